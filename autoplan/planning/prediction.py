"""A plan's prediction block: the cost model's figures and the 80 % interval of its tokens/s/GPU.

The interval comes from the shipped published runs' honest out-of-sample residuals in the plan's
stratum (cost_model/intervals.py: GPU generation x scale band x framework family x precision, dense or
MoE, pooled where too few runs and said so). It is added after the estimate's own keys, so a plan
file's existing keys keep their order. A calibrated estimate (a learned correction on the user's own
runs) gets none: the residuals are the analytical model's.
"""
from __future__ import annotations

from autoplan.specs.schemas import PREDICTION_INTERVAL_KEY as INTERVAL_KEY
from autoplan.specs.schemas import PREDICTION_INTERVAL_LEVEL as LEVEL
from cost_model.shipped_intervals import prediction_interval

INTERVAL_INFO_KEY = f"interval_{round(100 * LEVEL)}"
"""Where the interval came from: its stratum, the axes pooled away, how many residuals."""


def prediction_block(estimate, model, training, cluster, framework: str, calibrated: bool = False) -> dict:
    """`estimate.to_prediction()` with the interval of its tokens/s/GPU appended (none when calibrated)."""
    block = estimate.to_prediction()
    if calibrated:
        return block
    interval = prediction_interval(estimate.tokens_per_s_per_gpu, cluster.name, cluster.num_gpus, framework,
                                   training.dtype, moe=model.is_moe)
    if interval is not None:
        block[INTERVAL_KEY] = interval.to_list()
        block[INTERVAL_INFO_KEY] = {"level": interval.level, "stratum": interval.stratum, "pooled": interval.pooled,
                                    "num_residuals": interval.num_residuals}
    return block
