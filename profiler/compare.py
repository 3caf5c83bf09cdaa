"""Side by side: two hardware profiles at the figures a planner cares about, with ratios.

Matmul and attention figures are read at a few transformer shapes; a profile without a sample at
that exact shape shows its nearest measured shape (in log-shape distance), marked with `*`.
Collective figures are interpolated in log(message size) inside the measured range and left
blank outside it: a bandwidth is never extrapolated here.
"""
from __future__ import annotations

import bisect
import math

from autoplan.specs import HardwareProfile
from profiler.report import format_bytes
from profiler.sweeps import UNITS, GiB, MiB

MATMUL_SHAPES = (
    ((4096, 4096, 4096), "4k tokens x h=4096 projection"),
    ((4096, 8192, 1024), "4k tokens, h=8192 out-proj at TP=8"),
    ((16384, 16384, 4096), "16k tokens, h=4096 MLP up (f=16k)"),
)
ATTENTION_SHAPE = (1, 4096, 32, 128)
"""(batch, seq_len, num_heads, head_dim) of the attention rows."""
ALL_REDUCE_SIZES = (1 * MiB, 64 * MiB, 1 * GiB)
COMPARE_DTYPE = "bf16"


def _log_distance(a: tuple, b: tuple) -> float:
    return sum(math.log(x / y) ** 2 for x, y in zip(a, b))


def _nearest(samples, key, query: tuple):
    """(sample, exact) of the sample whose `key` is nearest to `query` in log space; (None, False)."""
    if not samples:
        return None, False
    best = min(samples, key=lambda s: _log_distance(key(s), query))
    return best, key(best) == query


def matmul_at(profile: HardwareProfile, shape: tuple, dtype: str = COMPARE_DTYPE):
    """(FLOP/s, exact) at the matmul shape nearest to `shape`."""
    sample, exact = _nearest([s for s in profile.matmul if s.dtype == dtype], lambda s: (s.m, s.n, s.k), shape)
    return (sample.flops_per_s if sample else None), exact


def attention_at(profile: HardwareProfile, shape: tuple, pass_: str, dtype: str = COMPARE_DTYPE):
    candidates = [s for s in profile.attention if s.dtype == dtype and s.pass_ == pass_]
    sample, exact = _nearest(candidates, lambda s: (s.batch, s.seq_len, s.num_heads, s.head_dim), shape)
    return (sample.flops_per_s if sample else None), exact


def all_reduce_bus_bandwidth(profile: HardwareProfile, scope: str, message_bytes: int) -> float | None:
    """Bus bandwidth of the largest measured all-reduce group of `scope`, log-interpolated in size."""
    rows = [c for c in profile.collectives if c.op == "all_reduce" and c.scope == scope]
    if not rows:
        return None
    group_size = max(c.group_size for c in rows)
    points = sorted((c.message_bytes, c.bus_bandwidth_bytes_per_s) for c in rows if c.group_size == group_size)
    sizes = [p[0] for p in points]
    if not sizes[0] <= message_bytes <= sizes[-1]:
        return None
    i = bisect.bisect_left(sizes, message_bytes)
    if sizes[i] == message_bytes:
        return points[i][1]
    (x0, y0), (x1, y1) = points[i - 1], points[i]
    w = math.log(message_bytes / x0) / math.log(x1 / x0)
    return y0 + w * (y1 - y0)


def comparison_rows(a: HardwareProfile, b: HardwareProfile) -> list[tuple[str, tuple, tuple]]:
    """(label, (value_a, exact_a), (value_b, exact_b)) per row; values in display units."""
    rows = []
    for shape, label in MATMUL_SHAPES:
        values = [matmul_at(p, shape) for p in (a, b)]
        rows.append((f"matmul {COMPARE_DTYPE} TFLOP/s, {label}", *[(_scale(v, 1e12), e) for v, e in values]))
    for pass_ in ("fwd", "bwd"):
        values = [attention_at(p, ATTENTION_SHAPE, pass_) for p in (a, b)]
        rows.append((f"attention {pass_} TFLOP/s, b=1 s=4096 heads=32 d=128",
                     *[(_scale(v, 1e12), e) for v, e in values]))
    rows.append(("memory bandwidth GB/s", *[(p.memory_bandwidth_bytes_per_s / 1e9, True) for p in (a, b)]))
    for scope in ("intra_node", "inter_node"):
        for size in ALL_REDUCE_SIZES:
            rows.append((f"all_reduce busbw GB/s, {scope.replace('_', '-')}, {format_bytes(size)}",
                         *[(_scale(all_reduce_bus_bandwidth(p, scope, size), 1e9), True) for p in (a, b)]))
    rows.append(("memory capacity GiB", *[(p.memory_capacity_bytes / GiB, True) for p in (a, b)]))
    rows.append((f"peak {COMPARE_DTYPE} TFLOP/s", *[(_scale(p.peak_flops_per_s.get(COMPARE_DTYPE), 1e12), True)
                                                  for p in (a, b)]))
    return rows


def _scale(value: float | None, unit: float) -> float | None:
    return None if value is None else value / unit


def _cell(value: float | None, exact: bool) -> str:
    if value is None:
        return "-"
    return f"{value:.4g}" + ("" if exact else "*")


def format_comparison(a: HardwareProfile, b: HardwareProfile, label_a: str, label_b: str) -> str:
    rows = comparison_rows(a, b)
    width = max(len(r[0]) for r in rows) + 2
    col_a, col_b = max(12, len(label_a) + 2), max(12, len(label_b) + 2)
    lines = [f"{'':<{width}}{label_a:>{col_a}}{label_b:>{col_b}}{'b/a':>11}"]
    for label, (va, ea), (vb, eb) in rows:
        ratio = f"{vb / va:.3g}" if va and vb is not None else "-"
        lines.append(f"{label:<{width}}{_cell(va, ea):>{col_a}}{_cell(vb, eb):>{col_b}}{ratio:>11}")
    lines += [
        f"a = {a.name} ({a.device_name}, {'measured' if a.measured else 'built-in'}); "
        f"b = {b.name} ({b.device_name}, {'measured' if b.measured else 'built-in'})",
        "* nearest measured shape (no sample at this shape); - not measured in that range",
        f"units: {UNITS}",
    ]
    return "\n".join(lines)
