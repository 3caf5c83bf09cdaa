"""The language-model loss: mean cross-entropy of the output head's logits against the labels.

Two ways to compute the same number:

- `plain_cross_entropy`: the head's logits (tokens x vocab) materialized, cast to fp32, then
  `F.cross_entropy`. Autograd keeps the fp32 log-softmax output for the backward and the backward
  materializes an fp32 gradient of the same size: for Llama-3.2-1B (vocab 128,256) at 4 x 2048
  tokens that is 4.2 GB each.
- `chunked_cross_entropy`: the head's matmul (with its bias and Gemma 2's logit soft-capping) and
  the loss fused and taken `chunk_tokens` rows at a
  time (the "fused linear cross-entropy" of Liger-Kernel, Hsu et al. 2024, arXiv 2410.10989,
  section 3.3, and of torchtune's chunked loss; here recomputing instead of computing the
  gradients in the forward, so nothing vocab-sized lives between forward and backward, which
  matters under pipeline schedules with several micro-batches in flight). The forward keeps
  only the hidden states (already kept by the head in the plain form), the labels and one fp32
  log-sum-exp per token; the backward recomputes each chunk's logits, turns them into
  softmax - one-hot in place, and multiplies back. At most one chunk of fp32 logits exists at a
  time (two with soft-capping: its tanh is kept for the derivative). Cost: the head's forward matmul
  runs twice (2·T·h·V more FLOPs per step). Under tensor parallelism it is vocabulary-parallel: each
  rank holds V/tp rows of the head and a chunk's logits over them (see the autograd Function).

Both take the softmax in fp32 whatever the compute dtype.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

CHUNK_LOGIT_BYTES = 256 * 2**20
"""Default size of one chunk's fp32 logits (`auto_chunk_tokens`): big enough that the head's
matmul stays a large GEMM (523 rows for a 128k vocabulary), small next to a GPU's memory."""


def auto_chunk_tokens(vocab_size: int) -> int:
    """Tokens per chunk so that a chunk's fp32 logits take at most CHUNK_LOGIT_BYTES."""
    return max(1, CHUNK_LOGIT_BYTES // (4 * vocab_size))


def plain_cross_entropy(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.flatten(0, -2).float(), labels.flatten())


class _ChunkedLinearCrossEntropy(torch.autograd.Function):
    """mean_t( logsumexp(z_t) - z_t[y_t] ), z_t = cap(h_t W^T + b) over the T rows of `hidden`.

    Vocabulary-parallel (Megatron's vocab-parallel cross-entropy, Shoeybi et al. 2019, arXiv
    1909.08053, section 3, on the chunked form): with `group`, W and b hold this rank's rows
    [vocab_start, vocab_start + W.shape[0]) of the vocabulary and every rank the same hidden rows;
    the log-sum-exp is assembled from each rank's max and sum of exponentials (two all-reduces per
    chunk) and the target logit from the rank that holds it (one), and the backward all-reduces the
    hidden rows' gradient, whose vocabulary sum each rank holds a part of. The head's weight and bias
    gradients stay local, as the shards are."""

    @staticmethod
    def forward(ctx, hidden, weight, bias, labels, chunk_tokens: int, softcap: float, group, vocab_start: int):
        num_tokens, local_vocab = hidden.shape[0], weight.shape[0]
        lse = torch.empty(num_tokens, dtype=torch.float32, device=hidden.device)
        total = torch.zeros((), dtype=torch.float32, device=hidden.device)
        for start in range(0, num_tokens, chunk_tokens):
            end = min(start + chunk_tokens, num_tokens)
            logits = _logits(hidden[start:end], weight, bias, softcap)
            lse[start:end] = _logsumexp(logits, group)
            local = labels[start:end] - vocab_start
            mine = (local >= 0) & (local < local_vocab)
            target = logits.gather(1, local.clamp(0, local_vocab - 1)[:, None]).squeeze(1) * mine
            _all_reduce(target, group)
            total += (lse[start:end] - target).sum()
        ctx.save_for_backward(hidden, weight, bias, labels, lse)
        ctx.chunk_tokens, ctx.softcap, ctx.group, ctx.vocab_start = chunk_tokens, softcap, group, vocab_start
        return total / num_tokens

    @staticmethod
    def backward(ctx, grad_loss: torch.Tensor):
        hidden, weight, bias, labels, lse = ctx.saved_tensors
        num_tokens, chunk, cap, local_vocab = hidden.shape[0], ctx.chunk_tokens, ctx.softcap, weight.shape[0]
        grad_hidden = torch.empty_like(hidden) if ctx.needs_input_grad[0] else None
        # fp32 accumulation over chunks (one chunk: the same rounding as autograd's single GEMM).
        grad_weight = torch.zeros(weight.shape, dtype=torch.float32, device=weight.device) \
            if ctx.needs_input_grad[1] else None
        grad_bias = torch.zeros(bias.shape, dtype=torch.float32, device=bias.device) \
            if bias is not None and ctx.needs_input_grad[2] else None
        scale = grad_loss.float() / num_tokens
        for start in range(0, num_tokens, chunk):
            end = min(start + chunk, num_tokens)
            h = hidden[start:end]
            logits = _logits(h, weight, bias, cap)
            # tanh of the capped logits, for the cap's derivative 1 - tanh^2 (another fp32 chunk)
            tanh = logits / cap if cap else None
            probs = logits.sub_(lse[start:end, None]).exp_()  # softmax, in place
            local = labels[start:end] - ctx.vocab_start
            mine = ((local >= 0) & (local < local_vocab)).to(probs.dtype)
            # d loss_t / d logits_t = softmax - one-hot, the one-hot scattered (a row whose target another
            # rank holds adds -0 to a clamped column): no nonzero(), whose unknown size made the host wait
            # for the device in every chunk of every micro-batch's backward
            probs.scatter_add_(1, local.clamp(0, local_vocab - 1)[:, None], mine.neg_()[:, None])
            probs.mul_(scale)
            if cap:
                probs.mul_(tanh.square_().neg_().add_(1.0))  # through z = cap * tanh(u / cap)
            grad_logits = probs.to(hidden.dtype)
            if grad_hidden is not None:
                grad_hidden[start:end] = grad_logits @ weight
            if grad_weight is not None:
                grad_weight += (grad_logits.t() @ h).float()
            if grad_bias is not None:
                grad_bias += probs.sum(0)
        if grad_hidden is not None:
            _all_reduce(grad_hidden, ctx.group)  # each rank holds its vocabulary rows' part of the sum
        return (grad_hidden, None if grad_weight is None else grad_weight.to(weight.dtype),
                None if grad_bias is None else grad_bias.to(bias.dtype), None, None, None, None, None)


def _logits(h: torch.Tensor, weight: torch.Tensor, bias, softcap: float) -> torch.Tensor:
    """One chunk's fp32 logits, capped as Gemma 2 caps them: c * tanh(u / c)."""
    logits = (h @ weight.t()).float()
    if bias is not None:
        logits += bias.float()
    if softcap:
        logits.div_(softcap).tanh_().mul_(softcap)
    return logits


def _all_reduce(tensor: torch.Tensor, group, op=None) -> None:
    if group is not None:
        import torch.distributed as dist
        dist.all_reduce(tensor, op=op or dist.ReduceOp.SUM, group=group)


def _logsumexp(logits: torch.Tensor, group) -> torch.Tensor:
    """Per row, log sum_v exp(logits) over the whole vocabulary (every rank's rows with `group`)."""
    if group is None:
        return torch.logsumexp(logits, dim=-1)
    import torch.distributed as dist
    peak = logits.max(dim=-1).values
    _all_reduce(peak, group, dist.ReduceOp.MAX)
    sums = (logits - peak[:, None]).exp_().sum(dim=-1)
    _all_reduce(sums, group)
    return sums.log_().add_(peak)


def chunked_cross_entropy(hidden: torch.Tensor, weight: torch.Tensor, labels: torch.Tensor, chunk_tokens: int,
                          bias: torch.Tensor | None = None, softcap: float = 0.0, group=None,
                          vocab_start: int = 0) -> torch.Tensor:
    """The loss of `plain_cross_entropy(cap(hidden @ weight.T + bias), labels)` without the whole logit
    matrix: hidden (..., h), weight (vocab, h) and bias (vocab,) the head's, labels (...) int64, `softcap`
    the logit cap (0: none). With `group` (tensor parallelism) weight and bias are this rank's
    vocabulary rows starting at `vocab_start`, hidden the same on every rank of the group."""
    if chunk_tokens < 1:
        raise ValueError(f"chunk_tokens must be at least 1, got {chunk_tokens}")
    return _ChunkedLinearCrossEntropy.apply(hidden.flatten(0, -2), weight, bias, labels.flatten(), chunk_tokens,
                                            float(softcap or 0.0), group, vocab_start)
