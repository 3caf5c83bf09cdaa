"""A mixture-of-experts layer under tensor parallelism (experts split over the tp ranks, etp = tp; under
expert parallelism too, each ep rank's experts): Megatron-LM's account of MoE under TP before its token
dispatchers, which autoplan's cost model prices as "tp-gathered" (cost_model/layer_time.py
dispatch_times_s). Under expert parallelism every tp rank dispatches the same routed tokens among its own
ep peers (executor/torch_backend/expert_parallel.py). SwiGLU experts only (executor.model.check_buildable).

- The layer's input is whole on every tp rank: gathered from the sequence shards under sequence
  parallelism (the block's PrepareModuleInput, as for a dense MLP), replicated without it.
- The router is replicated (a DTensor Replicate on the tp mesh); every rank routes every token the
  same way.
- Each expert's gate/up weights (w1, w3) are split over its ffn rows, Shard(1) of the stacked
  [experts, ffn, h] tensors, and its down weight (w2) over the same ffn columns, Shard(2): every rank
  runs every expert on every routed token, with 1/tp of its width, and gets a partial sum of each
  output (Megatron-LM's column- then row-parallel MLP, Shoeybi et al. 2019, sec. 3, expert by expert).
  A shared expert is split the same way (w1/w3 Shard(0) of [ffn, h], w2 Shard(1)).
- The weighted, combined partial outputs are summed over tp once per layer: reduce-scattered to the
  sequence shards under SP, all-reduced without it (DTensor Partial -> Shard(1) / Replicate).
- Backward: the input's gradient (through the experts and through the router) is a partial sum on
  each rank, and so is the router weight's; both are marked Partial (`to_local(grad_placements=...)`)
  and summed over tp, the input's by the redistribution back to its layout, the router's where the
  trainer sums every Partial gradient before the norm and the step (train.py _clip_grad_norm), as for
  the norms under sequence parallelism.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


def apply_moe_tp(moe, tp_mesh, sequence_parallel: bool, expert_tp_mesh=None) -> None:
    """Split `moe` (executor.moe.MoEFeedForward, on the meta device before materialization) over `tp_mesh`;
    its routed experts over `expert_tp_mesh` (the same ranks on the expert-parallel mesh, so that FSDP2
    over its "edp" dimension sees one root mesh) when given."""
    from torch.distributed.tensor import Replicate, Shard

    experts_mesh = expert_tp_mesh or tp_mesh
    distribute_param(moe.router, "weight", tp_mesh, Replicate())
    for name, placement in (("w1", Shard(1)), ("w3", Shard(1)), ("w2", Shard(2))):
        distribute_param(moe.experts, name, experts_mesh, placement)
    if moe.shared_mlp is not None:
        for name, placement in (("w1", Shard(0)), ("w3", Shard(0)), ("w2", Shard(1))):
            distribute_param(getattr(moe.shared_mlp, name), "weight", tp_mesh, placement)
    moe.tensor_parallel = TensorParallelMoE(tp_mesh, sequence_parallel)


def distribute_param(module: nn.Module, name: str, mesh, placement) -> None:
    """Replace `module.<name>` (on the meta device, before materialization) by a DTensor parameter
    placed over `mesh`; init_weights later copies each rank its part of the full tensor. (Also for
    multi-head latent attention's replicated parts: parallelize.py apply_mla_tp.)"""
    from torch.distributed.tensor import distribute_tensor

    param = getattr(module, name)
    setattr(module, name, nn.Parameter(distribute_tensor(param.data, mesh, [placement]),
                                       requires_grad=param.requires_grad))


class TensorParallelMoE:
    """MoEFeedForward.forward under tensor parallelism (see the module docstring)."""

    def __init__(self, tp_mesh, sequence_parallel: bool):
        self.mesh, self.sequence_parallel = tp_mesh, sequence_parallel

    def forward(self, moe, x: torch.Tensor) -> torch.Tensor:
        from torch.distributed.tensor import DTensor, Partial, Replicate, Shard

        from executor.moe import local_shard as local

        if not isinstance(x, DTensor):  # without SP: the input arrives whole (replicated) on every rank
            x = DTensor.from_local(x, self.mesh, [Replicate()], run_check=False)
        logits = F.linear(x, moe.router.weight).to_local(grad_placements=[Partial()])
        x = x.to_local(grad_placements=[Partial()])
        combined = moe.routed(x.reshape(-1, x.shape[-1]), logits.reshape(-1, logits.shape[-1]))  # partial over tp
        combined = combined.view(x.shape)
        if moe.shared_mlp is not None:
            mlp = moe.shared_mlp
            hidden = F.silu(F.linear(x, local(mlp.w1.weight))) * F.linear(x, local(mlp.w3.weight))
            combined = combined + F.linear(hidden, local(mlp.w2.weight))
        layout = Shard(1) if self.sequence_parallel else Replicate()
        return DTensor.from_local(combined, self.mesh, [Partial()], run_check=False).redistribute(
            placements=[layout]).to_local()
