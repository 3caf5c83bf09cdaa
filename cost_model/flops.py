"""FLOP counts: the GEMMs of one transformer layer after the TP split, and the MFU convention.

A GEMM is (m, n, k): C[m,n] = A[m,k] @ B[k,n], 2*m*n*k FLOPs. Its backward is two GEMMs of the
same FLOPs with transposed shapes (data gradient (m, k, n), weight gradient (k, n, m)), hence the
"backward = 2x forward" of Narayanan et al. 2021 (arXiv 2104.04473, section 3.5).

The MFU convention (model FLOPs per token) is the project's one, `autoplan.specs.flops`; hardware
FLOPs add what recompute executes again.
"""
from __future__ import annotations

from dataclasses import dataclass

from autoplan.specs import ModelSpec


@dataclass(frozen=True)
class Gemm:
    name: str
    m: int
    n: int
    k: int
    count: int = 1
    """How many such GEMMs run (e.g. local experts)."""

    @property
    def flops(self) -> float:
        return 2.0 * self.m * self.n * self.k * self.count


def layer_gemms(model: ModelSpec, tokens: int, tp: int, ep: int = 1, moe: bool | None = None, etp: int = 0) -> tuple:
    """Forward GEMMs of one transformer layer on one GPU for `tokens` rows (micro-batch x local seq).

    Megatron column/row split (Shoeybi et al. 2019, arXiv 1909.08053): q/k/v and the MLP's first
    matrix split their output columns over tp, the attention output and the MLP's last matrix split
    their input rows. MoE: each token visits top-k experts; a GPU holds num_experts/ep experts, each
    split over the etp ranks of its expert-TP group (0 = tp). Each rank brings tokens/tp of the
    micro-batch (its sequence-parallel share), so the ep*etp ranks holding one copy of every expert
    share ep*etp*tokens/tp tokens, k routed copies each, and a local expert receives, on average,
    tokens*k*ep*etp/(tp*num_experts) rows (balanced routing): tokens*k*ep/num_experts when etp = tp.
    The FLOPs per rank do not depend on etp, the shapes do. Shared experts run on every token, split
    over tp like a dense MLP (Megatron's shared_experts). `moe` picks the layer kind (default: the
    model's MoE layer if it has any).
    """
    h = model.hidden_size
    moe = model.is_moe if moe is None else moe
    gemms = list(attention_gemms(model, tokens, tp))
    gated = 1 if model.mlp == "gelu" else 2
    if moe:
        width = model.expert_ffn_size
        etp = etp or tp
        local_experts = model.num_experts // ep
        rows = max(1, tokens * model.num_experts_per_token * ep * etp // (tp * model.num_experts))
        gemms += [
            Gemm("router", tokens, model.num_experts, h),
            Gemm("mlp_in", rows, gated * width // etp, h, local_experts),
            Gemm("mlp_out", rows, h, width // etp, local_experts),
        ]
        if model.shared_expert_ffn_size:
            shared = model.shared_expert_ffn_size
            gemms += [Gemm("shared_in", tokens, gated * shared // tp, h), Gemm("shared_out", tokens, h, shared // tp)]
    else:
        gemms += [
            Gemm("mlp_in", tokens, gated * model.ffn_hidden_size // tp, h),
            Gemm("mlp_out", tokens, h, model.ffn_hidden_size // tp),
        ]
    return tuple(gemms)


def attention_gemms(model: ModelSpec, tokens: int, tp: int) -> tuple:
    """The attention projections. Multi-head latent attention (DeepSeek-V2, arXiv 2405.04434 sec.
    2.1) replaces q/k/v by down-projections to the compressed ranks, which every TP rank computes
    whole (Megatron-Core's MLA keeps linear_q_down_proj / linear_kv_down_proj unsplit), and
    up-projections split over the heads like q/k/v."""
    h = model.hidden_size
    out = Gemm("attn_out", tokens, h, model.attn_out_size // tp)
    if not model.is_mla:
        return (Gemm("qkv", tokens, (model.q_size + model.kv_size + model.v_size) // tp, h), out)
    nope = model.head_dim - model.qk_rope_head_dim
    gemms = [Gemm("q_down", tokens, model.q_lora_rank, h),
             Gemm("q_up", tokens, model.q_size // tp, model.q_lora_rank)] if model.q_lora_rank else \
        [Gemm("q", tokens, model.q_size // tp, h)]
    gemms += [Gemm("kv_down", tokens, model.kv_lora_rank + model.qk_rope_head_dim, h),
              Gemm("kv_up", tokens, model.num_heads * (nope + model.value_dim) // tp, model.kv_lora_rank), out]
    return tuple(gemms)


def logits_gemm(model: ModelSpec, tokens: int, tp: int) -> Gemm:
    """The LM head, vocabulary split over tp (Megatron's parallel cross-entropy)."""
    return Gemm("logits", tokens, model.vocab_size // tp, model.hidden_size)


def backward_shapes(g: Gemm) -> tuple:
    """Data-gradient and weight-gradient GEMMs of a forward GEMM."""
    return (Gemm(g.name + "_dgrad", g.m, g.k, g.n, g.count), Gemm(g.name + "_wgrad", g.k, g.n, g.m, g.count))


def attention_core_fwd_flops(model: ModelSpec, micro_batch: int, seq_len: int, tp: int, cp: int,
                             causal: bool = True, window: int = 0) -> float:
    """QK^T and AV of one layer's forward on one GPU: 2*b*(query, key pairs)*heads*(d_qk + d_v),
    which is 4*b*s^2*q_size for the full square when d_v = d_qk.

    Causal: s(s+1)/2 pairs, written s^2/2. A causal sliding window of w keys (Beltagy et al. 2020,
    arXiv 2004.05150; Gemma 2/3, Mistral) leaves s*w - w(w-1)/2 pairs when w < s. Unmasked
    (`causal=False`, the unfused kernels that compute the whole square and mask it) every pair is
    computed, windowed or not. Context parallelism splits the queries over cp ranks with
    load-balanced causal chunks, so each rank does 1/cp of the work.
    """
    if not causal:
        pairs = float(seq_len) * seq_len
    elif window and window < seq_len:
        pairs = float(seq_len) * window - window * (window - 1) / 2.0
    else:
        pairs = seq_len * seq_len / 2.0
    return 2.0 * micro_batch * pairs * model.num_heads * (model.head_dim + model.value_dim) / (tp * cp)


def narayanan_flops_per_step(model: ModelSpec, global_batch: int, seq_len: int, recompute: bool) -> float:
    """Narayanan et al. 2021 eq. (3): 96*B*s*l*h^2*(1 + s/(6h) + V/(16*l*h)) with full recompute.

    Valid for their GPT shape (MHA, GeLU MLP with ffn = 4h). Without recompute the forward is not
    run twice: 72/96 of it (Korthikanti et al. 2022, arXiv 2205.05198, section 6: 72*B*L*s*h^2*(...)).
    Kept as an independent cross-check of the per-GEMM sums, and to convert published TFLOP/s.
    """
    B, s, l, h, V = global_batch, seq_len, model.num_layers, model.hidden_size, model.vocab_size
    if recompute:
        return 96.0 * B * s * l * h * h * (1.0 + s / (6.0 * h) + V / (16.0 * l * h))
    return 72.0 * B * s * l * h * h * (1.0 + s / (6.0 * h) + V / (12.0 * l * h))
