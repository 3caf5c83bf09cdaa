"""Which layers each pipeline rank holds, by kind, so that a model of dense and MoE layers is priced
per stage instead of by its mean layer.

DeepSeek-V3's first three layers are dense (first_k_dense_replace), the other 58 MoE; a Qwen3-MoE
config may list leading `mlp_only_layers`. Under a pipeline those dense layers sit on the first
rank(s), so every other rank holds only MoE layers, which cost more than the model's mean layer
(all-to-all, token permutation, imbalance: cost_model/moe_time.py). The step time follows its
slowest rank (cost_model/step_time.py), so the layer time it multiplies is the mean over the layers
of the rank whose layers cost the most per layer.
"""
from __future__ import annotations

from functools import lru_cache

from autoplan.specs import ModelSpec, ParallelPlan


def rank_layer_kinds(model: ModelSpec, plan: ParallelPlan) -> list:
    """For each pipeline rank, ((is_moe, window), count) of the layers it holds. Virtual stage k (in
    pipeline order, `ParallelPlan.virtual_stage_num_layers`) holds the next layers of the model and
    belongs to rank k % pp."""
    per_rank = [dict() for _ in range(plan.pp)]
    layer = 0
    for k, count in enumerate(plan.virtual_stage_num_layers(model.num_layers)):
        kinds = per_rank[k % plan.pp]
        for i in range(layer, layer + count):
            key = (model.is_moe_layer(i), model.layer_window(i))
            kinds[key] = kinds.get(key, 0) + 1
        layer += count
    return [tuple(kinds.items()) for kinds in per_rank]


def layer_seconds(lt) -> float:
    """One layer's seconds per micro-batch before overlap (cost_model.layer_time.LayerTimes): what ranks
    are compared by."""
    return (lt.gemm_fwd_s + lt.gemm_bwd_s + lt.attn_fwd_s + lt.attn_bwd_s + lt.memory_fwd_s + lt.memory_bwd_s
            + lt.tp_fwd_s + lt.tp_bwd_s + lt.cp_fwd_s + lt.cp_bwd_s + lt.ep_fwd_s + lt.ep_bwd_s)


def mixes_dense_and_moe(model: ModelSpec) -> bool:
    """A MoE model with some dense layers (the only case where ranks differ by kind of MLP)."""
    return model.is_moe and 0 < model.num_moe_layers < model.num_layers


def pacing_layer_kinds(model: ModelSpec, plan: ParallelPlan, per_layer_s) -> tuple | None:
    """The layer kinds of the rank whose mean layer costs the most (`per_layer_s(kinds)` prices a
    mix), or None when every rank's mean is the model's mean for this purpose: no pipeline, or no
    mix of dense and MoE layers (sliding-window mixes keep the model's mean)."""
    if plan.pp == 1 or not mixes_dense_and_moe(model):
        return None
    return max(_rank_mixes(model, plan.pp, plan.vpp), key=per_layer_s)


@lru_cache(maxsize=1024)
def _rank_mixes(model: ModelSpec, pp: int, vpp: int) -> tuple:
    """The distinct layer-kind mixes of the ranks, sorted (they depend on pp and vpp alone: a search
    asks for them once per candidate plan)."""
    return tuple(sorted(set(rank_layer_kinds(model, ParallelPlan(pp=pp, vpp=vpp)))))
