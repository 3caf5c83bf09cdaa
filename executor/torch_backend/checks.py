"""What the torch backend refuses, before anything is started. Each message names the feature,
the values and what to do instead (another backend, another plan, another flag)."""
from __future__ import annotations

import os

from autoplan.specs import AutoplanError, PlanDocument

from executor.data import open_tokens
from executor.model import check_buildable
from executor.options import RunOptions
from executor.torch_backend.checkpoint import latest_step, verify


def world_size(doc: PlanDocument, options: RunOptions) -> int:
    """The number of processes this run will have: torchrun's WORLD_SIZE, else --nproc, else the
    plan's GPU count."""
    if "WORLD_SIZE" in os.environ:
        return int(os.environ["WORLD_SIZE"])
    return options.nproc or doc.parallel.num_gpus


def check(doc: PlanDocument, options: RunOptions) -> None:
    plan, spec, training = doc.parallel, doc.model, doc.training
    check_buildable(spec, moe=True)
    processes = world_size(doc, options)
    if processes != plan.num_gpus or doc.cluster.num_gpus != plan.num_gpus:
        raise AutoplanError(
            f"plan {doc.plan_id} is for {doc.cluster.num_gpus} GPUs (dp={plan.dp} * tp={plan.tp} * pp={plan.pp} "
            f"* cp={plan.cp} = {plan.num_gpus}) but this run has {processes} processes; run it with "
            f"--nproc {plan.num_gpus} (or torchrun over {plan.num_gpus} GPUs), or plan for {processes} GPUs")
    plan.check(spec, training, doc.cluster, allow_tp_across_nodes=True)
    if plan.cp > 1 and spec.position == "learned":
        raise AutoplanError(
            f"model {spec.name!r} has learned positions; the torch backend's context parallelism (cp={plan.cp}) "
            "needs RoPE; run the plan with cp=1")
    if plan.cp > 1 and plan.sequence_parallel and (training.seq_len // plan.cp) % plan.tp:
        raise AutoplanError(
            f"sequence_parallel with cp needs seq_len/cp divisible by tp, got seq_len={training.seq_len}, "
            f"cp={plan.cp}, tp={plan.tp}")
    if spec.tied_embeddings and (plan.tp > 1 or plan.pp > 1):
        raise AutoplanError(
            f"model {spec.name!r} ties its embedding and head; the torch backend runs tied weights only with "
            f"tp=1 and pp=1, got tp={plan.tp}, pp={plan.pp} (the head would be sharded or on another stage)")
    if plan.sequence_parallel and spec.position == "learned":
        raise AutoplanError(
            f"model {spec.name!r} has learned positions; the torch backend does not shard them for "
            "sequence_parallel=true; run the plan with sequence_parallel=false")
    if plan.sequence_parallel and training.seq_len % plan.tp:
        raise AutoplanError(
            f"sequence_parallel needs seq_len divisible by tp, got seq_len={training.seq_len}, tp={plan.tp}")
    if training.seq_len > spec.max_seq_len:
        raise AutoplanError(f"seq_len={training.seq_len} exceeds model {spec.name!r} max_seq_len={spec.max_seq_len}")
    if plan.pp > 1 and plan.num_microbatches < plan.pp:
        raise AutoplanError(
            f"1F1B needs at least as many micro-batches as pipeline stages, got num_microbatches="
            f"{plan.num_microbatches}, pp={plan.pp}")
    if spec.is_moe and (plan.tp > 1 or plan.pp > 1):
        raise AutoplanError(
            f"model {spec.name!r} is a mixture of experts; the torch backend runs MoE with data, context and "
            f"expert parallelism only, got tp={plan.tp}, pp={plan.pp}; plan it with tp=1 and pp=1 "
            "(autoplan search --tp 1 --pp 1) or export it to Megatron-LM")
    if plan.ep > 1 and options.checkpoint_dir:
        raise AutoplanError(
            f"--checkpoint-dir with expert parallelism (ep={plan.ep}) is not wired (each ep rank holds other "
            "experts under the same parameter names); run without checkpoints or with ep=1")
    if training.dtype in ("fp16", "fp8"):
        raise AutoplanError(
            f"the torch backend trains in bf16 on GPU (fp32 on CPU); dtype={training.dtype!r} needs loss "
            "scaling or float8 kernels that are not wired; plan with dtype bf16")
    _check_device(options, processes)
    open_tokens(options.data, options.data_dtype, options.seed, spec.vocab_size)  # missing file -> error
    if options.resume:
        verify(options.checkpoint_dir, doc.plan_id)  # before any process starts, and before unpickling
    if options.resume and latest_step(options.checkpoint_dir) >= options.steps:
        raise AutoplanError(f"--resume: the checkpoint in {options.checkpoint_dir!r} is at step "
                            f"{latest_step(options.checkpoint_dir)}, nothing left of --steps {options.steps}")


def _check_device(options: RunOptions, processes: int) -> None:
    if options.device != "cuda":
        return
    import torch

    if not torch.cuda.is_available():
        raise AutoplanError("--device cuda but torch sees no CUDA device here; use --device cpu")
    local = int(os.environ.get("LOCAL_WORLD_SIZE", processes))
    if local > torch.cuda.device_count():
        raise AutoplanError(f"{local} processes on this node but only {torch.cuda.device_count()} CUDA "
                            "devices; use torchrun across nodes or a plan for fewer GPUs")
