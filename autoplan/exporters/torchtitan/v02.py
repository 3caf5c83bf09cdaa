"""torchtitan 0.2.0, export target `torchtitan-0.2`: the TOML job config of a plan (section and option
names of torchtitan's `JobConfig`, torchtitan/config/job_config.py at 0.2.0).

0.2.x are the last torchtitan releases that read TOML; the current one (0.3.0, target `torchtitan`,
autoplan/exporters/torchtitan/v03.py) configures jobs in Python. The rules 0.3.0 relaxed are re-checked
here: 0.2.0's DDP is one-dimensional, and its tensor parallelism always shards on the sequence."""
from __future__ import annotations

import json

from autoplan.exporters.architecture import architecture_facts, unmapped_note
from autoplan.exporters.common import comment_block, full_recompute_every_k, header_lines
from autoplan.exporters.launch import launch_script
from autoplan.exporters.torchtitan.flavors import (
    LLAMA3_02_FLAVORS, deepseek_v3_flavor, is_deepseek_v3, llama3_02_flavor, llama3_architecture_notes,
)
from autoplan.exporters.torchtitan.shared import data_parallel_degrees, pipeline_and_experts, training_section
from autoplan.specs import InfeasiblePlan, PlanDocument


def export(doc: PlanDocument) -> tuple:
    par = doc.parallel
    if par.zero_stage == 0 and par.dp > 1 and (par.tp, par.pp, par.cp) != (1, 1, 1):
        # torchtitan 0.2.0 torchtitan/models/llama3/infra/parallelize.py: DDP (dp_replicate alone) is
        # applied only when no other parallelism is; 0.3.0 runs every data-parallel layout as FSDP/HSDP.
        raise InfeasiblePlan(f"torchtitan 0.2.0 runs plain data parallelism (zero_stage=0) only without tp/pp/cp, "
                             f"got tp={par.tp}, pp={par.pp}, cp={par.cp}; export to torchtitan (0.3.0) or plan "
                             f"with --zero 1 or more", "export_torchtitan02_zero0")
    if doc.model.is_moe and not doc.model.is_mla:
        # torchtitan 0.2.0's MoE models are its own architectures (deepseek_v3 always has MLA; llama4;
        # qwen3), none of which a plain top-k mixture with standard attention, such as Mixtral, maps onto.
        raise InfeasiblePlan(f"torchtitan 0.2.0 has no model for the mixture of experts {doc.model.name!r} (its MoE "
                             f"models are deepseek_v3 with MLA, llama4 and qwen3, with their own layers; Qwen3-MoE "
                             f"maps onto 0.3.0's qwen3: --to torchtitan); export it to megatron or deepspeed",
                             "export_torchtitan_moe")
    _, shard, _ = data_parallel_degrees(doc, [])
    if par.ep > 1 and (par.ep % (par.cp * par.tp) or (shard * par.cp * par.tp) % par.ep):
        # torchtitan 0.2.0 distributed/parallel_dims.py _validate (lines 57-64): its experts are whole
        # (expert_tensor_parallel_degree 1, the default this export keeps), and then the expert group takes
        # whole cp x tp blocks of the shard group: ep % (cp*tp) == 0 and (dp_shard*cp*tp) % ep == 0. 0.3.0
        # lets ep take part of a block (ep | dp_shard*cp*tp), which the planner's torchtitan rules follow.
        raise InfeasiblePlan(f"torchtitan 0.2.0 builds its expert group from whole cp x tp blocks: ep must be a "
                             f"multiple of cp*tp = {par.cp * par.tp} and divide dp_shard*cp*tp = "
                             f"{shard * par.cp * par.tp}, got ep={par.ep}; export to torchtitan (0.3.0) or plan "
                             f"with --ep a multiple of {par.cp * par.tp}", "export_torchtitan02_ep")
    notes: list = []
    sections = {
        "job": {"description": f"autoplan plan {doc.plan_id}"},
        "model": _model(doc, notes),
        "training": training_section(doc, notes),
        "parallelism": _parallelism(doc, notes),
        "activation_checkpoint": _activation_checkpoint(doc, notes),
        "optimizer": {"name": "AdamW"},
    }
    if doc.parallel.tp_comm_overlap:
        # Async TP, as the plan was costed (Framework.tp_comm_overlap_kind "async-tp"): 0.2.0 runs it only
        # under compile of the model (distributed/tensor_parallel.py maybe_enable_async_tp).
        sections["parallelism"]["enable_async_tensor_parallel"] = True
        sections["compile"] = {"enable": True, "components": ["model", "loss"]}
    if doc.training.dtype == "fp8":
        # torchao's Float8Linear swapped in by the converter registered as "quantize.linear.float8".
        sections["model"]["converters"] = ["quantize.linear.float8"]
        sections["quantize.linear.float8"] = {"enable_fsdp_float8_all_gather": doc.parallel.zero_stage == 3}
    if needs_flavor_module(doc.model):
        sections["experimental"] = {"custom_import": FLAVOR_MODULE}
    body = "\n".join(_toml_section(name, values) for name, values in sections.items())
    return comment_block(header_lines(doc, "torchtitan-0.2"), notes) + "\n" + body, notes


FLAVOR_MODULE = "autoplan_flavor"
"""Module the launch script writes beside the TOML to register a flavor torchtitan does not ship
(loaded by `[experimental] custom_import`)."""


def flavor(model) -> str:
    """torchtitan's own flavor when the shape is one it ships, else the plan's model name."""
    return (deepseek_v3_flavor(model) if is_deepseek_v3(model) else llama3_02_flavor(model)) or model.name


def needs_flavor_module(model) -> bool:
    """A llama3-architecture model whose shape torchtitan does not ship (MLA models go to deepseek_v3)."""
    return not is_deepseek_v3(model) and not llama3_02_flavor(model)


def flavor_module(doc: PlanDocument) -> str:
    """Python that registers the plan's model as a llama3 flavor. torchtitan sizes the SwiGLU FFN as
    multiple_of * ceil(int(ffn_dim_multiplier * int(8 * dim / 3)) / multiple_of) (llama3 FeedForward),
    so multiple_of = ffn_hidden_size, with a multiplier below 1 only when 8*dim/3 exceeds it, is exact."""
    model = doc.model
    base = int(2 * 4 * model.hidden_size / 3)
    multiplier = None if base <= model.ffn_hidden_size else model.ffn_hidden_size / base
    return (f"# Registers {model.name!r} as a torchtitan llama3 flavor; written by autoplan for plan {doc.plan_id}.\n"
            "from torchtitan.models.llama3 import llama3_args\n"
            "from torchtitan.models.llama3.model.args import RoPEScalingArgs, TransformerModelArgs\n\n"
            f"llama3_args[{model.name!r}] = TransformerModelArgs(\n"
            f"    dim={model.hidden_size}, n_layers={model.num_layers}, n_heads={model.num_heads}, "
            f"n_kv_heads={model.num_kv_heads},\n"
            f"    vocab_size={model.vocab_size}, multiple_of={model.ffn_hidden_size}, ffn_dim_multiplier={multiplier!r},\n"
            f"    max_seq_len={max(model.max_seq_len, doc.training.seq_len)},{stated_numerics(model)}\n)\n")


def stated_numerics(model) -> str:
    """The RoPE base, scaling and norm epsilon of the model's config as TransformerModelArgs fields (0.2.0
    llama3 model/args.py lines 21-39; unstated base and eps: its defaults 10000 and 1e-5). 0.2.0's llama3
    applies Llama 3.1's RoPE scaling to every flavor (model.py precompute_freqs_cis, lines 61-80; its
    RoPEScalingArgs default factor 8): a model without that scaling gets factor 1, which leaves every
    frequency as it is."""
    fields = [f"rope_theta={float(model.rope_theta)!r}"] if model.rope_theta and model.position == "rope" else []
    fields += [f"norm_eps={model.norm_eps!r}"] if model.norm_eps else []
    factor = model.rope_scaling_factor if model.rope_scaling == "llama3" else 1.0
    fields.append(f"rope_scaling_args=RoPEScalingArgs(scaling_factor={float(factor)!r})")
    return "\n    " + ", ".join(fields) + ","


def _numerics_notes(model) -> list:
    """One line naming the numerics of the model's config that the 0.2.0 export does not set."""
    lost = []
    if not needs_flavor_module(model):
        lost += [f"rope_theta={model.rope_theta:g}"] if model.rope_theta else []
        lost += [f"norm_eps={model.norm_eps:g}"] if model.norm_eps else []
    shipped_scaling = needs_flavor_module(model) or model.rope_scaling_factor == 8  # the flavors' llama3 x8
    if model.rope_scaling and (model.rope_scaling != "llama3" or not shipped_scaling):
        lost.append(f"rope_scaling {model.rope_scaling} x{model.rope_scaling_factor:g}")
    lost += ["q/k/v biases (qkv_bias)"] if model.qkv_bias and not model.linear_bias else []
    lost += [f"router scoring {model.moe_router_score}"] if model.moe_router_score else []
    if not lost:
        return []
    return ["not set by the torchtitan 0.2.0 export (the shipped flavor's or torchtitan's own apply; export to "
            "torchtitan 0.3.0 or megatron to carry them): " + ", ".join(lost)]


def launch(doc: PlanDocument, launcher: str, header: list, toml_text: str) -> str:
    """A launch script: the TOML (and the flavor module) written next to the run, then torchtitan.train."""
    files = {"job.toml": toml_text}
    env = {}
    if needs_flavor_module(doc.model):
        files[f"{FLAVOR_MODULE}.py"] = flavor_module(doc)
        env["PYTHONPATH"] = '"$RUN_DIR${PYTHONPATH:+:$PYTHONPATH}"'  # where custom_import finds it
    placeholders = {
        "TOKENIZER_PATH": "folder with the Hugging Face tokenizer files (model.hf_assets_path)",
        "DATASET": "a dataset torchtitan registers (torchtitan/datasets/hf_datasets.py, e.g. c4)",
        "TRAIN_STEPS": "optimizer steps to run",
    }
    args = [("--job.config_file", '"$RUN_DIR/job.toml"'), ("--model.hf_assets_path", '"$TOKENIZER_PATH"'),
            ("--training.dataset", '"$DATASET"'), ("--training.steps", '"$TRAIN_STEPS"')]
    return launch_script(doc, header, placeholders, env, files, ["-m", "torchtitan.train"], args, launcher)


def _model(doc: PlanDocument, notes: list) -> dict:
    model = doc.model
    name = flavor(model)
    if needs_flavor_module(model):
        notes.append(f"model shape: torchtitan 0.2.0 ships the llama3 flavors {', '.join(LLAMA3_02_FLAVORS)}; "
                     f"{model.name!r} is registered by the module {FLAVOR_MODULE}.py that `--launch` writes "
                     f"(`[experimental] custom_import`); without it, register dim={model.hidden_size} "
                     f"n_layers={model.num_layers} n_heads={model.num_heads} n_kv_heads={model.num_kv_heads} "
                     f"FFN {model.ffn_hidden_size} yourself")
    if name in LLAMA3_02_FLAVORS:
        notes.append(f"vocabulary: torchtitan takes it from the tokenizer (hf_assets_path); the plan assumes "
                     f"{model.vocab_size} rows")
    notes += llama3_architecture_notes(model) + _numerics_notes(model)
    facts, mapped = architecture_facts(model), set()
    if is_deepseek_v3(model):
        # torchtitan's deepseek_v3 ModelArgs carry MLA, shared experts and the leading dense layers.
        args = [f"moe_inter_dim={model.expert_ffn_size}", f"n_routed_experts={model.num_experts}",
                f"n_activated_experts={model.num_experts_per_token}",
                f"n_shared_experts={model.shared_expert_ffn_size // model.expert_ffn_size}",
                f"n_dense_layers={model.num_dense_layers}"]
        if model.is_mla:
            args += [f"q_lora_rank={model.q_lora_rank}", f"kv_lora_rank={model.kv_lora_rank}",
                     f"qk_nope_head_dim={model.head_dim - model.qk_rope_head_dim}",
                     f"qk_rope_head_dim={model.qk_rope_head_dim}", f"v_head_dim={model.value_dim}"]
        notes.append("mixture of experts / MLA: register the flavor in torchtitan's deepseek_v3 model with "
                     + " ".join(args))
        mapped = {"mla", "moe_ffn", "shared_experts"} | ({"moe_layers"} if model.moe_layer_freq == 1 else set())
    notes += unmapped_note(facts, mapped, "torchtitan's " + ("deepseek_v3" if is_deepseek_v3(model)
                                                             else "llama3") + " model")
    if model.tied_embeddings:
        notes.append("tied_embeddings: torchtitan's llama3 keeps separate embedding and output weights")
    return {"name": "deepseek_v3" if is_deepseek_v3(model) else "llama3", "flavor": name}


def _parallelism(doc: PlanDocument, notes: list) -> dict:
    par = doc.parallel
    # plain DDP at ZeRO 0 (export refuses it with tp/pp/cp)
    replicate, shard, reshard = data_parallel_degrees(doc, notes)
    if par.tp > 1 and not par.sequence_parallel:
        notes.append("sequence_parallel=false: torchtitan 0.2.0's tensor parallelism always shards the norms "
                     "on the sequence (sequence parallel; 0.3.0 has enable_sequence_parallel)")
    return {"data_parallel_replicate_degree": replicate, "data_parallel_shard_degree": shard,
            "fsdp_reshard_after_forward": reshard, "tensor_parallel_degree": par.tp,
            "context_parallel_degree": par.cp, "pipeline_parallel_degree": par.pp,
            **pipeline_and_experts(doc, notes, head="output")}


def _activation_checkpoint(doc: PlanDocument, notes: list) -> dict:
    par = doc.parallel
    if par.recompute == "none":
        return {"mode": "none"}
    if par.recompute == "selective":
        notes.append("recompute=selective: torchtitan's op-level selective checkpointing saves the "
                     "matmul outputs and recomputes the rest, close to but not only the attention core")
        return {"mode": "selective", "selective_ac_option": "op"}
    per_stage = par.layers_per_stage(doc.model.num_layers)
    if par.recompute_num_layers == per_stage:
        return {"mode": "full"}
    # Layer-selective checkpointing wraps every k-th block; the count is exact only if it divides.
    k, count = full_recompute_every_k(per_stage, par.recompute_num_layers)
    if count != par.recompute_num_layers:
        notes.append(f"recompute_num_layers={par.recompute_num_layers} of {per_stage} layers per stage: "
                     f"torchtitan checkpoints every k-th layer; k={k} recomputes {count}")
    return {"mode": "selective", "selective_ac_option": str(k)}


def _toml_section(name: str, values: dict) -> str:
    return f"[{name}]\n" + "".join(f"{key} = {_toml_value(v)}\n" for key, v in values.items())


def _toml_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):  # a TOML basic string: JSON's escapes are a subset of TOML's
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    raise TypeError(f"no TOML form for {value!r}")
