"""Use a calibration file (written by `autoplan calibrate`) when planning.

Two things can come out of calibration, and the planner uses both:

- a learned HardwareProfile (op regressors fitted on a measured profile, see cost_model.learned.ops):
  it replaces the profile the analytical model reads, so measured matmul/attention efficiencies and
  collective bandwidths enter every term of the estimate;
- a plan-level correction of the step time (cost_model.learned.correction): every time term of the
  analytical estimate is multiplied by exp(predicted log(measured/analytical)), so the breakdown still
  sums to the total. A plan outside the correction's training range keeps the analytical answer.

`provenance.cost_model` / `CostEstimate.cost_model` says which model scored a plan:
"analytical/1" or "analytical/1+learned/1".

    calibration = load_calibration("calibration.json")
    estimator = CalibratedEstimator(model, training, cluster, profile, calibration)
    estimate = estimator.estimate(plan)          # a CostEstimate, corrected where it may be
"""
from __future__ import annotations

import math
from dataclasses import replace

from autoplan.specs import CostEstimate, HardwareProfile
from cost_model.learned.correction import correction_in_distribution, out_of_range_features
from cost_model.learned.features import plan_record
from cost_model.learned.store import LEARNED_COST_MODEL, CalibrationFile
from cost_model.stage_memory import DEVICE_TERMS, min_full_recompute_layers

__all__ = ["CalibratedEstimator", "CalibrationFile", "apply", "apply_memory", "correction_factor", "load_calibration",
           "scoring_profile"]


def load_calibration(path) -> CalibrationFile:
    """Read and check a calibration file; any mismatch is one AutoplanError line."""
    return CalibrationFile.load(path)


def correction_factor(calibration: CalibrationFile | None, record: dict) -> float:
    """exp(predicted log(measured/analytical)) for one plan record; exactly 1.0 when there is no
    trained correction or the record lies outside its training range."""
    if calibration is None or calibration.correction is None:
        return 1.0
    if not correction_in_distribution(calibration.correction, [record])[0]:
        return 1.0
    return float(math.exp(calibration.correction.predict([record])[0]))


def apply_memory(calibration: CalibrationFile | None, estimate: CostEstimate) -> CostEstimate:
    """The estimate with its allocated-peak terms scaled by the memory correction (the runtime
    memory and allocator headroom stay), or the estimate itself without one."""
    if calibration is None or calibration.memory_correction is None:
        return estimate
    return estimate.scaled_memory(calibration.memory_correction.factor_, DEVICE_TERMS,
                                  f"{estimate.cost_model}+{LEARNED_COST_MODEL}")


def apply(calibration: CalibrationFile | None, estimate: CostEstimate, record: dict) -> CostEstimate:
    """The estimate with its time terms scaled by the correction factor (and its memory by the
    memory correction), labelled with the model that scored it. Without a trained correction, the
    estimate itself; for a plan outside the correction's training range, the analytical time with a
    note saying which features were out."""
    estimate = apply_memory(calibration, estimate)
    if calibration is None or calibration.correction is None:
        return estimate
    outside = out_of_range_features(calibration.correction, record)
    if outside:
        note = f"learned correction not applied (plan outside its training range: {'; '.join(outside)})"
        return replace(estimate, notes=(*estimate.notes, note))
    factor = correction_factor(calibration, record)
    label = estimate.cost_model if estimate.cost_model.endswith(LEARNED_COST_MODEL) else \
        f"{estimate.cost_model}+{LEARNED_COST_MODEL}"
    return estimate.scaled_time(factor, label)


def scoring_profile(profile: HardwareProfile, calibration: CalibrationFile | None) -> HardwareProfile:
    """The profile to score with: the calibration's learned profile when it has one for this GPU
    (same device name as the requested profile), else the requested profile unchanged."""
    learned = calibration.profile if calibration is not None else None
    if learned is not None and learned.device_name == profile.device_name:
        return learned
    return profile


class CalibratedEstimator:
    """The analytical Estimator with a calibration applied (cost_model.contract.PlanEstimator)."""

    def __init__(self, model, training, cluster, profile: HardwareProfile,
                 calibration: CalibrationFile | None = None, **estimator_options):
        """`estimator_options` go to the analytical Estimator (software, allow_tp_across_nodes, ...)."""
        from cost_model import Estimator

        self.model, self.training, self.cluster = model, training, cluster
        self.calibration = calibration
        self.profile = scoring_profile(profile, calibration)
        self.analytical = Estimator(model, training, cluster, self.profile, **estimator_options)

    @property
    def framework(self):
        return self.analytical.framework

    @property
    def usable_memory_bytes(self) -> int:
        return self.analytical.usable_memory_bytes

    @property
    def memory_headroom_bytes(self) -> int:
        return self.analytical.memory_headroom_bytes

    def memory(self, plan, recompute: str | None = None, num_recompute: int | None = None) -> dict:
        """The analytical breakdown with the memory correction on its allocated-peak terms."""
        memory = self.analytical.memory(plan, recompute, num_recompute)
        if self.calibration is None or self.calibration.memory_correction is None:
            return memory
        factor = self.calibration.memory_correction.factor_
        return {k: v if k in DEVICE_TERMS else v * factor for k, v in memory.items()}

    def min_full_recompute_layers(self, plan) -> int | None:
        """Fewest layers per stage to recompute fully so the corrected memory fits (as the
        analytical model's bisection, cost_model.estimator, on the corrected breakdown)."""
        return min_full_recompute_layers(self, plan)

    def estimate(self, plan) -> CostEstimate:
        estimate = self.analytical.estimate(plan)
        if self.calibration is None or self.calibration.correction is None:
            return apply_memory(self.calibration, estimate)
        record = plan_record(self.model, self.training, self.cluster, plan, self.profile, estimate,
                             self.analytical.framework)
        return apply(self.calibration, estimate, record)
