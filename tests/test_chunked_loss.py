"""The fused, chunked head + cross-entropy (executor/loss.py) against the whole-logit loss: with a
head bias, with logit soft-capping, and vocabulary-parallel over two gloo processes (tp = 2, the
vocabulary split unevenly). Loss and every gradient within fp32 rounding: both take the softmax in
fp32; the chunked form sums the chunks in another order (measured below 1e-6 relative)."""
from __future__ import annotations

import os
import tempfile

import pytest

torch = pytest.importorskip("torch")

import torch.nn.functional as F  # noqa: E402

from executor.loss import chunked_cross_entropy  # noqa: E402

TOKENS, HIDDEN, VOCAB, CHUNK = 37, 16, 51, 5
"""37 tokens in chunks of 5 (the last one short); 51 = 26 + 25 rows over tp = 2."""
RTOL, ATOL = 1e-5, 1e-6
CASES = [(False, 0.0), (True, 0.0), (False, 3.0), (True, 3.0)]
"""(head bias, soft-cap): a cap of 3 bends logits of size ~4 (randn over 16 dims) hard."""


def _inputs(bias: bool, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    hidden = torch.randn(TOKENS, HIDDEN, generator=gen, requires_grad=True)
    weight = torch.randn(VOCAB, HIDDEN, generator=gen, requires_grad=True)
    b = torch.randn(VOCAB, generator=gen, requires_grad=True) if bias else None
    labels = torch.randint(0, VOCAB, (TOKENS,), generator=gen)
    return hidden, weight, b, labels


def _whole(hidden, weight, b, labels, cap):
    """The executor's plain path (executor/model.py): head, fp32, cap, F.cross_entropy."""
    logits = F.linear(hidden, weight, b).float()
    if cap:
        logits = cap * torch.tanh(logits / cap)
    return F.cross_entropy(logits, labels)


def _params(hidden, weight, b):
    return [hidden, weight] + ([b] if b is not None else [])


@pytest.mark.parametrize("bias,cap", CASES)
def test_chunked_loss_equals_the_whole_logit_loss(bias, cap):
    hidden, weight, b, labels = _inputs(bias)
    whole = _whole(hidden, weight, b, labels, cap)
    want = torch.autograd.grad(whole, _params(hidden, weight, b))
    fused = chunked_cross_entropy(hidden, weight, labels, CHUNK, bias=b, softcap=cap)
    got = torch.autograd.grad(fused, _params(hidden, weight, b))
    assert torch.allclose(fused, whole, rtol=RTOL, atol=ATOL)
    for name, g, w in zip(("hidden", "weight", "bias"), got, want):
        assert torch.allclose(g, w, rtol=RTOL, atol=ATOL), (name, (g - w).abs().max())


def _vocab_parallel_rank(rank: int, store: str, out: str) -> None:
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2)
    rows = -(-VOCAB // 2)
    start, end = rank * rows, min(VOCAB, (rank + 1) * rows)
    errors = []
    for bias, cap in CASES:
        hidden, weight, b, labels = _inputs(bias)
        whole = _whole(hidden, weight, b, labels, cap)
        want = torch.autograd.grad(whole, _params(hidden, weight, b))
        local_w = weight.detach()[start:end].clone().requires_grad_()
        local_b = b.detach()[start:end].clone().requires_grad_() if bias else None
        local_h = hidden.detach().clone().requires_grad_()
        fused = chunked_cross_entropy(local_h, local_w, labels, CHUNK, bias=local_b, softcap=cap,
                                      group=dist.group.WORLD, vocab_start=start)
        got = torch.autograd.grad(fused, _params(local_h, local_w, local_b))
        shards = [want[0], want[1][start:end]] + ([want[2][start:end]] if bias else [])
        if not torch.allclose(fused, whole, rtol=RTOL, atol=ATOL):
            errors.append(f"loss bias={bias} cap={cap}: {fused.item()} vs {whole.item()}")
        for name, g, w in zip(("hidden", "weight", "bias"), got, shards):
            if not torch.allclose(g, w, rtol=RTOL, atol=ATOL):
                errors.append(f"{name} grad bias={bias} cap={cap}: max diff {(g - w).abs().max().item():.3g}")
    with open(f"{out}.{rank}", "w") as f:
        f.write("\n".join(errors) or "ok")
    dist.destroy_process_group()


def test_vocabulary_parallel_chunked_loss_equals_the_whole_logit_loss():
    """Two gloo ranks, each with its rows of the head (26 and 25): the same loss on both, the whole
    hidden gradient on both, each rank its rows of the weight and bias gradients."""
    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory() as tmp:
        store, out = os.path.join(tmp, "store"), os.path.join(tmp, "result")
        mp.start_processes(_vocab_parallel_rank, args=(store, out), nprocs=2, start_method="spawn")
        results = [open(f"{out}.{rank}").read() for rank in range(2)]
    assert results == ["ok", "ok"], results


HOST_SYNC_OPS = {"aten::nonzero", "aten::item", "aten::_local_scalar_dense", "aten::masked_select"}
"""Operators whose output size or value the host must read from the device: on a GPU each one waits
for every kernel queued before it."""


def test_chunked_loss_never_makes_the_host_wait_for_the_device():
    """Forward and backward over 8 chunks without an operator whose result size depends on the data
    (it used nonzero() once per chunk in the backward: 64 waits a step for Llama-3.2-1B's 4 x 2048 in
    523-token chunks)."""
    from torch.profiler import ProfilerActivity, profile

    hidden, weight, b, labels = _inputs(True)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        torch.autograd.grad(chunked_cross_entropy(hidden, weight, labels, CHUNK, bias=b), _params(hidden, weight, b))
    names = {e.name for e in prof.events()}
    assert "_ChunkedLinearCrossEntropyBackward" in names  # the profile saw the backward
    assert not names & HOST_SYNC_OPS, names & HOST_SYNC_OPS
