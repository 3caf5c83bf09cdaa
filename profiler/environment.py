"""The environment stamp of a profile: what ran, where, with which versions."""
from __future__ import annotations

import datetime
import os
import platform
import socket
import subprocess
from pathlib import Path

import torch

from profiler.sweeps import UNITS

PROFILER_VERSION = "autoplan.profiler/2"
"""Version of the measurement method (grids, timing, conventions); bump when figures change meaning.
2: quick and full share one per-shape procedure, shapes sampled in round-robin passes after a soak
(GPU), device state (clocks, power, throttling, temperature) stamped before and after."""


def _run(command: list[str], cwd: str | None = None) -> str | None:
    try:
        done = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    if done.returncode != 0:
        return None
    return done.stdout.strip() or None


def git_revision() -> str | None:
    """The commit of the autoplan checkout this profiler runs from (None outside git)."""
    return _run(["git", "rev-parse", "HEAD"], cwd=str(Path(__file__).resolve().parent))


def cpu_model_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "cpu"


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return cpu_model_name()


def process_stamp(device: torch.device) -> dict:
    """What differs per process: host and device (gathered on rank 0)."""
    return {"hostname": socket.gethostname(), "device_name": device_name(device),
            "torch_threads": torch.get_num_threads()}


def environment_stamp(device: torch.device, backend: str, world_size: int, num_nodes: int,
                      quick: bool, per_process: list[dict]) -> dict:
    stamp = {
        "profiler_version": PROFILER_VERSION,
        "units": UNITS,
        "created_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "quick": quick,
        "world_size": world_size,
        "num_nodes": num_nodes,
        "hostnames": sorted({p["hostname"] for p in per_process}),
        "device_type": device.type,
        "device_names": sorted({p["device_name"] for p in per_process}),
        "torch_threads_per_process": per_process[0]["torch_threads"],
        "backend": backend,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "git_revision": git_revision(),
    }
    if device.type == "cuda":
        stamp["driver"] = _run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"])
        if stamp["driver"]:
            stamp["driver"] = stamp["driver"].splitlines()[0]
        stamp["nccl"] = ".".join(str(v) for v in torch.cuda.nccl.version())
        stamp["cudnn"] = torch.backends.cudnn.version()
        stamp["compute_capability"] = ".".join(str(v) for v in torch.cuda.get_device_capability(device))
    return stamp
