"""The language-model loss: mean cross-entropy of the output head's logits against the labels.

Two ways to compute the same number:

- `plain_cross_entropy`: the head's logits (tokens x vocab) materialized, cast to fp32, then
  `F.cross_entropy`. Autograd keeps the fp32 log-softmax output for the backward and the backward
  materializes an fp32 gradient of the same size: for Llama-3.2-1B (vocab 128,256) at 4 x 2048
  tokens that is 4.2 GB each.
- `chunked_cross_entropy`: the head's matmul and the loss fused and taken `chunk_tokens` rows at a
  time (the "fused linear cross-entropy" of Liger-Kernel, Hsu et al. 2024, arXiv 2410.10989,
  section 3.3, and of torchtune's chunked loss; here recomputing instead of computing the
  gradients in the forward, so nothing vocab-sized lives between forward and backward, which
  matters under pipeline schedules with several micro-batches in flight). The forward keeps
  only the hidden states (already kept by the head in the plain form), the labels and one fp32
  log-sum-exp per token; the backward recomputes each chunk's logits, turns them into
  softmax - one-hot in place, and multiplies back. At most one chunk of fp32 logits exists at a
  time. Cost: the head's forward matmul runs twice (2·T·h·V more FLOPs per step).

Both take the softmax in fp32 whatever the compute dtype.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

CHUNK_LOGIT_BYTES = 256 * 2**20
"""Default size of one chunk's fp32 logits (`auto_chunk_tokens`): big enough that the head's
matmul stays a large GEMM (1046 rows for a 128k vocabulary), small next to a GPU's memory."""


def auto_chunk_tokens(vocab_size: int) -> int:
    """Tokens per chunk so that a chunk's fp32 logits take at most CHUNK_LOGIT_BYTES."""
    return max(1, CHUNK_LOGIT_BYTES // (4 * vocab_size))


def plain_cross_entropy(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.flatten(0, -2).float(), labels.flatten())


class _ChunkedLinearCrossEntropy(torch.autograd.Function):
    """mean_t( logsumexp(h_t W^T) - (h_t W^T)[y_t] ) over the T rows of `hidden`."""

    @staticmethod
    def forward(ctx, hidden: torch.Tensor, weight: torch.Tensor, labels: torch.Tensor, chunk_tokens: int):
        num_tokens = hidden.shape[0]
        lse = torch.empty(num_tokens, dtype=torch.float32, device=hidden.device)
        total = torch.zeros((), dtype=torch.float32, device=hidden.device)
        for start in range(0, num_tokens, chunk_tokens):
            end = min(start + chunk_tokens, num_tokens)
            logits = (hidden[start:end] @ weight.t()).float()
            lse[start:end] = torch.logsumexp(logits, dim=-1)
            target = logits.gather(1, labels[start:end, None]).squeeze(1)
            total += (lse[start:end] - target).sum()
        ctx.save_for_backward(hidden, weight, labels, lse)
        ctx.chunk_tokens = chunk_tokens
        return total / num_tokens

    @staticmethod
    def backward(ctx, grad_loss: torch.Tensor):
        hidden, weight, labels, lse = ctx.saved_tensors
        num_tokens, chunk = hidden.shape[0], ctx.chunk_tokens
        grad_hidden = torch.empty_like(hidden) if ctx.needs_input_grad[0] else None
        # fp32 accumulation over chunks (one chunk: the same rounding as autograd's single GEMM).
        grad_weight = torch.zeros(weight.shape, dtype=torch.float32, device=weight.device) \
            if ctx.needs_input_grad[1] else None
        scale = grad_loss.float() / num_tokens
        for start in range(0, num_tokens, chunk):
            end = min(start + chunk, num_tokens)
            h = hidden[start:end]
            probs = (h @ weight.t()).float().sub_(lse[start:end, None]).exp_()  # softmax, in place
            rows = torch.arange(end - start, device=probs.device)
            probs[rows, labels[start:end]] -= 1.0  # d loss_t / d logits_t = softmax - one-hot
            grad_logits = probs.mul_(scale).to(hidden.dtype)
            if grad_hidden is not None:
                grad_hidden[start:end] = grad_logits @ weight
            if grad_weight is not None:
                grad_weight += (grad_logits.t() @ h).float()
        return grad_hidden, None if grad_weight is None else grad_weight.to(weight.dtype), None, None


def chunked_cross_entropy(hidden: torch.Tensor, weight: torch.Tensor, labels: torch.Tensor,
                          chunk_tokens: int) -> torch.Tensor:
    """The loss of `plain_cross_entropy(hidden @ weight.T, labels)` without the whole logit matrix:
    hidden (..., h), weight (vocab, h) (the head's, no bias), labels (...) int64."""
    if chunk_tokens < 1:
        raise ValueError(f"chunk_tokens must be at least 1, got {chunk_tokens}")
    return _ChunkedLinearCrossEntropy.apply(hidden.flatten(0, -2), weight, labels.flatten(), chunk_tokens)
