"""Time and cost to train a number of tokens with a plan: what people ask a planner after "how fast".

    days       = train_tokens / tokens_per_s / 86,400
    gpu_hours  = train_tokens / tokens_per_s * num_gpus / 3,600
    cost       = gpu_hours * gpu_hour_price

Steady-state throughput only: start-up, checkpoints, evaluation and failures come on top (Llama 3
reports ~90% effective training time over 54 days, arXiv:2407.21783 section 3.3.4).
"""
from __future__ import annotations


def training_run(tokens_per_s: float, num_gpus: int, train_tokens: float, gpu_hour_price: float | None = None) -> dict:
    """{"days", "gpu_hours", "cost"} of training `train_tokens` at `tokens_per_s` (cost None without a price)."""
    seconds = train_tokens / tokens_per_s
    gpu_hours = seconds * num_gpus / 3600
    return {"days": seconds / 86400, "gpu_hours": gpu_hours,
            "cost": gpu_hours * gpu_hour_price if gpu_hour_price else None}
