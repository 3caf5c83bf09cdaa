"""One prediction's interval from the shipped published runs' honest out-of-sample residuals.

The residuals are each shipped dense row's, held out by source (constants refitted without its
source, no fact its source's measurements chose), and the MoE rows' (no fit saw one); the interval
is cost_model/intervals.py's for the plan's stratum. Computed once per process (under a second).
"""
from __future__ import annotations

from functools import lru_cache

from cost_model.intervals import LEVEL, Interval, interval_of, residual
from cost_model.published import load_published_runs
from cost_model.splits import stratum
from cost_model.validation import held_out_results, moe_results


@lru_cache(maxsize=1)
def shipped_residuals() -> tuple:
    """(stratum, residual) of every shipped row predicted out of sample: the dense rows held out by
    source, the MoE rows (no fit saw one)."""
    runs = load_published_runs()
    done = [r for r in held_out_results(runs, split="source") + moe_results(runs) if not r.skipped]
    return tuple((stratum(r.run), residual(r)) for r in done)


def prediction_interval(tokens_per_s_per_gpu: float, gpu: str, num_gpus: int, framework: str, dtype: str,
                        moe: bool = False, level: float = LEVEL) -> Interval | None:
    """The `level` interval of a predicted tokens/s/GPU for a run of that stratum (its GPU type, GPU count,
    framework, precision and whether the model is a mixture of experts), from the shipped runs' honest
    out-of-sample residuals."""
    where = stratum(None, gpu=gpu, num_gpus=num_gpus, framework=framework, dtype=dtype, moe=moe)
    return interval_of(tokens_per_s_per_gpu, list(shipped_residuals()), where, level)
