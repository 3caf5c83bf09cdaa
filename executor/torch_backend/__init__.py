"""The torch.distributed backend: FSDP2 (ZeRO), DTensor tensor/sequence parallel, pipelining,
activation checkpointing; local gloo/nccl processes or torchrun. See docs/executor.md."""
from __future__ import annotations

from autoplan.specs import AutoplanError, Measurement, PlanDocument

from executor.options import RunOptions
from executor.torch_backend.checks import check, world_size


def run(doc: PlanDocument, options: RunOptions) -> Measurement:
    return run_many([doc], options)[0]


def run_many(docs: list[PlanDocument], options: RunOptions) -> list[Measurement]:
    """Check every plan, then run them in sequence in one group of local processes."""
    counts = {doc.parallel.num_gpus for doc in docs}
    if len(counts) > 1:
        raise AutoplanError(f"plans run together must need the same GPU count, got {sorted(counts)}; "
                            "run them separately")
    if len(docs) > 1 and options.checkpoint_dir:
        raise AutoplanError(f"--checkpoint-dir takes one plan per run (the {len(docs)} plans would overwrite "
                            "each other's checkpoints); run them one at a time")
    for doc in docs:
        check(doc, options)
    from executor.torch_backend.launch import launch

    return launch(docs, options, world_size(docs[0], options))


__all__ = ["check", "run", "run_many"]
