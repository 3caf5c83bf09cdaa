"""One prediction's interval from the shipped published runs' honest out-of-sample residuals.

The residuals are each shipped dense row's, held out along the plan's transfer (by default a new
source: constants refitted without the row's source, no fact its source's measurements chose; or a new
GPU generation or scale band), and the MoE rows' (no fit saw one); the interval is
cost_model/intervals.py's for the plan's stratum. Computed once per process and transfer (seconds).
"""
from __future__ import annotations

from functools import lru_cache

from autoplan.specs import AutoplanError
from cost_model.intervals import DEFAULT_TRANSFER, LEVEL, TRANSFERS, Interval, interval_of, residual
from cost_model.published_rows import load_published_runs
from cost_model.splits import MOE_SPLIT, stratum
from cost_model.validation import held_out_results, moe_results

PLAN_TRANSFERS = tuple(t for t in TRANSFERS if t not in ("precision", MOE_SPLIT))
"""The transfers a plan's interval can assume (fp8 held out is a check on the fit, not a user's plan)."""


@lru_cache(maxsize=len(PLAN_TRANSFERS))
def shipped_residuals(transfer: str = DEFAULT_TRANSFER) -> tuple:
    """(stratum, residual) of every shipped row predicted out of sample: the dense rows held out along
    `transfer` (a split of cost_model.splits.SPLITS), the MoE rows (no fit saw one)."""
    runs = load_published_runs()
    done = [r for r in held_out_results(runs, split=transfer) + moe_results(runs) if not r.skipped]
    return tuple((stratum(r.run), residual(r)) for r in done)


def prediction_interval(tokens_per_s_per_gpu: float, gpu: str, num_gpus: int, framework: str, dtype: str,
                        moe: bool = False, level: float = LEVEL, transfer: str = DEFAULT_TRANSFER) -> Interval | None:
    """The `level` interval of a predicted tokens/s/GPU for a run of that stratum (its GPU type, GPU count,
    framework, precision and whether the model is a mixture of experts), from the shipped runs' honest
    out-of-sample residuals across `transfer` (PLAN_TRANSFERS)."""
    if transfer not in PLAN_TRANSFERS:
        raise AutoplanError(f"interval transfer must be one of {', '.join(PLAN_TRANSFERS)}, got {transfer!r}")
    where = stratum(None, gpu=gpu, num_gpus=num_gpus, framework=framework, dtype=dtype, moe=moe)
    return interval_of(tokens_per_s_per_gpu, list(shipped_residuals(transfer)), where, level, transfer)
