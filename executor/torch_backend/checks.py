"""What the torch backend refuses, before anything is started. Each message names the feature,
the values and what to do instead (another backend, another plan, another flag)."""
from __future__ import annotations

import os

from autoplan.specs import AutoplanError, PlanDocument, get_framework

from executor import fp8
from executor.backend_common import check_framework
from executor.data import open_tokens
from executor.model import check_buildable
from executor.options import RunOptions
from executor.torch_backend.checkpoint import latest_step, verify

FRAMEWORK = "autoplan"
"""The framework whose facts and rules describe this backend (autoplan.specs.frameworks)."""


def world_size(doc: PlanDocument, options: RunOptions) -> int:
    """The number of processes this run will have: torchrun's WORLD_SIZE, else --nproc, else the
    plan's GPU count."""
    if "WORLD_SIZE" in os.environ:
        return int(os.environ["WORLD_SIZE"])
    return options.nproc or doc.parallel.num_gpus


def check(doc: PlanDocument, options: RunOptions) -> None:
    plan, spec, training = doc.parallel, doc.model, doc.training
    check_framework(doc, (FRAMEWORK,))
    check_buildable(spec, moe=True)
    processes = world_size(doc, options)
    if processes != plan.num_gpus or doc.cluster.num_gpus != plan.num_gpus:
        raise AutoplanError(
            f"plan {doc.plan_id} is for {doc.cluster.num_gpus} GPUs (dp={plan.dp} * tp={plan.tp} * pp={plan.pp} "
            f"* cp={plan.cp} = {plan.num_gpus}) but this run has {processes} processes; run it with "
            f"--nproc {plan.num_gpus} (or torchrun over {plan.num_gpus} GPUs), or plan for {processes} GPUs")
    plan.check(spec, training, doc.cluster, allow_tp_across_nodes=True)
    # What this backend can run is the `autoplan` framework's rules: the planner searched with them.
    get_framework(FRAMEWORK).check(spec, training, plan)
    _check_device(options, processes)
    if training.dtype == "fp8":
        fp8.torchao_float8()  # installed and importable, before any process starts
    elif options.fp8_recipe:
        raise AutoplanError(f"--fp8-recipe {options.fp8_recipe} is for fp8 plans; plan {doc.plan_id} trains in "
                            f"{training.dtype}: drop the flag, or plan with --dtype fp8")
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


