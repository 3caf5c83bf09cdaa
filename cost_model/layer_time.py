"""Seconds per micro-batch of one transformer layer (and of the stage extras) on one GPU.

Every figure comes from the profile's tables through `ProfileTables`: GEMMs at their shape after
the TP split, attention from the attention table (flash) or as batched GEMMs plus a memory-bound
softmax (no flash), norms/activations/residuals/RoPE as memory-bound bytes, TP/SP/CP/EP traffic
from the collective table. `LayerTimes` is cached per (micro-batch, tp, cp, ep, sp) by the
estimator, so a search pays for each shape once.
"""
from __future__ import annotations

from dataclasses import dataclass, fields, replace

from autoplan.specs import ModelSpec
from autoplan.specs.flops import ATTENTION_BACKWARD_FLOPS_RATIO
from cost_model.flops import Gemm, attention_core_fwd_flops, backward_shapes, layer_gemms, logits_gemm
from cost_model.memory import mlp_activation_elems
from cost_model.moe_time import flex_dispatch_time_s, moe_layer_times
from cost_model.tables import ProfileTables

BYTES_ACT = 2
EXPERT_GEMMS = ("mlp_in", "mlp_out")
"""The routed experts' GEMMs in a MoE layer's `layer_gemms` (the router and shared experts run on every token)."""
SHARED_GEMMS = ("shared_in", "shared_out")
ATTN_BWD_FLOPS_RATIO = ATTENTION_BACKWARD_FLOPS_RATIO


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


@dataclass(frozen=True)
class Rates:
    """What the estimator fixed: the GEMM dtype and the framework's efficiencies against the
    profile's tables (matmul_scale = Framework.gemm_efficiency, the same for built-in and measured
    profiles; memory_scale = elementwise_bytes_factor x fused_elementwise)."""
    gemm_dtype: str
    matmul_scale: float
    fp8_scale: float
    attention_scale: float
    memory_scale: float
    flash_attention: bool
    attention_kernel: str = "sdpa"
    """Framework.attention_kernel: which of the profile's attention tables prices the attention core."""
    moe_load_imbalance: float = 0.0
    """Framework.moe_load_imbalance (cost_model/moe_time.py)."""
    moe_a2a_overlap: bool = False
    """Framework.moe_a2a_overlap (cost_model/moe_time.py)."""
    moe_padded_expert_gemm: bool = False
    """Framework.moe_padded_expert_gemm (cost_model/moe_time.py)."""
    moe_dispatch: str = "tp-gathered"
    """Framework.moe_dispatch: how a MoE layer's tokens reach its experts (its collectives below)."""
    mla_padded_values: bool = False
    """Framework.mla_padded_values: MLA's attention core at the q/k head width for the values too."""
    fp8_rowwise: bool = False
    """Framework.fp8_rowwise: torchao's row-wise (axis-wise) scaled fp8, whose backward casts more."""
    fp8_expert_gemms: bool = True
    """Framework.fp8_expert_gemms: an fp8 plan's routed experts run their GEMMs in fp8 too."""
    tp_backward_input_reductions: int = 0
    """Framework.tp_backward_input_reductions (0: one per block)."""


GEMM_TIMES_MEMO_SIZE = 1 << 18
"""Entries gemms_time_s keeps per table before it starts over (a few hundred bytes each)."""


def gemm_time_s(tables: ProfileTables, gemm, dtype: str, scale: float) -> float:
    return gemm.flops / (tables.matmul_flops_per_s(gemm.m, gemm.n, gemm.k, dtype) * scale)


def gemms_time_s(tables: ProfileTables, gemms, rates: Rates) -> tuple:
    """(forward, backward) seconds of `gemms`. Remembered per table, GEMM shapes and rate: a search
    asks for the same layer's GEMMs under many plans (a bound for each of ~10^6 candidates)."""
    dtype = rates.gemm_dtype
    scale = rates.matmul_scale * (rates.fp8_scale if dtype == "fp8" else 1.0)
    key = (tuple(gemms), dtype, scale)
    times = tables.gemm_times_memo.get(key)
    if times is None:
        fwd = sum(gemm_time_s(tables, g, dtype, scale) for g in gemms)
        bwd = sum(gemm_time_s(tables, b, dtype, scale) for g in gemms for b in backward_shapes(g))
        if len(tables.gemm_times_memo) >= GEMM_TIMES_MEMO_SIZE:
            tables.gemm_times_memo.clear()
        times = tables.gemm_times_memo[key] = (fwd, bwd)
    return times


def memory_time_s(tables: ProfileTables, num_bytes: float, op_bytes: float) -> float:
    """Memory-bound traffic of `num_bytes` in ops of about `op_bytes` each."""
    return num_bytes / tables.memory_bytes_per_s(int(max(op_bytes, 1)))


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
    moe_capacity_factor, 0 = dropless)."""
    s_local = seq_len // cp
    tokens = micro_batch * s_local
    h = model.hidden_size
    moe = model.is_moe if moe is None else moe
    etp = etp or tp
    gemms = layer_gemms(model, tokens, tp, ep, moe, etp)
    # An fp8 plan whose framework keeps the routed experts' GEMMs in the compute dtype
    # (Framework.fp8_expert_gemms False) prices them, and casts nothing for them, in bf16.
    bf16_experts = moe and rates.gemm_dtype == "fp8" and not rates.fp8_expert_gemms
    expert_rates = replace(rates, gemm_dtype="bf16") if bf16_experts else rates

    def times_of(names=None) -> tuple:
        """(forward, backward) seconds of the layer's GEMMs named (all without `names`), each at its rates."""
        chosen = [g for g in gemms if names is None or g.name in names]
        experts = [g for g in chosen if g.name in EXPERT_GEMMS]
        rest = gemms_time_s(tables, [g for g in chosen if g.name not in EXPERT_GEMMS], rates)
        routed = gemms_time_s(tables, experts, expert_rates)
        return rest[0] + routed[0], rest[1] + routed[1]
    gemm_fwd_s, gemm_bwd_s = times_of()
    fp8_gemms = [g for g in gemms if not (bf16_experts and g.name in EXPERT_GEMMS)]

    # Attention core (QK^T, softmax, AV).
    heads_local = model.num_heads // tp
    # The work the kernel does: MLA's values padded to head_dim run A·V at that width.
    core_model = replace(model, v_head_dim=0) if rates.mla_padded_values and model.is_mla else model
    attn_flops = attention_core_fwd_flops(core_model, micro_batch, seq_len, tp, cp, causal=rates.flash_attention,
                                          window=window)
    if rates.flash_attention:
        fwd_rate = tables.attention_flops_per_s(s_local, micro_batch * heads_local, model.head_dim,
                                                rates.gemm_dtype, "fwd", rates.attention_kernel)
        bwd_rate = tables.attention_flops_per_s(s_local, micro_batch * heads_local, model.head_dim,
                                                rates.gemm_dtype, "bwd", rates.attention_kernel)
        attn_fwd_s = attn_flops / (fwd_rate * rates.attention_scale)
        attn_bwd_s = ATTN_BWD_FLOPS_RATIO * attn_flops / (bwd_rate * rates.attention_scale)
    else:
        # Unfused (Megatron 2021): batched GEMMs over the full square + a fused softmax that
        # reads and writes every score (fp16: 4 B forward, 6 B backward per score).
        dtype = "bf16" if rates.gemm_dtype == "fp8" else rates.gemm_dtype
        per_head = gemm_time_s(tables, Gemm("scores", s_local, seq_len, model.head_dim), dtype, rates.matmul_scale)
        scores = micro_batch * heads_local * s_local * seq_len
        gemm_s = 2 * per_head * micro_batch * heads_local
        # Soft-capping (Gemma 2) is one more elementwise pass over the scores each way (+4 B fwd, +6 B bwd).
        cap = 2.0 if model.attn_logit_softcap else 1.0
        attn_fwd_s = gemm_s + memory_time_s(tables, cap * 4.0 * scores * rates.memory_scale, 2.0 * s_local * seq_len)
        attn_bwd_s = 2 * gemm_s + memory_time_s(tables, cap * 6.0 * scores * rates.memory_scale,
                                                2.0 * s_local * seq_len)

    # Memory-bound ops (per token): the layer's norms (read+write h each: 2 pre-norm, 4 sandwich, 1
    # shared by a parallel block), 2 residual adds (2 reads + 1 write), the MLP activation (gated
    # reads 2f writes f; GeLU reads f writes f), q/k norms (read+write q and k), RoPE on the rotated
    # part of q and k. Tensors outside the TP region are split by tp only under sequence parallelism.
    outside = tp if sequence_parallel else 1
    elems = (model.num_layer_norms * 2 * h + 2 * 3 * h) / outside + mlp_activation_elems(model, moe) / tp
    if model.qk_norm:
        elems += 2 * (model.q_size + model.kv_size) / tp
    if model.rope_dim:
        elems += 2 * (model.q_size + model.kv_size) / tp * model.rope_dim / model.head_dim
    fwd_bytes = BYTES_ACT * elems * tokens * rates.memory_scale
    op_bytes = BYTES_ACT * tokens * h / outside
    memory_fwd_s = memory_time_s(tables, fwd_bytes, op_bytes)
    def mem_s(per_token_elems: float) -> float:
        return memory_time_s(tables, BYTES_ACT * per_token_elems * tokens * rates.memory_scale, op_bytes)
    norm_fwd_s = mem_s(model.num_layer_norms * 2 * h / outside)
    per_width = 2 if model.mlp == "gelu" else 3
    routed_act_s = mem_s(per_width * model.expert_ffn_size * model.num_experts_per_token / tp) if moe else 0.0
    act_s = mem_s(mlp_activation_elems(model, moe) / tp)

    def fwd_of(names) -> float:
        return times_of(names)[0]
    memory_bwd_s = 2.0 * memory_fwd_s
    fp8_weight_cast_s = 0.0
    if rates.gemm_dtype == "fp8":
        # Float8 scaling (Micikevicius et al. 2022, arXiv 2209.05433): each GEMM's input is read in
        # bf16 and written in fp8 (3 B per element) in forward, each output gradient in backward
        # (the wgrad GEMM reuses the forward's fp8 input). Weights: fp8_weight_cast_s, per cast.
        memory_fwd_s += memory_time_s(tables, sum(3.0 * g.m * g.k * g.count for g in fp8_gemms), op_bytes)
        memory_bwd_s += memory_time_s(tables, sum(3.0 * g.m * g.n * g.count for g in fp8_gemms), op_bytes)
        if rates.fp8_rowwise:
            # Row-wise scales run along one axis, and the weight-gradient GEMM contracts the other: its
            # output gradient is cast again along dim 1 and the saved bf16 input re-cast along dim 1
            # (torchao float8/float8_linear.py matmul_with_hp_or_float8_args.backward: four casts,
            # none shared with the data-gradient GEMM's; tensor-wise, one scale serves both axes).
            memory_bwd_s += memory_time_s(tables, sum(3.0 * (g.m * g.n + g.m * g.k) * g.count for g in fp8_gemms),
                                          op_bytes)
            # torchao runs its two backward GEMMs (slow accumulation) in cuBLAS's tensor-wise kernel with unit
            # scales and rescales their bf16 outputs in one more kernel per GEMM (float8/float8_ops.py
            # addmm_float8_unwrapped, `output *= post_inverse_scale`; pytorch/ao issue 2184): 2 B read and
            # 2 B written per element of the data gradient (m x k) and of the weight gradient (n x k).
            memory_bwd_s += memory_time_s(tables, sum(4.0 * (g.m * g.k + g.n * g.k) * g.count for g in fp8_gemms),
                                          op_bytes)
        weight_bytes = sum(3.0 * g.k * g.n * g.count for g in fp8_gemms)
        fp8_weight_cast_s = memory_time_s(tables, weight_bytes, weight_bytes / max(1, len(fp8_gemms)))

    # TP: two all-reduces per pass, or with SP an all-gather + reduce-scatter pair in their place
    # (Korthikanti 2022 section 4.2.2: same bytes on the wire). Narayanan 2021 section 3.2. A
    # parallel block sums attention and MLP outputs before one reduction (GPT-NeoX gpt_j_residual,
    # PaLM sec. 2): one collective per pass.
    # Backward mirrors the forward (each gather's gradient is a reduction and vice versa), with one
    # input-gradient reduction per block unless the framework reduces each projection's apart.
    tp_rpn = min(tp, gpus_per_node)
    buffer = BYTES_ACT * tokens * h
    dispatch = dispatch_in_effect(rates.moe_dispatch, ep)
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
    tp_bytes = 0.0 if tp == 1 else collectives * (tp - 1) / tp * buffer

    # CP: ring exchange of K/V chunks (fwd), and of K/V plus their gradients (bwd), overlapped
    # with the attention compute of the same step where it fits (Liu et al. 2023, Ring Attention).
    # A sliding-window layer needs only the keys within the window before its own chunk. MLA
    # exchanges K and V after the up-projection (per head, d_qk and d_v wide).
    cp_rpn = max(1, min(cp, gpus_per_node // tp)) if tp <= gpus_per_node else 1
    kv_tokens = min(seq_len, s_local + window) if window else seq_len
    kv_buffer = BYTES_ACT * micro_batch * kv_tokens * (model.kv_size + model.v_size) / tp
    cp_fwd = tables.collective_time_s("all_gather", kv_buffer, cp, cp_rpn)
    cp_fwd_s = max(0.0, cp_fwd - attn_fwd_s)
    cp_bwd_s = max(0.0, 2 * cp_fwd - attn_bwd_s)

    # MoE: the dispatch and combine of the routed tokens, forward and backward, as the framework's
    # dispatcher moves them (dispatch_times_s): the part that follows the routing goes through the
    # imbalance and the overlap of cost_model/moe_time.py, the allgather dispatcher's fixed gathers not.
    ep_fwd_s = ep_bwd_s = moe_fwd_s = 0.0
    if moe:
        a2a_s, gathered_s = dispatch_times_s(model, tables, dispatch, tokens, tp, ep, etp, gpus_per_node)
        # Imbalance, token permutation and the all-to-all's overlap: cost_model/moe_time.py.
        expert_fwd_s, expert_bwd_s = times_of(EXPERT_GEMMS)
        mt = moe_layer_times(model, tables, expert_fwd_s, expert_bwd_s, a2a_s, gemm_fwd_s + attn_fwd_s,
                             gemm_bwd_s + attn_bwd_s, tokens, tp, ep, etp, rates.memory_scale,
                             rates.moe_load_imbalance, rates.moe_a2a_overlap, capacity_factor,
                             rates.moe_padded_expert_gemm)
        gemm_fwd_s, gemm_bwd_s = gemm_fwd_s + mt.imbalance_gemm_fwd_s, gemm_bwd_s + mt.imbalance_gemm_bwd_s
        memory_fwd_s, memory_bwd_s = memory_fwd_s + mt.permute_fwd_s, memory_bwd_s + mt.permute_bwd_s
        ep_fwd_s, ep_bwd_s = mt.a2a_fwd_s + gathered_s, mt.a2a_bwd_s + gathered_s
        moe_fwd_s = (fwd_of(("router", *EXPERT_GEMMS, *SHARED_GEMMS)) + mt.imbalance_gemm_fwd_s + act_s
                     + mt.permute_fwd_s + mt.a2a_fwd_s + gathered_s)
    return LayerTimes(
        gemm_fwd_s=gemm_fwd_s, gemm_bwd_s=gemm_bwd_s, attn_fwd_s=attn_fwd_s, attn_bwd_s=attn_bwd_s,
        memory_fwd_s=memory_fwd_s, memory_bwd_s=memory_bwd_s, tp_fwd_s=tp_pass_s, tp_bwd_s=tp_bwd_s,
        cp_fwd_s=cp_fwd_s, cp_bwd_s=cp_bwd_s, ep_fwd_s=ep_fwd_s, ep_bwd_s=ep_bwd_s,
        gemm_fwd_flops=sum(g.flops for g in gemms), attn_fwd_flops=attn_flops, tp_bytes=tp_bytes,
        fp8_weight_cast_s=fp8_weight_cast_s, norm_fwd_s=norm_fwd_s, moe_act_fwd_s=routed_act_s,
        mlp_fwd_s=0.0 if moe else fwd_of(EXPERT_GEMMS) + act_s, moe_fwd_s=moe_fwd_s,
        shared_fwd_s=fwd_of(SHARED_GEMMS) + act_s - routed_act_s if moe else 0.0,
        mla_up_fwd_s=fwd_of(("q_up", "kv_up")))


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
