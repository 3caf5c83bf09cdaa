"""The search space: which values each knob of a ParallelPlan may take, and how a choice of knobs
becomes a plan.

The knobs are fixed categorical domains (what Optuna samples and what `--exhaustive` enumerates).
`dp` and `num_microbatches` are not knobs: they follow from the GPU count and the global batch.
Choices that cannot matter are folded onto one canonical plan instead of being searched twice:
sequence parallelism without TP, ZeRO without data parallelism and interleaving without a pipeline
are the same plan as the feature switched off. The structural rules themselves are
`ParallelPlan.check`; whether a plan fits in memory is the cost model's answer.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import asdict, dataclass

from autoplan.specs import (
    RECOMPUTE_POLICIES, ClusterSpec, InfeasiblePlan, ModelSpec, ParallelPlan, TrainingSpec,
)

# Order matters only for display and for the enumeration order of `--exhaustive`.
KNOBS = ("tp", "pp", "cp", "vpp", "ep", "etp", "micro_batch_size", "zero_stage", "recompute", "sequence_parallel",
         "moe_capacity_factor", "tp_comm_overlap")
MAX_MICRO_BATCH = 16
MIN_CP_CHUNK_TOKENS = 256
"""Context parallelism splits each sequence into 2*cp load-balanced chunks; below a few hundred
tokens per chunk the ring exchange cannot hide behind attention, so such degrees are not searched."""


@dataclass(frozen=True)
class Pins:
    """Knobs the user fixed on the command line; None leaves a knob to the search."""
    dp: int | None = None
    tp: int | None = None
    pp: int | None = None
    cp: int | None = None
    vpp: int | None = None
    ep: int | None = None
    etp: int | None = None
    micro_batch_size: int | None = None
    zero_stage: int | None = None
    zero_shard: int | None = None
    recompute: str | None = None
    sequence_parallel: bool | None = None
    tp_comm_overlap: bool | None = None
    moe_capacity_factor: float | tuple | None = None
    """MoE routing: one capacity factor (0 = dropless) pins it; a tuple of them is searched. None: dropless
    only -- dropping tokens changes what the model trains on, so the search tries it only when asked."""

    def pinned(self) -> dict:
        """The knobs fixed to one value (a single capacity factor among them)."""
        pinned = {k: v for k, v in asdict(self).items() if v is not None and k != "moe_capacity_factor"}
        if len(self.capacity_factors()) == 1 and self.moe_capacity_factor is not None:
            pinned["moe_capacity_factor"] = self.capacity_factors()[0]
        return pinned

    def capacity_factors(self) -> tuple:
        """The capacity factors to plan with (0.0 = dropless)."""
        factors = self.moe_capacity_factor
        if factors is None:
            return (0.0,)
        return tuple(float(f) for f in factors) if isinstance(factors, tuple) else (float(factors),)

    def describe(self) -> str:
        flags = {"micro_batch_size": "micro-batch", "zero_stage": "zero", "zero_shard": "zero-shard"}
        parts = []
        for k, v in self.pinned().items():
            if k in ("sequence_parallel", "tp_comm_overlap"):
                flag = k.replace("_", "-")
                parts.append(f"--{flag}" if v else f"--no-{flag}")
            elif k == "moe_capacity_factor":
                parts.append(f"--moe-capacity-factor {v:g}")
            else:
                parts.append(f"--{flags.get(k, k)} {v}")
        return " ".join(parts)


def divisors(n: int) -> list[int]:
    """Ascending divisors of n in O(sqrt(n)): a config.json with 10^9 layers must not hang the search."""
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return small + [n // d for d in reversed(small) if d * d != n]


def batch_rule(global_batch_size: int, dp: int, micro_batch_size: int) -> InfeasiblePlan:
    """Why dp * micro_batch_size does not divide the global batch: "batch_product" when dp alone does
    not (no micro-batch size helps: the problem's batch), "micro_batch_product" when only this
    micro-batch size is too large (a choice of the search grid, not a plan the batch rules out)."""
    tag = "batch_product" if global_batch_size % dp else "micro_batch_product"
    return InfeasiblePlan(f"global_batch_size must be a multiple of dp*micro_batch_size, got global_batch_size="
                          f"{global_batch_size}, dp={dp} * micro_batch_size={micro_batch_size} = "
                          f"{dp * micro_batch_size}", tag)


class SearchSpace:
    """The discrete plan space for one (model, training, cluster), with the user's pins applied."""

    def __init__(self, model: ModelSpec, training: TrainingSpec, cluster: ClusterSpec,
                 pins: Pins = Pins(), allow_tp_across_nodes: bool = False, framework=None):
        self.model, self.training, self.cluster = model, training, cluster
        # The framework (a Framework; None: any, experts split over tp) decides what etp may be. Experts
        # split over their own TP degree (Framework.expert_tensor_parallel): etp is searched jointly with
        # tp and ep. Experts whole under expert parallelism (Framework.experts_whole_with_ep): etp follows
        # ep (canonical_knobs). Otherwise it stays tp (0).
        self.framework = framework
        self.expert_tp = bool(framework and framework.expert_tensor_parallel)
        self.experts_whole_with_ep = bool(framework and framework.experts_whole_with_ep)
        self.pins = pins
        # once, not per plan: `plan()` runs for every knob combination (a report enumerates ~200,000),
        # and dataclasses.asdict per call was half of a report's time
        self._pinned = pins.pinned()
        self.allow_tp_across_nodes = allow_tp_across_nodes
        self.domains = self._domains()

    # -- domains -------------------------------------------------------------------------------
    def _domains(self) -> dict:
        m, t, c = self.model, self.training, self.cluster
        n = c.num_gpus
        tp_limit = n if self.allow_tp_across_nodes else min(n, c.gpus_per_node)
        heads_gcd = math.gcd(m.num_heads, m.num_kv_heads)
        free = {
            "tp": [d for d in divisors(heads_gcd) if d <= tp_limit and n % d == 0],
            # Any pipeline depth with a layer per stage: uneven splits follow
            # ParallelPlan.stage_num_layers (and chunk_num_layers with interleaving).
            "pp": [d for d in divisors(n) if d <= m.num_layers],
            "cp": [d for d in divisors(n) if t.seq_len % (2 * d) == 0
                   and t.seq_len // (2 * d) >= MIN_CP_CHUNK_TOKENS] if t.seq_len % 2 == 0 else [1],
            # Chunk counts that split a rank's layers evenly, for the smaller and the larger rank
            # of each pipeline depth (126 layers at pp=8: ranks of 15 and 16 -> vpp 3, 5, 8, ...).
            "vpp": sorted({v for p in divisors(n) if 1 < p <= m.num_layers
                           for per_rank in {m.num_layers // p, -(-m.num_layers // p)}
                           for v in divisors(per_rank) if p * v <= m.num_layers} | {1}),
            "ep": divisors(m.num_experts) if m.is_moe else [1],
            # 0 = tp; an expert TP degree of its own within a node (Megatron-Core's MoE parallel
            # folding, where etp = 1 is the common choice): ParallelPlan.check bounds it further.
            "etp": [0] + [d for d in divisors(c.gpus_per_node) if m.expert_ffn_size % d == 0]
                   if m.is_moe and self.expert_tp else [0],
            "micro_batch_size": [d for d in divisors(t.global_batch_size) if d <= MAX_MICRO_BATCH],
            "zero_stage": [0, 1, 2, 3],
            "recompute": list(RECOMPUTE_POLICIES),
            "sequence_parallel": [False, True],
            # Overlapping TP communication is searched where the framework offers it (Framework.tp_comm_overlap_kind).
            "tp_comm_overlap": [False, True] if self.framework and self.framework.tp_comm_overlap_kind else [False],
            # Dropless unless the user names capacities (a dense model then breaks ParallelPlan.check's rule).
            "moe_capacity_factor": list(self.pins.capacity_factors()),
        }
        if 1 not in free["cp"]:
            free["cp"].insert(0, 1)
        pinned = self._pinned
        return {k: (pinned[k],) if k in pinned else tuple(v) for k, v in free.items()}

    @property
    def size(self) -> int:
        """Number of knob combinations (before rules and canonical folding)."""
        return math.prod(len(v) for v in self.domains.values())

    # -- from knobs to a plan ------------------------------------------------------------------
    def plan(self, knobs: dict) -> ParallelPlan:
        """The canonical plan for one choice of knobs; raises InfeasiblePlan for a broken rule.

        A `full` recompute plan comes back with every layer of a stage recomputed; the search then
        asks the cost model for the fewest layers that fit.
        """
        m, t, c = self.model, self.training, self.cluster
        k, dp = self.canonical_knobs(knobs)
        per_replica = dp * k["micro_batch_size"]
        if t.global_batch_size % per_replica:
            raise batch_rule(t.global_batch_size, dp, k["micro_batch_size"])
        plan = ParallelPlan(
            dp=dp, tp=k["tp"], pp=k["pp"], cp=k["cp"], vpp=k["vpp"], ep=k["ep"], etp=k["etp"],
            sequence_parallel=k["sequence_parallel"], zero_stage=k["zero_stage"],
            tp_comm_overlap=k["tp_comm_overlap"], micro_batch_size=k["micro_batch_size"], num_microbatches=t.global_batch_size // per_replica,
            recompute=k["recompute"], moe_capacity_factor=k["moe_capacity_factor"],
            recompute_num_layers=-(-m.num_layers // k["pp"]) if k["recompute"] == "full" else 0,
            zero_shard=self._pinned.get("zero_shard", 0),
        )
        plan.check(m, t, c, allow_tp_across_nodes=self.allow_tp_across_nodes)
        return plan

    def canonical_knobs(self, knobs: dict) -> tuple[dict, int]:
        """The knobs with the choices that cannot change the plan folded onto the canonical one,
        and dp; raises InfeasiblePlan when the degrees cannot multiply to the GPU count."""
        c, m = self.cluster, self.model
        pinned = self._pinned
        k = dict(knobs)
        k.setdefault("etp", 0)  # callers that name no expert TP mean etp = tp
        k.setdefault("moe_capacity_factor", 0.0)  # nor a capacity: dropless
        k.setdefault("tp_comm_overlap", False)  # nor an overlap: off
        model_parallel = k["tp"] * k["pp"] * k["cp"]
        if c.num_gpus % model_parallel:
            raise InfeasiblePlan(
                f"tp*pp*cp must divide the GPU count, got tp={k['tp']} * pp={k['pp']} * cp={k['cp']} = "
                f"{model_parallel}, num_gpus={c.num_gpus}", "degree_product")
        dp = c.num_gpus // model_parallel
        if "dp" in pinned and pinned["dp"] != dp:
            raise InfeasiblePlan(
                f"dp*tp*pp*cp must equal the GPU count, got dp={pinned['dp']} * tp={k['tp']} * pp={k['pp']} "
                f"* cp={k['cp']} = {pinned['dp'] * model_parallel}, num_gpus={c.num_gpus}", "degree_product")
        # Fold choices that cannot change the plan onto the canonical one (unless the user pinned them,
        # in which case ParallelPlan.check says why they cannot work).
        if k["tp"] == 1 and "sequence_parallel" not in pinned:
            k["sequence_parallel"] = False
        if k["tp"] == 1 and "tp_comm_overlap" not in pinned:
            k["tp_comm_overlap"] = False
        if dp == 1 and "zero_stage" not in pinned:
            k["zero_stage"] = 0
        if k["pp"] == 1 and "vpp" not in pinned:
            k["vpp"] = 1
        if not m.is_moe and "ep" not in pinned:
            k["ep"] = 1
        if self.experts_whole_with_ep and "etp" not in pinned:
            k["etp"] = self.framework.default_etp(m, k["ep"])
        if k["etp"] == k["tp"] and "etp" not in pinned:
            k["etp"] = 0
        return k, dp

    def enumerate(self):
        """Every structurally valid canonical plan once, and the rules the rest broke.

        Returns (plans, rejections) where rejections maps a reason tag to (count, first message),
        counting distinct canonical plans: knob choices that fold onto one plan are one rejection, so
        the counts say which rule rejected the most plans (the planner blames that one).
        """
        plans, seen, tried, rejections = [], set(), set(), {}
        names = list(self.domains)
        for values in itertools.product(*(self.domains[k] for k in names)):
            try:
                knobs, _ = self.canonical_knobs(dict(zip(names, values)))
                key = tuple(knobs[k] for k in names)
                if key in tried:
                    continue
                tried.add(key)
                plan = self.plan(knobs)
            except InfeasiblePlan as exc:
                count, first = rejections.get(exc.reason, (0, str(exc)))
                rejections[exc.reason] = (count + 1, first)
                continue
            if plan not in seen:
                seen.add(plan)
                plans.append(plan)
        return plans, rejections

    def knobs_of(self, plan: ParallelPlan) -> dict:
        """The knob values that produce `plan` (for enqueuing a known plan into a study)."""
        return {k: getattr(plan, k) for k in KNOBS}
