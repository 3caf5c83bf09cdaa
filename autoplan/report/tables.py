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


def percent(fraction) -> str:
    """0.4512 -> '45.1%'; n/a when missing."""
    if fraction is None or not math.isfinite(fraction):
        return "n/a"
    return f"{fraction:.1%}"


def yes_no(flag) -> str:
    return "yes" if flag else "no"


MEMORY_KINDS = {"cpu_rss_high_water": "RSS high-water",
                "xla_compiled_bytes_per_device": "XLA compiled, per device"}


def comparable_memory(m) -> tuple:
    """(predicted bytes, measured bytes, what both count) for one run, like with like, or
    (predicted, measured, why they cannot be compared) with None for a figure left out:

    - CUDA: the prediction's allocated peak (its breakdown without the CUDA context and the
      allocator's cached block, cost_model.stage_memory.DEVICE_TERMS) against max_memory_allocated;
    - CPU: the same allocated peak (the tensors) plus the `cpu_runtime` term (what the process holds
      beyond its tensors after the first step, measured by the profile) against the growth of the
      resident set over the process before the model was built (`cpu_rss_growth_bytes`). A plan
      predicted from a profile without that term is compared on its tensors alone and the row says
      so (the growth then reads above them). The RSS high water itself also holds the interpreter
      and its libraries, so a record without the growth is not compared;
    - XLA: the prediction's peak against the compiled program's bytes per device."""
    from cost_model.stage_memory import allocated_peak_bytes

    breakdown = m.prediction.get("memory_breakdown_bytes") or {}
    allocated = allocated_peak_bytes(breakdown) if breakdown else m.prediction.get("peak_memory_bytes", float("nan"))
    kind = m.extra.get("peak_memory_kind")
    if kind == "cpu_rss_high_water":
        growth = m.extra.get("cpu_rss_growth_bytes")
        if growth is None:
            return allocated, None, ("not compared: the RSS high water also holds the interpreter and libraries, "
                                     "and this record has no RSS growth over the process before the model")
        runtime = breakdown.get("cpu_runtime", 0.0)
        if not runtime:
            return allocated, growth, ("allocated tensors only vs RSS growth over the process before the model: the plan's "
                                       "profile has no measured CPU runtime term (profile the CPU again), so the "
                                       "growth also holds the modules and buffers the first step loads")
        return allocated + runtime, growth, (f"allocated tensors + CPU runtime {memory(runtime)} (measured by the profile) "
                                             "vs RSS growth over the process before the model")
    if kind in MEMORY_KINDS:
        return m.prediction.get("peak_memory_bytes", float("nan")), m.peak_memory_bytes, MEMORY_KINDS[kind]
    return allocated, m.peak_memory_bytes, "allocated peak vs max_memory_allocated"


def time_comparison(m, profile) -> tuple:
    """(measured seconds or None, what is compared or why not) for one run's step time: the median
    wall time of the timed steps, unless on a CPU the run's ranks (`cpu_wait_share`) or the
    profile's processes (environment `cpu_wait_share`) waited for a CPU other processes held more
    than CPU_WAIT_SHARE_LIMIT of the time: then the wall time measures the other processes too."""
    from autoplan.specs.host_process import time_not_comparable

    why = time_not_comparable(m.extra.get("cpu_wait_share"), profile.environment if profile else None)
    if why:
        return None, f"not compared: {why}"
    if m.extra.get("peak_memory_kind") == "cpu_rss_high_water" and m.extra.get("cpu_wait_share") is None:
        return m.median_step_time_s, "median wall step; CPU contention not recorded"
    return m.median_step_time_s, "median wall step"


def peak_flops(profile, dtype: str) -> tuple:
    """(FLOP/s, where it comes from) of the profile the plan was predicted with: the one peak both
    MFU columns divide by, so they are the same quantity."""
    source = profile.sources.get("peak_flops_per_s") or "not stated in the profile"
    return profile.peak(dtype), source


def measured_vs_predicted(paths) -> tuple[list, list]:
    """One row per successful run in the measurement files: the plan, where it ran, its predicted and
    measured step time, peak memory (like with like, `comparable_memory`) and MFU (both against the
    peak of the plan's profile, named with its source), the errors, and whether the two describe the
    same hardware and framework. Returns (rows with header first, one line per mismatch). The
    prediction is the one the plan carried when it was run (what the planner promised)."""
    from autoplan.inputs.clusters import cluster_for_plan_file
    from autoplan.rendering.render import plan_line
    from autoplan.specs import AutoplanError, PlanDocument, read_measurements
    from autoplan.specs.compat import measurement_mismatch
    from autoplan.specs.flops import mfu

    rows = [["run", "plan", "ran on", "step time predicted", "measured (median)", "error", "time compared",
             "peak memory predicted", "measured", "error", "memory compared", "MFU predicted", "measured",
             "MFU peak (source)", "same hardware?"]]
    mismatches = []
    for path in paths:
        for m in read_measurements(path)[0]:
            if m.status != "ok" or not m.step_times_s:
                continue
            doc = PlanDocument.from_dict(m.plan)
            try:
                profile = cluster_for_plan_file(doc.cluster, Path(path).parent)
                mismatch = measurement_mismatch(m, profile, doc.framework)
            except AutoplanError:
                profile = mismatch = None  # the plan's profile is gone: cannot tell
            if mismatch:
                mismatches.append(mismatch)
            pred_s = m.prediction.get("step_time_s", float("nan"))
            meas_s, time_compared = time_comparison(m, profile)
            pred_b, meas_b, compared = comparable_memory(m)
            if profile is not None:
                peak, source = peak_flops(profile, doc.training.dtype)
                measured_mfu = mfu(doc.model, doc.training.seq_len, m.tokens_per_s, doc.parallel.num_gpus, peak)
                mfus = [percent(m.prediction.get("mfu")), percent(measured_mfu), f"{peak / 1e12:,.3g} TFLOP/s ({source})"]
            else:
                mfus = [percent(m.prediction.get("mfu")), "n/a", "n/a: the plan's profile is not found"]
            ran_on = f"{m.num_gpus} x {m.environment.get('device_name') or m.environment.get('device', '?')} ({m.backend})"
            rows.append([m.plan_id, plan_line(doc.parallel.to_dict()), ran_on,
                         seconds(pred_s), f"{seconds(m.median_step_time_s)} of {len(m.step_times_s)}",
                         signed_error(pred_s, meas_s) if meas_s is not None else "n/a", time_compared,
                         memory(pred_b),
                         memory(meas_b) if meas_b is not None else f"{memory(m.peak_memory_bytes)} RSS",
                         signed_error(pred_b, meas_b) if meas_b is not None else "n/a", compared, *mfus,
                         "no: " + mismatch.split(" was ", 1)[-1] if mismatch else "yes"])
    return rows, mismatches
