"""The built-in frameworks: one entry each, every fact with its source.

A new framework is one entry here (plus its fitted efficiency values, if any, in
`cost_model/data/constants.json`). `get_framework(name)` is the one lookup; unknown names are one
line that lists the known ones.
"""
from __future__ import annotations

from autoplan.specs.errors import AutoplanError
from autoplan.specs.framework import Framework, StateTerm

DEFAULT_FRAMEWORK = "autoplan"


def _fsdp2_states(what: str) -> dict:
    """FSDP2 with a bf16 MixedPrecisionPolicy: the sharded parameter IS the fp32 master (PyTorch
    FSDP2 docs, `fully_shard(mp_policy=MixedPrecisionPolicy(param_dtype=bfloat16,
    reduce_dtype=float32))`); gradients land in fp32 on the sharded parameter; AdamW keeps two fp32
    moments."""
    return {
        "params": StateTerm(4, 1, f"fp32 parameters ({what})"),
        "grads": StateTerm(4, 2, "fp32 gradients"),
        "optimizer": StateTerm(8, 1, "AdamW momentum 4 + variance 4 (fp32)"),
    }


_AUTOPLAN_STATES = {
    "params": StateTerm(4, 1, "fp32 parameters: the master weights (DDP at ZeRO 0, FSDP2-sharded at 1-3)"),
    "grads": StateTerm(4, 2, "fp32 gradients; ZeRO 1 keeps them whole until the last micro-batch"),
    "optimizer": StateTerm(8, 1, "AdamW momentum 4 + variance 4 (fp32)"),
}

FRAMEWORKS = {f.name: f for f in (
    Framework(
        name="autoplan", version="autoplan 0.1 executor, torch backend (torch 2.9)",
        description="this project's torch.distributed executor (`autoplan run`): FSDP2/DDP, TP/SP, "
                    "torch.distributed.pipelining, all-gather-KV context parallelism, dropless MoE",
        states=_AUTOPLAN_STATES, compute_weight_copy_bytes=2.0, selective_recompute="attention",
        fused_cross_entropy=False, flash_attention=True, dtypes=("bf16", "fp32"),
        moe_with_tp_pp=False, min_microbatches_per_stage=True, tied_embeddings_one_stage=True,
        learned_positions_split_sequence=False, seq_len_within_model=True, tp_with_block_extras=False,
        cp_with_masked_attention=False, mla=False,
        sources={
            "mla": "executor/model.py builds no MLA block (docs/models.md: planned only)",
            "tp_with_block_extras": "executor/torch_backend/parallelize.py: its TP plan covers the Llama/GPT "
                                    "block's linears only (q/k norms etc. would be replicated without summed grads)",
            "cp_with_masked_attention": "executor/torch_backend/context_parallel.py: plain causal attention",
            "states": "docs/executor.md: fp32 parameters under bf16 autocast (GPU), FSDP2 per ZeRO stage",
            "compute_weight_copy_bytes": "autocast caches the bf16 cast of each fp32 weight for backward; "
                                         "FSDP2 (ZeRO 1/2) keeps gathered bf16 weights from forward to backward",
            "fused_cross_entropy": "executor/model.py: F.cross_entropy over fp32 logits",
            "dtypes": "fp16 (no loss scaling) and fp8 (no float8 kernels) are not wired",
            "min_microbatches_per_stage": "torch.distributed.pipelining Schedule1F1B",
            "moe_with_tp_pp": "executor: MoE runs with dp, cp and ep only",
            "tied_embeddings_one_stage": "executor: the tied head is neither sharded nor on another stage",
            "learned_positions_split_sequence": "executor: learned positions are not sharded for cp/sp",
        }),
    Framework(
        name="autoplan-xla", version="autoplan 0.1 executor, torch_xla 2.9 SPMD backend",
        description="this project's torch_xla SPMD executor (`autoplan run --backend xla`): one SPMD "
                    "program over a (dp, cp, tp) mesh, ZeRO by sharding annotations",
        states=_AUTOPLAN_STATES, selective_recompute="attention", fused_cross_entropy=False,
        flash_attention=False, dtypes=("bf16", "fp32"), max_pp=1, max_vpp=1, moe=False,
        seq_len_within_model=True, tp_with_block_extras=False, cp_with_masked_attention=False, mla=False,
        sources={"max_pp": "executor/xla_backend: one SPMD program, no pipeline schedule",
                 "moe": "executor/xla_backend: dense models only",
                 "flash_attention": "XLA's CPU devices run attention as plain matmuls"}),
    Framework(
        name="megatron-core", version="Megatron-LM core_r0.13 (2025)",
        description="NVIDIA Megatron-LM / Megatron-Core: TP/SP, interleaved 1F1B, CP, distributed optimizer",
        max_zero_with_pp=2, max_zero_with_ep=2,
        sources={"states": "Megatron distributed optimizer docs: bf16 params, fp32 main grads, fp32 master + Adam",
                 "max_zero_with_pp": "megatron/training/arguments.py: --use-torch-fsdp2 refuses pipeline "
                                     "parallelism",
                 "max_zero_with_ep": "megatron/training/arguments.py: --use-torch-fsdp2 refuses expert "
                                     "parallelism"}),
    Framework(
        name="torchtitan", version="torchtitan 0.2 (2025)",
        description="PyTorch torchtitan: FSDP2 + TP/SP + torch.distributed.pipelining + CP, "
                    "op-level selective activation checkpointing",
        states=_fsdp2_states("FSDP2-sharded master"), compute_weight_copy_bytes=0.0,
        selective_recompute="ops", fused_cross_entropy=False, dtypes=("bf16", "fp8", "fp32"),
        zero_stages=(0, 1, 2, 3), zero0_only_pure_dp=True, sequence_parallel="always",
        min_microbatches_per_stage=True,
        sources={"states": "torchtitan parallelize: fully_shard with MixedPrecisionPolicy(bf16, fp32 reduce)",
                 "selective_recompute": "torchtitan activation_checkpoint mode 'selective', option 'op'",
                 "fused_cross_entropy": "torchtitan's loss: F.cross_entropy over fp32-cast logits",
                 "dtypes": "torchtitan: no fp16 with loss scaling",
                 "zero0_only_pure_dp": "torchtitan's DDP is one-dimensional (dp_replicate without tp/pp/cp)",
                 "sequence_parallel": "torchtitan's TP plan shards the norms on the sequence (SequenceParallel)",
                 "min_microbatches_per_stage": "torch.distributed.pipelining Schedule1F1B"}),
    Framework(
        name="deepspeed", version="DeepSpeed 0.16 (2025) with Megatron-DeepSpeed",
        description="Microsoft DeepSpeed ZeRO 1-3 and its pipeline engine",
        pp_scatter_gather=False, max_zero_with_pp=1, max_cp=1, max_vpp=1, mla=False,
        sources={"mla": "Megatron-DeepSpeed has no multi-latent attention","max_zero_with_pp": "deepspeed/runtime/pipe/engine.py: ZeRO-2/3 are incompatible with "
                                     "pipeline parallelism",
                 "max_cp": "DeepSpeed's sequence parallelism is Ulysses (all-to-all over heads), not the "
                           "context parallelism planned here",
                 "max_vpp": "the pipeline engine has no interleaved schedule",
                 "pp_scatter_gather": "the pipeline engine sends whole activations from every TP rank"}),
    Framework(
        name="llm-foundry", version="MosaicML llm-foundry 0.x with Composer FSDP (2023-2024)",
        description="MosaicML llm-foundry: PyTorch FSDP (Composer) data parallelism, flash attention",
        states=_fsdp2_states("FSDP flat-parameter master"), zero_stages=(0, 2, 3), max_tp=1, max_pp=1,
        max_cp=1, max_vpp=1, sequence_parallel="never", mla=False,
        sources={"zero_stages": "Composer FSDP sharding_strategy NO_SHARD / SHARD_GRAD_OP / FULL_SHARD",
                 "max_tp": "llm-foundry trains with FSDP only (its benchmark tables)"}),
    Framework(
        name="megatron-2021", version="Megatron-LM of Narayanan et al. 2021 (arXiv 2104.04473)",
        description="historical: Megatron-LM as in the 2021 scaling paper (no flash attention, no CP/SP)",
        flash_attention=False, dp_comm_overlap=0.0, max_cp=1, sequence_parallel="never", zero_stages=(0,), mla=False,
        sources={"flash_attention": "2021: fused softmax, scores stored", "dp_comm_overlap":
                 "2021: gradient all-reduce after the pipeline flush", "sequence_parallel":
                 "introduced by Korthikanti et al. 2022"}),
    Framework(
        name="megatron-deepspeed", version="Megatron-DeepSpeed as BigScience ran BLOOM (2022)",
        description="historical: Megatron-DeepSpeed (fused softmax, ZeRO-1, DeepSpeed pipeline engine)",
        flash_attention=False, pp_scatter_gather=False, max_zero_with_pp=1, max_cp=1, max_vpp=1,
        sequence_parallel="never", mla=False,
        sources={"flash_attention": "BLOOM training (2022) predates flash attention in Megatron-DeepSpeed",
                 "pp_scatter_gather": "DeepSpeed's pipeline engine sends whole activations"}),
)}
FRAMEWORK_NAMES = tuple(FRAMEWORKS)


def get_framework(name: str) -> Framework:
    """The built-in framework of this name; one line listing the known ones otherwise."""
    framework = FRAMEWORKS.get(name.strip().lower() if isinstance(name, str) else name)
    if framework is None:
        raise AutoplanError(f"unknown framework {name!r}; known: {', '.join(FRAMEWORK_NAMES)}")
    return framework

