"""What a CPU process measures about itself (Linux /proc): how much memory it holds, and how long it
waited for a CPU that other processes held. One definition that the profiler (the CPU runtime term
and the contention it stores in a profile) and the executor (the RSS growth and the contention a CPU
run records) both use, so the prediction and the measurement count the same thing. Standard library only.
"""
from __future__ import annotations

import resource
from pathlib import Path


def _proc_status_bytes(field: str) -> int | None:
    """A size line of /proc/self/status (Linux, in KiB there), in bytes; None where it cannot tell."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(f"{field}:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def cpu_peak_rss_bytes() -> int:
    """High-water resident set size of this process: VmHWM from /proc/self/status (Linux, can be
    reset by `reset_cpu_peak_rss`), else ru_maxrss (KiB on Linux, since the process started)."""
    peak = _proc_status_bytes("VmHWM")
    return peak if peak is not None else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def cpu_rss_baseline() -> tuple:
    """(resident set, its file-backed part) of this process now, for `cpu_rss_growth_bytes`."""
    return _proc_status_bytes("VmRSS") or 0, _proc_status_bytes("RssFile") or 0


def cpu_rss_growth_bytes(baseline: tuple) -> int:
    """How far the RSS high water rose over `baseline` (cpu_rss_baseline before the model was built),
    less the file-backed pages mapped in since (library code the first step runs, which stays
    resident): what the run's tensors and the C allocator's heap took at their peak, with the Python
    modules the first step imports (anonymous memory: code objects, not file pages). The file-backed
    part is read at the end, when it is largest, so the result errs low by what the heap gave back."""
    rss, file = baseline
    file_growth = max(0, (_proc_status_bytes("RssFile") or 0) - file)
    return max(0, cpu_peak_rss_bytes() - rss - file_growth)


def reset_cpu_peak_rss() -> None:
    """Start a new RSS high-water mark (Linux: writing 5 to /proc/self/clear_refs resets VmHWM),
    so the second plan run in a process does not report the first one's peak."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        pass


CPU_WAIT_SHARE_LIMIT = 0.10
"""A CPU step time (or a profile's timings) is compared with a prediction only when the timing
threads waited for a CPU less than this share of the timed wall time: a thread that waits w of the
time runs 1/(1-w) slower than alone (at 0.10: 11%), and a shared 2-core machine reaches w = 0.9
(measured: the tour's 1.1 s steps held 0.06 s of CPU and 1.0 s of run-queue wait at load 15)."""


def time_not_comparable(run_cpu_wait_share: float | None, profile_environment: dict | None) -> str:
    """Why a run's wall step time is not compared with a prediction, '' when it is: the run's ranks
    (its record's `cpu_wait_share`) or the processes that measured its profile (the profile's
    environment) waited for a CPU over CPU_WAIT_SHARE_LIMIT of the time, so the wall time measures
    other processes too. The one rule for every reader of measured step times (report, calibrate)."""
    for whose, share in (("the run's ranks", run_cpu_wait_share),
                         ("the profile's processes", (profile_environment or {}).get("cpu_wait_share"))):
        if share is not None and share > CPU_WAIT_SHARE_LIMIT:
            return (f"{whose} waited for a CPU other processes held {share:.0%} of the time "
                    f"(over {CPU_WAIT_SHARE_LIMIT:.0%}); run again on a quiet machine")
    return ""


def cpu_wait_s() -> float | None:
    """Seconds the calling thread has spent runnable but waiting on a run queue for a CPU since it
    started (Linux /proc/thread-self/schedstat, second field, in ns): time other processes held
    the CPU. None where the kernel does not tell."""
    try:
        return int(Path("/proc/thread-self/schedstat").read_text().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return None


def wait_share(waits_s: list, walls_s: list) -> float | None:
    """The share of the timed wall time spent waiting for a CPU; None where a wait is unknown."""
    if not walls_s or any(w is None for w in waits_s) or sum(walls_s) <= 0:
        return None
    return min(1.0, sum(waits_s) / sum(walls_s))
