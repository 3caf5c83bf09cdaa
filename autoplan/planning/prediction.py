"""A plan's prediction block: the cost model's figures and the 80 % interval of its tokens/s/GPU.

The interval comes from the shipped published runs' honest out-of-sample residuals in the plan's
stratum (cost_model/intervals.py: GPU generation x scale band x framework family x precision, dense or
MoE, pooled where too few runs and said so), held out by source: it assumes the plan runs on a stack,
cluster and date no published row measured ("new source"), and says so. It is added after the estimate's own keys, so a plan
file's existing keys keep their order. A calibrated estimate (a learned correction on the user's own
runs) gets none: the residuals are the analytical model's.
"""
from __future__ import annotations

from autoplan.specs.schemas import PREDICTION_INTERVAL_INFO_KEY as INTERVAL_INFO_KEY
from autoplan.specs.schemas import PREDICTION_INTERVAL_KEY as INTERVAL_KEY
from cost_model.shipped_intervals import prediction_interval


def prediction_block(estimate, model, training, cluster, framework: str, calibrated: bool = False) -> dict:
    """`estimate.to_prediction()` with the interval of its tokens/s/GPU appended (none when calibrated)."""
    block = estimate.to_prediction()
    if calibrated:
        return block
    interval = prediction_interval(estimate.tokens_per_s_per_gpu, cluster.name, cluster.num_gpus, framework,
                                   training.dtype, moe=model.is_moe)
    if interval is not None:
        block[INTERVAL_KEY] = interval.to_list()
        block[INTERVAL_INFO_KEY] = {"level": interval.level, "transfer": interval.transfer, "stratum": interval.stratum,
                                    "pooled": interval.pooled, "num_residuals": interval.num_residuals}
    return block
