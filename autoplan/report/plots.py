"""The report's figures, one function per figure: data in, a PNG path out (matplotlib, Agg).

Every function takes plain numbers (no specs), so notebooks can call them on any data and the
report builder owns the gathering. Bandwidths and rates are base-10 (tokens/s, GB/s), memory
base-2 (GiB), and each axis says so.
"""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")  # files only, no display: reports are built on headless machines
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.ticker import FixedLocator, FormatStrFormatter, LogLocator, NullFormatter  # noqa: E402

GIB = 2 ** 30
_PALETTE = plt.get_cmap("tab10").colors


def _decimal_log_axis(axis, ticks=None) -> None:
    """Plain decimal labels on a log axis, at 1-2-5 steps or at the given ticks (matplotlib's
    default minor labels collide with the major ones)."""
    if ticks is None:
        axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    else:
        axis.set_major_locator(FixedLocator(ticks))
    axis.set_major_formatter(FormatStrFormatter("%g"))
    axis.set_minor_formatter(NullFormatter())


def _save(fig, path) -> str:
    fig.tight_layout()
    fig.savefig(path, dpi=110, bbox_inches="tight")  # "tight": legends placed outside the axes stay in
    plt.close(fig)
    return str(path)


def predicted_vs_measured(path, measured_s, predicted: dict, band: float = 0.10, title: str = "",
                          mismatched=None) -> str:
    """Log-log scatter of predicted vs measured step time, one series per label in `predicted`
    (e.g. {"analytical (MAPE 27%)": [...], ...}), with the y = x line and a +/-band. Rows flagged in
    `mismatched` (run on other hardware than predicted for) are drawn as crosses and say so."""
    measured_s = np.asarray(measured_s, float)
    flags = np.zeros(len(measured_s), bool) if mismatched is None else np.asarray(mismatched, bool)
    fig, ax = plt.subplots(figsize=(6.4, 5.6))
    lo, hi = measured_s.min() / 1.6, measured_s.max() * 1.6
    for i, (name, values) in enumerate(predicted.items()):
        values = np.asarray(values, float)
        if (~flags).any():
            ax.scatter(measured_s[~flags], values[~flags], s=18, alpha=0.75, color=_PALETTE[i], label=name)
        if flags.any():
            ax.scatter(measured_s[flags], values[flags], s=40, marker="x", color=_PALETTE[i],
                       label=f"{name}: ran on other hardware than predicted for")
        lo, hi = min(lo, values.min() / 1.6), max(hi, values.max() * 1.6)
    line = np.geomspace(lo, hi, 50)
    ax.plot(line, line, color="black", lw=1, label="predicted = measured")
    ax.fill_between(line, line * (1 - band), line * (1 + band), color="grey", alpha=0.2,
                    label=f"within ±{band:.0%}")
    ax.set(xscale="log", yscale="log", xlim=(lo, hi), ylim=(lo, hi), xlabel="measured step time (s)",
           ylabel="predicted step time (s)", title=title or "Measured (x) vs predicted (y) step time")
    _decimal_log_axis(ax.xaxis)
    _decimal_log_axis(ax.yaxis)
    ax.legend(loc="upper left", fontsize=8)
    ax.grid(True, which="both", alpha=0.3)
    return _save(fig, path)


def error_by_group(path, groups: list[str], errors: dict, title: str = "", clip: float = 1.0) -> str:
    """Horizontal bars of the mean absolute percentage error per group, one bar per model. The axis
    stops at `clip` (100%) so one wild group (a run on other hardware) does not flatten the rest;
    a clipped bar is labelled with its value at the edge."""
    fig, ax = plt.subplots(figsize=(9, 0.34 * len(groups) * max(len(errors), 1) + 1.8))
    y = np.arange(len(groups))
    height = 0.8 / max(len(errors), 1)
    largest = max((max(v) for v in errors.values() if len(v)), default=0.0)
    limit = min(largest, clip) * 100 * 1.12 or 1.0
    for i, (name, values) in enumerate(errors.items()):
        values = np.asarray(values, float) * 100
        ax.barh(y + i * height, np.minimum(values, limit), height, color=_PALETTE[i], label=name)
        for j, v in enumerate(values):
            if v > limit:
                ax.text(limit, y[j] + i * height, f" {v:,.0f}% (clipped) ", ha="right", va="center", fontsize=7,
                        color="white", fontweight="bold")
    ax.set_yticks(y + height * (len(errors) - 1) / 2, [_short(g) for g in groups], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlim(0, limit)
    ax.set(xlabel="mean absolute error of predicted throughput vs measured (%)",
           title=title or "Measured vs predicted: throughput error per source and model")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax.grid(True, axis="x", alpha=0.3)
    return _save(fig, path)


def _short(label: str, width: int = 60) -> str:
    return label if len(label) <= width else label[: width - 1] + "…"


def _unit(largest: float, units: tuple) -> tuple[str, float]:
    """The unit (name, size) in which `largest` reads as a number >= 1, from `units` largest first."""
    for name, size in units:
        if largest >= size:
            return name, size
    return units[-1]


TIME_UNITS = (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6))
MEMORY_UNITS = (("GiB", GIB), ("MiB", 2 ** 20), ("KiB", 2 ** 10))


def _stacked_barh(ax, names: list[str], breakdowns: list[dict], scale: float) -> None:
    """One horizontal stacked bar per plan (long plan labels read on the y axis), legend outside."""
    terms = []
    for b in breakdowns:
        terms += [t for t in b if t not in terms]
    left = np.zeros(len(names))
    y = np.arange(len(names))
    for i, term in enumerate(terms):
        values = np.array([b.get(term, 0.0) for b in breakdowns], float) / scale
        if not values.any():
            continue
        ax.barh(y, values, left=left, color=plt.get_cmap("tab20").colors[i % 20], label=term)
        left += values
    ax.set_yticks(y, names, fontsize=7)
    ax.invert_yaxis()
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax.grid(True, axis="x", alpha=0.3)


def breakdown_bars(path, names: list[str], time_breakdowns: list[dict], memory_breakdowns: list[dict],
                   memory_capacity_bytes: float | None = None, title: str = "") -> str:
    """Predicted time and memory breakdowns, one stacked bar per plan, each axis in the unit that
    reads at its scale (µs to s, KiB to GiB). The GPU-memory line is drawn when it is within 2.5x of
    the tallest bar; further out it would flatten the bars, so the title states it instead."""
    fig, (ax_t, ax_m) = plt.subplots(2, 1, figsize=(11, 1.2 + 0.9 * len(names) * 2))
    t_unit, t_scale = _unit(max(sum(b.values()) for b in time_breakdowns), TIME_UNITS)
    _stacked_barh(ax_t, names, time_breakdowns, t_scale)
    ax_t.set(xlabel=f"predicted step time ({t_unit})", title="Predicted time per step (exposed time of each term)")
    peak = max(sum(b.values()) for b in memory_breakdowns)
    m_unit, m_scale = _unit(max(peak, memory_capacity_bytes or 0) if memory_capacity_bytes and
                            memory_capacity_bytes <= 2.5 * peak else peak, MEMORY_UNITS)
    _stacked_barh(ax_m, names, memory_breakdowns, m_scale)
    m_title = "Predicted peak memory per GPU (worst pipeline stage)"
    if memory_capacity_bytes and memory_capacity_bytes <= 2.5 * peak:
        ax_m.axvline(memory_capacity_bytes / m_scale, color="red", ls="--", lw=1)
        ax_m.text(memory_capacity_bytes / m_scale, -0.5, " GPU memory", color="red", va="bottom", fontsize=7)
    elif memory_capacity_bytes:
        m_title += f"; GPU memory {memory_capacity_bytes / GIB:,.1f} GiB is off the axis"
    ax_m.set(xlabel=f"predicted peak memory per GPU ({m_unit})", title=m_title)
    if title:
        fig.suptitle(title)
    return _save(fig, path)


def pareto_front(points: list[dict]) -> list[dict]:
    """Points that fit in memory and that no other fitting point beats in both higher tokens_per_s
    and lower peak_memory_bytes, ordered by memory."""
    front, best = [], -np.inf
    fitting = [p for p in points if p.get("fits", True)]
    for p in sorted(fitting, key=lambda p: (p["peak_memory_bytes"], -p["tokens_per_s"])):
        if p["tokens_per_s"] > best:
            front.append(p)
            best = p["tokens_per_s"]
    return front


def pareto_plot(path, points: list[dict], memory_capacity_bytes: float | None = None,
                chosen: dict | None = None, title: str = "", clip: float = 1.25) -> str:
    """Scatter of every scored plan's prediction (tokens/s vs peak memory), plans that do not fit in
    grey, with the Pareto front of the fitting ones and the chosen plan. The memory axis stops at
    `clip` x the GPU memory: plans far beyond it cannot run and would squeeze the front into a sliver;
    how many were left off is said in the legend."""
    fig, ax = plt.subplots(figsize=(7.5, 5))
    limit = memory_capacity_bytes * clip / GIB if memory_capacity_bytes else None
    largest = max((p["peak_memory_bytes"] for p in points), default=0) / GIB
    if limit is not None and largest * 2.5 < memory_capacity_bytes / GIB:
        limit = None  # every plan far below the GPU memory: zoom on them, the legend states the capacity
    shown = [p for p in points if limit is None or p["peak_memory_bytes"] / GIB <= limit]
    hidden = len(points) - len(shown)
    for fits, color, label in ((True, _PALETTE[0], "plans that fit"), (False, "grey", "plans that do not fit")):
        sel = [p for p in shown if p.get("fits", True) == fits]
        if sel:
            ax.scatter([p["peak_memory_bytes"] / GIB for p in sel], [p["tokens_per_s"] for p in sel], s=12,
                       alpha=0.45, color=color, label=f"{len(sel):,} {label}")
    if hidden:
        ax.scatter([], [], color="none", label=f"{hidden:,} plans beyond {clip:g}x GPU memory, not shown")
    front = pareto_front(points)
    if front:
        ax.step([p["peak_memory_bytes"] / GIB for p in front], [p["tokens_per_s"] for p in front],
                where="post", color=_PALETTE[1], lw=2, label="Pareto front")
    if chosen:
        ax.scatter([chosen["peak_memory_bytes"] / GIB], [chosen["tokens_per_s"]], s=120, marker="*",
                   color=_PALETTE[3], zorder=5, label="chosen plan")
    if memory_capacity_bytes and (limit is not None or largest * 2.5 >= memory_capacity_bytes / GIB):
        ax.axvline(memory_capacity_bytes / GIB, color="red", ls="--", lw=1, label="GPU memory")
    elif memory_capacity_bytes:
        ax.scatter([], [], color="none", label=f"GPU memory {memory_capacity_bytes / GIB:,.1f} GiB (off the axis)")
    if limit is not None and shown:
        ax.set_xlim(0, max(limit, max(p["peak_memory_bytes"] for p in shown) / GIB * 1.05))
    ax.set(xlabel="predicted peak memory per GPU (GiB)", ylabel="predicted tokens/s (whole job)",
           title=title or "Predicted throughput vs memory of the scored plans")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax.grid(True, alpha=0.3)
    return _save(fig, path)


def scaling_curve(path, num_gpus: list[int], tokens_per_s: list[float], mfu: list[float], title: str = "") -> str:
    """Tokens/s (left axis, log) and MFU (right axis) of the best plan at each GPU count."""
    fig, ax = plt.subplots(figsize=(7, 4.6))
    ax.plot(num_gpus, tokens_per_s, "o-", color=_PALETTE[0], label="tokens/s")
    ideal = np.asarray(tokens_per_s[0]) * np.asarray(num_gpus) / num_gpus[0]
    ax.plot(num_gpus, ideal, ":", color=_PALETTE[0], alpha=0.6, label="linear scaling")
    ax.set(xscale="log", yscale="log", xlabel="GPUs", ylabel="predicted tokens/s (whole job)")
    _decimal_log_axis(ax.xaxis, num_gpus)
    _decimal_log_axis(ax.yaxis)
    ax.grid(True, which="both", alpha=0.3)
    twin = ax.twinx()
    twin.plot(num_gpus, np.asarray(mfu) * 100, "s--", color=_PALETTE[1], label="MFU")
    twin.set(ylabel="predicted MFU (%)", ylim=(0, max(60, float(np.max(mfu)) * 110)))
    lines = ax.get_legend_handles_labels()[0] + twin.get_legend_handles_labels()[0]
    ax.legend(lines, [ln.get_label() for ln in lines], fontsize=8, loc="upper left")
    ax.set_title(title or "Predicted scaling of the best plan")
    return _save(fig, path)
