"""The nearest plan that fits: what `autoplan estimate` suggests for a plan that does not fit in memory.

A small local search around the given plan, in the order a person would reach for the levers:
first the memory levers alone (ZeRO stage, recompute, micro-batch), then the layout too (tp, pp,
sequence parallelism), keeping the GPU count, cp, ep and the training shape. Each step enumerates
the search space with every other knob pinned to the plan's value (autoplan.planning.space), scores it with
the search's own scorer (autoplan.planning.search.PlanScorer: full recompute gets the fewest layers that fit),
and keeps the plans that run. Of those, the fastest wins (the fewest changed knobs on a tie): "nearest"
is the step, not the count of flags, since one lever alone can cost far more time than two together
(llama-2-70b at tp=8 on 32 H100s: ZeRO-3 alone fits at +79% step time, ZeRO-2 with full recompute of
9 layers at +3%).
"""
from __future__ import annotations

from dataclasses import dataclass

from autoplan.planning.search import PlanScorer, Scored
from autoplan.planning.space import KNOBS, Pins, SearchSpace
from autoplan.specs import ParallelPlan

MEMORY_LEVERS = ("zero_stage", "recompute", "micro_batch_size")
LAYOUT_LEVERS = ("tp", "pp", "sequence_parallel")
STEPS = (MEMORY_LEVERS, MEMORY_LEVERS + LAYOUT_LEVERS, MEMORY_LEVERS + LAYOUT_LEVERS + ("vpp",))
"""Which knobs each step frees; a step runs only when the one before found nothing that fits."""
FLAGS = {"zero_stage": "--zero", "recompute": "--recompute", "micro_batch_size": "--micro-batch", "tp": "--tp",
         "pp": "--pp", "vpp": "--vpp", "sequence_parallel": "--sequence-parallel"}


@dataclass(frozen=True)
class Suggestion:
    scored: Scored
    changes: dict
    """Knob -> (old value, new value), for the knobs that changed (dp follows tp and pp)."""
    num_scored: int

    def flags(self) -> list:
        """The command-line flags that turn the plan into the suggestion, e.g. ['--zero 3', '--recompute full']."""
        out = []
        for knob, (_, new) in self.changes.items():
            if knob == "sequence_parallel":
                out.append("--sequence-parallel" if new else "--no-sequence-parallel")
            else:
                out.append(f"{FLAGS[knob]} {new}")
        return out


def changed_knobs(old: ParallelPlan, new: ParallelPlan) -> dict:
    return {k: (getattr(old, k), getattr(new, k)) for k in FLAGS if getattr(old, k) != getattr(new, k)}


def nearest_fitting(model, training, cluster, estimator, plan: ParallelPlan,
                    allow_tp_across_nodes: bool = False) -> Suggestion | None:
    """The fastest plan that fits in the first step of levers where any does (the fewest changed
    knobs on a tie), or None when no plan within the levers fits on these GPUs. `estimator` carries
    the headroom and framework."""
    scorer = PlanScorer(estimator)
    for free in STEPS:
        # The plan's hybrid sharding is not a lever: its shard group stays what the user planned.
        pins = Pins(**{k: getattr(plan, k) for k in KNOBS if k not in free}, zero_shard=plan.zero_shard or None)
        space = SearchSpace(model, training, cluster, pins, allow_tp_across_nodes, framework=estimator.framework)
        candidates, _ = space.enumerate()
        fitting = [s for s in map(scorer.score, candidates) if s.feasible]
        if fitting:
            best = min(fitting, key=lambda s: (s.step_time_s, len(changed_knobs(plan, s.plan))))
            return Suggestion(best, changed_knobs(plan, best.plan), scorer.num_evaluated)
    return None
