"""Where one steady training step's time goes: a `torch.profiler` trace of one step, summed by kernel
class (GEMM, attention, elementwise/copies, optimizer, communication) and the rest of the step's
wall time (host work and idle gaps).

On CUDA the kernels are the GPU's (profiler events on the device); `host_idle_s` is the step's wall
time minus the union of their intervals: the time the GPU waits for the host. On a CPU the kernels are
the ATen operators' self times (their work, without the operators they call), views and allocations
left out; `host_idle_s` is then everything else: Python, module hooks, the autograd engine's
bookkeeping, the dispatcher, the profiler's own recording. Sizes base-2, times in seconds.
"""
from __future__ import annotations

import gzip
import shutil
from pathlib import Path

import torch

CLASSES = ("gemm", "attention", "elementwise_copies", "optimizer", "communication")
HOST = "host_idle"
CUDA_PATTERNS = (  # first match wins: flash kernels are CUTLASS kernels, so attention goes before GEMM
    ("attention", ("flash", "fmha", "attention", "sdpa", "attn")),
    ("communication", ("nccl",)),
    ("optimizer", ("adam", "multi_tensor_apply", "foreach")),
    ("gemm", ("gemm", "xmma", "cutlass", "nvjet", "cublas", "triton_tem_", "grouped_mm", "sm90_", "sm80_")),
)
CPU_PATTERNS = (
    ("attention", ("scaled_dot_product", "flash_attention", "efficient_attention")),
    ("communication", ("c10d", "allreduce", "all_reduce", "gloo", "nccl", "broadcast", "all_gather",
                       "reduce_scatter", "all_to_all")),
    ("optimizer", ("_foreach_", "_fused_adam")),
)
CPU_GEMMS = {"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::addbmm", "aten::_grouped_mm"}
CPU_HOST_OPS = {  # no arithmetic: metadata, views and allocations are host work on any device
    "aten::empty", "aten::empty_like", "aten::empty_strided", "aten::view", "aten::_unsafe_view", "aten::as_strided",
    "aten::t", "aten::transpose", "aten::reshape", "aten::expand", "aten::unsqueeze", "aten::squeeze", "aten::slice",
    "aten::select", "aten::detach", "aten::alias", "aten::permute", "aten::lift_fresh", "aten::resolve_conj",
    "aten::resolve_neg", "aten::contiguous", "aten::numpy_T", "aten::unflatten", "aten::flatten", "aten::chunk",
    "aten::split", "aten::narrow", "aten::set_", "aten::resize_", "aten::split_with_sizes", "detach",
    "aten::linear", "aten::matmul", "aten::to", "aten::expand_as", "aten::view_as", "aten::_reshape_alias",
    "aten::unbind", "aten::type_as", "aten::is_nonzero", "aten::item", "aten::_local_scalar_dense",
}


def kernel_class(name: str, device: str) -> str | None:
    """The class of one kernel (CUDA) or ATen operator (CPU) by its name; None: host work (CPU only)."""
    low = name.lower()
    if device == "cuda":
        return next((cls for cls, keys in CUDA_PATTERNS if any(k in low for k in keys)), "elementwise_copies")
    if name in CPU_GEMMS:
        return "gemm"
    cls = next((cls for cls, keys in CPU_PATTERNS if any(k in low for k in keys)), None)
    if cls == "communication":  # c10d::allreduce_, gloo:all_reduce: not ATen names
        return cls
    if name in CPU_HOST_OPS or not name.startswith("aten::"):
        return None
    return cls or "elementwise_copies"


def _union_s(intervals: list[tuple[float, float]]) -> float:
    """Total length of the union of (start, end) intervals (GPU streams overlap)."""
    total, end = 0.0, float("-inf")
    for start, stop in sorted(intervals):
        if stop <= end:
            continue
        total += stop - max(start, end)
        end = stop
    return total


def _in_optimizer(event) -> bool:
    parent = event.cpu_parent
    while parent is not None:
        if parent.name.startswith("Optimizer.step"):
            return True
        parent = parent.cpu_parent
    return False


def summarize(events, wall_s: float, device: str) -> dict:
    """Seconds per kernel class and host/idle, from a profiler's events of one step of `wall_s`."""
    from torch.autograd import DeviceType

    by_class = dict.fromkeys(CLASSES, 0.0)
    counts = dict.fromkeys(CLASSES, 0)
    intervals = []
    for event in events:
        on_device = event.device_type == DeviceType.CUDA
        if device == "cuda" and not on_device:
            continue
        if device == "cpu" and on_device:
            continue
        cls = kernel_class(event.name, device)
        if cls is None:
            continue
        if not on_device and cls == "elementwise_copies" and _in_optimizer(event):
            cls = "optimizer"  # a for-each update on a CPU runs per-tensor kernels under its _foreach_ call
        seconds = (event.time_range.elapsed_us() if on_device else event.self_cpu_time_total) / 1e6
        by_class[cls] += seconds
        counts[cls] += 1
        intervals.append((event.time_range.start / 1e6, event.time_range.end / 1e6))
    busy_s = _union_s(intervals) if device == "cuda" else sum(by_class.values())
    return {"wall_s": wall_s, "seconds": {**by_class, HOST: max(0.0, wall_s - busy_s)}, "kernel_counts": counts,
            "num_events": len(events)}


def profile_step(step, device: torch.device, trace_path: str = "") -> dict:
    """Run `step()` (one whole optimizer step, already warm) under torch.profiler and summarize it;
    with `trace_path`, also write the Chrome trace there, gzipped."""
    import time

    from torch.profiler import ProfilerActivity, profile, record_function

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=activities) as prof:
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        t0 = time.perf_counter()
        with record_function("step"):
            step()
            if device.type == "cuda":
                torch.cuda.synchronize(device)
        wall_s = time.perf_counter() - t0
    summary = summarize(prof.events(), wall_s, device.type)
    if trace_path:
        raw = Path(trace_path).with_suffix("")
        prof.export_chrome_trace(str(raw))
        with open(raw, "rb") as src, gzip.open(trace_path, "wb") as dst:
            shutil.copyfileobj(src, dst)
        raw.unlink()
        summary["trace"] = Path(trace_path).name
    return summary


def table_lines(summaries: dict) -> list[str]:
    """One column per profiled case, one row per class, in milliseconds, and the wall time."""
    names = list(summaries)
    lines = [f"{'ms per step':<20}" + "".join(f"{n:>18}" for n in names)]
    for cls in (*CLASSES, HOST):
        lines.append(f"{cls:<20}" + "".join(f"{summaries[n]['seconds'][cls] * 1e3:>18.2f}" for n in names))
    lines.append(f"{'wall':<20}" + "".join(f"{summaries[n]['wall_s'] * 1e3:>18.2f}" for n in names))
    return lines
