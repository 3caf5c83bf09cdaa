"""Per-device measurements: matmul and attention throughput, memory-bound bandwidth, capacity.

Every process measures its own device at the same time as the others, so a CPU "device" is the
share of cores one process gets (torch threads = cores / processes per node) and a GPU is one GPU
with its neighbours busy, as in training.
"""
from __future__ import annotations

import os
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Callable

import torch
import torch.nn.functional as F

from autoplan.specs.flops import ATTENTION_BACKWARD_FLOPS_RATIO
from profiler.passes import Probe, Timed, run_passes
from profiler.sweeps import MiB, Sweep
from profiler.timing import Clock, Recorder

TORCH_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
if hasattr(torch, "float8_e4m3fn"):
    TORCH_DTYPES["fp8"] = torch.float8_e4m3fn

CAPACITY_STEP_BYTES = 64 * MiB
"""Resolution of the GPU allocatable-memory binary search."""
NORM_HIDDEN = 4096
"""Row width of the norm op: the hidden size of a mid-sized model."""


@dataclass
class Bench:
    """What every measurement needs: where to run, how to time, where samples go, progress."""
    device: torch.device
    clock: Clock
    recorder: Recorder
    tick: Callable[[], None]
    memory_limit_bytes: int
    skipped: list = field(default_factory=list)
    """Shapes not run (too big for the device's memory), kept for the environment stamp."""

    @contextmanager
    def shape(self, what: str, num_bytes: int, num_steps: int = 1):
        """Guard one shape's measurement: yields whether to run it; a shape over the memory limit,
        or one that runs out of device memory, is skipped and listed, not fatal. The allocator's
        cache is emptied after each shape so that fragments of one do not starve the next."""
        try:
            if num_bytes > self.memory_limit_bytes:
                self.skipped.append(f"{what} (over {self.memory_limit_bytes} B)")
                yield False
            else:
                yield True
        except torch.OutOfMemoryError:
            self.skipped.append(f"{what} (out of memory)")
        finally:
            if self.device.type == "cuda":
                torch.cuda.empty_cache()
            for _ in range(num_steps):
                self.tick()


def _fp8_matmul_runs(device: torch.device) -> bool:
    """fp8 GEMMs need sm_89+ (Ada, Hopper) and torch._scaled_mm; try one tiny product to be sure."""
    if device.type != "cuda" or "fp8" not in TORCH_DTYPES or not hasattr(torch, "_scaled_mm"):
        return False
    if torch.cuda.get_device_capability(device) < (8, 9):
        return False
    try:
        a = torch.zeros(16, 16, device=device).to(torch.float8_e4m3fn)
        one = torch.ones((), device=device)
        torch._scaled_mm(a, a.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
        return True
    except RuntimeError:
        return False


def runnable_dtypes(device: torch.device, wanted: tuple) -> list[str]:
    """The wanted dtypes this device runs matmuls in."""
    runnable = []
    for dtype in wanted:
        if dtype == "fp8":
            if _fp8_matmul_runs(device):
                runnable.append(dtype)
        elif dtype == "bf16" and device.type == "cuda" and not torch.cuda.is_bf16_supported():
            continue
        elif dtype in TORCH_DTYPES:
            runnable.append(dtype)
    return runnable


def _matmul_fn(m: int, n: int, k: int, dtype: str, device: torch.device) -> Callable[[], object]:
    if dtype == "fp8":
        # _scaled_mm wants A row-major and B column-major; unit scales, bf16 output as in training.
        a = torch.randn(m, k, device=device).to(torch.float8_e4m3fn)
        b = torch.randn(n, k, device=device).to(torch.float8_e4m3fn).t()
        one = torch.ones((), device=device)
        return lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
    a = torch.randn(m, k, device=device, dtype=TORCH_DTYPES[dtype])
    b = torch.randn(k, n, device=device, dtype=TORCH_DTYPES[dtype])
    c = torch.empty(m, n, device=device, dtype=TORCH_DTYPES[dtype])
    return lambda: torch.matmul(a, b, out=c)


def matmul_probes(sweep: Sweep, dtypes: list[str], device: torch.device) -> list[Probe]:
    """C[m,n] = A[m,k] @ B[k,n] costs 2*m*n*k FLOPs (one multiply and one add per term)."""
    probes = []
    for dtype in dtypes:
        element_bytes = 1 if dtype == "fp8" else TORCH_DTYPES[dtype].itemsize
        for m, n, k in sweep.matmul_shapes:
            def build(m=m, n=n, k=k, dtype=dtype):
                return [Timed("matmul", _matmul_fn(m, n, k, dtype, device), {"flops": 2.0 * m * n * k},
                              dict(m=m, n=n, k=k, dtype=dtype))]
            probes.append(Probe(f"matmul {m}x{n}x{k} {dtype}", (m * k + k * n + 2 * m * n) * element_bytes, build))
    return probes


def attention_forward_flops(batch: int, seq_len: int, num_heads: int, head_dim: int) -> float:
    """QK^T and AV are 2*b*s*s*h*d FLOPs each; a causal mask skips half of both."""
    return 4.0 * batch * seq_len * seq_len * num_heads * head_dim / 2


BACKWARD_FLOPS_RATIO = ATTENTION_BACKWARD_FLOPS_RATIO


def _attention_ops(batch: int, seq_len: int, num_heads: int, head_dim: int, dtype: str,
                   device: torch.device) -> list[Timed]:
    """Causal SDPA forward, and backward timed alone by re-running autograd on a kept graph."""
    q, k, v = (torch.randn((batch, num_heads, seq_len, head_dim), device=device, dtype=TORCH_DTYPES[dtype],
                           requires_grad=True) for _ in range(3))
    fields = dict(batch=batch, seq_len=seq_len, num_heads=num_heads, head_dim=head_dim, dtype=dtype)
    forward_flops = attention_forward_flops(batch, seq_len, num_heads, head_dim)

    def forward():
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    out = forward()
    grad_out = torch.randn_like(out)

    def backward():
        # retain_graph keeps the saved tensors, so each run is one whole backward pass.
        return torch.autograd.grad(out, (q, k, v), grad_out, retain_graph=True)

    return [Timed("attention", forward, {"flops": forward_flops}, {**fields, "pass": "fwd"}),
            Timed("attention", backward, {"flops": BACKWARD_FLOPS_RATIO * forward_flops}, {**fields, "pass": "bwd"})]


def attention_probes(sweep: Sweep, dtypes: list[str], device: torch.device) -> list[Probe]:
    probes = []
    for dtype in dtypes:
        for batch, seq_len, num_heads, head_dim in sweep.attention_shapes:
            tensor_bytes = batch * num_heads * seq_len * head_dim * TORCH_DTYPES[dtype].itemsize
            # q, k, v, out, their gradients and the kernels' workspace
            probes.append(Probe(f"attention b={batch} s={seq_len} h={num_heads} d={head_dim} {dtype}",
                                12 * tensor_bytes,
                                lambda shape=(batch, seq_len, num_heads, head_dim), dtype=dtype:
                                    _attention_ops(*shape, dtype, device), num_steps=2))
    return probes


def _memory_op(op: str, num_elements: int, dtype: torch.dtype, device: torch.device):
    """(fn, bytes read + written per run) of one memory-bound op on tensors of num_elements."""
    x = torch.randn(num_elements, device=device, dtype=dtype)
    if op == "copy":
        out = torch.empty_like(x)
        return (lambda: out.copy_(x)), 2
    if op == "add":
        y, out = torch.randn_like(x), torch.empty_like(x)
        return (lambda: torch.add(x, y, out=out)), 3
    if op == "activation":  # SiLU, the gate of SwiGLU; out-of-place as in a forward pass
        return (lambda: F.silu(x)), 2
    if op == "norm":  # RMSNorm over rows of the hidden size; the weight vector is negligible
        rows = x.view(-1, NORM_HIDDEN)
        weight = torch.ones(NORM_HIDDEN, device=device, dtype=dtype)
        return (lambda: F.rms_norm(rows, (NORM_HIDDEN,), weight)), 2
    raise ValueError(f"unknown memory op {op!r}")


def memory_op_probes(sweep: Sweep, ops: tuple, device: torch.device) -> list[Probe]:
    dtype = TORCH_DTYPES[sweep.memory_op_dtype]
    probes = []
    for num_bytes in sweep.memory_op_bytes:
        num_elements = num_bytes // dtype.itemsize // NORM_HIDDEN * NORM_HIDDEN
        for op in ops:
            def build(op=op, num_elements=num_elements):
                fn, num_passes = _memory_op(op, num_elements, dtype, device)
                return [Timed("memory_op", fn, {"bytes_moved": num_passes * num_elements * dtype.itemsize},
                              dict(op=op, num_bytes=num_elements * dtype.itemsize))]
            probes.append(Probe(f"memory op {op} {num_bytes} B", 4 * num_bytes, build))
    return probes


def measure_device(bench: Bench, sweep: Sweep, matmul_dtypes: list[str], attention_dtypes: list[str],
                   ops: tuple) -> None:
    """Matmuls, attention and memory-bound ops of this device, in the sweep's round-robin passes
    (profiler.passes): every shape is sampled in every pass."""
    probes = (matmul_probes(sweep, matmul_dtypes, bench.device) + attention_probes(sweep, attention_dtypes, bench.device)
              + memory_op_probes(sweep, ops, bench.device))
    run_passes(bench, probes, sweep.compute_policy, sweep.num_passes)


def soak(device: torch.device, seconds: float) -> int:
    """Run bf16 8192^3 matmuls for `seconds` (untimed), so the clocks reach their level under
    sustained load before the first sample; returns how many ran."""
    if seconds <= 0:
        return 0
    import time

    a = torch.randn(8192, 8192, device=device, dtype=torch.bfloat16)
    c = torch.empty_like(a)
    count, end = 0, time.perf_counter() + seconds
    while time.perf_counter() < end:
        for _ in range(10):
            torch.matmul(a, a, out=c)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        count += 10
    return count


def _available_ram_bytes() -> tuple[int, str]:
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024, "MemAvailable in /proc/meminfo"
    except OSError:
        pass
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"), "available physical pages (sysconf)"


def measure_capacity_bytes(device: torch.device, num_local_processes: int) -> tuple[int, str]:
    """Allocatable memory of this process's device, and how it was found (for `sources`)."""
    if device.type != "cuda":
        available, how = _available_ram_bytes()
        return available // num_local_processes, (
            f"CPU: {how} divided by the {num_local_processes} profiling process(es) of the node "
            "(each process is one device; not a measured allocation)")
    free_bytes, total_bytes = torch.cuda.mem_get_info(device)
    # Binary search for the largest single allocation: what a training process can really take,
    # below `free` by the allocator's rounding and fragmentation. `low` always allocated.
    low, high = 0, free_bytes
    while high - low > CAPACITY_STEP_BYTES:
        mid = (low + high) // 2
        try:
            block = torch.empty(mid, dtype=torch.uint8, device=device)
            del block
            low = mid
        except torch.OutOfMemoryError:
            high = mid
        torch.cuda.empty_cache()
    return low, (f"GPU: largest single allocation found by binary search to {CAPACITY_STEP_BYTES >> 20} MiB "
                 f"(cudaMemGetInfo free {free_bytes} B of total {total_bytes} B, after the CUDA context)")
