"""DeepSpeed: the JSON config of a plan (DeepSpeed's config keys), plus the Megatron-DeepSpeed
flags for the model-parallel degrees, which DeepSpeed's JSON does not hold."""
from __future__ import annotations

import json

from autoplan.exporters.architecture import architecture_facts, unmapped_note
from autoplan.exporters.common import embedding_counts_as_a_layer, stages_text, uneven_stages
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
    if counts is not None and not embedding_counts_as_a_layer(counts):
        notes.append(f"uneven pipeline stages ({stages_text(counts)} layers per rank) do not map: "
                     f"DeepSpeed's PipelineModule partition_method balances the layers to the same largest "
                     f"stage but places the extra layers by its own rule")
    if par.cp > 1:
        notes.append(f"cp={par.cp}: Megatron-DeepSpeed splits the sequence with DeepSpeed-Ulysses "
                     f"(all-to-all over heads, needs num_heads % cp == 0), not ring attention")
    notes.append("Megatron-DeepSpeed flags for the rest of the plan: " + " ".join(_megatron_deepspeed_flags(doc)))
    if doc.model.is_moe:
        notes.append(f"mixture of experts: DeepSpeed-MoE takes the expert-parallel degree in the model "
                     f"code, deepspeed.moe.layer.MoE(num_experts={doc.model.num_experts}, ep_size={par.ep}, "
                     f"k={doc.model.num_experts_per_token})")
    notes += unmapped_note(architecture_facts(doc.model), set(), "DeepSpeed's JSON config")
    notes.append("optimizer: AdamW and its learning-rate schedule are left to the training script")
    return json.dumps(config, indent=2) + "\n", notes


def _zero(doc: PlanDocument, notes: list) -> dict:
    par = doc.parallel
    if par.zero_stage >= 2 and par.pp > 1:
        notes.append(f"zero_stage={par.zero_stage} with pp={par.pp}: DeepSpeed's pipeline engine supports "
                     f"ZeRO stage 0 or 1 only and refuses this config; use zero_stage=1 or pp=1")
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


def _megatron_deepspeed_flags(doc: PlanDocument) -> list:
    par = doc.parallel
    flags = [f"--tensor-model-parallel-size {par.tp}", f"--pipeline-model-parallel-size {par.pp}"]
    if par.pp == 1:
        flags.append("--no-pipeline-parallel")
    counts = uneven_stages(doc)
    if counts is not None and embedding_counts_as_a_layer(counts):
        # The embedding and the head weigh one layer each: BigScience's BLOOM-176B split 70 layers
        # over 12 stages this way (tr11-176B-ml.slurm).
        flags.append("--pp-partition-method 'type:transformer|embedding'")
    if par.sequence_parallel:
        flags.append("--sequence-parallel")
    if par.cp > 1:
        # Megatron-DeepSpeed's sequence split is DeepSpeed-Ulysses (all-to-all over heads), not a
        # ring: it needs num_heads divisible by the degree, and it moves different bytes.
        flags.append(f"--ds-sequence-parallel-size {par.cp}")
    flags += [f"--zero-stage {par.zero_stage}", "--deepspeed", "--deepspeed_config ds_config.json"]
    if par.recompute == "full":
        flags += ["--deepspeed-activation-checkpointing", "--recompute-granularity full",
                  "--recompute-method block", f"--recompute-num-layers {par.recompute_num_layers}"]
    elif par.recompute == "selective":
        flags.append("--recompute-granularity selective")
    return flags
