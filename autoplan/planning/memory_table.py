"""`autoplan memory`: per-GPU memory of one parallel layout across the memory levers.

Like `accelerate estimate-memory`, but for training with activations: one row per dtype x ZeRO
stage x recompute x micro-batch, each the cost model's own breakdown of the worst pipeline rank
(Estimator.estimate, the figures `search` and `estimate` print), grouped into five columns that
sum to the peak:

    weights     = params + weight_copies           (the stored weights and the compute-dtype copy)
    grads       = grads
    optimizer   = optimizer + optimizer_working    (states and the optimizer step's temporaries)
    activations = activations + activation_working + logits
    other       = every other term (comm_buffers, allocator_overhead, cuda_context, ...)

"full" recompute here recomputes every layer of a stage (the most memory it can save; `search`
and `estimate` recompute only the fewest layers that fit). A row the framework or the plan rules
refuse is kept apart with its rule tag (InfeasiblePlan.reason).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from autoplan.specs import RECOMPUTE_POLICIES, InfeasiblePlan, ParallelPlan, TrainingSpec
from cost_model.moe_memory import expert_state_bytes

DTYPES = ("bf16", "fp16", "fp8")
ZERO_STAGES = (0, 1, 2, 3)
GROUPS = {"weights": ("params", "weight_copies"), "grads": ("grads",),
          "optimizer": ("optimizer", "optimizer_working"),
          "activations": ("activations", "activation_working", "logits")}
COLUMNS = (*GROUPS, "other")


def group_breakdown(breakdown: dict) -> dict:
    """The cost model's memory terms in the table's five columns; their sum is the breakdown's sum."""
    grouped = {name: sum(breakdown.get(k, 0.0) for k in keys) for name, keys in GROUPS.items()}
    known = {k for keys in GROUPS.values() for k in keys}
    grouped["other"] = sum(v for k, v in breakdown.items() if k not in known)
    return grouped


@dataclass(frozen=True)
class Layout:
    """The parallel degrees every row shares (dp is what the GPU count leaves)."""
    dp: int
    tp: int
    pp: int
    cp: int = 1
    vpp: int = 1
    ep: int = 1
    sequence_parallel: bool = False
    etp: int = 0
    """Expert tensor-parallel size; 0: tp (ParallelPlan.etp)."""

    def describe(self) -> str:
        extra = (f" vpp={self.vpp}" if self.vpp > 1 else "") + (f" ep={self.ep}" if self.ep > 1 else "") \
            + (f" etp={self.etp}" if self.etp else "")
        return f"dp={self.dp} tp={self.tp} pp={self.pp} cp={self.cp}{extra} {'sp' if self.sequence_parallel else 'no-sp'}"


@dataclass
class MemoryRow:
    dtype: str
    zero_stage: int
    recompute: str
    micro_batch_size: int
    columns: dict = field(default_factory=dict)
    """COLUMNS -> bytes; empty for a refused row."""
    peak_bytes: int = 0
    fits: bool = False
    step_time_s: float = 0.0
    experts_bytes: int = 0
    """The routed experts' weights, grads and optimizer states (a part of those columns; 0: dense)."""
    refused: str = ""
    """The rule tag when the framework or the plan rules refuse the row."""
    reason: str = ""

    def to_dict(self) -> dict:
        out = {"dtype": self.dtype, "zero_stage": self.zero_stage, "recompute": self.recompute,
               "micro_batch_size": self.micro_batch_size}
        if self.refused:
            return {**out, "refused": self.refused, "reason": self.reason}
        return {**out, **{f"{k}_bytes": int(v) for k, v in self.columns.items()}, "peak_bytes": self.peak_bytes,
                "fits": self.fits, "step_time_s": self.step_time_s,
                **({"experts_bytes": self.experts_bytes} if self.experts_bytes else {})}


def micro_batches(global_batch_size: int, dp: int) -> list:
    """1, 2, 4, ... while dp * micro-batch divides the global batch."""
    per_replica, out, b = global_batch_size // dp if global_batch_size % dp == 0 else 0, [], 1
    while per_replica and per_replica % b == 0:
        out.append(b)
        b *= 2
    return out


def memory_rows(model, training: TrainingSpec, cluster, profile, layout: Layout, make_estimator, dtypes=DTYPES,
                zero_stages=ZERO_STAGES, recomputes=RECOMPUTE_POLICIES, micro_batch_sizes=None) -> list:
    """Every row of the table, refused ones included. `make_estimator(training)` builds the cost
    model for one dtype (with the framework and headroom the caller chose)."""
    sizes = micro_batch_sizes or micro_batches(training.global_batch_size, layout.dp)
    rows = []
    for dtype in dtypes:
        shape = TrainingSpec(global_batch_size=training.global_batch_size, seq_len=training.seq_len, dtype=dtype,
                             optimizer=training.optimizer)
        if dtype not in profile.peak_flops_per_s:
            reason = f"{profile.name} has no {dtype} matmuls (it has {', '.join(sorted(profile.peak_flops_per_s))})"
            rows += [MemoryRow(dtype, z, r, b, refused="profile_dtype", reason=reason)
                     for z in zero_stages for r in recomputes for b in sizes]
            continue
        est = make_estimator(shape)
        for zero in zero_stages:
            for recompute in recomputes:
                for mbs in sizes:
                    rows.append(_row(est, model, shape, layout, dtype, zero, recompute, mbs))
    return rows


def _row(est, model, training, layout: Layout, dtype: str, zero: int, recompute: str, mbs: int) -> MemoryRow:
    row = MemoryRow(dtype, zero, recompute, mbs)
    per_replica = layout.dp * mbs
    if training.global_batch_size % per_replica:
        row.refused, row.reason = "batch_product", (f"global batch {training.global_batch_size} is not a multiple of "
                                                    f"dp*micro_batch = {per_replica}")
        return row
    plan = ParallelPlan(dp=layout.dp, tp=layout.tp, pp=layout.pp, cp=layout.cp, vpp=layout.vpp, ep=layout.ep,
                        etp=layout.etp,
                        sequence_parallel=layout.sequence_parallel, zero_stage=zero, micro_batch_size=mbs,
                        num_microbatches=training.global_batch_size // per_replica, recompute=recompute,
                        recompute_num_layers=-(-model.num_layers // layout.pp) if recompute == "full" else 0)
    try:
        estimate = est.estimate(plan)
    except InfeasiblePlan as exc:
        row.refused, row.reason = exc.reason, str(exc)
        return row
    row.columns = group_breakdown(estimate.memory_breakdown_bytes)
    row.experts_bytes = int(sum(expert_state_bytes(est, plan).values()))
    row.peak_bytes, row.fits, row.step_time_s = estimate.peak_memory_bytes, estimate.fits, estimate.step_time_s
    return row
