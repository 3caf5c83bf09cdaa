"""What a run records: the environment stamp, model FLOPs and MFU, peak memory, the Measurement.

MFU uses the project's one convention (`autoplan.specs.flops`: 6 x the matmul parameters + the
attention matmuls, no recompute) against the dense datasheet peak of `autoplan.specs.gpus`, so a
measured MFU and a predicted one are the same quantity.
"""
from __future__ import annotations

import os
import platform
import socket
import subprocess
import sys
from pathlib import Path

from autoplan.specs import Measurement, PlanDocument
from autoplan.specs.flops import mfu
from autoplan.specs.host_process import (  # noqa: F401  (the executor's names for them)
    cpu_peak_rss_bytes, cpu_rss_baseline, cpu_rss_growth_bytes, cpu_wait_s, reset_cpu_peak_rss, wait_share,
)


def git_revision(root: Path = Path(__file__).resolve().parent.parent) -> str:
    """The checkout's short revision, "+dirty" where tracked files differ from it ("" outside git)."""
    try:
        rev = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=root, capture_output=True,
                             text=True, timeout=5).stdout.strip()
        # --no-optional-locks: status never takes the index lock to refresh it, so a status killed at its
        # timeout (or with the run it stamps) leaves no stale .git/index.lock behind in the user's checkout.
        dirty = subprocess.run(["git", "--no-optional-locks", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                               capture_output=True, text=True, timeout=5).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""
    return f"{rev}+dirty" if rev and dirty else rev


def _nvidia_driver() -> str:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return ""
    return out.strip().splitlines()[0] if out.strip() else ""


def environment(device: str, world_size: int, backend: str, device_name: str = "") -> dict:
    """Versions, machine and device, enough to tell two measurements' setups apart."""
    import torch

    env = {
        "backend": backend,
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "num_cpus": os.cpu_count(),
        "world_size": world_size,
        "device": device,
        "device_name": device_name or (torch.cuda.get_device_name() if device == "cuda"
                                       else platform.processor() or "cpu"),
        "git_revision": git_revision(),
    }
    if device == "cuda":
        env.update(cuda=torch.version.cuda, cudnn=torch.backends.cudnn.version(), driver=_nvidia_driver(),
                   nccl=".".join(map(str, torch.cuda.nccl.version())),
                   cuda_alloc_conf=os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""))
    if "torch_xla" in sys.modules:
        env["torch_xla"] = getattr(sys.modules["torch_xla"], "__version__", "")
    return env


STEP_LINE_PREFIX = "[autoplan run] "


def step_line(step: int, num_steps: int, loss: float, grad_norm: float, lr: float, step_time_s: float,
              tokens_per_s: float, mfu_fraction: float | None) -> str:
    """The progress line of one training step, the same for every backend (torch and XLA call this):
    each figure is named as the record names it, units in the name, e.g.
    `[autoplan run] step 3/10 loss 9.8765 grad_norm 1.2340 lr 3.00e-04 step_time_s 0.780 tokens_per_s 4,096 mfu 45.1%`.
    `mfu_fraction` None: no datasheet peak for the device (a CPU), said as `mfu n/a`."""
    util = "n/a" if mfu_fraction is None else f"{mfu_fraction:.1%}"
    return (f"{STEP_LINE_PREFIX}step {step}/{num_steps} loss {loss:.4f} grad_norm {grad_norm:.4f} lr {lr:.2e} "
            f"step_time_s {step_time_s:.3f} tokens_per_s {tokens_per_s:,.0f} mfu {util}")


def run_extra(options, grad_norms: list, learning_rates: list, first_step: int, peak_memory_kind: str,
              notes: list) -> dict:
    """The `extra` fields every backend's record carries (each backend adds its own beside them):
    per-step `grad_norms` and `learning_rates` (every step run, warm-up included, like `losses`)."""
    return {"grad_norms": [float(g) for g in grad_norms], "learning_rates": [float(x) for x in learning_rates],
            "first_step": first_step, "options": options.to_dict(), "peak_memory_kind": peak_memory_kind,
            "notes": list(notes)}


def build_measurement(doc: PlanDocument, backend: str, status: str, *, step_times_s: list, losses: list,
                      peak_memory_bytes: int, env: dict, num_warmup_steps: int, peak: float,
                      error: str = "", extra: dict | None = None) -> Measurement:
    """The record of one run; MFU and tokens/s (when steps were timed) go into `extra`."""
    record = Measurement(
        plan_id=doc.plan_id, plan=doc.to_dict(), prediction=dict(doc.prediction), backend=backend,
        status=status, step_times_s=[float(t) for t in step_times_s], losses=[float(x) for x in losses],
        peak_memory_bytes=int(peak_memory_bytes), environment=env, num_warmup_steps=num_warmup_steps,
        tokens_per_step=doc.training.tokens_per_step, num_gpus=doc.cluster.num_gpus,
        peak_flops_per_s=peak, error=error, extra=dict(extra or {}))
    if record.step_times_s:
        record.extra["tokens_per_s"] = record.tokens_per_s
        record.extra["mfu"] = mfu(doc.model, doc.training.seq_len, record.tokens_per_s,
                                  doc.parallel.num_gpus, peak)
    return record
