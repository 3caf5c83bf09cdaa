"""What a profile measures: the shape grids and timing policies, per device kind and depth.

The matmul grid is log-spaced so the cost model can interpolate in log(m), log(n), log(k): a
transformer layer's GEMMs under a TP split t are (tokens, 3h/t, h) for QKV, (tokens, h, h/t) for
the output projection and (tokens, f/t, h), (tokens, h, f/t) for the MLP; with h from 1k to 16k,
f about 4h and t from 1 to 8, their n and k lie inside 1k..32k on a GPU. CPU grids are smaller so a
CPU profile stays quick on a laptop; the cost model extrapolates from their edges.

Sizes are base-2 (KiB, MiB, GiB).
"""
from __future__ import annotations

from dataclasses import dataclass
from itertools import product

from autoplan.specs.choices import MEMORY_OPS  # noqa: F401 - re-exported for profiler.runner
from profiler.timing import TimingPolicy

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30
UNITS = "sizes base-2 (KiB, MiB, GiB); bandwidths base-10 (GB/s); FLOP/s base-10 (TFLOP/s)"



@dataclass(frozen=True)
class Sweep:
    matmul_shapes: tuple
    """(m, n, k) triples."""
    matmul_dtypes: tuple
    """Wanted dtypes; those the device cannot run are dropped at run time (fp8 needs sm_89+)."""
    attention_shapes: tuple
    """(batch, seq_len, num_heads, head_dim) tuples, causal."""
    attention_dtypes: tuple
    memory_op_bytes: tuple
    """Size of one operand tensor of each memory-bound op, in bytes."""
    memory_op_dtype: str
    message_bytes: tuple
    """Collective message sizes (the nccl-tests buffer size, see collectives.py)."""
    collective_dtype: str
    compute_policy: TimingPolicy
    collective_policy: TimingPolicy
    num_passes: int = 3
    """Round-robin passes over the per-device shapes: each pass takes its share of every shape's
    samples, so no shape is measured only early (cool) or only late (hot) in the sweep."""
    soak_s: float = 0.0
    """Seconds of sustained matmuls before the first pass, so clocks settle at their loaded level
    (power and thermal limits) before anything is timed, however long the sweep then runs."""


def _grid(ms, nks) -> tuple:
    return tuple((m, n, k) for m, n, k in product(ms, nks, nks))


def _powers(first: int, last: int, factor: int) -> tuple:
    sizes, size = [], first
    while size <= last:
        sizes.append(size)
        size *= factor
    return tuple(sizes)


def sweep_for(device_type: str, quick: bool) -> Sweep:
    """The grid for one device kind ("cuda" or "cpu"); `quick` is the few-shapes version."""
    if device_type == "cuda":
        return _CUDA_QUICK if quick else _CUDA_FULL
    return _CPU_QUICK if quick else _CPU_FULL


# Quick and full sweeps of one device kind share the per-shape procedure (policies, passes, soak);
# they differ only in which shapes they measure, and the quick shapes are a subset of the full ones,
# so the two can be compared shape by shape (benchmarks/profile_agreement.py).
_CUDA_COMPUTE = TimingPolicy(warmup_iterations=5, min_samples=6, max_samples=48, target_sample_s=2e-3, budget_s=0.15)
_CUDA_COLLECTIVE = TimingPolicy(warmup_iterations=5, min_samples=5, max_samples=30, target_sample_s=2e-3, budget_s=0.15)
_CUDA_SOAK_S = 20.0
_CPU_COMPUTE = TimingPolicy(warmup_iterations=2, min_samples=3, max_samples=12, target_sample_s=2e-3, budget_s=0.05)
_CPU_COLLECTIVE = TimingPolicy(warmup_iterations=2, min_samples=3, max_samples=10, target_sample_s=2e-3, budget_s=0.03)

_CUDA_FULL = Sweep(
    matmul_shapes=_grid((1024, 4096, 16384), (1024, 2048, 4096, 8192, 16384, 32768)),
    matmul_dtypes=("bf16", "fp16", "fp8", "fp32"),
    attention_shapes=tuple(product((1, 4), (1024, 4096, 16384), (16, 64), (64, 128))),
    attention_dtypes=("bf16", "fp16"),
    memory_op_bytes=_powers(16 * MiB, 4 * GiB, 4),
    memory_op_dtype="bf16",
    message_bytes=_powers(1 * KiB, 1 * GiB, 4),
    collective_dtype="bf16",
    compute_policy=_CUDA_COMPUTE, collective_policy=_CUDA_COLLECTIVE, soak_s=_CUDA_SOAK_S,
)

_CUDA_QUICK = Sweep(
    matmul_shapes=_grid((4096, 16384), (1024, 4096, 16384)),
    matmul_dtypes=("bf16", "fp16", "fp8"),
    attention_shapes=((1, 4096, 64, 128), (1, 16384, 64, 128)),
    attention_dtypes=("bf16",),
    memory_op_bytes=(256 * MiB, 1 * GiB),
    memory_op_dtype="bf16",
    message_bytes=(64 * KiB, 1 * MiB, 64 * MiB, 1 * GiB),
    collective_dtype="bf16",
    compute_policy=_CUDA_COMPUTE, collective_policy=_CUDA_COLLECTIVE, soak_s=_CUDA_SOAK_S,
)

_CPU_FULL = Sweep(
    matmul_shapes=_grid((128, 512, 2048), (128, 512, 2048)),
    matmul_dtypes=("bf16", "fp16", "fp32"),
    attention_shapes=tuple(product((1,), (256, 1024), (4, 16), (64,))),
    attention_dtypes=("bf16", "fp32"),
    memory_op_bytes=_powers(1 * MiB, 64 * MiB, 4),
    memory_op_dtype="fp32",
    message_bytes=_powers(1 * KiB, 64 * MiB, 4),
    collective_dtype="fp32",
    compute_policy=_CPU_COMPUTE, collective_policy=_CPU_COLLECTIVE,
)

_CPU_QUICK = Sweep(
    matmul_shapes=_grid((128, 512), (128, 512)),
    matmul_dtypes=("bf16", "fp32"),
    attention_shapes=((1, 256, 4, 64), (1, 1024, 4, 64)),
    attention_dtypes=("bf16", "fp32"),
    memory_op_bytes=(4 * MiB, 64 * MiB),
    memory_op_dtype="fp32",
    message_bytes=(4 * KiB, 256 * KiB, 4 * MiB),
    collective_dtype="fp32",
    compute_policy=_CPU_COMPUTE, collective_policy=_CPU_COLLECTIVE,
)
