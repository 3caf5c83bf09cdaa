"""DeepSpeed: the JSON config of a plan (DeepSpeed's config keys), plus the Megatron-DeepSpeed
flags for the model-parallel degrees, which DeepSpeed's JSON does not hold."""
from __future__ import annotations

import json

from autoplan.exporters.architecture import architecture_facts, unmapped_note
from autoplan.exporters.common import stages_text, target_version, uneven_stages
from autoplan.exporters.launch import launch_script
from autoplan.specs import PlanDocument


def export(doc: PlanDocument) -> tuple:
    par, training = doc.parallel, doc.training
    notes: list = []
    config = {
        # DeepSpeed checks train_batch_size == micro * accumulation * data-parallel world size,
        # where the data-parallel world excludes the tensor and pipeline ranks (Megatron's mpu).
        "train_batch_size": training.global_batch_size,
        "train_micro_batch_size_per_gpu": par.micro_batch_size,
        "gradient_accumulation_steps": par.num_microbatches,
        "zero_optimization": _zero(doc, notes),
        **_precision(doc, notes),
    }
    checkpointing = _activation_checkpointing(doc, notes)
    if checkpointing:
        config["activation_checkpointing"] = checkpointing
    if par.vpp > 1:
        notes.append(f"vpp={par.vpp}: DeepSpeed's pipeline engine has no interleaved schedule; "
                     f"it runs {doc.model.num_layers // par.pp} layers per stage as plain 1F1B")
    counts = uneven_stages(doc)
    if counts is not None:
        notes.append(f"uneven pipeline stages ({stages_text(counts)} layers per rank) do not map: "
                     f"Megatron-DeepSpeed's PipelineModule(partition_method='type:transformer') balances the "
                     f"transformer layers and places the extra ones by its own rule")
    if par.cp > 1:
        notes.append(f"cp={par.cp}: Megatron-DeepSpeed splits the sequence with DeepSpeed-Ulysses "
                     f"(all-to-all over heads, needs num_heads % cp == 0), not ring attention")
    # A JSON file holds no comment: the release it is written for heads the notes the user reads beside it.
    notes.insert(0, f"written for {target_version('deepspeed')}")
    notes.append("Megatron-DeepSpeed flags for the rest of the plan: " + " ".join(megatron_deepspeed_flags(doc)))
    if par.tp * par.pp * par.cp > 1:
        # DeepSpeedConfig asserts train_batch_size == micro * accumulation * (world size / model-parallel
        # size), and learns the model-parallel size only from the mpu object it is given.
        notes.append(f"batch check: DeepSpeed accepts train_batch_size={training.global_batch_size} only with "
                     f"Megatron-DeepSpeed's mpu (deepspeed.initialize(..., mpu=mpu)), which makes the data-parallel "
                     f"world {par.dp} of {doc.cluster.num_gpus} GPUs; without an mpu it divides by all "
                     f"{doc.cluster.num_gpus} and refuses the config")
    notes += unmapped_note(architecture_facts(doc.model), set(), "DeepSpeed's JSON config")
    notes += _numerics_note(doc.model)
    notes.append("optimizer: AdamW and its learning-rate schedule are left to the training script")
    return json.dumps(config, indent=2) + "\n", notes


def _numerics_note(model) -> list:
    """The numerics of the model's config the Megatron-DeepSpeed flags below do not set (its model code's
    defaults apply), in one line."""
    stated = [f"rope_theta={model.rope_theta:g}"] if model.rope_theta else []
    stated += [f"rope_scaling {model.rope_scaling} x{model.rope_scaling_factor:g}"] if model.rope_scaling else []
    stated += [f"norm_eps={model.norm_eps:g}"] if model.norm_eps else []
    stated += ["q/k/v biases (qkv_bias)"] if model.qkv_bias and not model.linear_bias else []
    stated += [f"router scoring {model.moe_router_score}"] if model.moe_router_score else []
    return [f"not set by the Megatron-DeepSpeed model flags (set them in its model code): {', '.join(stated)}"] \
        if stated else []


def launch(doc: PlanDocument, launcher: str, header: list, config_text: str) -> str:
    """A launch script: ds_config.json written next to the run, then Megatron-DeepSpeed's pretrain_gpt.py
    with the model, batch and parallel flags (megatron/arguments.py of deepspeedai/Megatron-DeepSpeed)."""
    par = doc.parallel
    placeholders = {
        "MEGATRON_DEEPSPEED": f"checkout of deepspeedai/Megatron-DeepSpeed (holds pretrain_gpt.py); written for "
                              f"{target_version('deepspeed')}",
        "DATA_PATH": "prefix of the tokenized dataset (.bin/.idx from tools/preprocess_data.py)",
        "TOKENIZER_MODEL": f"Hugging Face tokenizer (name or path) with {doc.model.vocab_size} ids or fewer",
        "TRAIN_ITERS": "optimizer steps to run",
        "LR": "peak learning rate",
    }
    flags = [tuple(flag.split(" ", 1)) for flag in megatron_deepspeed_flags(doc)]
    flags = [("--deepspeed_config", '"$RUN_DIR/ds_config.json"') if f[0] == "--deepspeed_config" else f for f in flags]
    args = megatron_deepspeed_model_flags(doc) + flags + [
        ("--data-path", '"$DATA_PATH"'), ("--tokenizer-type", "HFTokenizer"), ("--tokenizer-model", '"$TOKENIZER_MODEL"'),
        ("--train-iters", '"$TRAIN_ITERS"'), ("--lr", '"$LR"')]
    # Megatron-DeepSpeed's validate_args raises on CUDA without it under sequence parallelism and its
    # async TP all-reduce (megatron/arguments.py).
    env = {"CUDA_DEVICE_MAX_CONNECTIONS": 1} if par.tp > 1 else {}
    return launch_script(doc, header, placeholders, env, {"ds_config.json": config_text},
                         ['"$MEGATRON_DEEPSPEED/pretrain_gpt.py"'], args, launcher)


def megatron_deepspeed_model_flags(doc: PlanDocument) -> list:
    """Model shape, sequence, batch and precision in Megatron-DeepSpeed's flag names."""
    model, training, par = doc.model, doc.training, doc.parallel
    flags = [("--num-layers", model.num_layers), ("--hidden-size", model.hidden_size),
             ("--num-attention-heads", model.num_heads), ("--num-key-value-heads", model.num_kv_heads),
             ("--ffn-hidden-size", model.ffn_hidden_size), ("--seq-length", training.seq_len),
             ("--max-position-embeddings", max(model.max_seq_len, training.seq_len)),
             ("--micro-batch-size", par.micro_batch_size), ("--global-batch-size", training.global_batch_size),
             ("--normalization", model.norm)]
    if model.head_dim * model.num_heads != model.hidden_size:
        flags.append(("--kv-channels", model.head_dim))
    if model.mlp == "swiglu":
        flags.append(("--swiglu",))
    if model.position == "rope":
        flags.append(("--use-rotary-position-embeddings",))
    if not model.tied_embeddings:
        flags.append(("--untie-embeddings-and-output-weights",))
    if not model.linear_bias:
        flags.append(("--disable-bias-linear",))
    if training.dtype in ("bf16", "fp8"):
        flags.append(("--bf16",))
    elif training.dtype == "fp16":
        flags.append(("--fp16",))
    return flags


def _zero(doc: PlanDocument, notes: list) -> dict:
    par = doc.parallel  # ZeRO-2/3 with pp > 1 never gets here: the deepspeed framework rule refuses it
    if par.zero_stage == 0:
        return {"stage": 0}
    # Overlapping the reduce(-scatter) with backward and packing gradients contiguously are the
    # settings DeepSpeed's own ZeRO tutorials run with.
    return {"stage": par.zero_stage, "overlap_comm": True, "contiguous_gradients": True}


def _precision(doc: PlanDocument, notes: list) -> dict:
    dtype = doc.training.dtype
    if dtype == "fp16":
        # loss_scale 0 selects dynamic loss scaling, starting at 2**initial_scale_power.
        return {"fp16": {"enabled": True, "loss_scale": 0, "initial_scale_power": 16},
                "bf16": {"enabled": False}}
    if dtype == "fp8":
        notes.append("dtype=fp8: DeepSpeed's config has no fp8; run the GEMMs under Transformer "
                     "Engine's fp8_autocast in the model; exported as bf16")
    if dtype == "fp32":
        return {"fp16": {"enabled": False}, "bf16": {"enabled": False}}
    return {"bf16": {"enabled": True}, "fp16": {"enabled": False}}


def _activation_checkpointing(doc: PlanDocument, notes: list) -> dict:
    par = doc.parallel
    if par.recompute == "none":
        return {}
    if par.recompute == "selective":
        notes.append("recompute=selective: DeepSpeed's checkpointing is whole-layer; Megatron-DeepSpeed "
                     "selects the attention core with --recompute-granularity selective")
    section = {
        # Partitioning the kept layer inputs over the tensor-parallel ranks is DeepSpeed's
        # counterpart of Megatron's sequence-parallel activation sharding.
        "partition_activations": par.tp > 1 and par.sequence_parallel,
        "contiguous_memory_optimization": False,
        "cpu_checkpointing": False,
        "synchronize_checkpoint_boundary": False,
        "profile": False,
    }
    if par.recompute == "full":
        section["number_checkpoints"] = par.recompute_num_layers
    return section


def megatron_deepspeed_flags(doc: PlanDocument) -> list:
    """Flags of Microsoft's Megatron-DeepSpeed `pretrain_gpt.py` (megatron/arguments.py) for what
    DeepSpeed's JSON does not hold: the model-parallel degrees, recompute, experts."""
    par, model = doc.parallel, doc.model
    flags = [f"--tensor-model-parallel-size {par.tp}", f"--pipeline-model-parallel-size {par.pp}"]
    if par.pp == 1:
        flags.append("--no-pipeline-parallel")
    if par.sequence_parallel:
        flags.append("--sequence-parallel")
    if par.cp > 1:
        # Megatron-DeepSpeed's sequence split is DeepSpeed-Ulysses (all-to-all over heads), not a
        # ring: it needs num_heads divisible by the degree, and it moves different bytes.
        flags.append(f"--ds-sequence-parallel-size {par.cp}")
    if model.is_moe:
        # DeepSpeed-MoE layers built by Megatron-DeepSpeed's model code from these flags.
        flags += [f"--num-experts {model.num_experts}", f"--topk {model.num_experts_per_token}",
                  f"--moe-expert-parallel-size {par.ep}"]
    flags += [f"--zero-stage {par.zero_stage}", "--deepspeed", "--deepspeed_config ds_config.json"]
    if par.recompute == "full":
        flags += ["--deepspeed-activation-checkpointing", "--recompute-granularity full",
                  "--recompute-method block", f"--recompute-num-layers {par.recompute_num_layers}"]
    elif par.recompute == "selective":
        flags.append("--recompute-granularity selective")
    return flags
