"""A cheap lower bound on a plan's step time, for an exact search that scores only the plans that
can still win (autoplan.planning.bounded).

The bound reads the same per-shape layer times as the estimate (`Estimator.stage_costs`, cached
per (micro-batch, tp, cp, ep, sp)) and keeps only terms that step_time.step_time_terms adds for
at least that many layers, each term non-negative:

    bound = (m + (p - 1) / v) * L_min * per_layer
    per_layer = compute + memory-bound + exposed TP (step_time.tp_exposed_s: pipelined under the GEMMs
                with Megatron-Core's userbuffers, else the framework's hidden share) + CP/EP
                + the framework's layer overhead

m micro-batches of the slowest rank (which holds at least L_min layers, the fewest of any rank),
plus the pipeline bubble, which is at least (p - 1) / v micro-batch times of the other ranks (each
at least L_min layers) under 1F1B, even or uneven (Narayanan et al. 2021 sec. 2.2). Everything
else (recompute, extras of the first and last ranks, point-to-point, data-parallel traffic, the
optimizer step) only adds. Nothing here depends on the ZeRO stage, recompute policy or memory, so
one bound covers a group of plans sharing (tp, pp, cp, vpp, ep, micro-batch, sp).

The bound is a claim about step_time.py's terms; tests/test_bounded_search.py checks it against
every plan of several spaces, and the search falls back to scoring every plan if a scored plan
ever comes in under its bound.
"""
from __future__ import annotations

from autoplan.specs import ParallelPlan
from autoplan.specs.framework_facts import TensorParallelFacts
from cost_model.stages import stage_split
from cost_model.step_time import tp_exposed_s

SAFETY = 1.0 - 1e-9
"""The bound and the estimate sum the same floats in different orders."""


def step_time_lower_bound(est, plan: ParallelPlan) -> float:
    """A lower bound on `est.estimate(plan).step_time_s` for any ZeRO stage and recompute policy of
    `plan`'s shape (Estimator `est`, analytical; a calibrated one can scale times down)."""
    est = est.for_plan(plan)   # the framework as the plan runs it (its TP communication overlap)
    plan = plan.replace(tp_comm_overlap=False)
    costs = est.stage_costs(plan)
    lt, sw = costs.layer, est.framework
    per_layer = (lt.gemm_fwd_s + lt.gemm_bwd_s + lt.attn_fwd_s + lt.attn_bwd_s
                 + lt.memory_fwd_s + lt.memory_bwd_s
                 + tp_exposed_s(plan, sw.facts(TensorParallelFacts), lt)
                 + lt.cp_fwd_s + lt.cp_bwd_s + lt.ep_fwd_s + lt.ep_bwd_s
                 + sw.layer_overhead_s * sw.fused_elementwise)
    fewest = min(stage_split(plan, est.model.num_layers).num_layers)
    m = plan.num_microbatches
    # The slowest rank is at least as slow as the last, which adds the head and the loss (and the
    # embedding when it is also the first) to its layers.
    last_extras = costs.head_compute_s + costs.head_memory_s + (costs.embed_s if plan.pp == 1 else 0.0)
    microbatch_times = m + (plan.pp - 1) / plan.vpp
    return max(0.0, SAFETY * (microbatch_times * fewest * per_layer
                              + m * (last_extras + _weight_casts_lower_s(est, plan, costs, fewest))))


def _weight_casts_lower_s(est, plan: ParallelPlan, costs, fewest: int) -> float:
    """Per micro-batch, at most the weight-cast term of step_time.step_time_terms: the bytes it
    moves over the rank holding the most parameters (at least the last rank with the fewest
    layers), at the profile's best copy bandwidth."""
    per_param = est.framework.weight_cast_bytes_per_param
    if not per_param:
        return 0.0
    local = sum(costs.params.local(plan, fewest, first=plan.pp == 1, last=True))
    return per_param * local / est.tables.peak_memory_bytes_per_s


def no_recompute_time_s(est, plan: ParallelPlan) -> float:
    """The step time of `plan` without recompute, from the time terms alone (no memory model): a
    lower bound for its selective and full recompute variants. Recompute only adds: its own term,
    a longer micro-batch in the bubble; the ranks that hold the data-parallel states and the
    optimizer do not depend on it. With uneven stages recompute can move which rank sets the pace;
    that rank then holds more layers, so the step grows further (checked for every plan of uneven
    spaces by tests/test_bounded_search.py)."""
    if plan.recompute != "none":
        plan = plan.replace(recompute="none", recompute_num_layers=0)
    time, _, _ = est.time_terms(plan, keep=True)
    return SAFETY * sum(time.values())


def recompute_time_lower_s(est, plan: ParallelPlan) -> float:
    """A lower bound on the step time of a selective or full recompute `plan` as the search scores it
    (autoplan.planning.search.PlanScorer), from the time terms alone: its own under selective recompute; under
    full recompute those of one recomputed layer per stage, the fewest the scorer keeps (the
    recompute term and the bubble grow with the layers; with none at all the plan is its twin without
    recompute, scored on its own)."""
    if plan.recompute == "full":
        plan = plan.replace(recompute_num_layers=1)
    time, _, _ = est.time_terms(plan, keep=True)
    return SAFETY * sum(time.values())


def priced_time_s(est, plan: ParallelPlan) -> float:
    """The step time of `plan` as the estimate will price it, from its time terms (held for that
    estimate): the sharpest bound there is, for a full-recompute plan once the search knows the
    layers it will recompute (PlanScorer.as_scored)."""
    time, _, _ = est.time_terms(plan, keep=True)
    return SAFETY * sum(time.values())


def memory_floor_bytes(every_layer_recomputed: dict) -> float:
    """A lower bound on the peak memory of a plan under any recompute policy, from its breakdown with
    every layer fully recomputed (`Estimator.memory(plan, "full", layers)`, cost_model.stage_memory):
    every term but the backward working set, which full recompute doubles. The states, weight copies,
    logits, buffers and device terms do not depend on the policy, and the saved activations of any
    policy hold at least each layer's input, all that full recompute keeps (checked for every plan of
    several spaces by tests/test_bounded_search.py)."""
    return SAFETY * sum(v for k, v in every_layer_recomputed.items() if k != "activation_working")
