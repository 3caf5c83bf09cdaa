"""torch FSDP2 (fully_shard) on a gloo CPU rank, as autoplan's executor and torchtitan apply it, for the
model-state oracle (tests/state_oracle_ranks.py runs `run` once per case; tests/test_state_oracle.py
compares its counts with the cost model).

A case: {"zero_stage", "sync": whose gradient sync between micro-batches (_set_grad_sync)}.
- The wrapping is the executor's own: executor/torch_backend/parallelize.py apply_fsdp (one
  fully_shard per block, then the root; reshard_after_forward at ZeRO-3 only) with the GPU's
  MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32) (parallelize.mixed_precision on cuda).
- The executor's gradient accumulation (executor/torch_backend/train.py PlanRunner._set_grad_sync):
  ZeRO 0-1 keep gradient sync off until the last micro-batch (set_requires_gradient_sync(last)).
- torchtitan 0.2.0's (torchtitan/train.py train_step, line 508: a plain loop over the micro-batches,
  no no_sync): every micro-batch reduce-scatters, at every ZeRO stage its export maps to FSDP
  (autoplan/exporters/torchtitan/shared.py data_parallel_degrees: ZeRO 1/2 as
  fsdp_reshard_after_forward "never", ZeRO 3 "default" = reshard after forward).

Gradient holders, by FSDP2's names (torch/distributed/fsdp/_fully_shard/_fsdp_param.py): the sharded
parameter's .grad (the reduce-scattered fp32 gradient), the unsharded parameter's .grad and
unsharded_accumulated_grad (the whole gradient kept while sync is off, in the reduce dtype: lines
630-638). The gathered bf16 weights (the unsharded parameters) are counted under "other": the cost
model holds them as compute-weight copies, not as a model state.
"""
from __future__ import annotations

import torch

from tests.state_oracle_ranks import MICRO_BATCHES, count, optimizer_tensors

VOCAB, HIDDEN, LAYERS = 512, 128, 2


class Blocks(torch.nn.Module):
    """An embedding, `layers` MLP blocks in `layers` (the ModuleDict apply_fsdp walks), a head."""

    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(VOCAB, HIDDEN)
        self.layers = torch.nn.ModuleDict({str(i): torch.nn.Sequential(
            torch.nn.Linear(HIDDEN, 4 * HIDDEN), torch.nn.GELU(), torch.nn.Linear(4 * HIDDEN, HIDDEN))
            for i in range(LAYERS)})
        self.head = torch.nn.Linear(HIDDEN, VOCAB, bias=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens[:, :-1])
        for layer in self.layers.values():
            x = x + layer(x)
        logits = self.head(x).float()
        return torch.nn.functional.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten())


def init_distributed() -> None:
    torch.distributed.init_process_group("gloo")


def _fsdp_params(model) -> list:
    return [p for m in model.modules() if hasattr(m, "_get_fsdp_state")
            for group in [m._get_fsdp_state()._fsdp_param_group] if group is not None for p in group.fsdp_params]


def _grad_holders(model) -> list:
    out = []
    for p in _fsdp_params(model):
        out += [p.sharded_param.grad, p.unsharded_accumulated_grad,
                getattr(getattr(p, "_unsharded_param", None), "grad", None)]
    return [t for t in out if t is not None]


def _set_grad_sync(case: dict, model, last: bool) -> None:
    """case["sync"]: "executor", its own PlanRunner._set_grad_sync (train.py) for the case's ZeRO stage
    over 2 replicas; "every micro-batch", torchtitan's loop; "pipelined", what torch.distributed.
    pipelining's backward_maybe_with_nosync does to an FSDP stage (torch 2.9 pipelining/stage.py lines
    645-649: sync and resharding off until the last backward)."""
    from types import SimpleNamespace

    from executor.torch_backend.train import PlanRunner

    if case["sync"] == "executor":
        runner = SimpleNamespace(doc=SimpleNamespace(parallel=SimpleNamespace(zero_stage=case["zero_stage"])),
                                 fsdp=case["zero_stage"] > 0, num_replicas=torch.distributed.get_world_size())
        PlanRunner._set_grad_sync(runner, model, last)
    elif case["sync"] == "pipelined":
        model.set_requires_gradient_sync(last)
        model.set_reshard_after_backward(last)


def _wrap(case: dict, model):
    """FSDP2 as executor/torch_backend/parallelize.py apply_fsdp applies it (zero_stage 3 reshards after
    the forward; torchtitan's "never" / "default" reshard_after_forward are the same fully_shard calls
    with False / True), or, at zero_stage 0 over several replicas, the executor's DDP (train.py line
    117: torch DistributedDataParallel over fp32 weights, which autocast casts)."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy

    from executor.torch_backend.parallelize import apply_fsdp

    if case["zero_stage"] == 0:
        return torch.nn.parallel.DistributedDataParallel(model, broadcast_buffers=False)
    mesh = init_device_mesh("cpu", (torch.distributed.get_world_size(),))
    apply_fsdp(model, mesh, case["zero_stage"], MixedPrecisionPolicy(param_dtype=torch.bfloat16,
                                                                       reduce_dtype=torch.float32))
    return model


def run(case: dict, snap) -> dict:
    torch.manual_seed(0)
    model = Blocks()
    numel = sum(p.numel() for p in model.parameters())
    wrapped = _wrap(case, model)
    optimizer = torch.optim.AdamW(wrapped.parameters(), lr=1e-4)
    for micro_batch in range(MICRO_BATCHES):
        _set_grad_sync(case, wrapped, last=micro_batch == MICRO_BATCHES - 1)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=case["zero_stage"] == 0):
            loss = wrapped(torch.randint(0, VOCAB, (2, 33)))
        loss.backward()
        snap.grads_held(_grad_holders(model) if case["zero_stage"] else [p.grad for p in model.parameters()])
    optimizer.step()
    params = [p.sharded_param for p in _fsdp_params(model)] if case["zero_stage"] else list(model.parameters())
    return count(snap, numel, params=params, optimizer=optimizer_tensors(optimizer))
