"""The one MFU convention, for predicted and measured MFU alike.

Model FLOPs per token = 6 * N_matmul + 12 * L * s * q_size:
- N_matmul: every parameter a token passes through that takes part in a matmul -- all active
  parameters but the token-embedding lookup (a gather, no FLOPs); the LM head counts once, tied to
  the embedding or not, because its matmul runs either way. 6 = 2 forward + 4 backward FLOPs per
  parameter and token (Kaplan et al. 2020, arXiv 2001.08361, eq. 2.1).
- 12 * L * s * q_size: the attention score (QK^T) and value (AV) matmuls, forward and backward,
  counted over the full s x s square as PaLM does (Chowdhery et al. 2022, arXiv 2204.02311,
  appendix B) and as Narayanan et al. 2021 (arXiv 2104.04473) eq. 3 does; with a value width
  other than the query/key width (MLA) 6 * s * heads * (d_qk + d_v) per layer, and a sliding-window
  layer counts min(s, window) keys per query.
Recompute is not counted (that is hardware FLOPs). The denominator is the dense datasheet peak of
the training dtype (`autoplan.specs.gpus`) times the number of GPUs.

Why not 6 * N with the embedding: the lookup executes no FLOPs, so counting it rewards models
with large vocabularies for work that is not done (torchtitan and Megatron-LM leave it out too).
"""
from __future__ import annotations

from autoplan.specs.model import ModelSpec

ATTENTION_BACKWARD_FLOPS_RATIO = 2.5
"""Fused attention's backward FLOPs over its forward's: dQ, dK, dV and dP are four matmuls plus the QK^T
recompute of flash attention (Dao 2022, arXiv 2205.14135, sec. 3.1) = 5 against the forward's 2. The
profiler counts a timed backward with it, and the cost model prices one with it."""


def matmul_params(model: ModelSpec) -> int:
    """Active parameters that take part in a matmul (everything but the embedding lookup)."""
    head = model.vocab_size * model.hidden_size if model.tied_embeddings else 0
    return model.num_active_params - model.embedding_params() + head


def model_flops_per_token(model: ModelSpec, seq_len: int) -> float:
    """6*N_matmul + 6*s_keys*heads*(d_qk + d_v) per layer (forward + backward; attention counted
    over the full square as PaLM does, 12*L*s*q_size when d_v = d_qk). A sliding-window layer
    counts min(s, w) keys per query: the band its queries can see."""
    attention = sum(count * 6.0 * (min(seq_len, window) if window else seq_len)
                    * model.num_heads * (model.head_dim + model.value_dim)
                    for (_, window), count in model.layer_kinds())
    return 6.0 * matmul_params(model) + attention


def mfu(model: ModelSpec, seq_len: int, tokens_per_s: float, num_gpus: int, peak_flops_per_s: float) -> float:
    """Model FLOPs utilization; 0.0 when the peak is unknown (e.g. a CPU)."""
    if peak_flops_per_s <= 0 or num_gpus <= 0:
        return 0.0
    return model_flops_per_token(model, seq_len) * tokens_per_s / (num_gpus * peak_flops_per_s)
