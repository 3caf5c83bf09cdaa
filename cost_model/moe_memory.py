"""The routed experts' share of one GPU's model states: what `autoplan memory` shows beside its
weights, grads and optimizer columns for a mixture-of-experts model.

Expert parameters split over ep (which experts a rank holds) and etp (each expert's width), and
their states shard over the expert data-parallel ranks tp*cp*dp / (etp*ep) from the ZeRO stage that
shards each state (cost_model/stage_memory.py counts them into the breakdown the same way; this is
that part alone, for the rank with the most layers).
"""
from __future__ import annotations

from autoplan.specs import ParallelPlan
from cost_model.memory import model_state_bytes, states_for


def expert_state_bytes(est, plan: ParallelPlan) -> dict:
    """{state name: bytes} of the routed experts on one GPU of the pipeline rank with the most layers
    (`est`: a cost_model.Estimator); empty for a dense model."""
    if not est.model.is_moe:
        return {}
    per_stage = plan.layers_per_stage(est.model.num_layers)
    _, expert = est.params.local(plan, per_stage, first=False, last=False)
    return model_state_bytes(expert, plan.zero_stage, plan.expert_dp, states_for(est.framework, plan))
