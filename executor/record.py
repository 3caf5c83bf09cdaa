"""What a run records: the environment stamp, model FLOPs and MFU, peak memory, the Measurement.

MFU convention (DESIGN "MFU"): model FLOPs per token = 6·N (N = the model's parameters a token
passes through, embeddings included; Kaplan et al. 2020, arXiv 2001.08361, eq. 2.1: 2·N forward,
4·N backward) + 12·L·H·Q·T for the attention score and value matmuls (PaLM, Chowdhery et al. 2022,
arXiv 2204.02311, appendix B; L layers, H heads, Q head_dim, T sequence length; not halved for the
causal mask, as in PaLM). Recompute is not counted (that would be hardware FLOPs). The denominator
is the GPU's dense datasheet peak for the training dtype times the number of GPUs.
"""
from __future__ import annotations

import os
import platform
import resource
import socket
import subprocess
import sys
from pathlib import Path

from autoplan.specs import Measurement, ModelSpec, PlanDocument

# Dense (no 2:4 sparsity) peak FLOP/s per GPU, from the NVIDIA datasheets:
# A100: "NVIDIA A100 Tensor Core GPU" datasheet (2021): BF16/FP16 312 TFLOPS, TF32 156, FP32 19.5.
# H100 SXM / H100 PCIe: "NVIDIA H100 Tensor Core GPU" datasheet (2023): BF16 1,979 / 1,513 TFLOPS
#   with sparsity -> 989.5 / 756.5 dense; FP8 3,958 / 3,026 sparse -> 1,979 / 1,513 dense;
#   FP32 67 / 51 TFLOPS.
# H200: "NVIDIA H200 Tensor Core GPU" datasheet (2024): BF16 1,979 TFLOPS sparse -> 989.5 dense,
#   FP8 1,979 dense, FP32 67 (the H100 SXM compute die).
# L40S: "NVIDIA L40S" datasheet (2023): BF16 733 TFLOPS sparse -> 366.5 dense, FP32 91.6.
# Matched in order against torch.cuda.get_device_name(); the first substring found wins.
PEAK_FLOPS_PER_S = (
    ("H100 PCIe", {"bf16": 756.5e12, "fp16": 756.5e12, "fp8": 1513e12, "fp32": 51e12}),
    ("H100", {"bf16": 989.5e12, "fp16": 989.5e12, "fp8": 1979e12, "fp32": 67e12}),
    ("H200", {"bf16": 989.5e12, "fp16": 989.5e12, "fp8": 1979e12, "fp32": 67e12}),
    ("GH200", {"bf16": 989.5e12, "fp16": 989.5e12, "fp8": 1979e12, "fp32": 67e12}),
    ("A100", {"bf16": 312e12, "fp16": 312e12, "fp32": 19.5e12}),
    ("L40S", {"bf16": 366.5e12, "fp16": 366.5e12, "fp8": 733e12, "fp32": 91.6e12}),
)


def peak_flops_per_s(device_name: str, dtype: str) -> float:
    """Datasheet dense peak for this device and dtype; 0.0 when unknown (CPU: no MFU is reported)."""
    for key, peaks in PEAK_FLOPS_PER_S:
        if key in device_name:
            return peaks.get(dtype, 0.0)
    return 0.0


def model_flops_per_token(model: ModelSpec, seq_len: int) -> float:
    """6·N + 12·L·H·Q·T (see the module docstring for the sources)."""
    dense = 6.0 * model.num_active_params
    attention = 12.0 * model.num_layers * model.num_heads * model.head_dim * seq_len
    return dense + attention


def mfu(model: ModelSpec, seq_len: int, tokens_per_s: float, num_gpus: int, peak: float) -> float:
    """Model FLOPs utilization; 0.0 when the peak is unknown."""
    if peak <= 0 or num_gpus <= 0:
        return 0.0
    return model_flops_per_token(model, seq_len) * tokens_per_s / (num_gpus * peak)


def cpu_peak_rss_bytes() -> int:
    """High-water resident set size of this process: VmHWM from /proc/self/status (Linux, can be
    reset by `reset_cpu_peak_rss`), else ru_maxrss (KiB on Linux, since the process started)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def reset_cpu_peak_rss() -> None:
    """Start a new RSS high-water mark (Linux: writing 5 to /proc/self/clear_refs resets VmHWM),
    so the second plan run in a process does not report the first one's peak."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        pass


def _git_revision() -> str:
    root = Path(__file__).resolve().parent.parent
    try:
        rev = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=root, capture_output=True,
                             text=True, timeout=5).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
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
        "git_revision": _git_revision(),
    }
    if device == "cuda":
        env.update(cuda=torch.version.cuda, cudnn=torch.backends.cudnn.version(), driver=_nvidia_driver(),
                   nccl=".".join(map(str, torch.cuda.nccl.version())),
                   cuda_alloc_conf=os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""))
    if "torch_xla" in sys.modules:
        env["torch_xla"] = getattr(sys.modules["torch_xla"], "__version__", "")
    return env


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
