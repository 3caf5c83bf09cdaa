"""Distributed checkpoints with torch.distributed.checkpoint (DCP), saved atomically.

Each save writes `<dir>/.tmp-step-<n>` on every rank, then (after a barrier) rank 0 renames it to
`<dir>/step-<n>`: a run killed mid-save leaves a `.tmp-` folder that resume ignores, and the last
complete `step-<n>` stays. The two newest complete checkpoints are kept. Keys are prefixed with the
pipeline rank and chunk index, so stages never collide and a resume must use the same plan.
"""
from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import torch.distributed as dist
from torch import nn

from autoplan.specs import AutoplanError

STEP_DIR = re.compile(r"^step-(\d+)$")
NUM_KEPT = 2


def _state(models: list[nn.Module], optimizers: list, pp_rank: int) -> dict:
    from torch.distributed.checkpoint.state_dict import get_model_state_dict, get_optimizer_state_dict

    state = {}
    for i, (model, opt) in enumerate(zip(models, optimizers)):
        state[f"pp{pp_rank}.chunk{i}.model"] = get_model_state_dict(model)
        state[f"pp{pp_rank}.chunk{i}.optim"] = get_optimizer_state_dict(model, opt)
    return state


def latest_step(checkpoint_dir: str) -> int:
    """The newest complete checkpoint's step, or 0 when there is none."""
    root = Path(checkpoint_dir)
    if not root.is_dir():
        return 0
    steps = [int(m.group(1)) for p in root.iterdir() if (m := STEP_DIR.match(p.name)) and p.is_dir()]
    return max(steps, default=0)


def save(checkpoint_dir: str, step: int, models, optimizers, pp_rank: int) -> None:
    import torch.distributed.checkpoint as dcp

    root = Path(checkpoint_dir)
    tmp, final = root / f".tmp-step-{step:06d}", root / f"step-{step:06d}"
    if dist.get_rank() == 0:
        root.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(tmp, ignore_errors=True)  # left by a run killed mid-save
    dist.barrier()
    dcp.save(_state(models, optimizers, pp_rank), checkpoint_id=str(tmp))
    dist.barrier()
    if dist.get_rank() == 0:
        shutil.rmtree(final, ignore_errors=True)
        os.replace(tmp, final)
        for old in sorted(p for p in root.iterdir() if STEP_DIR.match(p.name))[:-NUM_KEPT]:
            shutil.rmtree(old, ignore_errors=True)
    dist.barrier()


def load(checkpoint_dir: str, models, optimizers, pp_rank: int) -> int:
    """Load the newest complete checkpoint into models and optimizers; return its step."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import set_model_state_dict, set_optimizer_state_dict

    step = latest_step(checkpoint_dir)
    if step == 0:
        raise AutoplanError(f"--resume: no complete checkpoint (step-NNNNNN folder) in {checkpoint_dir!r}; "
                            "run without --resume to start fresh")
    state = _state(models, optimizers, pp_rank)
    try:
        dcp.load(state, checkpoint_id=str(Path(checkpoint_dir) / f"step-{step:06d}"))
    except Exception as exc:  # DCP raises CheckpointException / RuntimeError for foreign layouts
        raise AutoplanError(f"--resume: checkpoint step {step} in {checkpoint_dir!r} does not match this "
                            f"plan ({type(exc).__name__}); resume with the plan that wrote it") from None
    for i, (model, opt) in enumerate(zip(models, optimizers)):
        set_model_state_dict(model, state[f"pp{pp_rank}.chunk{i}.model"])
        set_optimizer_state_dict(model, opt, state[f"pp{pp_rank}.chunk{i}.optim"])
    return step
