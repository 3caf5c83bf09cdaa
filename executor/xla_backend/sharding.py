"""How a plan becomes SPMD sharding annotations: a literal table of parameter specs, activation
specs at the module boundaries, ZeRO over the data axis, and activation checkpointing.

Partition specs name mesh axes per tensor dimension (torch_xla `xs.mark_sharding`); None replicates
that dimension. An `nn.Linear` weight is (out_features, in_features), so Megatron's column-parallel
split (Shoeybi et al. 2019, arXiv 1909.08053, section 3) is "tp" on dim 0 and the row-parallel split
is "tp" on dim 1. "fsdp" in the table is a placeholder: the data axis under ZeRO-3, else None.

What SPMD lets us say, honestly: a mark is an annotation, and XLA's partitioner chooses the
collectives and XLA's buffer assignment what lives when.
- ZeRO-3: parameters carry "dp" on their other dimension; the partitioner all-gathers them where
  they are used and reduce-scatters their gradients.
- ZeRO-1: the AdamW moments carry the ZeRO-3 spec while the parameters stay replicated over dp, so
  the update runs on 1/dp of every tensor and the new parameters are all-gathered.
- ZeRO-2: as ZeRO-1, and the accumulated gradients are marked dp-sharded before the update, which
  lets the partitioner reduce-scatter them instead of all-reducing.
"""
from __future__ import annotations

import re

import torch
from torch import nn

from executor.model import canonical_name

# Parameter name (without "layers.<i>.") -> partition spec, one entry per tensor dimension.
PARAM_SPECS = {
    "tok_embeddings.weight": ("tp", "fsdp"),      # vocab-parallel embedding (rows = vocabulary)
    "pos_embeddings.weight": (None, "fsdp"),
    "attention_norm.weight": ("fsdp",), "attention_norm.bias": ("fsdp",),
    "attention.wq.weight": ("tp", "fsdp"), "attention.wq.bias": ("tp",),   # column-parallel
    "attention.wk.weight": ("tp", "fsdp"), "attention.wk.bias": ("tp",),
    "attention.wv.weight": ("tp", "fsdp"), "attention.wv.bias": ("tp",),
    "attention.wo.weight": ("fsdp", "tp"), "attention.wo.bias": ("fsdp",),  # row-parallel
    "ffn_norm.weight": ("fsdp",), "ffn_norm.bias": ("fsdp",),
    "feed_forward.w1.weight": ("tp", "fsdp"), "feed_forward.w1.bias": ("tp",),
    "feed_forward.w3.weight": ("tp", "fsdp"), "feed_forward.w3.bias": ("tp",),
    "feed_forward.w2.weight": ("fsdp", "tp"), "feed_forward.w2.bias": ("fsdp",),
    "norm.weight": ("fsdp",), "norm.bias": ("fsdp",),
    "output.weight": ("tp", "fsdp"),              # vocab-parallel LM head
}
COLUMN_PARALLEL = ("attention.wq", "attention.wk", "attention.wv", "feed_forward.w1", "feed_forward.w3", "output")
"""Modules whose output is split on its last dimension over tp."""
ROW_PARALLEL = ("attention.wo", "feed_forward.w2")
"""Modules whose output is a partial sum over tp, reduced (or reduce-scattered under SP) to the
residual-stream layout."""
_LAYER_PREFIX = re.compile(r"^layers\.\d+\.")


def param_spec(name: str, fsdp_axis: str | None) -> tuple:
    """Partition spec of the parameter `name` (contract FQN) with "fsdp" resolved to `fsdp_axis`."""
    key = _LAYER_PREFIX.sub("", canonical_name(name))
    if key not in PARAM_SPECS:
        raise KeyError(f"no sharding rule for parameter {name!r}; add it to PARAM_SPECS")
    return tuple(fsdp_axis if axis == "fsdp" else axis for axis in PARAM_SPECS[key])


def activation_specs(sequence_parallel: bool) -> dict:
    """Specs of the (batch, seq, features) activations at module boundaries, and of the tokens.

    The residual stream is split on batch over dp and on sequence over cp; under Megatron sequence
    parallelism (Korthikanti et al. 2022, arXiv 2205.05198, section 4.2) it is also split on
    sequence over tp, so norms run on 1/tp of the tokens and the row-parallel outputs are
    reduce-scattered instead of all-reduced.
    """
    seq = ("cp", "tp") if sequence_parallel else "cp"
    return {"tokens": ("dp", "cp"), "residual": ("dp", seq, None), "column": ("dp", "cp", "tp")}


def shard_parameters(model: nn.Module, mesh, zero_stage: int) -> dict:
    """Mark every parameter per PARAM_SPECS; returns {name: spec} of what was marked."""
    import torch_xla.distributed.spmd as xs

    fsdp_axis = "dp" if zero_stage == 3 else None
    marked = {}
    for name, param in model.named_parameters():
        spec = param_spec(name, fsdp_axis)
        xs.mark_sharding(param, mesh, spec)
        marked[canonical_name(name)] = spec
    return marked


def shard_activations(model: nn.Module, mesh, sequence_parallel: bool) -> None:
    """Hooks that annotate activations (and their gradients) at the block and projection boundaries."""
    import torch_xla.distributed.spmd as xs

    specs = activation_specs(sequence_parallel)

    def mark(spec):
        return lambda t: xs.mark_sharding_with_gradients(t, mesh, spec)

    residual, column = mark(specs["residual"]), mark(specs["column"])
    for name, module in model.named_modules():
        name = canonical_name(name)
        short = _LAYER_PREFIX.sub("", name)
        if re.fullmatch(r"layers\.\d+", name) or name == "norm":
            module.register_forward_pre_hook(lambda _m, args: (residual(args[0]), *args[1:]))
        elif short in COLUMN_PARALLEL:
            module.register_forward_hook(lambda _m, _args, out: column(out))
        elif short in ROW_PARALLEL:
            module.register_forward_hook(lambda _m, _args, out: residual(out))


def init_optimizer_state(optimizer: torch.optim.AdamW, model: nn.Module, mesh, zero_stage: int) -> None:
    """Create the AdamW moments up front, marked per the ZeRO stage.

    Creating them before the first step (as AdamW would, lazily: step 0.0 on the host, zero moments
    shaped like the parameter) lets ZeRO-1/2 mark them dp-sharded, and makes the first step's graph
    the same as every later one, so XLA compiles it once.
    """
    import torch_xla.distributed.spmd as xs

    fsdp_axis = "dp" if zero_stage >= 1 else None
    for name, param in model.named_parameters():
        spec = param_spec(name, fsdp_axis)
        state = optimizer.state[param]
        state["step"] = torch.tensor(0.0)
        for key in ("exp_avg", "exp_avg_sq"):
            state[key] = torch.zeros_like(param)
            xs.mark_sharding(state[key], mesh, spec)


def shard_gradients(model: nn.Module, mesh) -> None:
    """ZeRO-2: mark the accumulated gradients dp-sharded before clipping and the update."""
    import torch_xla.distributed.spmd as xs

    for name, param in model.named_parameters():
        if param.grad is not None:
            xs.mark_sharding(param.grad, mesh, param_spec(name, "dp"))


def apply_recompute(model: nn.Module, recompute: str, num_layers: int, checkpoint_fn) -> list:
    """Wrap what the plan recomputes in activation checkpointing; returns the wrapped module names.

    "full": the first `num_layers` transformer blocks (Megatron's "block" method: the rest keep their
    activations); "selective": the attention core of every block (Korthikanti et al. 2022, 4.1).
    `checkpoint_fn` is torch_xla's checkpoint (it adds optimization barriers so XLA's CSE cannot
    merge the recomputation back into the forward pass).
    """
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper

    if recompute == "none":
        return []
    wrapped = []
    for index in list(model.layers.keys()):
        block = model.layers[index]
        if recompute == "full" and len(wrapped) < num_layers:
            model.layers[index] = checkpoint_wrapper(block, checkpoint_fn=checkpoint_fn)
            wrapped.append(f"layers.{index}")
        elif recompute == "selective":
            block.attention.core = checkpoint_wrapper(block.attention.core, checkpoint_fn=checkpoint_fn)
            wrapped.append(f"layers.{index}.attention.core")
    return wrapped


def parallelize(model: nn.Module, mesh, plan, checkpoint_fn) -> tuple:
    """Apply a plan to a materialized model on the XLA device, in torchtitan's fixed order:
    parameter layout, activation layout, then activation checkpointing (the hooks go on the bare
    modules, before the checkpoint wrappers change the module tree). Returns (marked specs,
    recomputed module names)."""
    marked = shard_parameters(model, mesh, plan.zero_stage)
    shard_activations(model, mesh, plan.sequence_parallel)
    recomputed = apply_recompute(model, plan.recompute, plan.recompute_num_layers, checkpoint_fn)
    return marked, recomputed
