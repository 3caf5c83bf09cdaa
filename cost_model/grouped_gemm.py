"""A MoE layer's local experts run as one grouped GEMM per weight: its time on the GPU.

Where a framework runs the experts as one `torch._grouped_mm` call per weight (torchtitan 0.3.0
models/common/moe.py GroupedExperts._grouped_mm, KempnerForge's packed experts, autoplan's executor on
Hopper: Framework.moe_grouped_gemm), the cost model does not price each local expert as a GEMM of its
own shape from the dense table. That proxy pays each small expert's launch and poor occupancy, and the
kernel records (cost_model/data/kernels/kernel_rates-{h100,h200}.json, `grouped` entries, balanced
routing, four models' expert shapes with 8 and 32 local experts at 128-8,192 tokens each) time the
grouped kernel up to 3.1x faster than it for narrow experts at few tokens (Qwen3-30B-A3B, 768 wide).

The kernel is priced in three named parts, each read from what the profile already measured:

    t = fixed_s + max(compute_s, streaming_s) + overlap x min(compute_s, streaming_s)

- compute_s: the FLOPs at the dense GEMM table's rate for the whole group as one GEMM, the experts'
  rows stacked (m x experts, n, k): the grouped kernel tiles every expert in one launch, so its SMs
  fill as a GEMM of all the rows would;
- streaming_s: the bytes every expert's operands and output move once (experts x (n k + m k + m n)
  x the dtype's width) at the profile's peak HBM rate: each expert's weights are read for its own
  rows only, so at few rows the kernel waits on HBM where a dense GEMM of the stacked rows would
  reuse them from L2;
- fixed_s and overlap: one call's fixed time (launch and setup) and how much of the shorter part the
  kernel fails to hide under the longer. These two are the kernel's, per GPU, fitted to its record by
  `fit_kernel` (grid search, least mean |log| error of the time) when first needed (`fitted_kernel`):
  on all of the H100 record, 13 us and 0.10; on the H200's, 9 us and 0.30.

Held out one model at a time (the other three fit the two parameters), the records' grouped rates are
predicted within 4.7 % (H100) and 5.7 % (H200) mean absolute error, Qwen3-30B-A3B's within 8.8 % and
8.7 %, where the per-expert proxy misses by 10.7 % and 14.1 % (Qwen3-30B-A3B: 22.4 % and 25.2 %):
`PYTHONPATH=. .venv/bin/python benchmarks/grouped_gemm_table.py`, tests/test_grouped_gemm.py.
The records time the forward's projections; the backward's data- and weight-gradient GEMMs are the
same kernel on the shapes cost_model/flops.py backward_shapes gives (an assumption: not timed). A GPU
or dtype the records do not cover keeps the per-expert pricing (`kernel_for`).
"""
from __future__ import annotations

import itertools
import json
import math
import statistics
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from cost_model.profiles import builtin_profile
from cost_model.tables import ProfileTables

RECORDS = Path(__file__).resolve().parent / "data" / "kernels"
GROUPED_RECORDS = {"h100-80gb": "kernel_rates-h100.json", "h200": "kernel_rates-h200.json"}
"""Built-in profile -> the kernel record timed on its GPU (torch 2.11, CUDA 13.0, 2026-11-27)."""
GROUPED_DTYPES = ("bf16", "fp16")
"""The records time bf16 (fp16 runs the same tensor-core kernel); an fp8 grouped GEMM is another kernel."""
BYTES_PER_ELEMENT = 2
"""Of a GROUPED_DTYPES operand."""


@dataclass(frozen=True)
class GroupedKernel:
    fixed_s: float
    """One grouped call's fixed time: launch and setup, whatever its size."""
    overlap: float
    """Fraction of the shorter of compute and HBM streaming that the kernel does not hide."""


FIXED_GRID_S = tuple(i * 1e-6 for i in range(31))
OVERLAP_GRID = tuple(i / 20 for i in range(21))


def kernel_for(tables, dtype: str) -> GroupedKernel | None:
    """The grouped kernel's parameters for `tables`' GPU (built-in or measured, matched by device name)
    at `dtype`, fitted to that GPU's record at first use (`fitted_kernel`); None where the records do
    not cover them (the per-expert pricing stays)."""
    if dtype not in GROUPED_DTYPES:
        return None
    for name in GROUPED_RECORDS:
        if _device_name(name) == tables.profile.device_name:
            return fitted_kernel(name)
    return None


@lru_cache(maxsize=None)
def _device_name(profile_name: str) -> str:
    return builtin_profile(profile_name).device_name


@lru_cache(maxsize=None)
def fitted_kernel(profile_name: str) -> GroupedKernel:
    """`fit_kernel` over every balanced entry of the record of a built-in profile's GPU
    (GROUPED_RECORDS), priced on that profile (about 0.1 s, once per process)."""
    tables = ProfileTables(builtin_profile(profile_name))
    return fit_kernel(record_points(tables, GROUPED_RECORDS[profile_name]))


def kernel_parts_s(tables, m: int, n: int, k: int, experts: int, dtype: str) -> tuple:
    """(compute_s, streaming_s) of one grouped GEMM of `experts` groups of (m, n, k) (module docstring)."""
    flops = 2.0 * m * n * k * experts
    compute_s = flops / tables.matmul_flops_per_s(m * experts, n, k, dtype)
    streaming_s = BYTES_PER_ELEMENT * experts * (n * k + m * k + m * n) / tables.peak_memory_bytes_per_s
    return compute_s, streaming_s


def kernel_time_s(kernel: GroupedKernel, compute_s: float, streaming_s: float) -> float:
    longer, shorter = max(compute_s, streaming_s), min(compute_s, streaming_s)
    return kernel.fixed_s + longer + kernel.overlap * shorter


def grouped_gemm_time_s(tables, gemm, dtype: str, scale: float, kernel: GroupedKernel) -> float:
    """Seconds of a Gemm whose `count` groups run as one grouped kernel, at the framework's GEMM
    efficiency `scale` (as every GEMM: cost_model/layer_terms.py gemm_time_s)."""
    compute_s, streaming_s = kernel_parts_s(tables, gemm.m, gemm.n, gemm.k, gemm.count, dtype)
    return kernel_time_s(kernel, compute_s, streaming_s) / scale


def balanced_entries(record: str) -> list:
    """The balanced grouped-GEMM entries of a kernel record (benchmarks/kernel_rates.py `grouped`,
    variant grouped-balanced: every local expert the same rows)."""
    entries = json.loads((RECORDS / record).read_text())["entries"]
    return [e for e in entries if e.get("kind") == "grouped" and e["variant"] == "grouped-balanced"]


def record_points(tables, record: str) -> list:
    """(model, measured s, compute_s, streaming_s) of every balanced grouped entry of a kernel record."""
    points = []
    for e in balanced_entries(record):
        m, n, k, experts = e["tokens_per_expert"], e["n"], e["k"], e["experts"]
        measured_s = 2.0 * m * n * k * experts / e["flops_per_s"]
        points.append((e["model"], measured_s, *kernel_parts_s(tables, m, n, k, experts, "bf16")))
    return points


def fit_kernel(points: list) -> GroupedKernel:
    """The grid's (fixed_s, overlap) of least mean |log(predicted / measured)| time over `points`."""
    def loss(pair) -> float:
        kernel = GroupedKernel(*pair)
        return statistics.fmean(abs(math.log(kernel_time_s(kernel, c, s) / t)) for _, t, c, s in points)
    return GroupedKernel(*min(itertools.product(FIXED_GRID_S, OVERLAP_GRID), key=loss))
