"""fp8 training of a plan whose training dtype is "fp8": torchao's float8 linears (Float8Linear,
dynamic scaling, e4m3 forward and e5m2 gradients) in place of the transformer blocks' nn.Linear.

Which linears: the blocks' attention and MLP projections (wq, wk, wv, wo, w1, w2, w3) whose both
dimensions are multiples of 16 (the fp8 GEMM kernels' rule, torch._scaled_mm; torchtitan 0.3.0
components/quantization/utils.py module_filter_fn skips the others the same way). The embedding,
the output head, the router and the experts' grouped GEMMs stay in the compute dtype (bf16), as the
`autoplan` framework entry says (autoplan/specs/frameworks/autoplan.py, "dtypes" and "fp8_moe").

Recipes (torchao Float8LinearRecipeName): "tensorwise" (one scale per tensor, cuBLAS) and "rowwise"
(one scale per row, CUTLASS). With tensorwise under FSDP2 sharding the weights are all-gathered in
fp8 (torchao enable_fsdp_float8_all_gather: half the bytes of a bf16 gather) and their scales are
computed once per step after the optimizer (precompute_float8_dynamic_scale_for_fsdp, one
all-reduce of every weight's amax); rowwise gathers bf16 (torchao supports the fp8 gather for
tensorwise scaling only).

On a CPU the fp8 GEMMs are emulated (Float8LinearConfig.emulate: the operands are cast to fp8 and
back, then multiplied in the compute dtype), so a CPU run computes the same rounding as a GPU one
and tests can compare fp8 losses with the unquantized ones.
"""
from __future__ import annotations

from dataclasses import replace

from torch import nn

from autoplan.specs import AutoplanError, PlanDocument, get_framework

from executor.options import FP8_RECIPES, RunOptions

FP8_LINEARS = ("wq", "wk", "wv", "wo", "w1", "w2", "w3")
"""The block linears an fp8 plan runs in fp8 (executor/blocks.py Attention and FeedForward)."""
FP8_DIM_MULTIPLE = 16
"""Both dimensions of an fp8 GEMM operand must be multiples of 16 (torch._scaled_mm)."""


def torchao_float8():
    """torchao.float8, or one line saying how to install it."""
    try:
        import torchao.float8 as float8
    except ImportError as exc:  # ModuleNotFoundError, or a torchao built for another torch
        raise AutoplanError(f"fp8 plans need torchao's float8 training (pip install torchao, in the "
                            f"`autoplan[torch]` extra), which did not import here: {exc}") from None
    return float8


def recipe_for(doc: PlanDocument, options: RunOptions) -> str:
    """The scaling recipe of an fp8 plan's run: --fp8-recipe, else the plan framework's; "" for a
    plan in another dtype."""
    if doc.training.dtype != "fp8":
        return ""
    return options.fp8_recipe or ("rowwise" if get_framework(doc.framework).fp8_rowwise else "tensorwise")


def is_fp8_linear(fqn: str, module: nn.Module) -> bool:
    """Whether the linear at `fqn` runs in fp8: a block projection with 16-divisible dimensions."""
    return (isinstance(module, nn.Linear) and fqn.rsplit(".", 1)[-1] in FP8_LINEARS and ".layers." in f".{fqn}"
            and module.in_features % FP8_DIM_MULTIPLE == 0 and module.out_features % FP8_DIM_MULTIPLE == 0)


def float8_all_gather(recipe: str, fsdp_sharded: bool) -> bool:
    """FSDP2 gathers the fp8 linears' weights in fp8: tensorwise scaling, weights sharded over replicas."""
    return recipe == "tensorwise" and fsdp_sharded


def convert(model: nn.Module, recipe: str, emulate: bool, all_gather: bool) -> int:
    """Swap the model's fp8 linears (is_fp8_linear) for torchao Float8Linear, in place, on the meta
    device before tensor parallelism and FSDP2 wrap it. Returns how many were swapped."""
    assert recipe in FP8_RECIPES, recipe
    float8 = torchao_float8()
    config = float8.Float8LinearConfig.from_recipe_name(recipe)
    config = replace(config, emulate=emulate, enable_fsdp_float8_all_gather=all_gather)
    swapped = []

    def keep(module: nn.Module, fqn: str) -> bool:
        if is_fp8_linear(fqn, module):
            swapped.append(fqn)
            return True
        return False

    float8.convert_to_float8_training(model, module_filter_fn=keep, config=config)
    return len(swapped)


def precompute_scales(models: list) -> None:
    """After the optimizer step: every fp8-gathered weight's scale in one all-reduce (tensorwise
    with the fp8 all-gather only; torchao otherwise computes each scale in its cast)."""
    float8 = torchao_float8()
    for model in models:
        float8.precompute_float8_dynamic_scale_for_fsdp(model)
