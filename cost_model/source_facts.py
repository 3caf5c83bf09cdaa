"""What each published source states about the stack and cluster its runs ran on, beyond the CSV's
columns: the per-source facts (network, framework as it was then, how it logs memory), the models'
architecture details and which built-in framework predicts the software a row names.

cost_model/published.py reads the rows with these; a new source's facts go here.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from autoplan.specs import StateTerm
from autoplan.specs.framework import megatron_states
from cost_model.splits import Where

KEMPNERFORGE_FACTS = {
    # bf16 master weights: the model is cast to the mixed-precision dtype before and after
    # fully_shard (kempnerforge/distributed/parallel.py build_parallel_model `model.to(dtype=param_dtype)`;
    # config/training.py param_dtype "the master weight dtype", bf16 by default), so the sharded
    # parameters, their gradients and torch AdamW's two moments (zeros_like the parameter) are bf16.
    "states": {
        "params": StateTerm(2, 1, "bf16 parameters (the master weights)"),
        "grads": StateTerm(2, 2, "bf16 gradients (the fp32 reduce-scatter output cast to the parameter)"),
        "optimizer": StateTerm(4, 1, "AdamW momentum 2 + variance 2 (bf16, as the parameters)"),
    },
    # Fused AdamW over bf16 states: reads parameter, gradient, both moments (8), writes parameter
    # and moments (6).
    "optimizer_bytes_per_param": 14.0,
    # The token embedding is never split over TP, and the head's vocab-split logits are gathered to
    # every TP rank for F.cross_entropy (kempnerforge/distributed/tensor_parallel.py
    # apply_tensor_parallel: "Token embedding stays replicated", output head ColwiseParallel(...,
    # output_layouts=Replicate())); the loss is F.cross_entropy on those bf16 logits (scripts/train.py):
    # the logits, the log-softmax output it saves and, in backward, their two gradients, 2 B each.
    "embedding_tp_sharded": False,
    "loss_gathers_logits": True,
    "loss_bytes_per_logit": 8.0,
    # Its TP plan gives q, k, v, gate and up each its own ColwiseParallel (tensor_parallel.py
    # _build_block_tp_plan, at the measured commits), so backward reduces each input gradient apart:
    # 5 reduce-scatters (SP) or all-reduces (its PP stages' plain TP) per layer where torchtitan has 2.
    # Counted with that plan on torch 2.9's DTensor over a fake 2-rank process group
    # (tests/test_tp_collective_counts.py): backward 2 all-gathers + 5 reduce-scatters, compiled or
    # eager; the forward's 5 gathers of eager mode become 2 under torch.compile (AOTAutograd's CSE
    # merges the identical gathers of one input), and every SP row of KempnerForge's is compiled.
    "tp_backward_input_reductions": 5,
    # FSDP2's gradient sync off on every micro-batch but the last (kempnerforge/training/grad.py
    # maybe_no_sync, called by scripts/train.py at the measured commits 01b461a, 601aba9, 3ad9d9a).
    "zero3_reduce_every_microbatch": False,
    "zero2_reduce_every_microbatch": False,
    # Its pipeline path shards each stage with apply_fsdp2's default reshard_after_forward=True
    # (scripts/train.py and kempnerforge/distributed/parallel.py at 601aba9, the config-validation
    # commit), under torch.distributed.pipelining, which keeps the weights gathered from a backward
    # to the next forward: m + 1 gathers a step (Framework.pp_reshard_after_forward).
    "pp_reshard_after_forward": True,
}
"""KempnerForge as it ran its published benchmarks (on torchtitan's facts otherwise)."""
MSAMP_O3_STATES = {
    "params": StateTerm(1, 3, "fp8 weights the GEMMs read"),
    "grads": StateTerm(1, 2, "fp8 weight gradients"),
    "optimizer": StateTerm(5, 1, "fp16 master weights 2 + fp8 first moment 1 + fp16 second moment 2"),
}
"""What FP8-LM's own rows keep per parameter: MS-AMP's O3 level, the one for ZeRO / Megatron training
(Azure/MS-AMP docs/user-tutorial/optimization-level.md table: weight FP8, master weight FP16, weight
gradient FP8, optimizer states FP8 + FP16)."""
NEMO2_MLPERF_LLAMA31 = {
    "states": {**megatron_states(), "grads": StateTerm(2, 2, "bf16 main-grad buffer (grad_reduce_in_fp32=False)")},
    "main_grad_reduce_bytes": 2.0,
}
"""NVIDIA's MLPerf llama31 implementation (NeMo 2 over Megatron-Core: training_results_v5.0
NVIDIA/benchmarks/llama31_405b/implementations/eos-dfw_n64_ngc25.01_nemo/pretrain.py, which builds the
8b, 70b and 405b configs): MegatronMixedPrecision(grad_reduce_in_fp32=False) and
DistributedDataParallelConfig(grad_reduce_in_fp32=False), so the distributed optimizer's main-grad
buffer and its reduce-scatter are bf16 (megatron/core/distributed/distributed_data_parallel.py: the
buffer takes the parameters' dtype unless grad_reduce_in_fp32), not Megatron-LM's fp32 of --bf16."""
KEMPNERFORGE_MEMORY_LOG = dict(memory_gb_is_gib=True, memory_is_allocated=True, memory_of_rank0=True)
"""What KempnerForge's "Mem/GPU ... GB" is: torch.cuda.max_memory_allocated / 1024**3 (GiB of allocated
bytes: kempnerforge/metrics/memory.py get_memory_stats, metrics/tracker.py), of rank 0 only
(kempnerforge/metrics/logger.py: "Only emits from rank 0"), the first pipeline stage."""

@dataclass(frozen=True)
class RowDerivedFact:
    """A fact whose value came from a source's measured step times (solved from them, or a behaviour
    picked because its rows fit better), not from code, configs, papers or our own kernel timings.
    Every other fact a source states here is read from its code, configs or papers (each entry's
    comment cites where), and the fitted constants record theirs in constants.json. A held-out group
    that holds any of `evidence` must not see it: `autoplan validate` withholds it there (the run then
    takes its framework's fitted or documented value, as a new source would), and
    benchmarks/fit_constants.py withholds it from the refit's training rows the same way."""
    field: str
    """The Framework field it sets on the source's rows."""
    value: float
    source: str
    """The source whose measured rows chose it."""
    how: str
    """How the rows chose it, and the script that does it."""
    evidence: tuple
    """Where (cost_model.splits) each measurement it came from was made: its source, GPU, GPU count
    and precision, which need not be rows of the CSV."""


BLOOM_NETWORK = RowDerivedFact(
    "dp_bandwidth_scale", 0.265, "bigscience",
    "solved from BigScience's 200B one-vs-two-replica step times on Jean Zay (chronicles-prequel.md "
    "'Best TFLOPs', fp16 and bf16): benchmarks/bigscience_network.py",
    evidence=tuple(Where("bigscience", "a100-80gb", n, dtype) for n in (80, 160) for dtype in ("fp16", "bf16")))
"""The fraction of Jean Zay's Omni-Path bandwidth BLOOM's data-parallel collectives reached, measured on
BigScience's one-vs-two-replica pairs (tests/test_cost_model_published.py re-solves it with the
shipped constants)."""
BLOOM_DP_BANDWIDTH_SCALE = BLOOM_NETWORK.value
ROW_DERIVED_FACTS = (BLOOM_NETWORK,)
"""Every fact solved or chosen from a source's measured rows (each applied through SOURCES "derived").
Not here, because read from code rather than chosen by the rows, though the rows were checked against
them: DeepSpeed v0.3.13's ZeRO-3 terms of Narayanan et al. 2021's baseline rows (cost_model/published.py,
benchmarks/deepspeed_zero3_terms.py compares the variants on those rows)."""

# Architecture facts each source's models share (not in the CSV's columns).
# GPT (Megatron) and BLOOM: LayerNorm, biases, tied embeddings; GPT learned positions, BLOOM ALiBi.
# MPT (llm-foundry yamls): LayerNorm without biases (no_bias: true), ALiBi, tied embeddings.
# Llama 3 (torchtitan): RMSNorm, RoPE, no biases, untied.
SOURCES = {
    "N21": dict(source="narayanan2021", norm="layernorm", position="learned", tied_embeddings=True,
                linear_bias=True, framework="megatron-2021"),
    # Jean Zay nodes: 8 A100 80GB with NVLink and 4 Omni-Path 100 Gb/s links per node
    # (BigScience tr11-176B-ml README, "Hardware") = 6.25 GB/s per GPU, a quarter of a DGX A100.
    # Its data-parallel collectives reached a quarter of that: BigScience timed a 200B model on one
    # replica and on two (chronicles-prequel.md "Best TFLOPs", fp16 and bf16), and the second replica's
    # cost is the model's at 0.265 of the links' bandwidth (benchmarks/bigscience_network.py solves it;
    # NCCL "doesn't fully utilize Intel OPA", experiments/bandwidth/README.md). Measured, so DeepSpeed's
    # fitted bandwidth scale is not BLOOM's; pipeline sends keep the links' rate.
    "BLOOM": dict(source="bigscience", norm="layernorm", position="alibi", tied_embeddings=True,
                  linear_bias=True, framework="megatron-deepspeed", nic_bytes_per_s=4 * 100e9 / 8 / 8,
                  derived=(BLOOM_NETWORK,)),
    "LLMFOUNDRY": dict(source="llm-foundry", norm="layernorm", position="alibi", tied_embeddings=True,
                       linear_bias=False, framework="llm-foundry"),
    # The torchtitan paper's runs (2024) predate 0.3.0's chunked loss (0.2.0 has no ChunkedLossWrapper):
    # F.cross_entropy over the whole fp32-cast logits.
    "TORCHTITAN": dict(source="torchtitan", norm="rmsnorm", position="rope", tied_embeddings=False,
                       linear_bias=False, framework="torchtitan", framework_then={"loss_chunks": 1}),
    # The sources added in 2026-11 state their software and architecture per row (columns framework,
    # norm, position, tied_embeddings, linear_bias, gpus_per_node): only the source key lives here,
    # and the scale-out network where it is not a DGX's (each row's notes cite it).
    # InternEvo's A100 cluster: 4 x 100 Gb/s RoCE per 8-GPU node (its hardware table).
    "INTERNEVO": dict(source="internevo", nic_bytes_per_s=4 * 100e9 / 8 / 8),
    # fms-fsdp wraps with FSDP1 (main_training_llama.py: FullyShardedDataParallel, use_orig_params only
    # under torch.compile) and its bfSixteen policy (fms_fsdp/policies/mixed_precision.py: param and
    # reduce dtype bf16): the flat parameter is gathered and reduced in place, in bf16, on torchtitan's
    # facts otherwise. Its README's throughput table: "A100 80G 128 GPUs with 400Gbps", "H100 96 GPUs
    # with 800 Gbps", per 8-GPU node: 6.25 and 12.5 GB/s per GPU.
    "FMS": dict(source="fms-fsdp", nic_bytes_per_s={"a100-80gb": 400e9 / 8 / 8, "h100-80gb": 800e9 / 8 / 8},
                framework_then={"gather_copy_bytes_per_param": 0.0, "reduce_copy_bytes_per_param": 0.0,
                                "sharded_reduce_bytes_per_grad": 2.0}),
    "KEMPNER": dict(source="kempnerforge", framework_then=KEMPNERFORGE_FACTS, **KEMPNERFORGE_MEMORY_LOG),
    # Only its 32B rows span nodes, and they ran on Ai2's Augusta cluster: the script (OLMo2-32B.py at
    # eaecf879c, a commit of the branch for "uploading checkpoints augusta") saves to gs://, and at that
    # commit olmo_core/distributed/utils.py sets NCCL's FASTRAK (GPUDirect-TCPXO) plugin on "augusta"
    # hosts. That is Google Cloud's A3 Mega: 8 H100 80GB with eight 200 Gb/s NICs for GPU traffic
    # (Google Cloud docs, "Networking and GPU machines"), 25 GB/s per GPU, half a DGX H100's.
    "OLMOCORE": dict(source="olmo-core", nic_bytes_per_s=200e9 / 8),
    "TTDOCS": dict(source="torchtitan-docs"),
    "NANOTRON": dict(source="nanotron"),
    "MLPERF": dict(source="mlperf"),
    "MTNLG": dict(source="mt-nlg"),
    "NEMOTRON": dict(source="nemotron"),
    "FP8LM": dict(source="fp8-lm"),
    "ZB": dict(source="zero-bubble"),
    # The flash-attention repo's GPT trainer takes its own fused loss (training/configs/experiment/pile/
    # base.yaml: train.loss_fn flash_attn.losses.cross_entropy.CrossEntropyLoss, inplace_backward: True,
    # "faster and uses less memory than torch.nn.CrossEntropyLoss"): its kernel keeps the bf16 logits and
    # a per-row log-sum-exp, and its backward writes the logits' gradient over them (in place): 2 B per
    # logit at the loss's peak, not Megatron's 6.
    "FA2": dict(source="flash-attention-2", framework_then={"fused_cross_entropy": True, "loss_bytes_per_logit": 2.0}),
    "MDS": dict(source="megatron-deepspeed-examples"),
    "NEOX": dict(source="gpt-neox-20b"),
    # BloombergGPT trained on 64 AWS p4d.24xlarge, 400 Gb/s of EFA per node (arXiv 2303.17564 Sec. 3.3-3.4, as
    # its row's notes say), not a DGX A100's 8 x 200 Gb/s. It ran SageMaker's sharded data parallelism
    # on DeepSpeed's facts, not DeepSpeed's collectives: their fitted bandwidth scale is not its, and
    # neither is DeepSpeed's parameter coordinator that releases modules between recompute and backward.
    "BBGPT": dict(source="bloomberggpt", nic_bytes_per_s=400e9 / 8 / 8,
                  framework_then={"dp_bandwidth_scale": 1.0, "zero3_recompute_reuse_params": math.inf}),
    "DGXC": dict(source="dgxc-jax"),
    # torchao's float8 training table ran torchtitan 0.0.2, before 0.3.0's chunked loss.
    "TORCHAO": dict(source="torchao", framework_then={"loss_chunks": 1}),
    # Mixture-of-experts runs (2026-12, cost_model/data/published_sources/moe.md). They are scored
    # out of sample only: no constant is fitted on a row with moe_num_experts (cost_model/splits.py).
    "MOEZOO": dict(source="megatron-moe-modelzoo"),
    "MCOREMOERM": dict(source="megatron-core-moe-readme"),
    # KempnerForge pads every expert's tokens to the busiest expert's count before its grouped GEMM,
    # and reads those counts on the host in every MoE layer (Framework.moe_host_sync).
    "KEMPNERMOE": dict(source="kempnerforge-moe", framework_then={**KEMPNERFORGE_FACTS, "moe_padded_expert_gemm": True,
                                                                  "moe_host_sync": True},
                       **KEMPNERFORGE_MEMORY_LOG),
    # FlagPerf's "mem" column (its READMEs: "显存", in GiB, as "used/total") is the device memory its
    # monitor reads from nvidia-smi's Memory-Usage (training/nvidia/nvidia_monitor.py): everything the
    # process holds, compared with the whole predicted peak (allocated + allocator slack + CUDA context).
    # Its Megatron scripts pass no --moe-token-dispatcher-type, so they ran the allgather dispatcher, the
    # default of core_v0.6.0 and after (transformer_config.py moe_token_dispatcher_type = "allgather"),
    # whose unpermutation weighs the experts' outputs by the router's probabilities and so keeps them
    # (token_dispatcher.py line 197 at core_v0.6.0, the tag of its Mixtral H100 row; the others are of
    # the same weeks of 2024).
    # Its scripts (mixtral_8x7B megatron_main.sh @68d2944f, mixtral_7b @d23d2118, qwen1.5_MoE
    # megatron_pai_main.sh @6faf9c1f on Pai's Megatron-LM-240405) pass --use-distributed-optimizer but
    # neither --overlap-grad-reduce nor --overlap-param-gather, both off by default (Megatron-LM
    # core_v0.6.0 megatron/training/arguments.py lines 1278-1284): the gradients reduce-scatter once the
    # backward is done and the weights gather after the step, all exposed, in one bucket
    # (megatron/core/distributed/distributed_data_parallel.py lines 56-66: bucket_size None without
    # overlap_grad_reduce).
    "FLAGPERF": dict(source="flagperf", memory_used_of_total_gib=True,
                     framework_then={"moe_dispatch": "allgather", "moe_weighted_outputs_saved": True,
                                     "dp_overlap_zero_stages": (), "dp_param_gather_overlap": False,
                                     "dp_bucket_params": math.inf}),
    "MLMISSUE": dict(source="megatron-lm-issue"),
}

MODEL_FACTS = {
    # model_configs/benchmarking/Qwen3-235B-A22B.yaml (Megatron-MoE-ModelZoo @b0b92ff329df): 64 heads
    # of kv_channels 128 (q projection 8192 wide at h 4096), qk-layernorm; 94 layers all MoE, no
    # shared expert, no dense first layers.
    "Qwen3-235B-A22B": dict(head_dim=128, qk_norm="head"),
    # FlagPerf's megatron_pai_main.sh (qwen1.5_14B_MoE case): --add-qkv-bias, no other linear bias.
    "FlagPerf 'qwen1.5_14B_MoE' (Qwen1.5-style 24L h2048, 8 experts top-2, expert ffn 5504)": dict(qkv_bias=True),
}
"""Architecture facts of a published row's model that the CSV has no column for (model_name -> ModelSpec
fields): head width, q/k norms, q/k/v bias, shared experts (shared_expert_ffn_size) and leading dense
layers (num_dense_layers). None of the MoE rows' models has shared experts or dense layers (Mixtral,
Qwen3-235B-A22B, KempnerForge's and FlagPerf's test models: every layer MoE, per their notes)."""
FRAMEWORK_FACTS = {
    "megatron-core": "megatron-core", "nemo-megatron-core": "megatron-core",
    # NeMo 1.x "legacy" Megatron GPT with Transformer Engine layers (MLPerf GPT-3 2023-2024).
    "nemo-megatron-legacy": "megatron-core",
    # Megatron-LM before Megatron-Core (2023 forks of the zero-bubble and FP8-LM papers): the same
    # kernels (Transformer Engine or Apex, flash attention), distributed optimizer.
    "megatron-lm-legacy": "megatron-core",
    # InternEvo: Megatron-style TP with ZeRO-1 over bf16 weights and fp32 master weights, flash
    # attention, overlapped ZeRO communication; the closest built-in facts are Megatron-Core's.
    # (nanotron, MaxText and Paxml have no built-in entry: their rows are listed as skipped.)
    "internevo": "megatron-core",
    "megatron-deepspeed": "deepspeed", "sagemaker-smp": "deepspeed",
    # GPT-NeoX 20B (2022) and MT-NLG (2021): fused softmax without flash attention, DeepSpeed pipeline.
    "gpt-neox": "megatron-deepspeed",
    # FSDP stacks on PyTorch (FSDP1 or FSDP2, bf16 compute over fp32 master weights): torchtitan's facts.
    "torchtitan": "torchtitan", "kempnerforge": "torchtitan", "olmo-core": "torchtitan", "fms-fsdp": "torchtitan",
    "flash-attn-training": "torchtitan",
}
# The MoE rows name megatron-core (Megatron-LM, Pai-Megatron-Patch, FlagPerf's Megatron cases) and
# kempnerforge (FSDP2 on PyTorch), both above.
"""The software a published row names (its `framework` column) -> the built-in framework whose facts
predict it."""
