"""The CPU runtime term: what a CPU training process holds beyond its tensors, measured.

A CPU run's memory is read as the growth of its resident set over the process before the model was
built (autoplan.specs.host_process.cpu_rss_growth_bytes). That growth holds the run's tensors and
also what the first training step makes the process load and keep: the Python modules imported
lazily on the way (PyTorch's first optimizer step imports torch._dynamo, ~860 modules, ~60 MiB of
anonymous memory on torch 2.9 as measured here), the autograd engine's and gloo's buffers, the C
allocator's arenas. None of it scales with the model, so it is measured once per profile: a minimal
training step (autograd forward and backward, for-each AdamW, a gloo all-reduce of the gradients)
run first in each profiling process, its RSS growth less the probe's own tensors. The cost model
adds it to CPU plans only (cost_model/stage_memory.py `cpu_runtime`).
"""
from __future__ import annotations

import sys

import torch
import torch.distributed as dist

from autoplan.specs.host_process import cpu_rss_baseline, cpu_rss_growth_bytes, reset_cpu_peak_rss

PROBE_VOCAB, PROBE_WIDTH, PROBE_TOKENS, PROBE_STEPS = 64, 32, 64, 2
"""A model small enough that its tensors are a rounding error (~0.1 MiB) next to what is measured."""
STATE_BYTES_PER_PARAM = 16
"""fp32 weight, gradient and AdamW's two moments."""
LAZY_MODULE = "torch._dynamo"
"""The largest lazily imported part: already loaded, it would not be counted (the source says so)."""


def _probe_model() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Embedding(PROBE_VOCAB, PROBE_WIDTH), torch.nn.Linear(PROBE_WIDTH, PROBE_WIDTH),
                               torch.nn.GELU(), torch.nn.Linear(PROBE_WIDTH, PROBE_VOCAB))


def measure_cpu_runtime_bytes(distributed: bool) -> tuple[int, bool]:
    """(bytes the process holds after a minimal training step beyond the step's tensors, whether
    torch._dynamo was imported before the probe, in which case the figure leaves it out).
    Run before anything else allocates in the process: the sweeps' buffers would grow the heap first."""
    preloaded = LAZY_MODULE in sys.modules
    reset_cpu_peak_rss()
    baseline = cpu_rss_baseline()
    generator = torch.Generator().manual_seed(0)
    model = _probe_model()
    optimizer = torch.optim.AdamW(model.parameters(), foreach=True)
    tokens = torch.randint(0, PROBE_VOCAB, (PROBE_TOKENS,), generator=generator)
    for _ in range(PROBE_STEPS):
        loss = torch.nn.functional.cross_entropy(model(tokens), tokens)
        loss.backward()
        if distributed:
            for p in model.parameters():
                dist.all_reduce(p.grad)
        optimizer.step()
        optimizer.zero_grad()
    tensors = STATE_BYTES_PER_PARAM * sum(p.numel() for p in model.parameters())
    return max(0, cpu_rss_growth_bytes(baseline) - tensors), preloaded


def runtime_source(per_rank: list) -> str:
    """The profile's note for `runtime_memory_bytes`, from every rank's (bytes, preloaded)."""
    note = (f"measured: RSS growth of a minimal training step (autograd, for-each AdamW, gloo all-reduce) over the "
            f"process after init_process_group, less the probe's tensors, the most of {len(per_rank)} process(es) "
            f"(torch {torch.__version__}): the modules and buffers the first step loads")
    if any(preloaded for _, preloaded in per_rank):
        note += f"; {LAZY_MODULE} was imported before the probe, so its modules are not counted (reads low)"
    return note
