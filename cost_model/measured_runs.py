"""Re-predict measured runs (`autoplan run` records) with any profile and framework.

The records carry the plan they ran; predicting them again with today's cost model, a built-in or
a measured profile and the framework that ran them (`autoplan` for the project's executor) says
how far the model is from the executor on real hardware. The shipped H100 runs
(cost_model/data/h100_runs) are the one such set: one H100 SXM, 14 records of 12 plans, 10 that
trained and 4 out of memory (2026-11-22, see their README).

Errors are fractions: (predicted - measured) / measured on the median step time.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass
from pathlib import Path

from autoplan.specs import HardwareProfile, PlanDocument, read_measurements
from autoplan.specs.compat import record_framework
from cost_model.constants import Constants, load_constants
from cost_model.estimator import Estimator
from cost_model.profiles import builtin_profile

H100_RUNS_DIR = Path(__file__).parent / "data" / "h100_runs"


@dataclass(frozen=True)
class RunPrediction:
    label: str
    """The plan id and the record's line, to tell records of one plan apart."""
    status: str
    measured_step_time_s: float
    predicted_step_time_s: float
    measured_peak_bytes: int
    predicted_peak_bytes: float
    predicted_fits: bool
    predicted_allocated_bytes: float = 0.0
    """The prediction without the device terms: what max_memory_allocated measures."""
    measured_reserved_bytes: int | None = None
    predicted_reserved_bytes: float = 0.0
    """max_memory_reserved, in records written since the executor keeps it (None before)."""

    @property
    def allocated_error(self) -> float:
        return (self.predicted_allocated_bytes - self.measured_peak_bytes) / self.measured_peak_bytes

    @property
    def reserved_error(self) -> float | None:
        """The reserved peak against the prediction less the CUDA context (which is outside the
        allocator): states, activations and the allocator's largest block."""
        if not self.measured_reserved_bytes:
            return None
        return (self.predicted_reserved_bytes - self.measured_reserved_bytes) / self.measured_reserved_bytes

    @property
    def step_error(self) -> float:
        return (self.predicted_step_time_s - self.measured_step_time_s) / self.measured_step_time_s


def load_profile(ref: str) -> HardwareProfile:
    """`builtin:NAME` or the path of a measured profile JSON."""
    if ref.startswith("builtin:"):
        return builtin_profile(ref.split(":", 1)[1])
    return HardwareProfile.load(ref)


def predict_measurements(path, profile: HardwareProfile, framework: str | None = None,
                         constants: Constants | None = None) -> list:
    """One RunPrediction per record of a measurement JSONL (trained and out-of-memory alike), with
    `framework`'s facts, or by default those of the framework that ran each record
    (autoplan.specs.compat.record_framework: the shipped H100 records ran autoplan-91ee867)."""
    constants = constants or load_constants()
    records, problems = read_measurements(path)
    if problems:
        raise ValueError(f"{path}: {problems[0]}")
    out = []
    for lineno, rec in enumerate(records, 1):
        doc = PlanDocument.from_dict(rec.plan, f"plan of record {rec.plan_id}")
        cluster = doc.cluster
        est = Estimator(doc.model, doc.training, cluster, profile, framework=constants.framework(framework or record_framework(rec, doc.framework)),
                        constants=constants)
        e = est.estimate(doc.parallel)
        ok = rec.status == "ok"
        out.append(RunPrediction(
            label=f"{rec.plan_id} line {lineno}",
            status=rec.status,
            measured_step_time_s=rec.median_step_time_s if ok else float("nan"),
            predicted_step_time_s=e.step_time_s, measured_peak_bytes=rec.peak_memory_bytes,
            predicted_peak_bytes=e.peak_memory_bytes, predicted_fits=e.fits,
            predicted_allocated_bytes=e.details.get("memory_allocated_peak_bytes", e.peak_memory_bytes),
            measured_reserved_bytes=rec.extra.get("peak_memory_reserved_bytes"),
            predicted_reserved_bytes=e.peak_memory_bytes - e.memory_breakdown_bytes.get("cuda_context", 0.0)))
    return out


def step_time_mape(predictions: list) -> float:
    """Mean |error| of the step time over the records that trained."""
    return statistics.fmean(abs(p.step_error) for p in predictions if p.status == "ok")


H100_PROFILES = ("builtin:h100-80gb", "profile-full.json", "profile-quick.json")


def memory_errors(predictions: list) -> dict:
    """MAPE and worst under-prediction of the allocated and, where the records keep it, the reserved
    peak, over the records that trained: {"allocated": {...}, "reserved": {...} or None}."""
    ok = [p for p in predictions if p.status == "ok" and p.measured_peak_bytes]
    out = {}
    for name, errors in (("allocated", [p.allocated_error for p in ok]),
                         ("reserved", [e for e in (p.reserved_error for p in ok) if e is not None])):
        out[name] = {"num_runs": len(errors), "mape": statistics.fmean(abs(e) for e in errors),
                     "worst_under": min(0.0, min(errors))} if errors else None
    return out


def h100_summary(constants: Constants | None = None) -> dict:
    """The shipped H100 runs predicted with each profile (each with the framework that ran it): profile ->
    {num_runs, mape, mean_error, max, oom_predicted_to_fit}."""
    out = {}
    for ref in H100_PROFILES:
        profile = load_profile(ref if ref.startswith("builtin:") else str(H100_RUNS_DIR / ref))
        preds = predict_measurements(H100_RUNS_DIR / "runs.jsonl", profile, constants=constants)
        errors = [p.step_error for p in preds if p.status == "ok"]
        out[ref] = {"num_runs": len(errors), "mape": statistics.fmean(abs(e) for e in errors),
                    "mean_error": statistics.fmean(errors), "max": max(abs(e) for e in errors),
                    "oom_predicted_to_fit": sum(1 for p in preds if p.status == "oom" and p.predicted_fits),
                    "memory": memory_errors(preds)}
    return out
