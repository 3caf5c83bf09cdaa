"""Distributed checkpoints with torch.distributed.checkpoint (DCP), saved atomically.

Each save writes `<dir>/.tmp-step-<n>` on every rank, then (after a barrier) rank 0 renames it to
`<dir>/step-<n>`: a run killed mid-save leaves a `.tmp-` folder that resume ignores, and the last
complete `step-<n>` stays. The two newest complete checkpoints are kept. Keys are prefixed with the
pipeline rank and chunk index, so stages never collide and a resume must use the same plan. Under
expert parallelism every ep rank holds other experts under the same parameter names (executor/
torch_backend/expert_parallel.py keeps a slice of each layer's experts): their keys, and their optimizer
states', also carry the ep index (`ep<e>.`), so DCP keeps one copy per ep index (the edp ranks' copies,
identical or FSDP shards of one tensor, dedup as any replica's) instead of one for all.

A checkpoint is code: torch.distributed.checkpoint unpickles its `.metadata`, so loading a folder
someone else wrote can run their code. Each save therefore writes a manifest beside the shards
(`autoplan_manifest.json`: the plan id and the SHA-256 of `.metadata`), and `--resume` loads only a
checkpoint whose manifest is there, names this plan and matches its `.metadata` byte for byte.
The manifest says autoplan wrote the folder for this plan; it is no signature, so checkpoints must
still come from a trusted place (see docs/bad_input.md).
"""
from __future__ import annotations

import hashlib
import os
import re
import shutil
from pathlib import Path

import torch.distributed as dist
from torch import nn

from autoplan.specs import AutoplanError, read_json, write_json_atomic
from executor.torch_backend.expert_parallel import is_expert_param

MANIFEST = "autoplan_manifest.json"
MANIFEST_SCHEMA = "autoplan.checkpoint/v1"

STEP_DIR = re.compile(r"^step-(\d+)$")
NUM_KEPT = 2


def _expert_keys(flat: dict, ep_rank: int | None, restore: bool = False) -> dict:
    """`flat` ({fqn: value}) with every expert fqn prefixed by `ep<ep_rank>.` (or, with `restore`, the
    prefix taken off again); unchanged without expert parallelism (`ep_rank` None)."""
    if ep_rank is None:
        return flat
    prefix = f"ep{ep_rank}."
    if restore:
        return {k.removeprefix(prefix): v for k, v in flat.items()}
    return {prefix + k if is_expert_param(k) else k: v for k, v in flat.items()}


def _state(models: list[nn.Module], optimizers: list, pp_rank: int, ep_rank: int | None) -> dict:
    from torch.distributed.checkpoint.state_dict import get_model_state_dict, get_optimizer_state_dict

    state = {}
    for i, (model, opt) in enumerate(zip(models, optimizers)):
        optim = get_optimizer_state_dict(model, opt)
        # The param groups name parameters, identical on every ep rank: only the tensors move keys.
        optim = {**optim, "state": _expert_keys(optim["state"], ep_rank)}
        state[f"pp{pp_rank}.chunk{i}.model"] = _expert_keys(get_model_state_dict(model), ep_rank)
        state[f"pp{pp_rank}.chunk{i}.optim"] = optim
    return state


def latest_step(checkpoint_dir: str) -> int:
    """The newest complete checkpoint's step, or 0 when there is none."""
    root = Path(checkpoint_dir)
    if not root.is_dir():
        return 0
    steps = [int(m.group(1)) for p in root.iterdir() if (m := STEP_DIR.match(p.name)) and p.is_dir()]
    return max(steps, default=0)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def write_manifest(folder: Path, plan_id: str, step: int) -> None:
    write_json_atomic(folder / MANIFEST, {"schema": MANIFEST_SCHEMA, "plan_id": plan_id, "step": step,
                                          "metadata_sha256": _sha256(folder / ".metadata")})


def verify(checkpoint_dir: str, plan_id: str) -> int:
    """The newest complete checkpoint's step, once its manifest shows autoplan wrote it for this plan
    and its `.metadata` is unchanged; else one AutoplanError line (nothing is unpickled before)."""
    step = latest_step(checkpoint_dir)
    if step == 0:
        raise AutoplanError(f"--resume: no complete checkpoint (step-NNNNNN folder) in {checkpoint_dir!r}; "
                            "run without --resume to start fresh")
    folder = Path(checkpoint_dir) / f"step-{step:06d}"
    trust = ("a checkpoint is code (its .metadata is unpickled): resume only from checkpoints autoplan wrote, "
             "kept where only you can write")
    if not (folder / MANIFEST).is_file():
        raise AutoplanError(f"--resume: {str(folder)!r} has no {MANIFEST} (autoplan writes one with every "
                            f"checkpoint); {trust}")
    manifest = read_json(folder / MANIFEST, "checkpoint manifest")
    if not isinstance(manifest, dict) or manifest.get("schema") != MANIFEST_SCHEMA:
        raise AutoplanError(f"--resume: {str(folder / MANIFEST)!r} is not a manifest of schema "
                            f"{MANIFEST_SCHEMA!r}; {trust}")
    if manifest.get("plan_id") != plan_id:
        raise AutoplanError(f"--resume: the checkpoint in {str(folder)!r} was written for plan "
                            f"{manifest.get('plan_id')!r}, this is plan {plan_id!r}; resume with the plan that "
                            f"wrote it, or use another --checkpoint-dir")
    metadata = folder / ".metadata"
    if not metadata.is_file() or _sha256(metadata) != manifest.get("metadata_sha256"):
        raise AutoplanError(f"--resume: {str(metadata)!r} does not match the SHA-256 its manifest recorded; "
                            f"it was changed after autoplan wrote it; {trust}")
    return step


def save(checkpoint_dir: str, step: int, models, optimizers, pp_rank: int, plan_id: str,
         ep_rank: int | None = None) -> None:
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.api import CheckpointException

    root = Path(checkpoint_dir)
    tmp, final = root / f".tmp-step-{step:06d}", root / f"step-{step:06d}"
    if dist.get_rank() == 0:
        root.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(tmp, ignore_errors=True)  # left by a run killed mid-save
    dist.barrier()
    try:
        dcp.save(_state(models, optimizers, pp_rank, ep_rank), checkpoint_id=str(tmp))
        dist.barrier()
        if dist.get_rank() == 0:
            write_manifest(tmp, plan_id, step)
            shutil.rmtree(final, ignore_errors=True)
            os.replace(tmp, final)
            for old in sorted(p for p in root.iterdir() if STEP_DIR.match(p.name))[:-NUM_KEPT]:
                shutil.rmtree(old, ignore_errors=True)
    except (OSError, RuntimeError, CheckpointException) as exc:
        # A full or read-only filesystem, a file-size limit: DCP's writers fail on every rank and DCP
        # gathers the failures into a CheckpointException (a BaseException: it passes `except Exception`),
        # torch's zip writer saying "unexpected pos". No barrier here: a rank that did not fail may be
        # waiting in the save's own collectives. The half-written folder goes; complete checkpoints stay.
        if dist.get_rank() == 0:
            shutil.rmtree(tmp, ignore_errors=True)
        lines = [line for line in str(exc).splitlines() if "Error" in line] or [str(exc).strip() or type(exc).__name__]
        reason = getattr(exc, "strerror", None) or lines[-1].strip()[:200]
        raise AutoplanError(f"--checkpoint-dir {checkpoint_dir!r}: saving step {step} failed ({reason}); check the "
                            f"free space and write access there, or choose another --checkpoint-dir") from None
    dist.barrier()


def load(checkpoint_dir: str, models, optimizers, pp_rank: int, plan_id: str, ep_rank: int | None = None) -> int:
    """Load the newest complete checkpoint into models and optimizers, once `verify` accepts it;
    return its step. `ep_rank`: this rank's expert-parallel index (None without expert parallelism)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import set_model_state_dict, set_optimizer_state_dict

    step = verify(checkpoint_dir, plan_id)
    state = _state(models, optimizers, pp_rank, ep_rank)
    try:
        dcp.load(state, checkpoint_id=str(Path(checkpoint_dir) / f"step-{step:06d}"))
    except Exception as exc:  # DCP raises CheckpointException / RuntimeError for foreign layouts
        raise AutoplanError(f"--resume: checkpoint step {step} in {checkpoint_dir!r} does not match this "
                            f"plan ({type(exc).__name__}); resume with the plan that wrote it") from None
    for i, (model, opt) in enumerate(zip(models, optimizers)):
        optim = state[f"pp{pp_rank}.chunk{i}.optim"]
        optim = {**optim, "state": _expert_keys(optim["state"], ep_rank, restore=True)}
        set_model_state_dict(model, _expert_keys(state[f"pp{pp_rank}.chunk{i}.model"], ep_rank, restore=True))
        set_optimizer_state_dict(model, opt, optim)
    return step
