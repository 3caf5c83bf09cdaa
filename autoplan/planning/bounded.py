"""The exact search without scoring every plan: branch and bound over groups of plans.

A group is the plans sharing (tp, pp, cp, vpp, ep, etp, micro-batch, sp, capacity factor): they differ only in ZeRO
stage and recompute policy. A group whose first plan breaks a rule that no ZeRO stage or policy
mends is rejected whole, before any bound. The others are opened cheapest bound first (a heap of
groups, their ZeRO stages and their plans with recompute); an entry whose bound exceeds the step
time of the `keep_layouts`-th best parallel layout found so far cannot hold the optimum nor the best
plan of any layout the runners-up are picked from, so it is never scored. The answer is the one
`exhaustive_search` gives, best plan and runners-up alike, from a few per cent of the scores.
Bounds (cost_model.bounds): a loose one from the layer times, the head and the weight casts for
every group; each ZeRO stage's time without recompute (no memory model); a plan's own time terms
under recompute (under full, at the layers it will recompute: a memory question, asked only of the
plans reached). A ZeRO stage no plan of which fits is not scored either: its model states and
weight copies alone over the memory (stage_memory.weights_floor_bytes, before its time is bounded),
or its leanest memory, floored for every policy by bounds.memory_floor_bytes. Its plans count as
rejected for memory ("out_of_memory", with the figures), as the exhaustive search counts the plans it
scores to learn they do not fit: so when nothing fits, the rejections already say so.
`autoplan.planning.search` (bounded_search) makes the scores its SearchResult; this module does not import it.

The bounds hold for the analytical Estimator; a calibrated or learned one may scale times down,
so `search` uses Optuna there. If a scored plan ever comes in under its stage's bound, `search`
scores every plan instead (and the tests fail: tests/test_bounded_search.py).
"""
from __future__ import annotations

import heapq
import itertools
import math

from autoplan.planning.space import SearchSpace, batch_rule
from autoplan.specs import InfeasiblePlan, ParallelPlan

KEEP_LAYOUTS = 5
"""The best plan and the best plans of 4 other layouts (planner.NUM_ALTERNATIVES runners-up)."""
_RECOMPUTE_RULES = ("recompute_policy", "recompute_layers")
"""Rules (InfeasiblePlan reason tags) that read the recompute policy: ParallelPlan.check's."""
_ZERO_RULES = ("zero_stage", "framework_zero_stage", "framework_zero_with_moe", "framework_zero_with_pp",
               "framework_zero_with_ep", "framework_zero3_tied_embeddings", "framework_zero3_dtype",
               "framework_zero0_mixed")
"""Rules that read the ZeRO stage: ParallelPlan.check's and Framework.check's. A group's plan that
breaks any other rule (rules are checked in a fixed order) has every ZeRO stage and policy break one
too, so the group is rejected whole (tests/test_bounded_search.py checks the split on every plan of
several spaces)."""
MENDABLE_RULES = _RECOMPUTE_RULES + _ZERO_RULES


def supports_bounds(estimator) -> bool:
    """Only the plain analytical Estimator is bounded below by cost_model.bounds."""
    from cost_model import Estimator

    return type(estimator) is Estimator


def plan_groups(space: SearchSpace, rejections: dict):
    """(knobs without zero/recompute, zero stages, recompute policies) per group, folded like
    SearchSpace.plan; degree and batch products that cannot work are counted and skipped."""
    d, pinned = space.domains, space.pins.pinned()
    n, gb = space.cluster.num_gpus, space.training.global_batch_size
    recomputes = d["recompute"]
    for tp, pp, cp, ep, etp, capacity in itertools.product(d["tp"], d["pp"], d["cp"], d["ep"], d["etp"],
                                                           d["moe_capacity_factor"]):
        if etp == tp and "etp" not in pinned:
            continue  # the same plan as etp 0 (= tp), which SearchSpace.canonical_knobs folds it onto
        vpps = d["vpp"] if pp > 1 or "vpp" in pinned else (1,)
        sps = d["sequence_parallel"] if tp > 1 or "sequence_parallel" in pinned else (False,)
        overlaps = d["tp_comm_overlap"] if tp > 1 or "tp_comm_overlap" in pinned else (False,)
        if n % (tp * pp * cp):
            _reject(rejections, "degree_product", len(vpps) * len(sps) * len(overlaps) * len(d["micro_batch_size"]),
                    f"tp*pp*cp must divide the GPU count, got tp={tp} * pp={pp} * cp={cp} = {tp * pp * cp}, "
                    f"num_gpus={n}")
            continue
        dp = n // (tp * pp * cp)
        zeros = d["zero_stage"] if dp > 1 or "zero_stage" in pinned else (0,)
        for vpp, sp, overlap, mb in itertools.product(vpps, sps, overlaps, d["micro_batch_size"]):
            if gb % (dp * mb):
                rule = batch_rule(gb, dp, mb)
                _reject(rejections, rule.reason, len(zeros) * len(recomputes), str(rule))  # the group's plans
                continue
            yield (dict(tp=tp, pp=pp, cp=cp, vpp=vpp, ep=ep, etp=etp, micro_batch_size=mb, sequence_parallel=sp,
                        tp_comm_overlap=overlap, moe_capacity_factor=capacity), zeros, recomputes)


def _reject(rejections: dict, tag: str, count: int, message: str) -> None:
    before, first = rejections.get(tag, (0, message))
    rejections[tag] = (before + count, first)


def _framework_rules(est):
    """The framework's rules a candidate must pass: its plan rules alone when the problem passes its
    own (Framework.check_problem, asked once here instead of once per candidate), else all of them
    (every candidate then breaks the problem's rule, and says so)."""
    fw = est.framework
    try:
        fw.check_problem(est.model, est.training)
    except InfeasiblePlan:
        return fw.check
    return fw.check_plan


def _rule_checked(space: SearchSpace, est, framework_rules, knobs: dict, zero: int, rejections: dict, count: int):
    """The group's plan at ZeRO stage `zero` without recompute, checked by the plan's and the
    framework's rules (what Estimator.estimate checks first). None with the `count` plans of that
    stage rejected when a rule breaks that the recompute policy cannot mend (no framework rule reads
    it); the plan unchecked (False) when the rule is a recompute one, for scoring to judge per plan."""
    try:
        plan = space.plan({**knobs, "zero_stage": zero, "recompute": "none"})
        framework_rules(est.model, est.training, plan)
        return plan
    except InfeasiblePlan as exc:
        if exc.reason in _RECOMPUTE_RULES:
            return False
        _reject(rejections, exc.reason, count, str(exc))
        return None


def _loose_bound(est, plan: ParallelPlan) -> float:
    from cost_model.bounds import step_time_lower_bound

    return step_time_lower_bound(est, plan)


def _tight_bound(est, plan: ParallelPlan) -> float:
    from cost_model.bounds import no_recompute_time_s

    return no_recompute_time_s(est, plan)


def _policy_bound(est, plan: ParallelPlan) -> float:
    from cost_model.bounds import recompute_time_lower_s

    return recompute_time_lower_s(est, plan)


def _full_recompute_bound(scorer, plan: ParallelPlan) -> tuple:
    """(bound, the plan scoring will price) for a full-recompute plan: its own step time at the layers
    the scorer will recompute (PlanScorer.as_scored, a memory question only), so that a plan which
    must recompute many layers to fit is never scored when that makes it too slow to matter. Falls
    back to recompute_time_lower_s (one recomputed layer) when a rule refuses it."""
    from cost_model.bounds import priced_time_s

    try:
        priced = scorer.as_scored(plan)
        return priced_time_s(scorer.estimator, priced), priced
    except InfeasiblePlan:  # scoring says why
        return _policy_bound(scorer.estimator, plan), None


def _weights_over(est, plan: ParallelPlan) -> str:
    """Why no plan of the stage fits when its model states and weight copies alone are over the usable
    memory (stage_memory.weights_floor_bytes: a cached sum, checked before the stage's step time is
    bounded), else ""."""
    from cost_model.stage_memory import weights_floor_bytes

    try:
        floor = weights_floor_bytes(est, plan)
    except Exception:  # a shape the memory model cannot price: let scoring say why
        return ""
    return _over(est, "its model states alone", floor)


def _over(est, what: str, num_bytes: float) -> str:
    if num_bytes <= est.usable_memory_bytes:
        return ""
    return f"does not fit: {what} {num_bytes / 2 ** 30:.1f} GiB > {est.usable_memory_bytes / 2 ** 30:.1f} GiB usable"


def _never_fits(est, plan: ParallelPlan) -> str:
    """Why no plan of the stage fits, else "": the leanest of its ZeRO stage (no recompute, selective, or
    every layer recomputed; memory falls with the recomputed layers, min_full_recompute_layers bisects
    on it) is over the usable memory. Such plans would only be scored to learn they do not fit. With
    every layer recomputed, the breakdown also floors the other policies (bounds.memory_floor_bytes)."""
    from cost_model.bounds import memory_floor_bytes

    usable = est.usable_memory_bytes
    try:
        every = est.memory(plan, "full", max(plan.stage_num_layers(est.model.num_layers)))
        leanest = sum(every.values())
        if leanest <= usable:
            return ""
        if memory_floor_bytes(every) <= usable:
            leanest = min([leanest] + [sum(est.memory(plan, recompute, 0).values())
                                       for recompute in ("selective", "none")])
    except Exception:  # a shape the memory model cannot price: let scoring say why
        return ""
    return _over(est, "its leanest recompute", leanest)


def bounded_scores(space: SearchSpace, scorer, keep_layouts: int = KEEP_LAYOUTS) -> tuple | None:
    """The plans the exhaustive search's answer needs, scored by `scorer` (autoplan.planning.search.PlanScorer):
    only the groups whose bound can still beat the `keep_layouts`-th best layout (see the module
    docstring). (scored, rule rejections, plans left unscored), or None when a plan came in under its
    group's bound: the caller then scores every plan.

    Three kinds of heap entries, each opened cheapest bound first: a group (loose bound), which opens
    into its ZeRO stages that pass the rules and whose model states alone fit (each at its time
    without recompute, a bound on its recompute policies), which score their plan without recompute
    and queue those with recompute at that bound. A plan with recompute, when first reached, goes
    back at its own time terms (selective: bounds.recompute_time_lower_s; full: bounds.priced_time_s
    at the layers the scorer will recompute, so one that must recompute many layers to fit is not
    scored in vain) and is scored when reached again. The time terms a bound prices are held for
    the estimate that scores the same plan."""
    est, rejections, tick = scorer.estimator, {}, itertools.count()  # tick: heap order among equal bounds
    framework_rules = _framework_rules(est)
    heap = _group_heap(space, est, framework_rules, rejections, tick)
    best_by_layout, threshold, scored, seen, pruned = {}, math.inf, [], set(), 0
    while heap:
        key, _, kind, entry = heapq.heappop(heap)
        if key > threshold:
            pruned = _num_plans(kind, entry) + sum(_num_plans(k, e) for _, _, k, e in heap)
            break
        bound = key  # a plan's entry carries its stage's bound besides its own key
        if kind == _GROUP:  # open into its ZeRO stages, each at its sharper bound
            _open_group(space, est, framework_rules, entry, bound, heap, tick, rejections)
            continue
        if kind == _STAGE:  # score its plan without recompute; queue the others at their own bounds
            knobs, zero, recomputes, first = entry
            over = first and _never_fits(est, first)
            if over:  # memory only for stages that could win
                _reject(rejections, "out_of_memory", len(recomputes), over)
                continue
            to_score = []
            for recompute in recomputes:
                try:
                    plan = first if first and recompute == "none" else \
                        space.plan({**knobs, "zero_stage": zero, "recompute": recompute})  # first: this one, checked
                except InfeasiblePlan as exc:
                    _reject(rejections, exc.reason, 1, str(exc))
                    continue
                if plan in seen:
                    continue
                seen.add(plan)
                if recompute == "none" or not first:
                    to_score.append((plan, None))
                else:  # at the stage's bound until reached, then at its own
                    heapq.heappush(heap, (bound, next(tick), _PLAN, (plan, bound, None, False)))
        else:
            plan, bound, priced, own_bound = entry
            if not own_bound:  # reached at its stage's bound: back in the heap at its own step time
                if plan.recompute == "full":  # at the layers it will recompute
                    own, priced = _full_recompute_bound(scorer, plan)
                else:
                    own = _policy_bound(est, plan)
                heapq.heappush(heap, (max(key, own), next(tick), _PLAN, (plan, bound, priced, True)))
                continue
            to_score = [(plan, priced)]
        for plan, priced in to_score:
            s = scorer.score(plan, priced)
            scored.append(s)
            # The stage's bound holds for the plan scored, also when a full-recompute plan folds onto
            # its twin without recompute (whose score is then the one taken).
            if s.estimate is not None and s.step_time_s < bound:  # the bound is broken: be exact the slow way
                return None
            if s.feasible:
                layout = (s.plan.dp, s.plan.tp, s.plan.pp, s.plan.cp, s.plan.ep)
                if s.step_time_s < best_by_layout.get(layout, math.inf):
                    best_by_layout[layout] = s.step_time_s
                    if len(best_by_layout) >= keep_layouts:
                        threshold = heapq.nsmallest(keep_layouts, best_by_layout.values())[-1]
    return scored, rejections, pruned


def _group_heap(space: SearchSpace, est, framework_rules, rejections: dict, tick) -> list:
    """A heap of the plan groups whose rules can pass, each at its loose bound; a group whose first
    plan breaks a rule no knob of the group mends is counted rejected, all of its plans."""
    heap = []
    for knobs, zeros, recomputes in plan_groups(space, rejections):
        first = broken = None
        try:
            first = space.plan({**knobs, "zero_stage": zeros[0], "recompute": "none"})
            framework_rules(est.model, est.training, first)
        except InfeasiblePlan as exc:
            broken = exc
        if broken is not None and broken.reason not in MENDABLE_RULES:  # every plan of the group breaks it
            _reject(rejections, broken.reason, len(zeros) * len(recomputes), str(broken))
            continue
        bound = _loose_bound(est, first) if first is not None else 0.0
        heap.append((bound, next(tick), _GROUP, (knobs, zeros, recomputes, first if broken is None else None)))
    heapq.heapify(heap)
    return heap


def _open_group(space: SearchSpace, est, framework_rules, entry: tuple, bound: float, heap: list, tick,
                rejections: dict) -> None:
    """Push a group's ZeRO stages that pass the rules and whose model states alone fit, each at its
    sharper bound (never below the group's)."""
    knobs, zeros, recomputes, checked = entry  # checked: the first ZeRO stage's plan, if it passed
    for zero in zeros:
        plan = checked if checked is not None and zero == zeros[0] else \
            _rule_checked(space, est, framework_rules, knobs, zero, rejections, len(recomputes))
        if plan is None:
            continue
        over = plan and _weights_over(est, plan)
        if over:  # no plan of the stage fits: no bound needed
            _reject(rejections, "out_of_memory", len(recomputes), over)
            continue
        sharper = _tight_bound(est, plan) if plan else 0.0
        heapq.heappush(heap, (max(bound, sharper), next(tick), _STAGE, (knobs, zero, recomputes, plan)))


_GROUP, _STAGE, _PLAN = 0, 1, 2
"""Heap entry kinds: a group of plans (all its ZeRO stages), one ZeRO stage of a group, one plan
with recompute (with its stage's bound)."""


def _num_plans(kind: int, entry: tuple) -> int:
    if kind == _PLAN:
        return 1
    return len(entry[1]) * len(entry[2]) if kind == _GROUP else len(entry[2])
