"""When no plan runs: the leanest plan that fits on a cluster, the fewest GPUs on which one fits, and the
one line `autoplan search` answers with."""
from __future__ import annotations

import itertools

from autoplan.planning.blame import NOT_A_PLAN, rule_that_broke
from autoplan.planning.estimators import make_estimator, resolve_framework
from autoplan.planning.search import GIB, SearchResult
from autoplan.planning.space import MIN_CP_CHUNK_TOKENS, SearchSpace
from autoplan.specs import DEFAULT_FRAMEWORK, AutoplanError, ClusterSpec, Framework, InfeasiblePlan

MAX_NODES_TRIED = 4096


def leanest_fitting_knobs(model, training, cluster, profile, framework: str | Framework,
                          memory_headroom_bytes: int = 0) -> dict | None:
    """The knobs of a plan that fits in memory on this cluster, or None when no plan does. Asks only
    the leanest memory plan of each layout (ZeRO-3, sequence parallel, micro-batch 1, full recompute
    of the fewest layers that fit), smallest model-parallel degrees first."""
    framework = resolve_framework(framework, training.dtype)
    space = SearchSpace(model, training, cluster, framework=framework)
    est = make_estimator(model, training, cluster, profile, framework=framework,
                         memory_headroom_bytes=memory_headroom_bytes)
    for tp in space.domains["tp"]:
        for pp in space.domains["pp"]:
            for cp in space.domains["cp"]:
                # etp 1 lets ep reach past dp*cp (the leanest experts where ep is capped by the expert
                # count); a wider expert TP of its own holds no less than one of these two
                for ep, etp in itertools.product(space.domains["ep"], [e for e in space.domains["etp"] if e <= 1]):
                    knobs = dict(tp=tp, pp=pp, cp=cp, vpp=1, ep=ep, etp=etp, micro_batch_size=1, zero_stage=3,
                                 recompute="full", sequence_parallel=tp > 1)
                    try:
                        if est.min_full_recompute_layers(space.plan(knobs)) is not None:
                            return knobs
                    except InfeasiblePlan:
                        continue
    return None


def fits_somewhere(model, training, cluster, profile, framework: str | Framework,
                   memory_headroom_bytes: int = 0) -> bool:
    """Does any plan fit in memory on this cluster? (`leanest_fitting_knobs` finds one.)"""
    return leanest_fitting_knobs(model, training, cluster, profile, framework, memory_headroom_bytes) is not None


def smallest_fitting_gpus(model, training, cluster, profile, framework: str | Framework = DEFAULT_FRAMEWORK,
                          memory_headroom_bytes: int = 0) -> int | None:
    """The fewest GPUs (whole nodes, upwards from the current count) on which some plan fits."""
    per_node = cluster.gpus_per_node
    start = max(1, cluster.num_gpus // per_node + 1)
    # Beyond this many GPUs even the widest model parallelism leaves dp > global batch: no plan.
    widest = max(per_node, model.num_heads) * model.num_layers * max(1, training.seq_len // (2 * MIN_CP_CHUNK_TOKENS))
    last = min(start + MAX_NODES_TRIED, training.global_batch_size * widest // per_node + 1)
    for nodes in range(start, last + 1):
        bigger = ClusterSpec(cluster.name, nodes * per_node, per_node, cluster.profile)
        if fits_somewhere(model, training, bigger, profile, framework, memory_headroom_bytes):
            return bigger.num_gpus
    return None


def no_plan_error(space: SearchSpace, result: SearchResult, model, training, cluster, profile,
                   framework: Framework, memory_headroom_bytes: int = 0) -> AutoplanError:
    pins = space.pins.describe()
    if pins and result.unfit:
        leanest = min(result.unfit, key=lambda s: s.peak_memory_bytes)
        return InfeasiblePlan(f"no plan with {pins} fits on {cluster.num_gpus} GPUs; the leanest "
                              f"{leanest.reason}; relax the pins", "out_of_memory")
    tag = rule_that_broke(result.rejections, set(space.pins.pinned()))
    if tag != "out_of_memory":
        count, first = result.rejections[tag]
        if pins:
            return InfeasiblePlan(f"{pins} cannot work: {first}", tag)
        plans = sum(c for t, (c, _) in result.rejections.items() if t not in NOT_A_PLAN)
        # Counted as rejected for memory: scored (result.unfit) or known without scoring (bounded search).
        num_unfit = result.rejections.get("out_of_memory", (0, ""))[0]
        unfit = f"; {num_unfit} others break no rule but do not fit in memory" if num_unfit else ""
        return InfeasiblePlan(f"no valid plan on {cluster.num_gpus} GPUs: {first} (this rule rejected {count} of "
                              f"the {plans} plans tried{unfit})", tag)
    needed = smallest_fitting_gpus(model, training, cluster, profile, framework, memory_headroom_bytes)
    gib = profile.memory_capacity_bytes / GIB
    margin = f", {memory_headroom_bytes / GIB:.1f} GiB kept free" if memory_headroom_bytes else ""
    head = (f"{model.name} does not fit on {cluster.num_gpus} x {cluster.name} ({gib:.1f} GiB each{margin}) "
            f"with any plan")
    if needed is None:
        return InfeasiblePlan(f"{head}, nor on up to {MAX_NODES_TRIED} more nodes", "out_of_memory")
    return InfeasiblePlan(f"{head}; the smallest GPU count that fits is {needed} (--gpus {needed})", "out_of_memory")
