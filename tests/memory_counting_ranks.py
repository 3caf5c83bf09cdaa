"""One rank of tests/test_memory_counting.py's multi-process count: builds each plan's model the way
executor/torch_backend/train.py PlanRunner._parallelize does (TP -> CP attention -> recompute ->
FSDP2 -> materialize -> CP's RoPE rows) on this rank's device mesh, runs one micro-batch's forward + loss
under saved-tensor hooks in the plan's GPU compute mode, and writes this rank's saved bytes per
scope to OUT/rank<r>.json. Started by `launch_counts` (the local launcher's environment: RANK,
WORLD_SIZE, MASTER_ADDR, ...). Usage: memory_counting_ranks.py OUT PLANS_JSON
"""
from __future__ import annotations

import collections
import json
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist

_CAST_OR_VIEW = {"TBackward0", "ToCopyBackward0", "ViewBackward0", "PermuteBackward0", "ExpandBackward0",
                 "_ToCopyBackward0", "_ToTorchTensorBackward"}
"""Autograd nodes that cast or view a weight without computing on it (`_ToTorchTensorBackward`: a DTensor's
to_local(), as the vocabulary-parallel loss takes its head rows)."""


def _local(t):
    """The plain tensor holding this rank's data: a DTensor's local shard, an AsyncCollectiveTensor's
    result (tensor subclasses, unwrapped through __tensor_flatten__)."""
    while type(t) is not torch.Tensor and type(t) is not torch.nn.Parameter and hasattr(t, "__tensor_flatten__"):
        t = getattr(t, t.__tensor_flatten__()[0][0])
    return t


def from_parameter(t) -> bool:
    """A weight or its cast (a chain of casts/views ending at a leaf's AccumulateGrad); the
    single-process count (tests/test_memory_counting.py) uses it too."""
    fn = t.grad_fn
    if fn is None and t.requires_grad:  # the leaf itself
        return True
    while fn is not None:
        name = type(fn).__name__
        if name == "AccumulateGrad":
            return True
        if name not in _CAST_OR_VIEW or not fn.next_functions:
            return False
        fn = fn.next_functions[0][0]
    return False


def count_plan(spec, plan, policy: str, b: int, s: int, device) -> dict:
    """This rank's bytes saved for backward per scope, and the compute mode it ran in."""
    from autoplan.specs import PlanDocument, ClusterSpec, TrainingSpec
    from executor import RunOptions
    from executor.model import build_model
    from executor.torch_backend.context_parallel import apply_cp_attention, local_tokens, localize_rope
    from executor.torch_backend.parallel_dims import ParallelDims
    from torch.distributed.fsdp import MixedPrecisionPolicy

    from executor.torch_backend.parallelize import apply_fsdp, apply_recompute, apply_tp
    from autoplan.specs.plan import compute_mode
    from executor.torch_backend.train import kernels_for

    doc = PlanDocument(model=spec, training=TrainingSpec(b * plan.dp, s, "bf16"),
                       cluster=ClusterSpec("cpu", plan.num_gpus, gpus_per_node=8), parallel=plan)
    dims = ParallelDims.from_plan(plan, dist.get_world_size())
    mesh = dims.build_mesh(device.type)
    cp_rank = mesh["cp"].get_local_rank()
    model = build_model(spec, kernels=kernels_for(doc, RunOptions()))
    if plan.tp > 1:
        apply_tp(model, mesh["tp"], plan.sequence_parallel)
    if plan.cp > 1:
        apply_cp_attention(model, mesh["cp"].get_group(), s, plan.cp, cp_rank)
    apply_recompute(model, policy, spec.num_layers)
    # The GPU compute mode (on the CPU the runner keeps fp32): FSDP2's bf16 weight copies, or fp32
    # weights under bf16 autocast.
    fsdp, bf16_copies = compute_mode(plan, spec, bf16_params=True)
    if fsdp:
        apply_fsdp(model, dims.fsdp_mesh(mesh), plan.zero_stage, MixedPrecisionPolicy(
            param_dtype=torch.bfloat16 if bf16_copies else None, reduce_dtype=torch.float32))
    model.to_empty(device=device)
    model.init_weights(0)
    if plan.cp > 1:
        localize_rope(model, s, plan.cp, cp_rank)
    states = {_local(t).untyped_storage().data_ptr() for t in (*model.buffers(), *model.parameters())}
    scope, seen, per_scope = ["embedding"], set(), collections.Counter()
    for key, layer in model.layers.items():
        layer.register_forward_pre_hook(lambda *_, key=key: scope.__setitem__(0, f"layer{key}"))
    model.norm.register_forward_pre_hook(lambda *_: scope.__setitem__(0, "head"))

    def pack(t):
        local = _local(t)
        ptr = local.untyped_storage().data_ptr()
        if model._rope_cast is not None:  # the RoPE table in bf16, cast in the first forward and kept
            states.add(_local(model._rope_cast).untyped_storage().data_ptr())  # across steps: a state
        if ptr not in seen and ptr not in states and not from_parameter(t):
            seen.add(ptr)
            per_scope[scope[0]] += local.untyped_storage().nbytes()
        return t

    torch.manual_seed(0)  # the same batch on every rank; cp ranks keep their own tokens
    tokens = torch.randint(0, spec.vocab_size, (b, s))
    labels = torch.randint(0, spec.vocab_size, (b, s))
    if plan.cp > 1:
        tokens, labels = (local_tokens(t, plan.cp, cp_rank) for t in (tokens, labels))
    model.train()
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=not bf16_copies), \
            torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = model(tokens.to(device), labels=labels.to(device))
    loss.backward()  # the collectives of the backward run on every rank alike
    return {"counted": dict(per_scope), "autocast": not bf16_copies}


def main(argv: list[str]) -> int:
    from autoplan.specs import ModelSpec, ParallelPlan
    from executor.torch_backend.worker import init_distributed

    out, cases = Path(argv[0]), json.loads(Path(argv[1]).read_text())
    torch.set_num_threads(1)
    device = init_distributed("cpu")
    results = []
    try:
        for case in cases:
            spec, plan = ModelSpec.from_dict(case["model"]), ParallelPlan.from_dict(case["plan"])
            results.append(count_plan(spec, plan, case["policy"], case["b"], case["s"], device))
    finally:
        dist.destroy_process_group()
    (out / f"rank{os.environ['RANK']}.json").write_text(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
