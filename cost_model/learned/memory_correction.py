"""The learned memory correction: one factor on the predicted allocated peak, learned from measured
peaks, with out-of-memory runs as evidence.

Memory is counted tensor by tensor (cost_model/stage_memory.py), so what a calibration can still
find is a systematic ratio: a software version that saves one more tensor per layer, an allocator
that rounds differently. A handful of runs constrains one ratio, not a model of many features, so
the correction is one factor f on the allocated peak (the terms torch.cuda.max_memory_allocated
counts); the device terms (runtime memory, allocator headroom) stay as they are.

- Trained runs: f = exp(mean log(measured / predicted allocated peak)).
- Out-of-memory runs are censored observations: the run needed at least the capacity, so the
  corrected device need must reach it, predicted_allocated * f + device_terms >= capacity, i.e.
  f >= (capacity - device_terms) / predicted_allocated. The factor is raised to the largest such
  bound, so no run that ran out of memory is predicted to fit after calibration.

`evaluate_memory` scores it out of sample: leave-one-group-out, or leave-one-run-out when there
are too few groups, on the allocated-peak error of trained runs and on the out-of-memory runs
still predicted to fit.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

MEMORY_CORRECTION_KIND = "memory-factor/1"


@dataclass(frozen=True)
class MemoryRow:
    """One run's memory evidence against its analytical prediction (bytes per GPU)."""
    predicted_allocated_bytes: float
    device_bytes: float
    """Predicted runtime memory + allocator headroom (outside max_memory_allocated)."""
    capacity_bytes: float
    measured_bytes: float
    """max_memory_allocated of a trained run; 0 for an out-of-memory run."""
    oom: bool
    group: str

    def fits(self, factor: float = 1.0) -> bool:
        return self.predicted_allocated_bytes * factor + self.device_bytes <= self.capacity_bytes


class MemoryCorrection:
    """f on the allocated peak; `fit(rows)` returns self, fitted state ends in `_`."""

    def fit(self, rows: list) -> "MemoryCorrection":
        trained = [r for r in rows if not r.oom and r.measured_bytes > 0]
        if not trained:
            raise ValueError("a memory correction needs at least one run with a measured peak")
        logs = [math.log(r.measured_bytes / r.predicted_allocated_bytes) for r in trained]
        self.fitted_factor_ = math.exp(sum(logs) / len(logs))
        bounds = [(r.capacity_bytes - r.device_bytes) / r.predicted_allocated_bytes for r in rows if r.oom]
        # Strictly above the bound: at exactly the capacity the plan would still "fit".
        self.oom_floor_ = max(bounds) * (1 + 1e-6) if bounds else 0.0
        self.factor_ = max(self.fitted_factor_, self.oom_floor_)
        self.n_trained_, self.n_oom_ = len(trained), len(bounds)
        return self

    def to_json(self) -> dict:
        return {"kind": MEMORY_CORRECTION_KIND, "factor": self.factor_, "fitted_factor": self.fitted_factor_,
                "oom_floor": self.oom_floor_, "num_trained": self.n_trained_, "num_oom": self.n_oom_}

    @classmethod
    def from_json(cls, data: dict) -> "MemoryCorrection":
        if data.get("kind") != MEMORY_CORRECTION_KIND:
            raise ValueError(f"memory correction kind {data.get('kind')!r} is not {MEMORY_CORRECTION_KIND!r}")
        model = cls()
        model.factor_, model.fitted_factor_ = float(data["factor"]), float(data["fitted_factor"])
        model.oom_floor_ = float(data["oom_floor"])
        model.n_trained_, model.n_oom_ = int(data["num_trained"]), int(data["num_oom"])
        if not (model.factor_ > 0 and math.isfinite(model.factor_)):
            raise ValueError(f"memory correction factor must be a positive number, got {model.factor_!r}")
        return model


def _scores(rows: list, factors: list) -> dict:
    """Allocated-peak APE over trained rows and out-of-memory rows predicted to fit."""
    ape = [abs(r.predicted_allocated_bytes * f / r.measured_bytes - 1) for r, f in zip(rows, factors)
           if not r.oom and r.measured_bytes > 0]
    return {"mape": float(np.mean(ape)) if ape else None, "max": float(np.max(ape)) if ape else None,
            "num_rows": len(ape), "num_oom": sum(r.oom for r in rows),
            "oom_predicted_to_fit": sum(1 for r, f in zip(rows, factors) if r.oom and r.fits(f))}


def evaluate_memory(rows: list, by_group: bool) -> dict:
    """Analytical vs calibrated, every row predicted by a correction fitted without it (leave one
    group out when `by_group`, else leave one run out). A fold without a trained run keeps f = 1."""
    keys = [r.group if by_group else i for i, r in enumerate(rows)]
    factors = []
    for key, row in zip(keys, rows):
        rest = [r for k, r in zip(keys, rows) if k != key]
        has_trained = any(not r.oom and r.measured_bytes > 0 for r in rest)
        factors.append(MemoryCorrection().fit(rest).factor_ if has_trained else 1.0)
    return {"scheme": "leave-one-group-out" if by_group else "leave-one-run-out",
            "analytical": _scores(rows, [1.0] * len(rows)), "calibrated": _scores(rows, factors)}
