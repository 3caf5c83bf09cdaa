"""The report's tables: numbers formatted for people, and predicted next to measured per run.

Cells are strings by the time they reach the HTML: a duration in the unit that reads at its scale
(µs, ms, s), memory in GiB or MiB, counts with thousands separators, yes/no for booleans, signed
percentages for errors. Memory is base 2 (GiB = 2^30 bytes), rates base 10.
"""
from __future__ import annotations

import math
from pathlib import Path

GIB, MIB = 2 ** 30, 2 ** 20


def seconds(value: float) -> str:
    """0.000812 -> '812 µs', 0.0243 -> '24.3 ms', 32.8 -> '32.8 s' (three significant digits)."""
    if value is None or not math.isfinite(value):
        return "n/a"
    for unit, size in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6)):
        if abs(value) >= size:
            return f"{value / size:.3g} {unit}"
    return f"{value / 1e-6:.2g} µs"


def memory(num_bytes: float) -> str:
    """Bytes as GiB from 1 GiB up, else MiB."""
    if num_bytes is None or not math.isfinite(num_bytes):
        return "n/a"
    return f"{num_bytes / GIB:,.2f} GiB" if abs(num_bytes) >= GIB else f"{num_bytes / MIB:,.1f} MiB"


def count(value: float) -> str:
    """A rate or count with thousands separators: 220651.3 -> '220,651'; small values keep 3 digits."""
    if value is None or not math.isfinite(value):
        return "n/a"
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"


def signed_error(predicted: float, measured: float) -> str:
    """(predicted - measured) / measured as '+12.3%' / '-4.0%'."""
    if not (measured and math.isfinite(measured) and math.isfinite(predicted)):
        return "n/a"
    return f"{(predicted - measured) / measured:+,.1%}"


def yes_no(flag) -> str:
    return "yes" if flag else "no"


MEMORY_KINDS = {"cpu_rss_high_water": "RSS high-water",
                "xla_compiled_bytes_per_device": "XLA compiled, per device"}


def measured_vs_predicted(paths) -> tuple[list, list]:
    """One row per successful run in the measurement files: the plan, where it ran, its predicted and
    measured step time and peak memory with the errors, and whether the two describe the same hardware
    and framework. Returns (rows with header first, one line per mismatch). The prediction is the one
    the plan carried when it was run (what the planner promised)."""
    from autoplan.clusters import cluster_for_plan_file
    from autoplan.render import plan_line
    from autoplan.specs import AutoplanError, PlanDocument, read_measurements
    from autoplan.specs.compat import measurement_mismatch

    rows = [["run", "plan", "ran on", "step time predicted", "measured (median)", "error",
             "peak memory predicted", "measured", "error", "same hardware?"]]
    mismatches = []
    for path in paths:
        for m in read_measurements(path)[0]:
            if m.status != "ok" or not m.step_times_s:
                continue
            doc = PlanDocument.from_dict(m.plan)
            try:
                mismatch = measurement_mismatch(m, cluster_for_plan_file(doc.cluster, Path(path).parent), doc.framework)
            except AutoplanError:
                mismatch = None  # the plan's profile is gone: cannot tell
            if mismatch:
                mismatches.append(mismatch)
            pred_s, pred_b = m.prediction.get("step_time_s", float("nan")), m.prediction.get("peak_memory_bytes", float("nan"))
            kind = MEMORY_KINDS.get(m.extra.get("peak_memory_kind"), "max allocated")
            ran_on = f"{m.num_gpus} x {m.environment.get('device_name') or m.environment.get('device', '?')} ({m.backend})"
            rows.append([m.plan_id, plan_line(doc.parallel.to_dict()), ran_on,
                         seconds(pred_s), f"{seconds(m.median_step_time_s)} of {len(m.step_times_s)}",
                         signed_error(pred_s, m.median_step_time_s), memory(pred_b),
                         f"{memory(m.peak_memory_bytes)} ({kind})", signed_error(pred_b, m.peak_memory_bytes),
                         "no: " + mismatch.split(" was ", 1)[-1] if mismatch else "yes"])
    return rows, mismatches
