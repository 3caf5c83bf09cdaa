"""Prediction intervals from honest out-of-sample residuals, split-conformal, per stratum and transfer.

A prediction's interval is the spread of the model's errors on published runs it did not see, in runs
like it and seen across the same kind of transfer. The residual of a held-out row is
log(measured / predicted) tokens/s/GPU, predicted with the constants refitted without the row's group
and without the facts its group's measurements chose (cost_model.validation.held_out_results, honest).
The transfer is the split the row was held out along (TRANSFERS): a new source, a new GPU generation, a
new scale band; a plan's interval assumes one ("new source" unless told), and validate scores each
split's rows with the residuals of that same split.

The interval is split-conformal (Vovk et al. 2005; Lei et al. 2018, "Distribution-free predictive
inference for regression", JASA, the split method with the absolute residual as score): with n residuals
in the pool, its half-width in log space is the level quantile of their |residual|s. The quantile is
Hyndman and Fan's type 6 ("Sample quantiles in statistical packages", The American Statistician, 1996):
rank (n + 1) x level, interpolated between the order statistics around it. The k-th smallest of n
exchangeable scores holds a new one with probability k / (n + 1), so that rank makes the interval cover
`level` of new rows in expectation. Split-conformal's usual rank, ceil((n + 1) x level), guarantees at
least `level`: its expected coverage lies between `level` and `level` + 1 / (n + 1), 80-84.8 % in a pool of
20 residuals. Measured on the fp8 rows held out by source (2026-11-30): 86 % covered with that rank, 83 %
with type 6; every other split moved by at most a point and a half. The score is symmetric because the
sign of a transfer's miss does not carry over from one group to another (held out by GPU generation, the
Ampere rows are predicted too fast and the Hopper rows too slow, and percentiles of one side's signed
residuals put the other side outside: 65 % and 54 % coverage before).

The pool is the residuals of the row's stratum: GPU generation, scale band, framework family and
precision (cost_model.splits.stratum); dense and mixture-of-experts models never share residuals (the
MoE rows, which no fit sees, miss by far more). A stratum with fewer than MIN_STRATUM_ROWS residuals is
pooled, dropping the axes in POOL_ORDER one at a time until enough remain, and the interval says so. A
row never takes a residual of its own held-out group, nor its own residual under another split
(coverage()).

For a new plan (`estimate`, `search`, plan files: cost_model/shipped_intervals.py) the residuals are
those of every shipped dense row held out along the plan's transfer, and the MoE rows' own.
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
"""The axes dropped in turn when a stratum has too few residuals; "moe" is never dropped. A split's own
axis (the generation held out by GPU generation) finds no residual of the row's group, so the pool
reaches it with the finer axes already dropped: transfers to a new generation or scale band are
judged by the transfers of that kind across families."""
TRANSFERS = {"source": "new source", "gpu_generation": "new GPU generation", "scale": "new scale band",
             "precision": "new precision", "moe": "new source"}
"""Split (cost_model.splits.SPLITS, and the MoE rows' split) -> the transfer its residuals measure, as
an interval names it. fp8 held out is one group (no other of its kind): its rows take the bf16/fp16
rows' residuals held out by source (cost_model.validation.out_of_sample)."""
DEFAULT_TRANSFER = "source"
"""A plan's interval assumes a new source: the user's own stack, cluster and date, which no row measured."""


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
    transfer: str = TRANSFERS[DEFAULT_TRANSFER]
    """The transfer whose residuals made it (TRANSFERS), e.g. "new source"."""

    def to_list(self) -> list:
        return [self.low, self.high]


def interval_quantile(values: list, level: float) -> float:
    """The `level` quantile of `values` (scores) that a new exchangeable score falls under with
    probability `level` in expectation: Hyndman and Fan's type 6, rank (n + 1) x level between the order
    statistics, linearly interpolated; the smallest below rank 1, the largest from rank n on."""
    ordered = sorted(values)
    rank = (len(ordered) + 1) * level
    below = math.floor(rank + 1e-9)
    if below >= len(ordered):
        return ordered[-1]
    if below < 1:
        return ordered[0]
    return ordered[below - 1] + (rank - below) * (ordered[below] - ordered[below - 1])


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


def interval_of(predicted: float, residuals: list, where: dict, level: float = LEVEL,
                transfer: str = DEFAULT_TRANSFER) -> Interval | None:
    """The `level` interval of `predicted` from the residuals of its stratum among `residuals` ((stratum,
    value) pairs, made across `transfer`): predicted x exp(-/+ the interval_quantile of their |values|).
    None when there are none."""
    values, pooled = pooled_residuals(residuals, where)
    if not values:
        return None
    half = interval_quantile([abs(v) for v in values], level)
    label = ", ".join(str(where[a]) for a in ("generation", "scale", "family", "precision"))
    return Interval(predicted * math.exp(-half), predicted * math.exp(half), level,
                    f"{label}, {'moe' if where['moe'] else 'dense'}", ", ".join(pooled), len(values),
                    TRANSFERS[transfer])


def coverage(results: list, group=lambda r: r.group, pool: list | None = None, level: float = LEVEL) -> dict:
    """How often the `level` interval holds the measured value over predicted `results`, each row's
    interval made from the residuals of the `pool` rows (default: `results`) outside its own held-out
    group (`group`) and other than the row itself (the same published run predicted under another
    split), and the median width as a fraction of the prediction; rows whose stratum was pooled are
    counted."""
    done = [r for r in results if not r.skipped]
    if not done:
        return {"num_rows": 0}
    pairs = [(stratum(r.run), residual(r), group(r), r.run.id)
             for r in (pool if pool is not None else done) if not r.skipped]
    hits, widths, pooled = 0, [], 0
    for r in done:
        where, g = stratum(r.run), group(r)
        iv = interval_of(r.predicted_tokens_per_s_per_gpu,
                         [(s, v) for s, v, h, row in pairs if h != g and row != r.run.id], where, level)
        if iv is None:
            continue
        hits += iv.low <= r.run.measured_tokens_per_s_per_gpu <= iv.high
        widths.append((iv.high - iv.low) / r.predicted_tokens_per_s_per_gpu)
        pooled += bool(iv.pooled)
    return {"num_rows": len(widths), "level": level, "coverage": hits / len(widths) if widths else None,
            "median_width": statistics.median(widths) if widths else None, "num_pooled": pooled}
