"""Context parallelism by all-gathering keys and values (Llama 3's scheme: Dubey et al. 2024,
arXiv 2407.21783, section 3.3.2), written here because torch's `context_parallel` ring attention
dispatches only CUDA flash/efficient SDPA kernels and so cannot run (or be tested) on CPU/gloo.

The sequence is cut into 2*cp chunks and rank r keeps chunks r and 2*cp-1-r, so every rank gets
the same share of the causal mask's work (load balancing). Each rank projects Q, K, V for its own
tokens, all-gathers K and V over the cp group (before GQA repetition: kv_heads, not q_heads, are
sent), and attends its queries to every key with an explicit mask built from global positions.
RoPE uses the global positions too: the model's `rope` table is replaced by its rows for this
rank's tokens. The backward sums each rank's key/value gradients back to their owner.
Gradients of the weights are then averaged over dp*cp (each cp rank saw different tokens).
"""
from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from executor.blocks import repeat_kv


def cp_positions(seq_len: int, cp: int, cp_rank: int) -> torch.Tensor:
    """Global token positions held by cp_rank: chunks cp_rank and 2*cp-1-cp_rank of 2*cp."""
    chunk = seq_len // (2 * cp)
    first, second = cp_rank, 2 * cp - 1 - cp_rank
    return torch.cat([torch.arange(first * chunk, (first + 1) * chunk),
                      torch.arange(second * chunk, (second + 1) * chunk)])


class _GatherSequence(torch.autograd.Function):
    """All-gather along the sequence dimension (2) of (batch, heads, seq, head_dim); the backward
    reduce-scatters (NCCL) or all-reduces and slices (gloo, which has no reduce-scatter)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, group) -> torch.Tensor:
        ctx.group = group
        parts = [torch.empty_like(x) for _ in range(dist.get_world_size(group))]
        dist.all_gather(parts, x.contiguous(), group=group)
        return torch.cat(parts, dim=2)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        world, rank = dist.get_world_size(ctx.group), dist.get_rank(ctx.group)
        chunks = [c.contiguous() for c in grad.chunk(world, dim=2)]
        if dist.get_backend(ctx.group) == dist.Backend.NCCL:
            out = torch.empty_like(chunks[rank])
            dist.reduce_scatter(out, chunks, group=ctx.group)
            return out, None
        total = grad.contiguous()
        dist.all_reduce(total, group=ctx.group)
        return total.chunk(world, dim=2)[rank].contiguous(), None


class ContextParallelAttention(nn.Module):
    """Drop-in for the model's `attention.core` (same inputs and output, this rank's queries)."""

    def __init__(self, group, seq_len: int, cp: int, cp_rank: int):
        super().__init__()
        self.group = group
        query_positions = cp_positions(seq_len, cp, cp_rank)
        key_positions = torch.cat([cp_positions(seq_len, cp, r) for r in range(cp)])  # gathered order
        # Causal over global positions. A plain attribute, not a buffer: the model is built on the
        # meta device and to_empty() would leave a buffer uninitialized.
        self.allowed_cpu = key_positions[None, :] <= query_positions[:, None]
        self.allowed = None

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        if self.allowed is None or self.allowed.device != q.device:
            self.allowed = self.allowed_cpu.to(q.device)
        k_all = _GatherSequence.apply(k, self.group)
        v_all = _GatherSequence.apply(v, self.group)
        return F.scaled_dot_product_attention(q, repeat_kv(q, k_all), repeat_kv(q, v_all), attn_mask=self.allowed)


def apply_cp_attention(model: nn.Module, group, seq_len: int, cp: int, cp_rank: int) -> None:
    """Replace every layer's attention core (before recompute wraps it)."""
    for layer in model.layers.values():
        layer.attention.core = ContextParallelAttention(group, seq_len, cp, cp_rank)


def localize_rope(model: nn.Module, seq_len: int, cp: int, cp_rank: int) -> None:
    """After init_weights: keep the RoPE rows of this rank's tokens, so the model's rope[:, :n]
    lookup for its n local tokens yields their global angles."""
    positions = cp_positions(seq_len, cp, cp_rank).to(model.rope.device)
    model.rope = model.rope[:, positions].contiguous()


def local_tokens(tokens: torch.Tensor, cp: int, cp_rank: int) -> torch.Tensor:
    """This rank's columns of a (batch, seq) token tensor."""
    return tokens[:, cp_positions(tokens.shape[1], cp, cp_rank).to(tokens.device)].contiguous()
