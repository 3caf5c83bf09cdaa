"""When no plan runs: the leanest plan a framework runs on a cluster, the fewest GPUs on which one fits,
and the one line `autoplan search` answers with, naming the rule that binds.

Every plan here passes the framework's own rules (Framework.check), as the search's do: a GPU count is
offered only where the framework runs a plan that fits there, at the training shape a search at that
count would use.
"""
from __future__ import annotations

import itertools
from typing import Callable

from autoplan.planning.blame import NOT_A_PLAN, rule_that_broke
from autoplan.planning.estimators import make_estimator, resolve_framework
from autoplan.planning.search import GIB, SearchResult
from autoplan.planning.space import MIN_CP_CHUNK_TOKENS, SearchSpace
from autoplan.specs import AutoplanError, ClusterSpec, Framework, InfeasiblePlan, TrainingSpec
from autoplan.specs.frameworks import FRAMEWORK_NAMES, HISTORICAL_FRAMEWORKS

MAX_NODES_TRIED = 4096
FRAMEWORK_NODES_TRIED = 64
"""Nodes past the first count where a plan would fit over which the framework's own plans are tried (each
count asks every layout the framework's rules: too slow for MAX_NODES_TRIED on an error line)."""

TrainingAt = Callable[[ClusterSpec], TrainingSpec]
"""The TrainingSpec a search on a cluster would use: the user's shape, its defaults taken at that cluster."""


def _leanest_variants(tp: int) -> list:
    """(zero_stage, sequence_parallel) from the leanest in memory: the highest ZeRO stage, sequence
    parallelism where tp > 1; a framework that refuses one is asked the next."""
    sp_first = (True, False) if tp > 1 else (False,)
    return [(zero, sp) for zero in (3, 2, 1, 0) for sp in sp_first]


def _layout_divides(space: SearchSpace, layout: dict) -> bool:
    """The degrees multiply to the GPU count and the replicas split the batch: the rules every ZeRO stage
    and sequence-parallel choice of the layout shares, asked once for all of them."""
    try:
        _, dp = space.canonical_knobs(dict(layout, zero_stage=3, sequence_parallel=layout["tp"] > 1))
    except InfeasiblePlan:
        return False
    return space.training.global_batch_size % (dp * layout["micro_batch_size"]) == 0


def leanest_fitting_knobs(model, training, cluster, profile, framework: str | Framework,
                          memory_headroom_bytes: int = 0, framework_rules: bool = True) -> dict | None:
    """The knobs of a plan that fits in memory on this cluster, or None when no plan does. Asks, for each
    layout (smallest model-parallel degrees first), its leanest plans in memory: micro-batch 1, full
    recompute of the fewest layers that fit, the highest ZeRO stage and sequence parallelism the framework
    takes. `framework_rules` False: the plan's own rules alone (what would fit, were the framework not
    in the way)."""
    framework = resolve_framework(framework, training.dtype)
    space = SearchSpace(model, training, cluster, framework=framework)
    est = make_estimator(model, training, cluster, profile, framework=framework,
                         memory_headroom_bytes=memory_headroom_bytes)
    for tp, pp, cp in itertools.product(space.domains["tp"], space.domains["pp"], space.domains["cp"]):
        # etp 1 lets ep reach past dp*cp (the leanest experts where ep is capped by the expert count); a
        # wider expert TP of its own holds no less than one of these two
        for ep, etp in itertools.product(space.domains["ep"], [e for e in space.domains["etp"] if e <= 1]):
            layout = dict(tp=tp, pp=pp, cp=cp, vpp=1, ep=ep, etp=etp, micro_batch_size=1, recompute="full")
            if not _layout_divides(space, layout):
                continue
            for zero, sp in _leanest_variants(tp):
                knobs = dict(layout, zero_stage=zero, sequence_parallel=sp)
                try:
                    plan = space.plan(knobs)
                    if framework_rules:
                        framework.check(model, training, plan)
                    if est.min_full_recompute_layers(plan) is not None:
                        return knobs
                except InfeasiblePlan:
                    continue
    return None


def smallest_fitting_gpus(model, training_at: TrainingAt, cluster, profile, framework: Framework,
                          memory_headroom_bytes: int = 0, framework_rules: bool = True,
                          max_nodes: int = MAX_NODES_TRIED) -> int | None:
    """The fewest GPUs (whole nodes, from one node more than `cluster`, at most `max_nodes` more) on which
    a plan fits, each count at the training shape a search there would use: one the framework runs, or
    (`framework_rules` False) one its plan rules allow."""
    per_node = cluster.gpus_per_node
    start = max(1, cluster.num_gpus // per_node + 1)
    training = training_at(cluster)
    # Beyond this many GPUs even the widest model parallelism leaves dp > global batch: no plan.
    widest = max(per_node, model.num_heads) * model.num_layers * max(1, training.seq_len // (2 * MIN_CP_CHUNK_TOKENS))
    last = min(start + max_nodes, training.global_batch_size * widest // per_node + 1)
    for nodes in range(start, last + 1):
        bigger = ClusterSpec(cluster.name, nodes * per_node, per_node, cluster.profile)
        if leanest_fitting_knobs(model, training_at(bigger), bigger, profile, framework, memory_headroom_bytes,
                                 framework_rules) is not None:
            return bigger.num_gpus
    return None


def framework_rule_in_the_way(model, training, cluster, profile, framework: Framework,
                              memory_headroom_bytes: int = 0) -> str:
    """Where a plan would fit on this cluster but the framework runs none that does: its rule that refuses
    the leanest such plan, and the frameworks that run one there ("" where memory alone binds)."""
    knobs = leanest_fitting_knobs(model, training, cluster, profile, framework, memory_headroom_bytes,
                                  framework_rules=False)
    if knobs is None:
        return ""
    try:
        framework.check(model, training, SearchSpace(model, training, cluster, framework=framework).plan(knobs))
        return ""
    except InfeasiblePlan as exc:
        rule = str(exc)
    others = [name for name in FRAMEWORK_NAMES if name not in HISTORICAL_FRAMEWORKS and name != framework.name
              and _runs_a_fitting_plan(model, training, cluster, profile, name, memory_headroom_bytes)]
    where = (f"; {', '.join(others)} run one that fits on {cluster.num_gpus} (--framework {others[0]})" if others
             else f"; no other framework runs one that fits on {cluster.num_gpus} either")
    return f"the plans that would fit on {cluster.num_gpus} GPUs break a rule of framework {framework.name}: {rule}{where}"


def _runs_a_fitting_plan(model, training, cluster, profile, name: str, memory_headroom_bytes: int) -> bool:
    framework = resolve_framework(name, training.dtype)
    try:
        framework.check_problem(model, training)
    except InfeasiblePlan:
        return False
    return leanest_fitting_knobs(model, training, cluster, profile, framework, memory_headroom_bytes) is not None


def _memory_refusal(space: SearchSpace, profile, training_at: TrainingAt, memory_headroom_bytes: int) -> str:
    """Where memory binds: the framework rule in the way here, and the fewest GPUs on which the framework
    runs a plan that fits. The count is searched where the plan rules alone first let one fit (the scan of
    MAX_NODES_TRIED nodes that answered before the framework's rules were asked), and from there over
    FRAMEWORK_NODES_TRIED more nodes of the framework's own plans."""
    model, training, cluster, framework = space.model, space.training, space.cluster, space.framework
    gib = profile.memory_capacity_bytes / GIB
    margin = f", {memory_headroom_bytes / GIB:.1f} GiB kept free" if memory_headroom_bytes else ""
    line = f"{model.name} does not fit on {cluster.num_gpus} x {cluster.name} ({gib:.1f} GiB each{margin}) with any plan"
    here = framework_rule_in_the_way(model, training, cluster, profile, framework, memory_headroom_bytes)
    line += f": {here}" if here else ""
    plain = smallest_fitting_gpus(model, training_at, cluster, profile, framework, memory_headroom_bytes,
                                  framework_rules=False)
    if plain is None:
        return f"{line}, nor on up to {MAX_NODES_TRIED} more nodes"
    below = ClusterSpec(cluster.name, plain - cluster.gpus_per_node, cluster.gpus_per_node, cluster.profile)
    needed = smallest_fitting_gpus(model, training_at, below, profile, framework, memory_headroom_bytes,
                                   max_nodes=FRAMEWORK_NODES_TRIED)
    if needed is not None:
        return f"{line}; the smallest GPU count that fits is {needed} (--gpus {needed})"
    at_plain = ClusterSpec(cluster.name, plain, cluster.gpus_per_node, cluster.profile)
    there = framework_rule_in_the_way(model, training_at(at_plain), at_plain, profile, framework,
                                      memory_headroom_bytes)
    upto = plain + FRAMEWORK_NODES_TRIED * cluster.gpus_per_node
    return f"{line}; framework {framework.name} runs none that fits from {plain} to {upto} GPUs" + (f": {there}" if there else "")


def no_plan_error(space: SearchSpace, result: SearchResult, profile, training_at: TrainingAt,
                  memory_headroom_bytes: int = 0) -> AutoplanError:
    """The one line when the search found no plan: the pins that cannot work, the rule that rejected the
    most plans, or, where memory binds, the framework rule in the way and the fewest GPUs that fit."""
    model, cluster, framework = space.model, space.cluster, space.framework
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
    return InfeasiblePlan(_memory_refusal(space, profile, training_at, memory_headroom_bytes), "out_of_memory")
