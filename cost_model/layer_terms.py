"""The terms of one layer's time that need no other layer_time machinery: the attention core, the
memory-bound ops, an fp8 plan's casts and context parallelism's exchange, each priced from the
profile's tables (`ProfileTables`) at the framework's rates (`Rates`). cost_model/layer_time.py
sums them into a layer's `LayerTimes`.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import NamedTuple

from autoplan.specs import ModelSpec
from autoplan.specs.framework_facts import MoEFacts
from autoplan.specs.flops import ATTENTION_BACKWARD_FLOPS_RATIO as ATTN_BWD_FLOPS_RATIO
from cost_model.flops import Gemm, attention_core_fwd_flops
from cost_model.memory import BYTES_ACT, mlp_activation_elems
from cost_model.tables import ProfileTables


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
    moe: MoEFacts = MoEFacts()
    """The framework's MoE facts (Framework.facts(MoEFacts)), moe_load_imbalance the run's measured one
    where it has one: what cost_model/moe_time.py and the dispatch's collectives read."""
    mla_padded_values: bool = False
    """Framework.mla_padded_values: MLA's attention core at the q/k head width for the values too."""
    fp8_rowwise: bool = False
    """Framework.fp8_rowwise: torchao's row-wise (axis-wise) scaled fp8, whose backward casts more."""
    fp8_expert_gemms: bool = True
    """Framework.fp8_expert_gemms: an fp8 plan's routed experts run their GEMMs in fp8 too."""
    fp8_norm_writes_fp8: bool = False
    """Framework.fp8_norm_writes_fp8: the norm in front of a linear writes that linear's fp8 input itself."""
    tp_backward_input_reductions: int = 0
    """Framework.tp_backward_input_reductions (0: one per block)."""



def gemm_time_s(tables: ProfileTables, gemm, dtype: str, scale: float) -> float:
    return gemm.flops / (tables.matmul_flops_per_s(gemm.m, gemm.n, gemm.k, dtype) * scale)


def memory_time_s(tables: ProfileTables, num_bytes: float, op_bytes: float) -> float:
    """Memory-bound traffic of `num_bytes` in ops of about `op_bytes` each."""
    return num_bytes / tables.memory_bytes_per_s(int(max(op_bytes, 1)))


def tile_head_dim(kernel: str, head_dim: int) -> int:
    """The head width an attention kernel's tiles compute at. flash-attn's Triton kernel
    (flash_attn/flash_attn_triton.py, `_flash_attn_forward` and `_flash_attn_backward`) tiles the head
    dimension at BLOCK_HEADDIM = max(next_power_of_2(d), 16) and masks the rest, so at d = 96 its dot
    products run 128 wide: 4/3 of the useful FLOPs, forward and backward. The CUDA and cuDNN kernels
    are compiled for the widths they support and compute at d (their tables are timed at it)."""
    if kernel != "flash-triton":
        return head_dim
    return max(16, 1 << (head_dim - 1).bit_length())


class AttentionTimes(NamedTuple):
    flops: float
    """Forward FLOPs of the attention core (QK^T and AV) the kernel does."""
    fwd_s: float
    bwd_s: float


def attention_core_times(model: ModelSpec, tables: ProfileTables, rates: Rates, micro_batch: int, seq_len: int,
                         tp: int, cp: int, window: int) -> AttentionTimes:
    """The attention core (QK^T, softmax, AV): the flash kernel from the profile's attention table, or
    unfused (Megatron 2021) batched GEMMs over the full square plus a softmax that reads and writes
    every score (fp16: 4 B forward, 6 B backward per score)."""
    s_local = seq_len // cp
    heads_local = model.num_heads // tp
    # The work the kernel does: MLA's values padded to head_dim run A·V at that width.
    core_model = replace(model, v_head_dim=0) if rates.mla_padded_values and model.is_mla else model
    attn_flops = attention_core_fwd_flops(core_model, micro_batch, seq_len, tp, cp, causal=rates.flash_attention,
                                          window=window)
    if rates.flash_attention:
        tile_dim = tile_head_dim(rates.attention_kernel, model.head_dim)
        work = attn_flops * tile_dim / model.head_dim  # what the tiles compute, padding included
        fwd_rate = tables.attention_flops_per_s(s_local, micro_batch * heads_local, tile_dim,
                                                rates.gemm_dtype, "fwd", rates.attention_kernel)
        bwd_rate = tables.attention_flops_per_s(s_local, micro_batch * heads_local, tile_dim,
                                                rates.gemm_dtype, "bwd", rates.attention_kernel)
        return AttentionTimes(attn_flops, work / (fwd_rate * rates.attention_scale),
                              ATTN_BWD_FLOPS_RATIO * work / (bwd_rate * rates.attention_scale))
    dtype = "bf16" if rates.gemm_dtype == "fp8" else rates.gemm_dtype
    per_head = gemm_time_s(tables, Gemm("scores", s_local, seq_len, model.head_dim), dtype, rates.matmul_scale)
    scores = micro_batch * heads_local * s_local * seq_len
    gemm_s = 2 * per_head * micro_batch * heads_local
    # Soft-capping (Gemma 2) is one more elementwise pass over the scores each way (+4 B fwd, +6 B bwd).
    cap = 2.0 if model.attn_logit_softcap else 1.0
    fwd_s = gemm_s + memory_time_s(tables, cap * 4.0 * scores * rates.memory_scale, 2.0 * s_local * seq_len)
    bwd_s = 2 * gemm_s + memory_time_s(tables, cap * 6.0 * scores * rates.memory_scale, 2.0 * s_local * seq_len)
    return AttentionTimes(attn_flops, fwd_s, bwd_s)


class MemoryBoundTimes(NamedTuple):
    fwd_s: float
    """The layer's memory-bound ops, forward (the backward moves twice the bytes)."""
    op_bytes: float
    """The size of one such op: what the profile's memory table is read at."""
    norm_fwd_s: float
    """The layer norms alone (recompute module "layernorm")."""
    routed_act_s: float
    """A MoE layer's routed experts' activation function (recompute module "moe_act"); 0 when dense."""
    act_s: float
    """The MLP activation function (all of a MoE layer's experts, routed and shared)."""


def memory_bound_times(model: ModelSpec, tables: ProfileTables, rates: Rates, tokens: int, tp: int,
                       sequence_parallel: bool, moe: bool) -> MemoryBoundTimes:
    """Memory-bound ops (per token): the layer's norms (read+write h each: 2 pre-norm, 4 sandwich, 1
    shared by a parallel block), 2 residual adds (2 reads + 1 write), the MLP activation (gated reads
    2f writes f; GeLU reads f writes f), q/k norms (read+write q and k), RoPE on the rotated part of q
    and k. Tensors outside the TP region are split by tp only under sequence parallelism."""
    h = model.hidden_size
    outside = tp if sequence_parallel else 1
    elems = (model.num_layer_norms * 2 * h + 2 * 3 * h) / outside + mlp_activation_elems(model, moe) / tp
    if model.qk_norm:
        elems += 2 * (model.q_size + model.kv_size) / tp
    if model.rope_dim:
        elems += 2 * (model.q_size + model.kv_size) / tp * model.rope_dim / model.head_dim
    op_bytes = BYTES_ACT * tokens * h / outside

    def mem_s(per_token_elems: float) -> float:
        return memory_time_s(tables, BYTES_ACT * per_token_elems * tokens * rates.memory_scale, op_bytes)
    per_width = 2 if model.mlp == "gelu" else 3
    routed_act_s = mem_s(per_width * model.expert_ffn_size * model.num_experts_per_token / tp) if moe else 0.0
    return MemoryBoundTimes(
        fwd_s=memory_time_s(tables, BYTES_ACT * elems * tokens * rates.memory_scale, op_bytes), op_bytes=op_bytes,
        norm_fwd_s=mem_s(model.num_layer_norms * 2 * h / outside), routed_act_s=routed_act_s,
        act_s=mem_s(mlp_activation_elems(model, moe) / tp))


NORM_FED_GEMMS = ("qkv", "mlp_in")
"""A dense layer's GEMMs whose input is a norm's output (the fused QKV, the MLP's input projection)."""


def fp8_cast_times(tables: ProfileTables, rates: Rates, fp8_gemms: list, op_bytes: float, memory_fwd_s: float,
                   memory_bwd_s: float, moe: bool = False) -> tuple:
    """(memory forward s, memory backward s, one cast of the weights s) with an fp8 plan's casts added.
    Float8 scaling (Micikevicius et al. 2022, arXiv 2209.05433): each GEMM's input is read in bf16 and
    written in fp8 (3 B per element) in forward, each output gradient in backward (the wgrad GEMM
    reuses the forward's fp8 input). Weights: the third figure, per cast.

    Where the norm writes its linear's fp8 input (Rates.fp8_norm_writes_fp8; a dense layer's norm-fed
    GEMMs, NORM_FED_GEMMS) there is no cast: the norm writes 1 B per element instead of its bf16 2 B,
    and the backward transposes that fp8 input for the weight gradient, 1 B read + 1 B written."""
    fused = [g for g in fp8_gemms if rates.fp8_norm_writes_fp8 and not moe and g.name in NORM_FED_GEMMS]
    cast_bytes = sum(3.0 * g.m * g.k * g.count for g in fp8_gemms if g not in fused)
    memory_fwd_s += memory_time_s(tables, cast_bytes - sum(1.0 * g.m * g.k * g.count for g in fused), op_bytes)
    memory_bwd_s += memory_time_s(tables, sum(2.0 * g.m * g.k * g.count for g in fused), op_bytes)
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
    return memory_fwd_s, memory_bwd_s, memory_time_s(tables, weight_bytes, weight_bytes / max(1, len(fp8_gemms)))


def cp_times(model: ModelSpec, tables: ProfileTables, micro_batch: int, seq_len: int, tp: int, cp: int, window: int,
             gpus_per_node: int, attn: AttentionTimes) -> tuple:
    """(forward s, backward s) exposed of CP's ring exchange of K/V chunks (forward), and of K/V plus
    their gradients (backward), overlapped with the attention compute of the same step where it fits
    (Liu et al. 2023, Ring Attention). A sliding-window layer needs only the keys within the window
    before its own chunk. MLA exchanges K and V after the up-projection (per head, d_qk and d_v wide)."""
    cp_rpn = max(1, min(cp, gpus_per_node // tp)) if tp <= gpus_per_node else 1
    kv_tokens = min(seq_len, seq_len // cp + window) if window else seq_len
    kv_buffer = BYTES_ACT * micro_batch * kv_tokens * (model.kv_size + model.v_size) / tp
    cp_fwd = tables.collective_time_s("all_gather", kv_buffer, cp, cp_rpn)
    return max(0.0, cp_fwd - attn.fwd_s), max(0.0, 2 * cp_fwd - attn.bwd_s)
