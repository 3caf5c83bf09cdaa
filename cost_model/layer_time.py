"""Seconds per micro-batch of one transformer layer (and of the stage extras) on one GPU.

Every figure comes from the profile's tables through `ProfileTables`: GEMMs at their shape after
the TP split, attention from the attention table (flash) or as batched GEMMs plus a memory-bound
softmax (no flash), norms/activations/residuals/RoPE as memory-bound bytes, TP/SP/CP/EP traffic
from the collective table. `LayerTimes` is cached per (micro-batch, tp, cp, ep, sp) by the
estimator, so a search pays for each shape once.
"""
from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import NamedTuple

from autoplan.specs import ModelSpec
from cost_model.flops import backward_shapes, layer_gemms, logits_gemm
from cost_model.grouped_gemm import GroupedKernel, grouped_gemm_time_s, kernel_for
from cost_model.layer_terms import (  # noqa: F401 (Rates, memory_time_s: read from here by the estimator and steps)
    MemoryBoundTimes, Rates, attention_core_times, cp_times, fp8_cast_times, gemm_time_s, memory_bound_times,
    memory_time_s,
)
from cost_model.memory import BYTES_ACT
from cost_model.moe_time import flex_dispatch_time_s, moe_layer_times, tp_exchange_time_s
from cost_model.tables import ProfileTables

EXPERT_GEMMS = ("mlp_in", "mlp_out")
"""The routed experts' GEMMs in a MoE layer's `layer_gemms` (the router and shared experts run on every token)."""
SHARED_GEMMS = ("shared_in", "shared_out")


@dataclass(frozen=True)
class LayerTimes:
    """One layer, one micro-batch, one GPU. Forward and backward kept apart for recompute/overlap."""
    gemm_fwd_s: float
    gemm_bwd_s: float
    attn_fwd_s: float
    attn_bwd_s: float
    memory_fwd_s: float
    memory_bwd_s: float
    tp_fwd_s: float
    tp_bwd_s: float
    cp_fwd_s: float
    cp_bwd_s: float
    ep_fwd_s: float
    ep_bwd_s: float
    gemm_fwd_flops: float
    attn_fwd_flops: float
    tp_bytes: float
    """Bytes one rank puts on the wire for this layer's TP/SP collectives (forward + backward)."""
    fp8_weight_cast_s: float = 0.0
    """fp8: one cast of this layer's weights (read bf16, write fp8: 3 B per weight); when and how often
    it happens is the framework's (Framework.fp8_weight_cast_per_microbatch, cost_model/step_time.py)."""
    norm_fwd_s: float = 0.0
    """Forward seconds of the submodules Megatron-Core's --recompute-modules names, already inside the
    sums above (what a selective recompute of that module pays again, cost_model/step_time.py): the two
    layer norms (layernorm), the routed experts' activation function (moe_act), the dense MLP (mlp),
    the whole MoE block with its router, permutation and exposed dispatch/combine (moe), the shared
    experts (shared_experts), MLA's up-projections (mla_up_proj)."""
    moe_act_fwd_s: float = 0.0
    mlp_fwd_s: float = 0.0
    moe_fwd_s: float = 0.0
    shared_fwd_s: float = 0.0
    mla_up_fwd_s: float = 0.0


GEMM_TIMES_MEMO_SIZE = 1 << 18
"""Entries gemms_time_s keeps per table before it starts over (a few hundred bytes each)."""


FP8_FPROP_FAST_ACCUM_SPEEDUP = 1.15
"""An fp8 forward GEMM over the profile's fp8 rate. The fp8 table is `torch._scaled_mm` with its default
split accumulation (profiler/compute.py, benchmarks/kernel_rates.py: use_fast_accum off), and so are the
training frameworks' backward GEMMs; their forward GEMMs run cuBLASLt's fast accumulation
(CUBLASLT_MATMUL_DESC_FAST_ACCUM): Transformer Engine pytorch/module/base.py `_2X_ACC_FPROP = False`
(DGRAD and WGRAD True), torchao float8/config.py `gemm_config_output = Float8GemmConfig(use_fast_accum=True)`
(grad_input and grad_weight False). Fast accumulation runs 1.1-1.2x the split-accumulation GEMM on an H100
(pytorch/ao issue 2377, 2025-06-14); 1.15 is that range's middle (no device measured it here)."""


def gemms_time_s(tables: ProfileTables, gemms, rates: Rates, grouped: GroupedKernel | None = None) -> tuple:
    """(forward, backward) seconds of `gemms`; with a `grouped` kernel, each Gemm's `count` groups run as
    one grouped call (cost_model/grouped_gemm.py), else as `count` GEMMs of the dense table. Remembered
    per table, GEMM shapes, rate and kernel: a search asks for the same layer's GEMMs under many plans (a
    bound for each of ~10^6 candidates)."""
    dtype = rates.gemm_dtype
    scale = rates.matmul_scale * (rates.fp8_scale if dtype == "fp8" else 1.0)
    key = (tuple(gemms), dtype, scale, grouped)
    times = tables.gemm_times_memo.get(key)
    if times is None:
        def time_s(g, at_scale):
            return grouped_gemm_time_s(tables, g, dtype, at_scale, grouped) if grouped else \
                gemm_time_s(tables, g, dtype, at_scale)
        fwd_scale = scale * (FP8_FPROP_FAST_ACCUM_SPEEDUP if dtype == "fp8" else 1.0)
        fwd = sum(time_s(g, fwd_scale) for g in gemms)
        bwd = sum(time_s(b, scale) for g in gemms for b in backward_shapes(g))
        if len(tables.gemm_times_memo) >= GEMM_TIMES_MEMO_SIZE:
            tables.gemm_times_memo.clear()
        times = tables.gemm_times_memo[key] = (fwd, bwd)
    return times


def mean_layer_times(model: ModelSpec, tables: ProfileTables, rates: Rates, micro_batch: int, seq_len: int,
                     tp: int, cp: int, ep: int, sequence_parallel: bool, gpus_per_node: int,
                     etp: int = 0, kinds: tuple = (), capacity_factor: float = 0.0,
                     memo: dict | None = None) -> LayerTimes:
    """The mean over the model's layers (or over `kinds`, ((is_moe, window), count) pairs: one pipeline
    rank's layers, cost_model/layer_mix.py) of `layer_times`, each kind of layer (dense/MoE,
    window/global) weighted by how many layers it has: stage totals are layers x mean. `memo`: a dict
    the caller keeps for one model, table, rates and sequence length (the Estimator's), so that each
    kind of layer is priced once per shape."""
    kinds = kinds or model.layer_kinds()
    memo = {} if memo is None else memo
    per_kind = []
    for (moe, window), count in kinds:
        key = (micro_batch, tp, cp, ep, sequence_parallel, etp, capacity_factor, moe, window)
        lt = memo.get(key)
        if lt is None:
            lt = memo[key] = layer_times(model, tables, rates, micro_batch, seq_len, tp, cp, ep, sequence_parallel,
                                         gpus_per_node, moe, window, etp, capacity_factor)
        per_kind.append((count, lt))
    if len(per_kind) == 1:
        return per_kind[0][1]
    total = sum(n for n, _ in per_kind)
    return LayerTimes(**{f.name: sum(n * getattr(lt, f.name) for n, lt in per_kind) / total
                         for f in fields(LayerTimes)})


def layer_times(model: ModelSpec, tables: ProfileTables, rates: Rates, micro_batch: int, seq_len: int,
                tp: int, cp: int, ep: int, sequence_parallel: bool, gpus_per_node: int,
                moe: bool | None = None, window: int = 0, etp: int = 0,
                capacity_factor: float = 0.0) -> LayerTimes:
    """One layer of the given kind (`moe`: MoE MLP or dense; `window`: sliding-window keys or 0;
    `etp`: the expert tensor-parallel degree, 0 = tp; `capacity_factor`: the plan's
    moe_capacity_factor, 0 = dropless): each concern priced by its own function below."""
    tokens = micro_batch * (seq_len // cp)
    moe = model.is_moe if moe is None else moe
    etp = etp or tp
    gemms = LayerGemms(tables, rates, layer_gemms(model, tokens, tp, ep, moe, etp), moe)
    gemm_fwd_s, gemm_bwd_s = gemms.times()
    attn = attention_core_times(model, tables, rates, micro_batch, seq_len, tp, cp, window)
    mem = memory_bound_times(model, tables, rates, tokens, tp, sequence_parallel, moe)
    memory_fwd_s, memory_bwd_s, fp8_weight_cast_s = mem.fwd_s, 2.0 * mem.fwd_s, 0.0
    if rates.gemm_dtype == "fp8":
        memory_fwd_s, memory_bwd_s, fp8_weight_cast_s = fp8_cast_times(tables, rates, gemms.fp8_gemms, mem.op_bytes,
                                                                       memory_fwd_s, memory_bwd_s, moe)
    dispatch = dispatch_in_effect(rates.moe.moe_dispatch, ep)
    tp_comm = tp_times(model, tables, rates, tokens, tp, moe, dispatch, sequence_parallel, gpus_per_node)
    cp_fwd_s, cp_bwd_s = cp_times(model, tables, micro_batch, seq_len, tp, cp, window, gpus_per_node, attn)
    ep_fwd_s = ep_bwd_s = moe_fwd_s = 0.0
    if moe:
        a2a_s, gathered_s = dispatch_times_s(model, tables, dispatch, tokens, tp, ep, etp, gpus_per_node)
        gathered_s += tp_exchange_time_s(model, tables, tokens, tp, gpus_per_node, rates.moe)
        # Imbalance, token permutation and the all-to-all's overlap: cost_model/moe_time.py.
        expert_fwd_s, expert_bwd_s = gemms.times(EXPERT_GEMMS)
        mt = moe_layer_times(model, tables, expert_fwd_s, expert_bwd_s, a2a_s, gemm_fwd_s + attn.fwd_s,
                             gemm_bwd_s + attn.bwd_s, tokens, tp, ep, etp, rates.memory_scale, rates.moe,
                             capacity_factor, mem.routed_act_s)
        gemm_fwd_s, gemm_bwd_s = gemm_fwd_s + mt.imbalance_gemm_fwd_s, gemm_bwd_s + mt.imbalance_gemm_bwd_s
        # The backward of an elementwise op moves twice its forward's bytes (memory_bwd_s above).
        memory_fwd_s += mt.permute_fwd_s + mt.weight_stack_s + mt.imbalance_act_s
        memory_bwd_s += mt.permute_bwd_s + mt.weight_stack_s + 2.0 * mt.imbalance_act_s
        ep_fwd_s, ep_bwd_s = mt.a2a_fwd_s + gathered_s, mt.a2a_bwd_s + gathered_s
        moe_fwd_s = (gemms.fwd_of(("router", *EXPERT_GEMMS, *SHARED_GEMMS)) + mt.imbalance_gemm_fwd_s + mem.act_s
                     + mt.imbalance_act_s + mt.permute_fwd_s + mt.weight_stack_s + mt.a2a_fwd_s + gathered_s)
    return LayerTimes(
        gemm_fwd_s=gemm_fwd_s, gemm_bwd_s=gemm_bwd_s, attn_fwd_s=attn.fwd_s, attn_bwd_s=attn.bwd_s,
        memory_fwd_s=memory_fwd_s, memory_bwd_s=memory_bwd_s, tp_fwd_s=tp_comm.fwd_s, tp_bwd_s=tp_comm.bwd_s,
        cp_fwd_s=cp_fwd_s, cp_bwd_s=cp_bwd_s, ep_fwd_s=ep_fwd_s, ep_bwd_s=ep_bwd_s,
        gemm_fwd_flops=sum(g.flops for g in gemms.gemms), attn_fwd_flops=attn.flops, tp_bytes=tp_comm.wire_bytes,
        fp8_weight_cast_s=fp8_weight_cast_s, moe_fwd_s=moe_fwd_s, **recompute_module_times(gemms, mem, moe))


class LayerGemms:
    """A layer's GEMMs, each priced at its rates: an fp8 plan whose framework keeps the routed
    experts' GEMMs in the compute dtype (Framework.fp8_expert_gemms False) prices them, and casts
    nothing for them, in bf16."""

    def __init__(self, tables: ProfileTables, rates: Rates, gemms: list, moe: bool):
        self.tables, self.rates, self.gemms = tables, rates, gemms
        bf16_experts = moe and rates.gemm_dtype == "fp8" and not rates.fp8_expert_gemms
        self.expert_rates = replace(rates, gemm_dtype="bf16") if bf16_experts else rates
        self.fp8_gemms = [g for g in gemms if not (bf16_experts and g.name in EXPERT_GEMMS)]
        """The GEMMs whose inputs an fp8 plan casts (fp8_cast_times)."""
        self.grouped = kernel_for(tables, self.expert_rates.gemm_dtype) if moe and rates.moe.moe_grouped_gemm else None
        """The routed experts' grouped kernel (Framework.moe_grouped_gemm), where a record covers the GPU."""

    def times(self, names=None) -> tuple:
        """(forward, backward) seconds of the GEMMs named (all without `names`), each at its rates."""
        chosen = [g for g in self.gemms if names is None or g.name in names]
        experts = [g for g in chosen if g.name in EXPERT_GEMMS]
        rest = gemms_time_s(self.tables, [g for g in chosen if g.name not in EXPERT_GEMMS], self.rates)
        routed = gemms_time_s(self.tables, experts, self.expert_rates, self.grouped)
        return rest[0] + routed[0], rest[1] + routed[1]

    def fwd_of(self, names) -> float:
        return self.times(names)[0]


class TpTimes(NamedTuple):
    fwd_s: float
    bwd_s: float
    wire_bytes: float
    """Bytes one rank puts on the wire for the layer's TP/SP collectives (forward + backward)."""


def tp_times(model: ModelSpec, tables: ProfileTables, rates: Rates, tokens: int, tp: int, moe: bool, dispatch: str,
             sequence_parallel: bool, gpus_per_node: int) -> TpTimes:
    """TP: two all-reduces per pass, or with SP an all-gather + reduce-scatter pair in their place
    (Korthikanti 2022 section 4.2.2: same bytes on the wire). Narayanan 2021 section 3.2. A parallel
    block sums attention and MLP outputs before one reduction (GPT-NeoX gpt_j_residual, PaLM sec. 2):
    one collective per pass. Backward mirrors the forward (each gather's gradient is a reduction and
    vice versa), with one input-gradient reduction per block unless the framework reduces each
    projection's apart."""
    tp_rpn = min(tp, gpus_per_node)
    buffer = BYTES_ACT * tokens * model.hidden_size
    reductions = 1 if model.parallel_block or not mlp_block_tp_pair(model, moe, dispatch, sequence_parallel) else 2
    bwd_reductions = rates.tp_backward_input_reductions or reductions
    if tp == 1:
        tp_pass_s = tp_bwd_s = 0.0
    elif sequence_parallel:
        gather_s = tables.collective_time_s("all_gather", buffer, tp, tp_rpn)
        scatter_s = tables.collective_time_s("reduce_scatter", buffer, tp, tp_rpn)
        tp_pass_s = reductions * (gather_s + scatter_s)
        tp_bwd_s = reductions * gather_s + bwd_reductions * scatter_s
    else:
        all_reduce_s = tables.collective_time_s("all_reduce", buffer, tp, tp_rpn)
        tp_pass_s = reductions * all_reduce_s
        tp_bwd_s = bwd_reductions * all_reduce_s
    # On the wire per rank: (tp-1)/tp of the buffer per all-gather or reduce-scatter, twice that per all-reduce.
    collectives = (3 * reductions + bwd_reductions) if sequence_parallel else 2 * (reductions + bwd_reductions)
    return TpTimes(tp_pass_s, tp_bwd_s, 0.0 if tp == 1 else collectives * (tp - 1) / tp * buffer)


def recompute_module_times(gemms: LayerGemms, mem: MemoryBoundTimes, moe: bool) -> dict:
    """LayerTimes' forward seconds of the submodules Megatron-Core's --recompute-modules names (but
    the whole MoE block, which layer_times adds from its dispatch)."""
    return dict(norm_fwd_s=mem.norm_fwd_s, moe_act_fwd_s=mem.routed_act_s,
                mlp_fwd_s=0.0 if moe else gemms.fwd_of(EXPERT_GEMMS) + mem.act_s,
                shared_fwd_s=gemms.fwd_of(SHARED_GEMMS) + mem.act_s - mem.routed_act_s if moe else 0.0,
                mla_up_fwd_s=gemms.fwd_of(("q_up", "kv_up")))


def dispatch_in_effect(dispatch: str, ep: int) -> str:
    """The dispatch a plan's MoE layers run (Framework.moe_dispatch): "alltoall-with-ep" (torchtitan 0.3.0)
    is the alltoall account with expert parallelism and the tp-gathered one without (models/common/
    moe_sharding.py: with EP the router and the experts take the sequence shard, Shard(1), and the experts
    are whole, expert_param_placement_sparse; without it the input is replicated over TP and the experts
    split over it, expert_param_placement_dense)."""
    if dispatch == "alltoall-with-ep":
        return "alltoall" if ep > 1 else "tp-gathered"
    return dispatch


def mlp_block_tp_pair(model: ModelSpec, moe: bool, dispatch: str, sequence_parallel: bool = True) -> bool:
    """Does the layer's MLP block run a TP collective pair of its own? A dense MLP does, and so does a
    MoE block whose input is gathered over TP (tp-gathered). Megatron-Core's dispatchers take the
    sequence-parallel share as it is and move the tokens themselves (dispatch_times_s); only a shared
    expert, a TP-split MLP on that share, keeps the pair. Without sequence parallelism (torchtitan; Megatron
    requires it with MoE under TP) the block's input is replicated over TP: each rank routes its slice of the
    sequence and the outputs come back together over TP, a pair again (moe_sharding.py
    _moe_sharding_config, output Partial to Replicate)."""
    return not moe or dispatch == "tp-gathered" or model.shared_expert_ffn_size > 0 or not sequence_parallel


def dispatch_times_s(model: ModelSpec, tables: ProfileTables, dispatch: str, tokens: int, tp: int, ep: int,
                     etp: int, gpus_per_node: int) -> tuple:
    """(routed_s, gathered_s): one pass's collectives that move a MoE layer's tokens to its experts and
    back (Framework.moe_dispatch), split into the part that follows the routing (the busiest rank
    receives more: cost_model/moe_time.py scales it by the load imbalance and may hide it) and the part
    that does not. Each rank routes its sequence-parallel share, tokens/tp, k copies of each.

    tp-gathered: one all-to-all of the tokens' routed copies over ep (the layer's TP pair is the dense
    MLP's, priced with the TP collectives). alltoall (Megatron-Core): the all-to-all over ep, then an
    all-gather over the etp ranks that split an expert and a reduce-scatter back, of the routed copies
    (token_dispatcher.py core_v0.16.1, MoEAlltoAllTokenDispatcher token_dispatch and dispatch_postprocess).
    allgather (Megatron-Core): an all-gather of every rank's hidden states over its etp x ep group and a
    reduce-scatter back (MoEAllGatherTokenDispatcher token_dispatch and token_combine), the same size
    however the tokens are routed. The ep group's ranks are etp apart, the etp group's consecutive (expert
    rank order tp-ep-dp: megatron/core/parallel_state.py core_v0.16.1 RankGenerator, order tp-cp-ep-dp-pp)."""
    dispatch = dispatch_in_effect(dispatch, ep)
    routed = BYTES_ACT * tokens / tp * model.num_experts_per_token * model.hidden_size
    if dispatch == "allgather":
        group = ep * etp
        if group == 1:
            return 0.0, 0.0
        gathered = BYTES_ACT * tokens / tp * model.hidden_size * group
        rpn = min(group, gpus_per_node)
        return 0.0, (tables.collective_time_s("all_gather", gathered, group, rpn)
                     + tables.collective_time_s("reduce_scatter", gathered, group, rpn))
    if dispatch == "flex":
        return (2 * flex_dispatch_time_s(model, tables, tokens, tp, ep, etp, gpus_per_node) if ep * etp > 1 else 0.0), 0.0
    routed_s = 0.0
    if ep > 1:
        ep_rpn = max(1, min(ep, gpus_per_node // etp))
        # tp-gathered: the layer's input was gathered over tp, so a rank's share of the routed copies is
        # its 1/tp of the gathered tokens' when its experts are split over etp = tp ranks.
        size = routed * etp if dispatch == "tp-gathered" else routed
        routed_s = 2 * tables.collective_time_s("all_to_all", size, ep, ep_rpn)
    if dispatch == "alltoall" and etp > 1:
        rpn = min(etp, gpus_per_node)
        routed_s += (tables.collective_time_s("all_gather", routed * etp, etp, rpn)
                     + tables.collective_time_s("reduce_scatter", routed * etp, etp, rpn))
    return routed_s, 0.0


def head_times(model: ModelSpec, tables: ProfileTables, rates: Rates, tokens: int, tp: int,
               recomputed_forward: bool = False, gathered_logits: bool = False) -> tuple:
    """(compute_s, memory_s) of the LM head + loss for one micro-batch (forward + backward).

    The head GEMM stays bf16 under fp8 (torchtitan and Transformer Engine keep the output layer
    in high precision). The fp32 cross-entropy reads/writes each logit ~4 times (4 B each).
    `recomputed_forward`: a chunked loss that recomputes the logits in its backward instead of
    keeping them (executor/loss.py) runs the forward GEMM twice. `gathered_logits`: the loss runs
    over all the vocab on every TP rank (Framework.loss_gathers_logits).
    """
    g = logits_gemm(model, tokens, tp)
    dtype = "bf16" if rates.gemm_dtype == "fp8" else rates.gemm_dtype
    fwd = gemm_time_s(tables, g, dtype, rates.matmul_scale) * (2 if recomputed_forward else 1)
    bwd = sum(gemm_time_s(tables, b, dtype, rates.matmul_scale) for b in backward_shapes(g))
    logits = tokens * model.vocab_size / (1 if gathered_logits else tp)
    # Final soft-capping (Gemma 2) reads and writes each fp32 logit once more each way (+16 B).
    per_logit = 32.0 if model.final_logit_softcap else 16.0
    mem = memory_time_s(tables, per_logit * logits * rates.memory_scale, 4.0 * logits)
    return fwd + bwd, mem


def embedding_time_s(model: ModelSpec, tables: ProfileTables, rates: Rates, tokens: int) -> float:
    """Embedding lookup (write b*s*h) and its gradient scatter-add (read + read-modify-write)."""
    return memory_time_s(tables, 4 * BYTES_ACT * tokens * model.hidden_size * rates.memory_scale,
                         BYTES_ACT * tokens * model.hidden_size)
