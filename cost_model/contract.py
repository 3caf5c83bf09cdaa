"""The estimator contract: what the search, the planner and the reports ask of a cost model.

The analytical `Estimator` and the calibrated one (`cost_model.learned.calibration.CalibratedEstimator`)
both satisfy it, so either can score a search without the caller knowing which.
"""
from __future__ import annotations

from typing import Protocol, runtime_checkable

from autoplan.specs import ClusterSpec, CostEstimate, Framework, HardwareProfile, ModelSpec, ParallelPlan, TrainingSpec


@runtime_checkable
class PlanEstimator(Protocol):
    model: ModelSpec
    training: TrainingSpec
    cluster: ClusterSpec
    profile: HardwareProfile
    """The profile the estimates are made on (a calibration may substitute a learned one)."""
    framework: Framework
    """The framework's facts, fitted efficiency values merged in."""
    usable_memory_bytes: int
    """The profile's capacity less the user's headroom: what "fits" is judged against."""

    def estimate(self, plan: ParallelPlan) -> CostEstimate:
        """Step time and memory of a plan; InfeasiblePlan when it breaks a rule (the plan's or the
        framework's). A plan that does not fit is returned, with `fits` false."""

    def memory(self, plan: ParallelPlan, recompute: str | None = None, num_recompute: int | None = None) -> dict:
        """Memory breakdown (bytes) of the worst pipeline rank, optionally under another recompute."""

    def min_full_recompute_layers(self, plan: ParallelPlan) -> int | None:
        """Fewest layers per stage to recompute fully so the plan fits (0: none needed; None: never fits)."""
