"""The printed summary of a measured profile: medians with their spread, units stated."""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from autoplan.specs import HardwareProfile
from autoplan.specs.host_process import CPU_WAIT_SHARE_LIMIT
from profiler.build import (
    ATTENTION_KEYS, COLLECTIVE_KEYS, MATMUL_KEYS, MEMORY_OP_KEYS, medians, samples_path,
)
from profiler.device_state import state_summary
from profiler.sweeps import UNITS


def format_bytes(num_bytes: float) -> str:
    """Base-2 size: 1 KiB = 1024 B."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if num_bytes >= scale:
            value = num_bytes / scale
            return f"{value:.0f} {unit}" if value == int(value) else f"{value:.1f} {unit}"
    return f"{num_bytes:.0f} B"


def tflops(flops_per_s: float) -> str:
    return f"{flops_per_s / 1e12:.3g}"


def gbps(bytes_per_s: float) -> str:
    """Base-10 bandwidth: 1 GB/s = 1e9 B/s."""
    return f"{bytes_per_s / 1e9:.3g}"


def _spread(row, fmt) -> str:
    return f"{fmt(row['median'])} [{fmt(row['p10'])}, {fmt(row['p90'])}]"


def _best_rows(table: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    """The row with the highest median for each value of `by`."""
    return table.loc[table.groupby(by)["median"].idxmax()]


def _matmul_lines(frame) -> list[str]:
    table = medians(frame, "matmul", MATMUL_KEYS, "flops_per_s")
    lines = ["matmul (TFLOP/s, 2mnk FLOPs): best shape per dtype, median [p10, p90]"]
    for _, r in _best_rows(table, ["dtype"]).iterrows():
        worst = table[table["dtype"] == r["dtype"]]["median"].min()
        num_shapes = int((table["dtype"] == r["dtype"]).sum())
        lines.append(f"  {r['dtype']:<5} {_spread(r, tflops):<28} at {r['m']:.0f}x{r['n']:.0f}x{r['k']:<8.0f}"
                     f" ({num_shapes} shapes, slowest {tflops(worst)})")
    return lines


def _attention_lines(frame) -> list[str]:
    table = medians(frame, "attention", ATTENTION_KEYS, "flops_per_s")
    lines = ["attention (causal SDPA, TFLOP/s): best shape per dtype and pass, median [p10, p90]"]
    for _, r in _best_rows(table, ["dtype", "pass"]).iterrows():
        lines.append(f"  {r['dtype']:<5} {r['pass']:<4} {_spread(r, tflops):<28} at b={r['batch']:.0f} "
                     f"s={r['seq_len']:.0f} heads={r['num_heads']:.0f} head_dim={r['head_dim']:.0f}")
    return lines


def _memory_lines(frame) -> list[str]:
    table = medians(frame, "memory_op", MEMORY_OP_KEYS, "bytes_per_s")
    largest = table["num_bytes"].max()
    lines = [f"memory-bound ops (GB/s read + written) at {format_bytes(largest)} per operand, median [p10, p90]"]
    for _, r in table[table["num_bytes"] == largest].iterrows():
        lines.append(f"  {r['op']:<11} {_spread(r, gbps)}")
    return lines


def _collective_lines(frame) -> list[str]:
    table = medians(frame, "collective", COLLECTIVE_KEYS, "bus_bandwidth_bytes_per_s")
    if table.empty:
        return ["collectives: none (one process)"]
    sizes = sorted(table["message_bytes"].unique())
    header = f"  {'op':<15}{'scope':<11}{'ranks':>5} |" + "".join(f"{format_bytes(s):>10}" for s in sizes)
    lines = ["collectives: bus bandwidth (GB/s, nccl-tests factors), median by message size", header]
    for (op, scope, group_size), part in table.groupby(["op", "scope", "group_size"], sort=False):
        by_size = dict(zip(part["message_bytes"], part["median"]))
        cells = "".join(f"{gbps(by_size[s]) if s in by_size else '-':>10}" for s in sizes)
        lines.append(f"  {op:<15}{scope:<11}{int(group_size):>5} |{cells}")
    return lines


def _cpu_lines(profile: HardwareProfile) -> list[str]:
    """The CPU runtime term with its source, and how long the sweeps waited for a CPU others held."""
    share = profile.environment.get("cpu_wait_share")
    contention = ("not measured" if share is None else
                  f"{share:.0%} of the sweeps' wall time" + (f" (over {CPU_WAIT_SHARE_LIMIT:.0%}: the CPU was shared, "
                                                            "timings read slow; profile again on a quiet machine)"
                                                            if share > CPU_WAIT_SHARE_LIMIT else ""))
    return [f"CPU runtime per process {format_bytes(profile.runtime_memory_bytes)} "
            f"({profile.sources.get('runtime_memory_bytes', 'source not stated')})",
            f"waited for a CPU held by other processes: {contention}"]


def format_report(profile: HardwareProfile, frame: pd.DataFrame, out: Path) -> str:
    env = profile.environment
    peaks = ", ".join(f"{dtype} {tflops(v)}" for dtype, v in sorted(profile.peak_flops_per_s.items()))
    lines = [
        f"wrote {out} and {samples_path(out).name} ({len(frame)} samples)",
        f"profile {profile.name!r}: {env.get('world_size')} {profile.device_kind} process(es) on "
        f"{profile.num_nodes} node(s), {profile.device_name}{' (quick)' if env.get('quick') else ''}",
        f"units: {UNITS}",
        f"capacity per device {format_bytes(profile.memory_capacity_bytes)}; memory bandwidth "
        f"{gbps(profile.memory_bandwidth_bytes_per_s)} GB/s",
        *(_cpu_lines(profile) if profile.device_kind == "cpu" else []),
        f"peak TFLOP/s: {peaks} ({profile.sources.get('peak_flops_per_s', '').split(':')[0]})",
        f"links: intra-node {gbps(profile.intra_node_bandwidth_bytes_per_s)} GB/s, "
        f"{profile.intra_node_latency_s * 1e6:.3g} us; inter-node {gbps(profile.inter_node_bandwidth_bytes_per_s)} "
        f"GB/s, {profile.inter_node_latency_s * 1e6:.3g} us",
        "",
        *_matmul_lines(frame), "", *_attention_lines(frame), "", *_memory_lines(frame), "",
        *_collective_lines(frame),
    ]
    sweep, states = env.get("sweep") or {}, env.get("device_state") or {}
    if sweep:
        drift = sweep.get("matmul_drift")
        lines += ["", f"sweep: {sweep.get('num_passes')} round-robin passes after a {sweep.get('soak_s', 0):g} s soak; "
                      "matmul throughput last pass vs first: "
                      + (f"{100 * drift:+.1f}% (median over shapes)" if drift is not None else "n/a")]
    for host, state in sorted(states.items()):
        lines.append(f"device state on {host}: {state_summary(state.get('before', {}), state.get('after', {}))}")
    if env.get("skipped_shapes"):
        lines += ["", f"skipped (too big for the device's memory): {len(env['skipped_shapes'])} shapes"]
    return "\n".join(lines)
