"""The state a device measures in: clocks, power, throttling, temperature, taken around the sweep.

A GEMM's throughput follows the SM clock, and the clock follows power and temperature: a sweep
that runs long enough to heat the GPU measures its late shapes slower (the shipped H100 quick and
full profiles differ 10-15% on the same shapes). So the environment stamp records the state before
and after the measurements, and the throttle reasons active then, so a reader can tell.

GPU: `nvidia-smi --query-gpu=... --format=csv` (one row per GPU), else NVML through pynvml when it
is installed. CPU: /proc/cpuinfo MHz, the cpufreq governor and current frequency, the thermal zones
of /sys/class/thermal and the load average. Whatever a machine does not expose is left out; this
never fails a profile.
"""
from __future__ import annotations

import datetime
import glob
import os
import statistics
import subprocess

GPU_FIELDS = ("index", "name", "clocks.sm", "clocks.mem", "clocks.max.sm", "power.limit", "power.draw",
              "clocks_throttle_reasons.active", "temperature.gpu")
"""nvidia-smi --query-gpu fields (nvidia-smi --help-query-gpu). Newer drivers name the throttle
reasons clocks_event_reasons.active; the query is retried with that name if the old one is refused."""
_KEYS = ("index", "name", "sm_clock_mhz", "memory_clock_mhz", "max_sm_clock_mhz", "power_limit_w", "power_draw_w",
         "throttle_reasons_mask", "temperature_c")

THROTTLE_REASONS = {
    0x1: "gpu_idle", 0x2: "applications_clocks_setting", 0x4: "sw_power_cap", 0x8: "hw_slowdown",
    0x10: "sync_boost", 0x20: "sw_thermal_slowdown", 0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown", 0x100: "display_clock_setting",
}
"""Bits of the throttle-reason mask (NVML nvml.h, nvmlClocksThrottleReason* / nvmlClocksEventReason*)."""


def throttle_reasons(mask: int) -> list[str]:
    """Names of the bits set in an NVML throttle-reason mask (unknown bits as hex)."""
    names = [name for bit, name in THROTTLE_REASONS.items() if mask & bit]
    unknown = mask & ~sum(THROTTLE_REASONS)
    return names + ([hex(unknown)] if unknown else [])


def _number(text: str):
    text = text.strip()
    try:
        return int(text, 16) if text.lower().startswith("0x") else (int(text) if text.isdigit() else float(text))
    except ValueError:
        return None     # "[N/A]", "[Not Supported]"


def parse_nvidia_smi_csv(text: str) -> list[dict]:
    """Rows of `nvidia-smi --query-gpu=GPU_FIELDS --format=csv,noheader,nounits`, one dict per GPU."""
    gpus = []
    for line in text.strip().splitlines():
        cells = [c.strip() for c in line.split(",")]
        if len(cells) != len(_KEYS):
            continue
        gpu = {key: (cell if key == "name" else _number(cell)) for key, cell in zip(_KEYS, cells)}
        if isinstance(gpu["throttle_reasons_mask"], int):
            gpu["throttle_reasons"] = throttle_reasons(gpu["throttle_reasons_mask"])
        gpus.append({k: v for k, v in gpu.items() if v is not None})
    return gpus


def _nvidia_smi() -> list[dict] | None:
    # A driver that refuses the old throttle-reason name gets the new one.
    for fields in (GPU_FIELDS, tuple(f.replace("clocks_throttle_reasons", "clocks_event_reasons") for f in GPU_FIELDS)):
        try:
            done = subprocess.run(["nvidia-smi", f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits"],
                                  capture_output=True, text=True, timeout=15, check=False)
        except (OSError, subprocess.SubprocessError):
            return None
        if done.returncode == 0:
            return parse_nvidia_smi_csv(done.stdout) or None
    return None


def _nvml() -> list[dict] | None:
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
        gpus = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(index)
            mask = pynvml.nvmlDeviceGetCurrentClocksThrottleReasons(h)
            name = pynvml.nvmlDeviceGetName(h)
            gpus.append({
                "index": index, "name": name.decode() if isinstance(name, bytes) else name,
                "sm_clock_mhz": pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM),
                "memory_clock_mhz": pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_MEM),
                "max_sm_clock_mhz": pynvml.nvmlDeviceGetMaxClockInfo(h, pynvml.NVML_CLOCK_SM),
                "power_limit_w": pynvml.nvmlDeviceGetEnforcedPowerLimit(h) / 1000,   # milliwatts
                "power_draw_w": pynvml.nvmlDeviceGetPowerUsage(h) / 1000,
                "throttle_reasons_mask": mask, "throttle_reasons": throttle_reasons(mask),
                "temperature_c": pynvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU)})
        pynvml.nvmlShutdown()
        return gpus
    except Exception:  # noqa: BLE001 -- any NVML failure means "not available here", never a failed profile
        return None


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            return f.read().strip()
    except OSError:
        return None


def cpu_state(root: str = "/") -> dict:
    """Clock, governor, temperatures and load of this host's CPUs (what it exposes of them)."""
    state: dict = {}
    cpuinfo = _read(os.path.join(root, "proc/cpuinfo")) or ""
    mhz = [float(line.split(":", 1)[1]) for line in cpuinfo.splitlines() if line.startswith("cpu MHz")]
    if mhz:
        state["cpu_mhz"] = {"min": min(mhz), "median": statistics.median(mhz), "max": max(mhz)}
    cpufreq = sorted(glob.glob(os.path.join(root, "sys/devices/system/cpu/cpu[0-9]*/cpufreq")))
    governors = {g for g in (_read(os.path.join(d, "scaling_governor")) for d in cpufreq) if g}
    if governors:
        state["governors"] = sorted(governors)
    current = [int(f) / 1000 for f in (_read(os.path.join(d, "scaling_cur_freq")) for d in cpufreq) if f and f.isdigit()]
    if current:
        state["scaling_cur_mhz"] = {"min": min(current), "median": statistics.median(current), "max": max(current)}
    zones = {}
    for zone in sorted(glob.glob(os.path.join(root, "sys/class/thermal/thermal_zone*"))):
        temp = _read(os.path.join(zone, "temp"))
        if temp and temp.lstrip("-").isdigit():
            zones[f"{os.path.basename(zone)}:{_read(os.path.join(zone, 'type')) or '?'}"] = int(temp) / 1000
    if zones:
        state["temperatures_c"] = zones
    load = (_read(os.path.join(root, "proc/loadavg")) or "").split()
    if len(load) >= 3:
        state["load_average"] = [float(x) for x in load[:3]]
    return state


def device_state(device_type: str) -> dict:
    """The state now: {"utc", "source", ...}; GPUs under "gpus", the host CPU's always."""
    state = {"utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
    if device_type == "cuda":
        gpus, source = _nvidia_smi(), "nvidia-smi"
        if gpus is None:
            gpus, source = _nvml(), "nvml"
        state["source"] = source if gpus else "unavailable (no nvidia-smi, no pynvml)"
        if gpus:
            state["gpus"] = gpus
    else:
        state["source"] = "procfs/sysfs"
    state["cpu"] = cpu_state()
    return state


def state_summary(before: dict, after: dict) -> str:
    """One line for the report: the GPUs' SM clock, power and throttling before -> after, or the CPU's."""
    def gpu_part(state: dict, key: str) -> str:
        values = [g.get(key) for g in state.get("gpus", []) if g.get(key) is not None]
        return "/".join(f"{v:g}" for v in values) if values else "?"

    if before.get("gpus") or after.get("gpus"):
        reasons = sorted({r for g in after.get("gpus", []) for r in g.get("throttle_reasons", [])} - {"gpu_idle"})
        return (f"SM clock {gpu_part(before, 'sm_clock_mhz')} -> {gpu_part(after, 'sm_clock_mhz')} MHz, "
                f"{gpu_part(before, 'temperature_c')} -> {gpu_part(after, 'temperature_c')} C, power limit "
                f"{gpu_part(after, 'power_limit_w')} W, throttled after by {', '.join(reasons) or 'nothing'} "
                f"({after.get('source', '?')})")
    b, a = before.get("cpu", {}).get("cpu_mhz"), after.get("cpu", {}).get("cpu_mhz")
    if b and a:
        return f"CPU clock (median) {b['median']:.0f} -> {a['median']:.0f} MHz"
    return "device state not exposed here"
