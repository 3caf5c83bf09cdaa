"""RunOptions: how to run a plan (not what the plan is). Filled from `autoplan run` flags."""
from __future__ import annotations

from dataclasses import asdict, dataclass

from autoplan.specs import AutoplanError

DEVICES = ("cpu", "cuda")
DATA_DTYPES = ("uint16", "uint32")


@dataclass(frozen=True)
class RunOptions:
    steps: int = 10
    """Optimizer steps to run (in total, counting the steps a resumed checkpoint already did)."""
    warmup_steps: int = 2
    """Leading steps left out of `step_times_s` (compilation, allocator and cache warm-up)."""
    seed: int = 0
    """Seeds the weights and the synthetic data; same seed, same losses."""
    lr: float = 3e-4
    """Peak learning rate of AdamW."""
    min_lr: float = 3e-5
    """Learning rate at the end of the cosine decay."""
    warmup: int = 0
    """Learning-rate warm-up steps (linear from 0 to lr), before the cosine decay."""
    grad_clip: float = 1.0
    """Clip the global gradient norm to this value; 0 disables clipping."""
    data: str = ""
    """Token-id file (flat binary, read as a numpy memmap); "" = synthetic tokens."""
    data_dtype: str = "uint16"
    """Element type of the `data` file: uint16 (nanoGPT's .bin, vocab <= 65536) or uint32."""
    out: str = "runs.jsonl"
    """JSONL file the Measurement record is appended to; "" = do not write one."""
    checkpoint_dir: str = ""
    """Folder for distributed checkpoints; "" = no checkpoints."""
    checkpoint_every: int = 0
    """Save a checkpoint every this many steps (0 = never)."""
    resume: bool = False
    """Continue from the latest checkpoint in checkpoint_dir."""
    device: str = "cpu"
    """"cpu" (gloo, fp32) or "cuda" (nccl, bf16 autocast where the plan says bf16)."""
    nproc: int = 0
    """Local processes to spawn; 0 = the plan's GPU count. Must equal the plan's GPU count."""
    log_every: int = 1
    """Print a progress line every this many steps (rank 0)."""
    backend: str = "torch"
    """"torch" (torch.distributed) or "xla" (torch_xla SPMD)."""

    def __post_init__(self) -> None:
        for key in ("steps", "log_every"):
            if getattr(self, key) < 1:
                raise AutoplanError(f"--{key.replace('_', '-')} must be at least 1, got {getattr(self, key)}")
        for key in ("warmup_steps", "warmup", "checkpoint_every", "nproc"):
            if getattr(self, key) < 0:
                raise AutoplanError(f"--{key.replace('_', '-')} must not be negative, got {getattr(self, key)}")
        if self.warmup_steps >= self.steps:
            raise AutoplanError(
                f"--warmup-steps must be smaller than --steps so some steps are measured, got "
                f"warmup_steps={self.warmup_steps}, steps={self.steps}")
        if not (self.lr > 0 and 0 <= self.min_lr <= self.lr):
            raise AutoplanError(f"need 0 < lr and 0 <= min_lr <= lr, got lr={self.lr}, min_lr={self.min_lr}")
        if self.grad_clip < 0:
            raise AutoplanError(f"--grad-clip must not be negative, got {self.grad_clip}")
        if self.device not in DEVICES:
            raise AutoplanError(f"--device must be one of {DEVICES}, got {self.device!r}")
        if self.data_dtype not in DATA_DTYPES:
            raise AutoplanError(f"--data-dtype must be one of {DATA_DTYPES}, got {self.data_dtype!r}")
        if (self.checkpoint_every or self.resume) and not self.checkpoint_dir:
            raise AutoplanError("--checkpoint-every and --resume need --checkpoint-dir DIR")

    def to_dict(self) -> dict:
        return asdict(self)

    def replace(self, **changes) -> "RunOptions":
        return RunOptions(**{**asdict(self), **changes})
