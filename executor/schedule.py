"""Optimizer recipe and learning-rate schedule: linear warm-up, then cosine decay to min_lr (Loshchilov & Hutter 2017,
SGDR, arXiv 1608.03983, without restarts), the schedule of GPT-3 and Llama."""
from __future__ import annotations

import math

# The optimizer recipe every backend shares, so the backends train identically.
ADAMW_BETAS = (0.9, 0.95)
"""GPT-3 (Brown et al. 2020, appendix B) and Llama 2 (Touvron et al. 2023, section 2.2)."""
WEIGHT_DECAY = 0.1
"""Same sources."""


def lr_at(step: int, lr: float, min_lr: float, warmup: int, total_steps: int) -> float:
    """Learning rate for optimizer step `step` (0-based)."""
    if step < warmup:
        return lr * (step + 1) / warmup
    decay_steps = max(total_steps - warmup, 1)
    progress = min((step - warmup) / decay_steps, 1.0)
    return min_lr + 0.5 * (lr - min_lr) * (1.0 + math.cos(math.pi * progress))


def lr_lambda(lr: float, min_lr: float, warmup: int, total_steps: int):
    """The schedule as a multiplier of `lr`, for torch.optim.lr_scheduler.LambdaLR."""
    return lambda step: lr_at(step, lr, min_lr, warmup, total_steps) / lr
