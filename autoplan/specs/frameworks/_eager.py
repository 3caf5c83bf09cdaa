"""Eager PyTorch's host issue facts (cost_model/host_time.py), shared by the frameworks that run the
same eager Llama op sequence (autoplan's executor, torchtitan). Not a framework module: the registry
skips modules whose names start with "_"."""
from __future__ import annotations

# Measured on the executor's model and the plain loop a user writes: cost_model/data/h100_runs/
# 2026-11-29-cpu-host-time, file profile-after2-noloss-llama-3.2-1b.json, case `torch-eager` (a 2-layer
# Llama, hidden 64, stepped as 4 micro-batches of 2, seq 32).
# Kernels per layer and micro-batch, counted: the profiler's kernels of one step (gemm 180,
# attention 24, elementwise/copies 1,346) over 2 layers x 4 micro-batches. The GEMMs check the count:
# 21 per layer and micro-batch (7 projections forward, 14 backward) x 8 = 168, plus the head's 3 x 4
# micro-batches = 180. The head's, loss's and embedding's other kernels are in the share too, so this
# is at most 2 % high for a 16-layer model and ~25 % for 2 layers. The optimizer's 411 kernels run once a
# step, not per micro-batch, and are not priced here.
EAGER_KERNELS_PER_LAYER = (180 + 24 + 1346) / (2 * 4)

# Host seconds per kernel, measured: process CPU time of that step (18.37 ms, median of 30 steps) over
# all its kernels (180 + 24 + 1,346 + 411 = 1,961) = 9.4 us. On a CPU device every kernel is host work,
# so this is dispatch + autograd + the (tiny: hidden 64) kernel itself, on the project's shared 2-core
# VM: an upper bound on the host side of a CUDA eager op. Published cross-checks: eager `x + 1` costs
# 4.5 us on an i9-11900K (J. Ansel, "Micro-optimizations for the most micro of benchmarks",
# dev-discuss.pytorch.org/t/1836), a CUDA launch a few us more.
EAGER_HOST_S_PER_KERNEL = 0.018371569 / (180 + 24 + 1346 + 411)

# The same facts on the record's GPT-2 (2 layers, hidden 64, LayerNorm, GeLU MLP, biases, tied head; seq 32,
# 2 micro-batches of 4; file profile-after2-noloss-gpt2-medium.json, case `torch-eager`): a GPT layer, the
# family of Megatron's GPT models (BigScience's BLOOM). Kernels per layer and micro-batch, counted: gemm 78,
# attention 12, elementwise/copies 365 over 2 layers x 2 micro-batches (the GEMMs check it: q, k, v, output,
# fc1, fc2 forward and twice that backward, 18 x 4 = 72, plus the tied head's 3 x 2 = 78). Host seconds per
# kernel: 8.99 ms of process CPU time per step over its 1,151 kernels (the optimizer's 696 included).
EAGER_GPT_KERNELS_PER_LAYER = (78 + 12 + 365) / (2 * 2)
EAGER_GPT_HOST_S_PER_KERNEL = 0.0089948125 / (78 + 12 + 365 + 696)
