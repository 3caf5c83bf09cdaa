"""Apply a plan to a model (or one pipeline stage of it), in torchtitan's order:
tensor/sequence parallel -> activation checkpointing -> torch.compile per block -> data parallel
(FSDP2 / DDP). The caller builds on the meta device before and materializes (to_empty +
init_weights) after.

Mixed precision: where FSDP2 applies, its MixedPrecisionPolicy keeps the fp32 sharded parameters
as master weights and gathers bf16 copies for compute, accumulating gradients in fp32. A plan with
one replica (dp*cp = 1) gets FSDP2 over its one-rank dp mesh for exactly that (the gather is a
cast, no communication), kept unsharded across the micro-batches of a step, so the weights are
cast once per step instead of once per micro-batch as autocast does.

ZeRO stages map onto PyTorch as follows (what is sharded over the dp group):
- zero 3: FSDP2 `fully_shard(reshard_after_forward=True)`: parameters, gradients and optimizer
  state sharded; parameters all-gathered again for the backward.
- zero 2: `fully_shard(reshard_after_forward=False)`: gradients (reduce-scatter) and optimizer
  state sharded; parameters stay gathered between forward and backward, as ZeRO-2 keeps them.
- zero 1: the same as zero 2. FSDP2 has no "optimizer state only" mode; zero 2 communicates the
  same volume as ZeRO-1 (reduce-scatter + all-gather = one all-reduce, Rajbhandari et al. 2020,
  arXiv 1910.02054, section 7) and holds less memory, so a plan that fits with zero 1 fits here.
- zero 0: plain data parallel. DistributedDataParallel (bucketed all-reduce overlapped with the
  backward) when the model is neither tensor- nor pipeline-parallel; otherwise one all-reduce of
  every gradient over the dp group after the last micro-batch (no overlap), since DDP does not
  take DTensor parameters or pipeline stages.
"""
from __future__ import annotations

import torch
from torch import nn

TP_PLAN_TOP = {
    # module name -> (style, keyword arguments); "seq" marks layouts that depend on sequence_parallel.
    "tok_embeddings": ("Rowwise", {"input_layouts": "Replicate", "output_layouts": "seq"}),
    "norm": ("SequenceParallel", {}),
    "output": ("Colwise", {"input_layouts": "seq", "output_layouts": "Replicate"}),
}
TP_PLAN_LAYER = {
    "attention_norm": ("SequenceParallel", {}),
    "attention": ("PrepareInput", {"input_layouts": ("seq", None), "desired_input_layouts": ("Replicate", None)}),
    "attention.wq": ("Colwise", {}),
    "attention.wk": ("Colwise", {}),
    "attention.wv": ("Colwise", {}),
    "attention.wo": ("Rowwise", {"output_layouts": "seq"}),
    "attention.wq_b": ("Colwise", {}),     # multi-head latent attention: the heads' up-projections
    "attention.wkv_b": ("Colwise", {}),
    "ffn_norm": ("SequenceParallel", {}),
    "feed_forward": ("PrepareInput", {"input_layouts": ("seq",), "desired_input_layouts": ("Replicate",)}),
    "feed_forward.w1": ("Colwise", {}),
    "feed_forward.w2": ("Rowwise", {"output_layouts": "seq"}),
    "feed_forward.w3": ("Colwise", {}),
}
"""Megatron-LM's split (Shoeybi et al. 2019, arXiv 1909.08053, section 3): q/k/v and the MLP's
first matrices column-wise, wo and the MLP's last matrix row-wise, so each block needs one
all-reduce forward and one backward. With sequence parallelism (Korthikanti et al. 2022, arXiv
2205.05198, section 4.2) the norms run on a sequence shard ("seq" = Shard(1)) and the all-reduce
becomes reduce-scatter + all-gather. Without it the norms stay replicated and are left out."""


def _layout(name, sequence_parallel: bool):
    from torch.distributed.tensor import Replicate, Shard

    if name is None:
        return None
    if isinstance(name, tuple):
        return tuple(_layout(n, sequence_parallel) for n in name)
    if name == "seq":
        return Shard(1) if sequence_parallel else Replicate()
    return {"Replicate": Replicate()}[name]


def tp_styles(table: dict, sequence_parallel: bool, present: set[str]) -> dict:
    """The table turned into parallel-style objects, for the modules this (stage) model has."""
    from torch.distributed.tensor.parallel import (
        ColwiseParallel, PrepareModuleInput, RowwiseParallel, SequenceParallel,
    )

    classes = {"Colwise": ColwiseParallel, "Rowwise": RowwiseParallel,
               "PrepareInput": PrepareModuleInput, "SequenceParallel": SequenceParallel}
    styles = {}
    for name, (style, kwargs) in table.items():
        if name not in present:
            continue
        if style in ("SequenceParallel", "PrepareInput") and not sequence_parallel:
            continue  # replicated norms need no style, and the inputs are already replicated
        styles[name] = classes[style](**{k: _layout(v, sequence_parallel) for k, v in kwargs.items()})
    return styles


def apply_tp(model: nn.Module, tp_mesh, sequence_parallel: bool, expert_tp_mesh=None) -> None:
    """TP (+SP) over `tp_mesh`; MoE experts over `expert_tp_mesh` (the same ranks on the expert mesh,
    under expert parallelism) or `tp_mesh`."""
    from torch.distributed.tensor.parallel import parallelize_module

    top = {name for name, child in model.named_children() if child is not None}
    parallelize_module(model, tp_mesh, tp_styles(TP_PLAN_TOP, sequence_parallel, top))
    from executor.blocks import LatentAttention
    from executor.moe import MoEFeedForward
    from executor.torch_backend.moe_tensor_parallel import apply_moe_tp

    for layer in model.layers.values():
        present = {name for name, _ in layer.named_modules() if name}
        parallelize_module(layer, tp_mesh, tp_styles(TP_PLAN_LAYER, sequence_parallel, present))
        if isinstance(layer.feed_forward, MoEFeedForward):  # experts split over tp (etp = tp)
            apply_moe_tp(layer.feed_forward, tp_mesh, sequence_parallel, expert_tp_mesh)
        if isinstance(layer.attention, LatentAttention):
            apply_mla_tp(layer.attention, tp_mesh)


def apply_mla_tp(attention, tp_mesh) -> None:
    """Multi-head latent attention's replicated parts as Replicate DTensors on `tp_mesh` (the down-
    projections wq_a and wkv_a and the latent norms; the heads' projections are the TP plan's), so that
    their partial gradients from each rank's heads are summed where every Partial gradient is
    (train.py _clip_grad_norm), and the block knows the mesh (executor/blocks.py LatentAttention)."""
    from torch.distributed.tensor import Replicate

    from executor.torch_backend.moe_tensor_parallel import distribute_param

    for name in ("wq_a", "q_norm", "wkv_a", "kv_norm"):
        module = getattr(attention, name, None)
        if module is not None:
            distribute_param(module, "weight", tp_mesh, Replicate())
    attention.tp_mesh = tp_mesh



def apply_recompute(model: nn.Module, policy: str, num_layers: int) -> None:
    """selective: checkpoint every layer's attention core (softmax(QK^T)V, the part whose
    activations grow with s^2; Korthikanti et al. 2022, section 4.3); full: checkpoint the first
    `num_layers` whole layers this stage holds (recompute_num_layers, per pipeline stage)."""
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper

    if policy == "selective":
        for layer in model.layers.values():
            layer.attention.core = checkpoint_wrapper(layer.attention.core, preserve_rng_state=False)
    elif policy == "full":
        for key in list(model.layers.keys())[:num_layers]:
            model.layers[key] = checkpoint_wrapper(model.layers[key], preserve_rng_state=False)


def apply_compile(model: nn.Module) -> None:
    """torch.compile each transformer block (torchtitan's granularity: one graph per block,
    compiled once and reused by every layer of the same shape; FSDP2's hooks stay outside)."""
    for key in list(model.layers.keys()):
        model.layers[key] = torch.compile(model.layers[key])


def apply_fsdp(model: nn.Module, dp_mesh, zero_stage: int, mp_policy=None) -> None:
    """FSDP2 per transformer block, then the root (embedding, final norm, head; a tied embedding
    and head share the root's group). Parameters are resharded after the forward for zero 3 only
    (and at dp = 1 never: there is nothing to shard)."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    reshard = zero_stage == 3 and dp_mesh.size() > 1
    kwargs = {"mesh": dp_mesh, "reshard_after_forward": reshard,
              "mp_policy": mp_policy or MixedPrecisionPolicy()}
    for layer in model.layers.values():
        fully_shard(layer, **kwargs)
    fully_shard(model, **kwargs)


def mixed_precision(device: str, dtype: str, bf16_params: bool = True):
    """bf16/fp16 compute on GPU with fp32 gradient reduction and fp32 master weights (fp8 plans:
    bf16 outside their fp8 GEMMs); fp32 on CPU and without bf16_params (autocast then does the casting)."""
    from torch.distributed.fsdp import MixedPrecisionPolicy

    if device != "cuda" or dtype not in ("bf16", "fp16", "fp8") or not bf16_params:
        return MixedPrecisionPolicy()
    param_dtype = torch.float16 if dtype == "fp16" else torch.bfloat16
    return MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=torch.float32)


def all_reduce_grads(models: list[nn.Module], dp_group, skip=()) -> None:
    """zero 0 under TP or PP: average every gradient over the dp group, once per step (but the
    parameters in `skip`: experts under expert parallelism, reduced over their own group)."""
    import torch.distributed as dist
    from torch.distributed.tensor import DTensor

    skipped = {id(p) for p in skip}
    grads = [p.grad for m in models for p in m.parameters() if p.grad is not None and id(p) not in skipped]
    num_replicas = dist.get_world_size(dp_group)
    for grad in grads:
        local = grad.to_local() if isinstance(grad, DTensor) else grad
        dist.all_reduce(local, group=dp_group)  # SUM then divide: gloo has no ReduceOp.AVG
        local.div_(num_replicas)
