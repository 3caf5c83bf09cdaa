"""Test hook: make a plan run out of memory on demand, so the recovery from an OOM can be tested on
machines that have no GPU memory to exhaust.

`AUTOPLAN_TEST_INJECT_OOM=PLAN_ID:STEP[:RANK]` (several separated by commas): when plan PLAN_ID
reaches optimizer step STEP (0-based) on rank RANK (every rank if left out), the step raises
`torch.OutOfMemoryError`, the exception the CUDA caching allocator raises, after the model and
optimizer are built, so their memory is held as in a real OOM. Unset in normal runs.
"""
from __future__ import annotations

import os

ENV = "AUTOPLAN_TEST_INJECT_OOM"


def _targets() -> list[tuple[str, int, int | None]]:
    targets = []
    for item in filter(None, os.environ.get(ENV, "").split(",")):
        parts = item.split(":")
        targets.append((parts[0], int(parts[1]), int(parts[2]) if len(parts) > 2 else None))
    return targets


def maybe_oom(plan_id: str, step: int, rank: int) -> None:
    """Raise torch.OutOfMemoryError where AUTOPLAN_TEST_INJECT_OOM asks for one."""
    import torch

    for target_plan, target_step, target_rank in _targets():
        if target_plan == plan_id and target_step == step and target_rank in (None, rank):
            raise torch.OutOfMemoryError(
                f"simulated out-of-memory at step {step} on rank {rank} ({ENV}={os.environ[ENV]})")
