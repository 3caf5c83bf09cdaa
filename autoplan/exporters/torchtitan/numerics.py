"""torchtitan 0.3.0: the model's own numerics over what torchtitan's builders set -- RoPE base and
scaling, the q/k/v biases, the norm epsilon and the RoPE cache length -- or a refusal naming the field
torchtitan cannot express.

torchtitan's builders hard-code them: a shape built in the module (llama3's private builders) gets
RoPE theta 10000 and no scaling (ComplexRoPE.Config defaults, models/common/rope.py line 97), RMSNorm
eps 1e-5 (models/common/nn_modules.py line 140) and no bias on wqkv (Linear.Config bias=False,
models/common/linear.py line 33); the shipped flavors their own (llama3: theta 500000 with llama
scaling 8; qwen3 235B-A22B: theta 5000000, where Qwen's config.json says 1000000). The module sets
each the model's config states, on the model config before torchtitan builds it."""
from __future__ import annotations

from autoplan.specs import InfeasiblePlan, PlanDocument

_SCALING = {"llama3": ("llama", "scaling_factor"), "yarn": ("yarn", "rope_factor")}
"""HF rope_scaling kind -> (RoPE.Config scaling, its factor field) of torchtitan 0.3.0 (rope.py lines 98-108)."""
NORM_CONFIGS_SOURCE = '''def _norm_configs(config):
    """Every RMSNorm.Config inside a model config (its blocks' norms, q/k and MLA latent norms, the final one)."""
    if isinstance(config, RMSNorm.Config):
        yield config
    elif isinstance(config, (list, tuple)):
        for item in config:
            yield from _norm_configs(item)
    elif dataclasses.is_dataclass(config):
        for field in dataclasses.fields(config):
            yield from _norm_configs(getattr(config, field.name))'''
"""Helper the module defines when it sets the norm epsilon."""


def numerics(doc: PlanDocument, name: str, custom: bool, rope_positions: int, notes: list) -> tuple:
    """(imports, helper source or "", body lines) that set the model's numerics on
    config.model_spec.model; `rope_positions` is what the builder's RoPE cache holds."""
    model, seq_len = doc.model, doc.training.seq_len
    rope = _rope_fields(doc, name, custom, notes)
    if seq_len > rope_positions:
        notes.append(f"seq_len={seq_len}: torchtitan's {name} flavors cache RoPE for {rope_positions} positions; "
                     f"the module sizes the cache for the plan")
        rope["max_seq_len"] = seq_len
    bias = model.qkv_bias and not model.linear_bias  # q/k/v only (Qwen); with every linear biased, none is
    if bias and not custom:
        raise InfeasiblePlan(f"{model.name!r} has q/k/v biases (qkv_bias); torchtitan 0.3.0's {name} model has none "
                             f"and the module cannot add them to a shipped flavor; export it to megatron",
                             "export_torchtitan_qkv_bias")
    imports, lines = [], []
    if rope or bias:
        lines.append("    for layer in config.model_spec.model.layers:  # the model's config, over the builder's")
    if rope:
        imports.append(("dataclasses", "replace"))
        args = ", ".join(f"{key}={value!r}" for key, value in rope.items())
        lines.append(f"        layer.attention.rope = replace(layer.attention.rope, {args})")
    if bias:  # Qwen: a bias on q, k and v (the fused wqkv); llama3's builder makes none
        lines.append("        layer.attention.qkv_linear.wqkv.bias = True")
    helper = ""
    if model.norm_eps:
        imports += [("torchtitan.models.common", "RMSNorm"), ("", "dataclasses")]
        lines += ["    for norm in _norm_configs(config.model_spec.model):",
                  f"        norm.eps = {model.norm_eps!r}"]
        helper = NORM_CONFIGS_SOURCE
    else:
        notes.append("norm_eps not stated in the model's config: torchtitan's RMSNorm eps (1e-5 unless the flavor sets "
                     "its own)")
    return imports, helper, lines


def _rope_fields(doc: PlanDocument, name: str, custom: bool, notes: list) -> dict:
    """RoPE.Config fields to replace: theta and scaling where the model states them."""
    model = doc.model
    if model.position != "rope":
        return {}
    out: dict = {}
    if model.rope_theta:
        out["theta"] = float(model.rope_theta)
    else:
        notes.append("rope_theta not stated in the model's config: " + (
            "torchtitan's default 10000" if custom else f"the {name} flavor's own"))
    if model.rope_scaling:
        if model.rope_scaling not in _SCALING:
            raise InfeasiblePlan(f"{model.name!r} scales RoPE by {model.rope_scaling!r} (rope_scaling); torchtitan "
                                 f"0.3.0's RoPE offers llama3 and yarn scaling only; export it to megatron",
                                 "export_torchtitan_rope_scaling")
        scaling, factor_field = _SCALING[model.rope_scaling]
        if scaling == "llama" and name == "qwen3":  # CosSinRoPE raises on llama scaling (rope.py line 285)
            raise InfeasiblePlan(f"{model.name!r}: torchtitan 0.3.0's qwen3 RoPE has no llama3 scaling "
                                 f"(rope_scaling); export it to megatron", "export_torchtitan_rope_scaling")
        out["scaling"] = scaling
        if model.rope_scaling_factor:
            out[factor_field] = float(model.rope_scaling_factor)
        notes.append(f"rope_scaling {model.rope_scaling} x{model.rope_scaling_factor:g}: its other parameters "
                     f"(original context, frequency factors / beta) are torchtitan's RoPE.Config defaults")
    elif model.rope_theta and (name != "qwen3"):
        out["scaling"] = "none"  # llama3's and deepseek_v3's flavors scale; a model that states no scaling has none
    return out
