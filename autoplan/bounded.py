"""The exact search without scoring every plan: branch and bound over groups of plans.

A group is the plans sharing (tp, pp, cp, vpp, ep, micro-batch, sp): they differ only in ZeRO
stage and recompute policy, so one lower bound on step time covers them all
(cost_model.bounds). Groups are opened cheapest bound first; a group whose bound exceeds the
step time of the `keep_layouts`-th best parallel layout found so far cannot hold the optimum nor
the best plan of any layout the runners-up are picked from, so it is never scored. The answer is
the one `exhaustive_search` gives, best plan and runners-up alike, from a few per cent of the
scores. Two bounds: a loose one from the layer times alone for every group, then, for the groups
that survive it, the time terms of the group's plans without recompute (no memory model).
`autoplan.search` (bounded_search) makes the scores its SearchResult; this module does not import it.

The bounds hold for the analytical Estimator; a calibrated or learned one may scale times down,
so `search` uses Optuna there. If a scored plan ever comes in under its group's bound, `search`
scores every plan instead (and the tests fail: tests/test_bounded_search.py).
"""
from __future__ import annotations

import heapq
import itertools
import math

from autoplan.space import SearchSpace, batch_rule
from autoplan.specs import InfeasiblePlan, ParallelPlan

KEEP_LAYOUTS = 5
"""The best plan and the best plans of 4 other layouts (planner.NUM_ALTERNATIVES runners-up)."""
_PLAN_RULES = ("zero_stage", "recompute_policy", "recompute_layers")
"""Rules a group's first plan can break that its other ZeRO stages or policies may not."""


def supports_bounds(estimator) -> bool:
    """Only the plain analytical Estimator is bounded below by cost_model.bounds."""
    from cost_model import Estimator

    return type(estimator) is Estimator


def _groups(space: SearchSpace, rejections: dict):
    """(knobs without zero/recompute, zero stages, recompute policies) per group, folded like
    SearchSpace.plan; degree and batch products that cannot work are counted and skipped."""
    d, pinned = space.domains, space.pins.pinned()
    n, gb = space.cluster.num_gpus, space.training.global_batch_size
    recomputes = d["recompute"]
    for tp, pp, cp, ep in itertools.product(d["tp"], d["pp"], d["cp"], d["ep"]):
        vpps = d["vpp"] if pp > 1 or "vpp" in pinned else (1,)
        sps = d["sequence_parallel"] if tp > 1 or "sequence_parallel" in pinned else (False,)
        if n % (tp * pp * cp):
            _reject(rejections, "degree_product", len(vpps) * len(sps) * len(d["micro_batch_size"]),
                    f"tp*pp*cp must divide the GPU count, got tp={tp} * pp={pp} * cp={cp} = {tp * pp * cp}, "
                    f"num_gpus={n}")
            continue
        dp = n // (tp * pp * cp)
        zeros = d["zero_stage"] if dp > 1 or "zero_stage" in pinned else (0,)
        for vpp, sp, mb in itertools.product(vpps, sps, d["micro_batch_size"]):
            if gb % (dp * mb):
                rule = batch_rule(gb, dp, mb)
                _reject(rejections, rule.reason, len(zeros) * len(recomputes), str(rule))  # the group's plans
                continue
            yield dict(tp=tp, pp=pp, cp=cp, vpp=vpp, ep=ep, micro_batch_size=mb, sequence_parallel=sp), zeros, recomputes


def _reject(rejections: dict, tag: str, count: int, message: str) -> None:
    before, first = rejections.get(tag, (0, message))
    rejections[tag] = (before + count, first)


def _loose_bound(est, plan: ParallelPlan) -> float:
    from cost_model.bounds import step_time_lower_bound

    return step_time_lower_bound(est, plan)


def _tight_bound(est, plan: ParallelPlan, zeros) -> float:
    from cost_model.bounds import no_recompute_time_s

    try:
        return min(no_recompute_time_s(est, plan.replace(zero_stage=z)) for z in zeros)
    except InfeasiblePlan:
        return 0.0


def _never_fits(est, plan: ParallelPlan, zeros) -> bool:
    """No plan of the group fits: the leanest of each ZeRO stage (no recompute, selective, or every
    layer recomputed; memory falls with the recomputed layers, min_full_recompute_layers bisects on
    it) is over the usable memory. Such plans would only be scored to learn they do not fit."""
    usable = est.usable_memory_bytes
    every = max(plan.stage_num_layers(est.model.num_layers))
    for z in sorted(zeros, reverse=True):  # the leanest first: the answer is usually "fits"
        for recompute, layers in (("full", every), ("selective", 0), ("none", 0)):
            try:
                if sum(est.memory(plan.replace(zero_stage=z), recompute, layers).values()) <= usable:
                    return False
            except Exception:  # a shape the memory model cannot price: let scoring say why
                return False
    return True


def bounded_scores(space: SearchSpace, scorer, keep_layouts: int = KEEP_LAYOUTS) -> tuple | None:
    """The plans the exhaustive search's answer needs, scored by `scorer` (autoplan.search.PlanScorer):
    only the groups whose bound can still beat the `keep_layouts`-th best layout (see the module
    docstring). (scored, rule rejections, plans left unscored), or None when a plan came in under its
    group's bound: the caller then scores every plan."""
    est, rejections, heap = scorer.estimator, {}, []
    for i, (knobs, zeros, recomputes) in enumerate(_groups(space, rejections)):
        try:
            first = space.plan({**knobs, "zero_stage": zeros[0], "recompute": "none"})
        except InfeasiblePlan as exc:
            if exc.reason in _PLAN_RULES:
                first = None
            else:
                _reject(rejections, exc.reason, len(zeros) * len(recomputes), str(exc))
                continue
        bound = _loose_bound(est, first) if first is not None else 0.0
        heap.append((bound, i, first is None, first, knobs, zeros, recomputes))
    heapq.heapify(heap)
    best_by_layout, threshold, scored, seen, pruned, pruned_memory = {}, math.inf, [], set(), 0, 0
    while heap:
        bound, i, tight, first, knobs, zeros, recomputes = heapq.heappop(heap)
        if bound > threshold:
            pruned = len(zeros) * len(recomputes) + sum(len(g[5]) * len(g[6]) for g in heap)
            break
        if not tight:  # refine once, then queue again at the sharper bound
            sharper = _tight_bound(est, first, zeros)
            heapq.heappush(heap, (max(bound, sharper), i, True, first, knobs, zeros, recomputes))
            continue
        if first is not None and _never_fits(est, first, zeros):  # memory only for groups that could win
            pruned_memory += len(zeros) * len(recomputes)
            continue
        for zero, recompute in itertools.product(zeros, recomputes):
            try:
                plan = space.plan({**knobs, "zero_stage": zero, "recompute": recompute})
            except InfeasiblePlan as exc:
                _reject(rejections, exc.reason, 1, str(exc))
                continue
            if plan in seen:
                continue
            seen.add(plan)
            s = scorer.score(plan)
            scored.append(s)
            if s.estimate is not None and s.step_time_s < bound:  # the bound is broken: be exact the slow way
                return None
            if s.feasible:
                layout = (s.plan.dp, s.plan.tp, s.plan.pp, s.plan.cp, s.plan.ep)
                if s.step_time_s < best_by_layout.get(layout, math.inf):
                    best_by_layout[layout] = s.step_time_s
                    if len(best_by_layout) >= keep_layouts:
                        threshold = heapq.nsmallest(keep_layouts, best_by_layout.values())[-1]
    return scored, rejections, pruned + pruned_memory
