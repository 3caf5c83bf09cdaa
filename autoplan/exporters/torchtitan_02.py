"""torchtitan 0.2.0, export target `torchtitan-0.2`: the TOML job config of a plan (section and option
names of torchtitan's `JobConfig`, torchtitan/config/job_config.py at 0.2.0).

0.2.x are the last torchtitan releases that read TOML; the current one (0.3.0, target `torchtitan`,
autoplan/exporters/torchtitan.py) configures jobs in Python. The rules 0.3.0 relaxed are re-checked
here: 0.2.0's DDP is one-dimensional, and its tensor parallelism always shards on the sequence."""
from __future__ import annotations

import json

from autoplan.exporters.architecture import architecture_facts, unmapped_note
from autoplan.exporters.common import (
    comment_block, full_recompute_every_k, header_lines, stages_text,
)
from autoplan.exporters.launch import launch_script
from autoplan.specs import InfeasiblePlan, PlanDocument

# torchtitan's mixed_precision_param accepts bfloat16 or float32; fp8 runs its GEMMs through the
# float8 converter on top of bfloat16 parameters.
_PARAM_DTYPES = {"bf16": "bfloat16", "fp8": "bfloat16", "fp16": "bfloat16", "fp32": "float32"}


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
    notes: list = []
    sections = {
        "job": {"description": f"autoplan plan {doc.plan_id}"},
        "model": _model(doc, notes),
        "training": _training(doc, notes),
        "parallelism": _parallelism(doc, notes),
        "activation_checkpoint": _activation_checkpoint(doc, notes),
        "optimizer": {"name": "AdamW"},
    }
    if doc.training.dtype == "fp8":
        # torchao's Float8Linear swapped in by the converter registered as "quantize.linear.float8".
        sections["model"]["converters"] = ["quantize.linear.float8"]
        sections["quantize.linear.float8"] = {"enable_fsdp_float8_all_gather": doc.parallel.zero_stage == 3}
    if _needs_flavor_module(doc.model):
        sections["experimental"] = {"custom_import": FLAVOR_MODULE}
    body = "\n".join(_toml_section(name, values) for name, values in sections.items())
    return comment_block(header_lines(doc, "torchtitan-0.2"), notes) + "\n" + body, notes


# torchtitan 0.2.0's llama3 flavors (torchtitan/models/llama3/__init__.py, llama3_args): dim, n_layers,
# n_heads, n_kv_heads and the FFN width its multiple_of/ffn_dim_multiplier give.
LLAMA3_FLAVORS = {
    "8B": (4096, 32, 32, 8, 14336),
    "70B": (8192, 80, 64, 8, 28672),
    "405B": (16384, 126, 128, 8, 53248),
}
# torchtitan 0.2.0's deepseek_v3 flavors (torchtitan/models/deepseek_v3/__init__.py): dim, n_layers,
# dense inter_dim, expert moe_inter_dim (DeepSeek-V2-Lite, V2, V3).
DEEPSEEK_V3_FLAVORS = {
    "16B": (2048, 27, 10944, 1408),
    "236B": (5120, 60, 12288, 1536),
    "671B": (7168, 61, 18432, 2048),
}
FLAVOR_MODULE = "autoplan_flavor"
"""Module the launch script writes beside the TOML to register a flavor torchtitan does not ship
(loaded by `[experimental] custom_import`)."""


def flavor(model) -> str:
    """torchtitan's own flavor when the shape is one it ships, else the plan's model name."""
    if model.is_moe or model.is_mla:
        shape = (model.hidden_size, model.num_layers, model.ffn_hidden_size, model.expert_ffn_size)
        return next((name for name, dims in DEEPSEEK_V3_FLAVORS.items() if dims == shape), model.name)
    shape = (model.hidden_size, model.num_layers, model.num_heads, model.num_kv_heads, model.ffn_hidden_size)
    return next((name for name, dims in LLAMA3_FLAVORS.items() if dims == shape), model.name)


def _needs_flavor_module(model) -> bool:
    """A llama3-architecture model whose shape torchtitan does not ship (MLA models go to deepseek_v3)."""
    return not (model.is_moe or model.is_mla) and flavor(model) not in LLAMA3_FLAVORS


def flavor_module(doc: PlanDocument) -> str:
    """Python that registers the plan's model as a llama3 flavor. torchtitan sizes the SwiGLU FFN as
    multiple_of * ceil(int(ffn_dim_multiplier * int(8 * dim / 3)) / multiple_of) (llama3 FeedForward),
    so multiple_of = ffn_hidden_size, with a multiplier below 1 only when 8*dim/3 exceeds it, is exact."""
    model = doc.model
    base = int(2 * 4 * model.hidden_size / 3)
    multiplier = None if base <= model.ffn_hidden_size else model.ffn_hidden_size / base
    return (f"# Registers {model.name!r} as a torchtitan llama3 flavor; written by autoplan for plan {doc.plan_id}.\n"
            "from torchtitan.models.llama3 import llama3_args\n"
            "from torchtitan.models.llama3.model.args import TransformerModelArgs\n\n"
            f"llama3_args[{model.name!r}] = TransformerModelArgs(\n"
            f"    dim={model.hidden_size}, n_layers={model.num_layers}, n_heads={model.num_heads}, "
            f"n_kv_heads={model.num_kv_heads},\n"
            f"    vocab_size={model.vocab_size}, multiple_of={model.ffn_hidden_size}, ffn_dim_multiplier={multiplier!r},\n"
            f"    max_seq_len={max(model.max_seq_len, doc.training.seq_len)},\n)\n")


def launch(doc: PlanDocument, launcher: str, header: list, toml_text: str) -> str:
    """A launch script: the TOML (and the flavor module) written next to the run, then torchtitan.train."""
    files = {"job.toml": toml_text}
    env = {}
    if _needs_flavor_module(doc.model):
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
    if _needs_flavor_module(model):
        notes.append(f"model shape: torchtitan 0.2.0 ships the llama3 flavors {', '.join(LLAMA3_FLAVORS)}; "
                     f"{model.name!r} is registered by the module {FLAVOR_MODULE}.py that `--launch` writes "
                     f"(`[experimental] custom_import`); without it, register dim={model.hidden_size} "
                     f"n_layers={model.num_layers} n_heads={model.num_heads} n_kv_heads={model.num_kv_heads} "
                     f"FFN {model.ffn_hidden_size} yourself")
    if name in LLAMA3_FLAVORS:
        notes.append(f"vocabulary: torchtitan takes it from the tokenizer (hf_assets_path); the plan assumes "
                     f"{model.vocab_size} rows")
    if (model.mlp, model.norm, model.position) != ("swiglu", "rmsnorm", "rope"):
        notes.append(f"architecture mlp={model.mlp} norm={model.norm} position={model.position}: "
                     f"torchtitan's llama3 is SwiGLU + RMSNorm + RoPE only")
    facts, mapped = architecture_facts(model), set()
    if model.is_moe or model.is_mla:
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
    notes += unmapped_note(facts, mapped, "torchtitan's " + ("deepseek_v3" if model.is_moe or model.is_mla
                                                             else "llama3") + " model")
    if model.tied_embeddings:
        notes.append("tied_embeddings: torchtitan's llama3 keeps separate embedding and output weights")
    return {"name": "deepseek_v3" if model.is_moe or model.is_mla else "llama3", "flavor": name}


def _training(doc: PlanDocument, notes: list) -> dict:
    par, training = doc.parallel, doc.training
    # With pp > 1 a rank's local batch is split into pipeline micro-batches; without pp,
    # torchtitan accumulates gradients until global_batch_size is reached.
    local = par.micro_batch_size * (par.num_microbatches if par.pp > 1 else 1)
    if training.dtype == "fp16":
        notes.append("dtype=fp16: torchtitan has no fp16 with loss scaling; exported as bfloat16")
    return {"local_batch_size": local, "global_batch_size": training.global_batch_size,
            "seq_len": training.seq_len, "mixed_precision_param": _PARAM_DTYPES[training.dtype],
            "mixed_precision_reduce": "float32"}


def _parallelism(doc: PlanDocument, notes: list) -> dict:
    par = doc.parallel
    replicate, shard, reshard = 1, par.dp, "default"
    if par.zero_stage == 0 and par.dp > 1:
        replicate, shard = par.dp, 1  # plain DDP (export refuses it with tp/pp/cp)
    elif par.zero_stage in (1, 2):
        # Parameters stay gathered from forward to backward: FSDP's ZeRO-2-like SHARD_GRAD_OP.
        reshard = "never"
        notes.append(f"zero_stage={par.zero_stage}: torchtitan has no ZeRO-1/2 distinction; exported "
                     f"as FSDP with fsdp_reshard_after_forward='never' (gradients and optimizer state "
                     f"sharded, parameters gathered for the whole step)")
    if par.tp > 1 and not par.sequence_parallel:
        notes.append("sequence_parallel=false: torchtitan 0.2.0's tensor parallelism always shards the norms "
                     "on the sequence (sequence parallel; 0.3.0 has enable_sequence_parallel)")
    out = {"data_parallel_replicate_degree": replicate, "data_parallel_shard_degree": shard,
           "fsdp_reshard_after_forward": reshard, "tensor_parallel_degree": par.tp,
           "context_parallel_degree": par.cp, "pipeline_parallel_degree": par.pp}
    if par.pp > 1:
        out["pipeline_parallel_schedule"] = "Interleaved1F1B" if par.vpp > 1 else "1F1B"
        out.update(pipeline_stages(doc, notes))
        out["pipeline_parallel_microbatch_size"] = par.micro_batch_size
    if doc.model.is_moe:
        out["expert_parallel_degree"] = par.ep
    return out


def pipeline_stages(doc: PlanDocument, notes: list, head: str = "output") -> dict:
    """The plan's (virtual) stages (ParallelPlan.virtual_stage_num_layers) in torchtitan's terms:
    its generated split when some weighing of the embedding and the head reproduces them, else the
    modules of every stage listed (module_fqns_per_model_part). `head`: the output projection's
    module name ("output" in 0.2, "lm_head" in 0.3)."""
    par, num_layers = doc.parallel, doc.model.num_layers
    stages = par.virtual_stage_num_layers(num_layers)
    default_stages = par.pp * (1 if par.vpp == 1 else 2)   # stages torchtitan makes per schedule
    for first_less, last_less in ((1, 1), (0, 0), (1, 0), (0, 1)):
        if torchtitan_split(len(stages), num_layers, first_less, last_less) != stages:
            continue
        out = {"pipeline_parallel_first_stage_less_layers": first_less,
               "pipeline_parallel_last_stage_less_layers": last_less}
        effective = num_layers + first_less + last_less
        per_stage = -(-effective // len(stages))
        if -(-effective // per_stage) == len(stages):   # torchtitan: ceil(effective / per stage) stages
            out["pipeline_parallel_layers_per_stage"] = per_stage   # stated even where it is the default
            return out
        if default_stages == len(stages):
            return out
    if par.pp > 1 and len(set(stages)) > 1:
        notes.append(f"uneven pipeline stages ({stages_text(stages)} layers per stage) are not torchtitan's "
                     f"generated split; every stage's modules are listed in module_fqns_per_model_part")
    first_layer = [sum(stages[:k]) for k in range(len(stages))]
    return {"module_fqns_per_model_part": [
        (["tok_embeddings"] if k == 0 else []) + [f"layers.{i}" for i in range(first_layer[k], first_layer[k] + n)]
        + (["norm", head] if k == len(stages) - 1 else []) for k, n in enumerate(stages)]}


def torchtitan_split(num_stages: int, num_layers: int, first_less: int, last_less: int) -> list | None:
    """Layers per stage of torchtitan's generated split (torchtitan 0.2 distributed/pipeline_parallel.py
    generate_llm_fqn_per_model_part; the same in 0.3.0's _generate_llm_fqn_per_model_part, line 366): num_layers + first_less + last_less "effective" layers shared
    out evenly, the first stages taking the remainder, then the embedding's and the head's weights
    taken off the first and the last stage. None when a stage would be left without layers."""
    effective = num_layers + first_less + last_less
    base, extra = divmod(effective, num_stages)
    counts = [base + (k < extra) for k in range(num_stages)]
    counts[0] -= first_less
    counts[-1] -= last_less
    return counts if min(counts) > 0 and base >= max(first_less, last_less) else None


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
