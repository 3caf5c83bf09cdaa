"""torchtitan: the TOML job config of a plan (section and option names of torchtitan's `JobConfig`)."""
from __future__ import annotations

from autoplan.exporters.architecture import architecture_facts, unmapped_note
from autoplan.exporters.common import (
    comment_block, embedding_counts_as_a_layer, full_recompute_every_k, header_lines, stages_text, uneven_stages,
)
from autoplan.specs import PlanDocument

# torchtitan's mixed_precision_param accepts bfloat16 or float32; fp8 runs its GEMMs through the
# float8 converter on top of bfloat16 parameters.
_PARAM_DTYPES = {"bf16": "bfloat16", "fp8": "bfloat16", "fp16": "bfloat16", "fp32": "float32"}


def export(doc: PlanDocument) -> tuple:
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
        sections["model"]["converters"] = ["float8"]
        sections["float8"] = {"enable_fsdp_float8_all_gather": doc.parallel.zero_stage == 3}
    body = "\n".join(_toml_section(name, values) for name, values in sections.items())
    return comment_block(header_lines(doc, "torchtitan"), notes) + "\n" + body, notes


def _model(doc: PlanDocument, notes: list) -> dict:
    model = doc.model
    notes.append(
        f"model shape: torchtitan takes it from a registered flavor; register {model.name!r} with "
        f"dim={model.hidden_size} n_layers={model.num_layers} n_heads={model.num_heads} "
        f"n_kv_heads={model.num_kv_heads} vocab_size={model.vocab_size} and an FFN of "
        f"{model.ffn_hidden_size} (ffn_dim_multiplier/multiple_of)")
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
    return {"name": "deepseek_v3" if model.is_moe or model.is_mla else "llama3", "flavor": model.name}


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
        if par.tp == par.pp == par.cp == 1:
            replicate, shard = par.dp, 1  # plain DDP
        else:
            notes.append("zero_stage=0: torchtitan's DDP is one-dimensional only, so with tp/pp/cp "
                         "the data-parallel group runs as FSDP (less memory, extra all-gathers)")
    elif par.zero_stage in (1, 2):
        # Parameters stay gathered from forward to backward: FSDP's ZeRO-2-like SHARD_GRAD_OP.
        reshard = "never"
        notes.append(f"zero_stage={par.zero_stage}: torchtitan has no ZeRO-1/2 distinction; exported "
                     f"as FSDP with fsdp_reshard_after_forward='never' (gradients and optimizer state "
                     f"sharded, parameters gathered for the whole step)")
    if par.tp > 1 and not par.sequence_parallel:
        notes.append("sequence_parallel=false: torchtitan's tensor parallelism always shards the norms "
                     "on the sequence (sequence parallel)")
    out = {"data_parallel_replicate_degree": replicate, "data_parallel_shard_degree": shard,
           "fsdp_reshard_after_forward": reshard, "tensor_parallel_degree": par.tp,
           "context_parallel_degree": par.cp, "pipeline_parallel_degree": par.pp}
    if par.pp > 1:
        out["pipeline_parallel_schedule"] = "Interleaved1F1B" if par.vpp > 1 else "1F1B"
        out.update(_pipeline_stages(doc, notes))
        out["pipeline_parallel_microbatch_size"] = par.micro_batch_size
    if doc.model.is_moe:
        out["expert_parallel_degree"] = par.ep
    return out


def _pipeline_stages(doc: PlanDocument, notes: list) -> dict:
    """torchtitan weighs the embedding and the head as pipeline_parallel_first/last_stage_less_layers
    layers of the first and last stage when it splits the model."""
    par, counts = doc.parallel, uneven_stages(doc)
    if counts is None:
        per_stage = doc.model.num_layers // (par.pp * par.vpp)
        notes.append("pipeline stages: torchtitan counts the embedding and the head as part of the first "
                     "and last stage's layers (pipeline_parallel_first/last_stage_less_layers); set both to 0 "
                     f"for the plan's even stages of {per_stage} layers")
        return {"pipeline_parallel_layers_per_stage": per_stage}
    if embedding_counts_as_a_layer(counts):
        # One layer fewer on the first and the last stage: torchtitan's default weighting.
        return {"pipeline_parallel_first_stage_less_layers": 1, "pipeline_parallel_last_stage_less_layers": 1}
    notes.append(f"uneven pipeline stages ({stages_text(counts)} layers per rank) do not map onto torchtitan's "
                 f"generated split (the embedding and the head weigh one layer each); list each stage's "
                 f"modules in module_fqns_per_model_part to reproduce it")
    return {}


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
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    raise TypeError(f"no TOML form for {value!r}")
