"""Expert parallelism: the experts of every MoE layer sharded over `ep` ranks, tokens sent to them
with all-to-all (GShard, Lepikhin et al. 2020, arXiv 2006.16668, section 2.2; the dropless
variable-size exchange of MegaBlocks, Gale et al. 2022, arXiv 2211.15841).

Ranks. The ep group is carved from the data-parallel ranks (dp, or dp x cp flattened: every rank
that holds the same non-expert weights) of each pipeline rank and tensor-parallel rank: with R = dp*cp
replicas they form an (R/ep, ep) mesh named ("edp", "ep"), ep innermost so that an ep group is
neighbouring replicas (one node at tp = 1, where the all-to-all is fastest). Under tensor parallelism
each tp rank dispatches the same routed tokens among its own ep peers, and every expert kept is split
over tp (executor/torch_backend/moe_tensor_parallel.py). Rank q keeps experts
[e*num_local, (e+1)*num_local) with e its "ep" index
and num_local = num_experts/ep; the R/ep ranks of an "edp" group hold the same experts.

Dispatch, per MoE layer and micro-batch (`AllToAllDispatcher`):
1. the per-expert token counts go to every rank of the ep group (an all-to-all of num_experts
   int64), so each rank knows how much it will receive from whom;
2. the tokens, sorted by expert, are exchanged with `all_to_all_single` and those split sizes;
3. they are regrouped from (source rank, expert) order to (expert, source rank) order, run through
   the local experts, put back in (source rank, expert) order, and
4. returned with the reverse all-to-all. `AllToAll` is the autograd function: its backward is the
   reverse exchange of the gradients.

Gradients. A local expert's gradient sums the contributions of every token routed to it from the
whole ep group, i.e. of ep ranks' losses; the non-expert gradients average R ranks' losses. So
expert gradients are summed over their edp group and divided by R (not by the edp size R/ep, which
would leave them ep times too large):
- zero_stage 0: DDP ignores the expert parameters; `reduce_expert_grads` all-reduces them over
  the edp group after the last micro-batch (one blocking all-reduce per tensor, no overlap).
- zero_stage 1-3: FSDP2 `fully_shard` on each layer's experts over the edp mesh (the enclosing
  block's `fully_shard` over the replica mesh then skips them), which only sums (divide factor 1,
  SUM reductions: gloo has no pre-multiplied sum); `divide_expert_grads` divides by R after the
  backward, as at zero_stage 0. FSDP's own divide factor is not used: on a one-rank edp group
  (ep = R) with the sum reduction, torch 2.13 applies it twice (fsdp/_fully_shard/_fsdp_collectives.py:
  the one-rank copy divides by gradient_divide_factor and the post-divide divides again; torch 2.9
  once). Measured on torch 2.13 (dp 2 x ep 2, ZeRO-1): expert gradients at half the single-process ones.
The global gradient norm adds the expert part summed over the ep group (different experts).
"""
from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn

from executor.moe import GroupedExperts, MoEFeedForward


class AllToAll(torch.autograd.Function):
    """all_to_all_single with variable splits; backward sends the gradients back the same way."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, output_splits: list[int], input_splits: list[int], group) -> torch.Tensor:
        ctx.splits, ctx.group = (output_splits, input_splits), group
        out = x.new_empty((sum(output_splits), *x.shape[1:]))
        dist.all_to_all_single(out, x.contiguous(), output_splits, input_splits, group=group)
        return out

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        output_splits, input_splits = ctx.splits
        grad_in = grad.new_empty((sum(input_splits), *grad.shape[1:]))
        dist.all_to_all_single(grad_in, grad.contiguous(), input_splits, output_splits, group=ctx.group)
        return grad_in, None, None, None


def expert_major_order(counts: torch.Tensor) -> torch.Tensor:
    """Indices that regroup rows laid out by (source rank, local expert) segments, counts[j, l]
    rows each, into (local expert, source rank) order."""
    flat = counts.flatten()
    starts = (torch.cumsum(flat, 0) - flat).view(counts.shape)  # segment starts, source-major
    lengths = counts.t().flatten()
    segment_starts = starts.t().flatten()
    offsets = torch.cumsum(lengths, 0) - lengths  # segment starts, expert-major
    total = int(lengths.sum())
    return torch.repeat_interleave(segment_starts - offsets, lengths, output_size=total) + \
        torch.arange(total, device=counts.device)


class AllToAllDispatcher:
    """Sends each routed token to the ep rank that holds its expert and brings the output back."""

    def __init__(self, group, num_local_experts: int):
        self.group = group
        self.ep = dist.get_world_size(group)
        self.num_local_experts = num_local_experts

    def __call__(self, routed: torch.Tensor, counts: torch.Tensor, experts: GroupedExperts) -> torch.Tensor:
        """routed: tokens sorted by global expert id, counts[e] for expert e (all num_experts)."""
        received_counts = torch.empty_like(counts)
        dist.all_to_all_single(received_counts, counts, group=self.group)
        received_counts = received_counts.view(self.ep, self.num_local_experts).cpu()  # [source, expert]
        sent = counts.view(self.ep, self.num_local_experts).sum(1).tolist()
        received = received_counts.sum(1).tolist()
        tokens = AllToAll.apply(routed, received, sent, self.group)
        order = expert_major_order(received_counts).to(tokens.device)
        out = experts(tokens[order], received_counts.sum(0).tolist())
        out = out[torch.argsort(order)]  # back to (source rank, expert) order
        return AllToAll.apply(out, sent, received, self.group)


def build_expert_mesh(device_type: str, dims, ep: int):
    """The (epp, edp, ep, etp) mesh of the world: for each pipeline rank (epp) and tensor-parallel rank
    (etp), its R = dp*cp replica ranks as (R/ep, ep), ep innermost. The world's ranks are laid out
    (pp, dp, cp, tp) (ParallelDims.build_mesh), so a replica group is every tp-th rank of a pipeline
    rank's block. The experts' tensor-parallel shards live on "etp" (the world's tp ranks), so that FSDP2
    over "edp" sees one root mesh. Its dimensions are named apart from the world's: torch 2.9 maps a
    submesh to its root by equality (ranks and name), so a "tp" here would re-root the world's tp."""
    import torch
    from torch.distributed.device_mesh import DeviceMesh

    replicas = dims.dp * dims.cp
    ranks = torch.arange(dims.pp * replicas * dims.tp).view(dims.pp, replicas // ep, ep, dims.tp)
    return DeviceMesh(device_type, ranks, mesh_dim_names=("epp", "edp", "ep", "etp"))


def moe_layers(model: nn.Module) -> list[MoEFeedForward]:
    return [m for m in model.modules() if isinstance(m, MoEFeedForward)]


def apply_ep(model: nn.Module, expert_mesh) -> None:
    """Keep this rank's experts in every MoE layer and route through the all-to-all dispatcher."""
    ep, ep_rank = expert_mesh["ep"].size(), expert_mesh["ep"].get_local_rank()
    for layer in moe_layers(model):
        num_local = layer.experts.num_experts // ep
        layer.experts.keep_experts(ep_rank * num_local, num_local)
        layer.dispatcher = AllToAllDispatcher(expert_mesh["ep"].get_group(), num_local)


def apply_expert_fsdp(model: nn.Module, expert_mesh, zero_stage: int, mp_policy) -> None:
    """FSDP2 on every layer's experts over the edp mesh, summing their gradients over it (divided by
    divide_expert_grads after the backward). Call before the blocks' own fully_shard."""
    from torch.distributed.fsdp import fully_shard

    for layer in moe_layers(model):
        experts = fully_shard(layer.experts, mesh=expert_mesh["edp"], reshard_after_forward=zero_stage == 3,
                              mp_policy=mp_policy)
        experts.set_gradient_divide_factor(1.0)
        experts.set_force_sum_reduction_for_comms(True)


def is_expert_param(name: str) -> bool:
    """A routed expert's weight (executor/moe.py GroupedExperts), by its fully qualified name."""
    return ".experts." in name


def expert_param_names(model: nn.Module) -> list[str]:
    return [name for name, _ in model.named_parameters() if is_expert_param(name)]


def expert_params(model: nn.Module) -> list[nn.Parameter]:
    return [p for name, p in model.named_parameters() if is_expert_param(name)]


def _local_grads(expert_params: list) -> list[torch.Tensor]:
    """Each expert gradient as this rank holds it (its tp or FSDP shard, if split)."""
    from torch.distributed.tensor import DTensor

    return [p.grad.to_local() if isinstance(p.grad, DTensor) else p.grad for p in expert_params if p.grad is not None]


def reduce_expert_grads(expert_params: list[torch.Tensor], edp_group, num_replicas: int) -> None:
    """zero 0: sum the expert gradients over the ranks holding the same experts, divide by R."""
    for grad in _local_grads(expert_params):
        dist.all_reduce(grad, group=edp_group)  # SUM then divide: gloo has no ReduceOp.AVG
        grad.div_(num_replicas)


def divide_expert_grads(expert_params: list[torch.Tensor], num_replicas: int) -> None:
    """zero 1-3: FSDP2 summed the expert gradients over their edp group; divide by R."""
    for grad in _local_grads(expert_params):
        grad.div_(num_replicas)
