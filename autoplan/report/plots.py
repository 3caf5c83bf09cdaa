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
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return str(path)


def predicted_vs_measured(path, measured_s, predicted: dict, band: float = 0.10, title: str = "") -> str:
    """Log-log scatter of predicted vs measured step time, one series per label in `predicted`
    (e.g. {"analytical (MAPE 27%)": [...], ...}), with the y = x line and a +/-band."""
    measured_s = np.asarray(measured_s, float)
    fig, ax = plt.subplots(figsize=(6.4, 5.6))
    lo, hi = measured_s.min() / 1.6, measured_s.max() * 1.6
    for i, (name, values) in enumerate(predicted.items()):
        values = np.asarray(values, float)
        ax.scatter(measured_s, values, s=18, alpha=0.75, color=_PALETTE[i], label=name)
        lo, hi = min(lo, values.min() / 1.6), max(hi, values.max() * 1.6)
    line = np.geomspace(lo, hi, 50)
    ax.plot(line, line, color="black", lw=1, label="predicted = measured")
    ax.fill_between(line, line * (1 - band), line * (1 + band), color="grey", alpha=0.2,
                    label=f"within ±{band:.0%}")
    ax.set(xscale="log", yscale="log", xlim=(lo, hi), ylim=(lo, hi), xlabel="measured step time (s)",
           ylabel="predicted step time (s)", title=title or "Predicted vs measured step time")
    _decimal_log_axis(ax.xaxis)
    _decimal_log_axis(ax.yaxis)
    ax.legend(loc="upper left", fontsize=8)
    ax.grid(True, which="both", alpha=0.3)
    return _save(fig, path)


def error_by_group(path, groups: list[str], errors: dict, title: str = "") -> str:
    """Horizontal bars of the mean absolute percentage error per group, one bar per model."""
    fig, ax = plt.subplots(figsize=(8.5, 0.32 * len(groups) * max(len(errors), 1) + 1.6))
    y = np.arange(len(groups))
    height = 0.8 / max(len(errors), 1)
    for i, (name, values) in enumerate(errors.items()):
        ax.barh(y + i * height, np.asarray(values) * 100, height, color=_PALETTE[i], label=name)
    ax.set_yticks(y + height * (len(errors) - 1) / 2, [_short(g) for g in groups], fontsize=7)
    ax.invert_yaxis()
    ax.set(xlabel="mean absolute error of throughput (%)", title=title or "Error per source and model")
    ax.legend(fontsize=8)
    ax.grid(True, axis="x", alpha=0.3)
    return _save(fig, path)


def _short(label: str, width: int = 60) -> str:
    return label if len(label) <= width else label[: width - 1] + "…"


def _stacked_bars(ax, names: list[str], breakdowns: list[dict], scale: float) -> None:
    terms = []
    for b in breakdowns:
        terms += [t for t in b if t not in terms]
    bottom = np.zeros(len(names))
    for i, term in enumerate(terms):
        values = np.array([b.get(term, 0.0) for b in breakdowns], float) / scale
        if not values.any():
            continue
        ax.bar(names, values, bottom=bottom, color=plt.get_cmap("tab20").colors[i % 20], label=term)
        bottom += values
    ax.legend(fontsize=7, ncol=2)
    ax.tick_params(axis="x", labelrotation=30, labelsize=7)


def breakdown_bars(path, names: list[str], time_breakdowns: list[dict], memory_breakdowns: list[dict],
                   memory_capacity_bytes: float | None = None, title: str = "") -> str:
    """Stacked time (s) and memory (GiB) breakdowns side by side, one bar per plan."""
    fig, (ax_t, ax_m) = plt.subplots(1, 2, figsize=(12, 5))
    _stacked_bars(ax_t, names, time_breakdowns, 1.0)
    ax_t.set(ylabel="step time (s)", title="Time breakdown (exposed time per term)")
    _stacked_bars(ax_m, names, memory_breakdowns, GIB)
    if memory_capacity_bytes:
        ax_m.axhline(memory_capacity_bytes / GIB, color="red", ls="--", lw=1)
        ax_m.text(0, memory_capacity_bytes / GIB, " GPU memory", color="red", va="bottom", fontsize=7)
    ax_m.set(ylabel="peak memory per GPU (GiB)", title="Memory breakdown (worst stage)")
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
                chosen: dict | None = None, title: str = "") -> str:
    """Scatter of every scored plan (tokens/s vs peak memory), plans that do not fit in grey, with
    the Pareto front of the fitting ones and the chosen plan."""
    fig, ax = plt.subplots(figsize=(7, 5))
    for fits, color, label in ((True, _PALETTE[0], "plans that fit"), (False, "grey", "plans that do not fit")):
        sel = [p for p in points if p.get("fits", True) == fits]
        if sel:
            ax.scatter([p["peak_memory_bytes"] / GIB for p in sel], [p["tokens_per_s"] for p in sel], s=12,
                       alpha=0.45, color=color, label=f"{len(sel)} {label}")
    front = pareto_front(points)
    if front:
        ax.step([p["peak_memory_bytes"] / GIB for p in front], [p["tokens_per_s"] for p in front],
                where="post", color=_PALETTE[1], lw=2, label="Pareto front")
    if chosen:
        ax.scatter([chosen["peak_memory_bytes"] / GIB], [chosen["tokens_per_s"]], s=120, marker="*",
                   color=_PALETTE[3], zorder=5, label="chosen plan")
    if memory_capacity_bytes:
        ax.axvline(memory_capacity_bytes / GIB, color="red", ls="--", lw=1, label="GPU memory")
    ax.set(xlabel="peak memory per GPU (GiB)", ylabel="tokens/s (whole job)",
           title=title or "Throughput vs memory of the scored plans")
    ax.legend(fontsize=8)
    ax.grid(True, alpha=0.3)
    return _save(fig, path)


def scaling_curve(path, num_gpus: list[int], tokens_per_s: list[float], mfu: list[float], title: str = "") -> str:
    """Tokens/s (left axis, log) and MFU (right axis) of the best plan at each GPU count."""
    fig, ax = plt.subplots(figsize=(7, 4.6))
    ax.plot(num_gpus, tokens_per_s, "o-", color=_PALETTE[0], label="tokens/s")
    ideal = np.asarray(tokens_per_s[0]) * np.asarray(num_gpus) / num_gpus[0]
    ax.plot(num_gpus, ideal, ":", color=_PALETTE[0], alpha=0.6, label="linear scaling")
    ax.set(xscale="log", yscale="log", xlabel="GPUs", ylabel="tokens/s (whole job)")
    _decimal_log_axis(ax.xaxis, num_gpus)
    _decimal_log_axis(ax.yaxis)
    ax.grid(True, which="both", alpha=0.3)
    twin = ax.twinx()
    twin.plot(num_gpus, np.asarray(mfu) * 100, "s--", color=_PALETTE[1], label="MFU")
    twin.set(ylabel="MFU (%)", ylim=(0, max(60, float(np.max(mfu)) * 110)))
    lines = ax.get_legend_handles_labels()[0] + twin.get_legend_handles_labels()[0]
    ax.legend(lines, [ln.get_label() for ln in lines], fontsize=8, loc="upper left")
    ax.set_title(title or "Scaling of the best plan")
    return _save(fig, path)
