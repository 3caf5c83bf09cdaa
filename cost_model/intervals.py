"""Prediction intervals from honest out-of-sample residuals, per stratum.

A prediction's interval is the spread of the model's errors on published runs it did not see, in runs
like it: the residual of a held-out row is log(measured / predicted) tokens/s/GPU, predicted with the
constants refitted without the row's group and without the facts its group's measurements chose
(cost_model.validation.held_out_results, honest). The stratum of a run is its GPU generation, scale
band, framework family and precision (cost_model.splits.stratum), and dense and mixture-of-experts
models never share residuals (the MoE rows, which no fit sees, miss by far more). The 80 % interval
is the predicted value times exp of the residuals' 10th and 90th percentiles in the stratum. A stratum
with fewer than MIN_STRATUM_ROWS residuals is pooled, dropping the axes in POOL_ORDER one at a time
until enough remain, and the interval says so.

For a new plan (`estimate`, `search`, plan files: cost_model/shipped_intervals.py) the residuals are
the leave-one-source-out ones of every shipped dense row and the MoE rows' own (each predicted by
constants that never saw its source). `autoplan validate` scores the intervals per split with
residuals that never saw the row: a row of held-out group g takes its interval from the other groups'
residuals only (coverage()).
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from autoplan.specs.schemas import PREDICTION_INTERVAL_LEVEL as LEVEL
from cost_model.splits import stratum

MIN_STRATUM_ROWS = 20
"""Fewer residuals than this and the 10th/90th percentiles rest on one or two rows each side."""
POOL_ORDER = ("family", "scale", "generation", "precision")
"""The axes dropped in turn when a stratum has too few residuals; "moe" is never dropped."""


@dataclass(frozen=True)
class Interval:
    low: float
    high: float
    level: float
    stratum: str
    """The stratum whose residuals made it, e.g. "hopper, 65-1024 GPUs, megatron, fp8, dense"."""
    pooled: str
    """The axes pooled away because the stratum held too few residuals ("" when none)."""
    num_residuals: int

    def to_list(self) -> list:
        return [self.low, self.high]


def quantile(values: list, q: float) -> float:
    """The q-quantile of `values`, linearly interpolated between order statistics."""
    ordered = sorted(values)
    pos = q * (len(ordered) - 1)
    i = int(math.floor(pos))
    j = min(i + 1, len(ordered) - 1)
    return ordered[i] + (pos - i) * (ordered[j] - ordered[i])


def residual(result) -> float:
    """log(measured / predicted) of one predicted RowResult."""
    return math.log(result.run.measured_tokens_per_s_per_gpu / result.predicted_tokens_per_s_per_gpu)


def pooled_residuals(residuals: list, where: dict) -> tuple:
    """(residual values, pooled axes) of the stratum `where` among `residuals` ((stratum, value)
    pairs), pooling along POOL_ORDER until MIN_STRATUM_ROWS remain; all of its kind at the last."""
    axes = [a for a in where if a != "moe"]
    pooled = []
    for drop in (None, *POOL_ORDER):
        if drop is not None:
            axes.remove(drop)
            pooled.append(drop)
        values = [v for s, v in residuals if s["moe"] == where["moe"] and all(s[a] == where[a] for a in axes)]
        if len(values) >= MIN_STRATUM_ROWS:
            break
    return values, tuple(pooled)


def interval_of(predicted: float, residuals: list, where: dict, level: float = LEVEL) -> Interval | None:
    """The `level` interval of `predicted` from the residuals of its stratum (None when there are none)."""
    values, pooled = pooled_residuals(residuals, where)
    if not values:
        return None
    tail = (1 - level) / 2
    label = ", ".join(str(where[a]) for a in ("generation", "scale", "family", "precision"))
    return Interval(predicted * math.exp(quantile(values, tail)), predicted * math.exp(quantile(values, 1 - tail)),
                    level, f"{label}, {'moe' if where['moe'] else 'dense'}", ", ".join(pooled), len(values))


def coverage(results: list, group=lambda r: r.group, pool: list | None = None, level: float = LEVEL) -> dict:
    """How often the `level` interval holds the measured value over predicted `results`, each row's
    interval made from the residuals of the `pool` rows (default: `results`) outside its own held-out
    group (`group`), and the median width as a fraction of the prediction; rows whose stratum was
    pooled are counted."""
    done = [r for r in results if not r.skipped]
    if not done:
        return {"num_rows": 0}
    pairs = [(stratum(r.run), residual(r), group(r)) for r in (pool if pool is not None else done) if not r.skipped]
    hits, widths, pooled = 0, [], 0
    for r in done:
        where, g = stratum(r.run), group(r)
        iv = interval_of(r.predicted_tokens_per_s_per_gpu, [(s, v) for s, v, h in pairs if h != g], where, level)
        if iv is None:
            continue
        hits += iv.low <= r.run.measured_tokens_per_s_per_gpu <= iv.high
        widths.append((iv.high - iv.low) / r.predicted_tokens_per_s_per_gpu)
        pooled += bool(iv.pooled)
    return {"num_rows": len(widths), "level": level, "coverage": hits / len(widths) if widths else None,
            "median_width": statistics.median(widths) if widths else None, "num_pooled": pooled}
