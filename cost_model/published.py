"""Published training runs (cost_model/data/published_runs.csv) as cost-model inputs.

Each row becomes (ModelSpec, TrainingSpec, ClusterSpec, ParallelPlan, Framework, measured
tokens/s/GPU). Where the source leaves a cell empty, the filling rule is written next to it here
and recorded on the run (`assumptions`), so a reader can see what was inferred.
"""
from __future__ import annotations

import csv
import re
from dataclasses import dataclass, field
from pathlib import Path

from autoplan.specs import (
    FRAMEWORKS, AutoplanError, ClusterSpec, Framework, HardwareProfile, ModelSpec, ParallelPlan, StateTerm,
    TrainingSpec,
)
from cost_model.constants import Constants, load_constants
from cost_model.moe_time import moe_run_facts
from cost_model.profiles import builtin_profile

PUBLISHED_RUNS_PATH = Path(__file__).parent / "data" / "published_runs.csv"
_PEAK_MEMORY = re.compile(r"(?:peak mem|max GPU mem|mem) ([0-9.]+) ?(GiB|GB)")

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
KEMPNERFORGE_MEMORY_LOG = dict(memory_gb_is_gib=True, memory_is_allocated=True, memory_of_rank0=True)
"""What KempnerForge's "Mem/GPU ... GB" is: torch.cuda.max_memory_allocated / 1024**3 (GiB of allocated
bytes: kempnerforge/metrics/memory.py get_memory_stats, metrics/tracker.py), of rank 0 only
(kempnerforge/metrics/logger.py: "Only emits from rank 0"), the first pipeline stage."""

# Architecture facts each source's models share (not in the CSV's columns).
# GPT (Megatron) and BLOOM: LayerNorm, biases, tied embeddings; GPT learned positions, BLOOM ALiBi.
# MPT (llm-foundry yamls): LayerNorm without biases (no_bias: true), ALiBi, tied embeddings.
# Llama 3 (torchtitan): RMSNorm, RoPE, no biases, untied.
SOURCES = {
    "N21": dict(source="narayanan2021", norm="layernorm", position="learned", tied_embeddings=True,
                linear_bias=True, framework="megatron-2021"),
    # Jean Zay nodes: 8 A100 80GB with NVLink and 4 Omni-Path 100 Gb/s links per node
    # (BigScience tr11-176B-ml README, "Hardware") = 6.25 GB/s per GPU, a quarter of a DGX A100.
    "BLOOM": dict(source="bigscience", norm="layernorm", position="alibi", tied_embeddings=True,
                  linear_bias=True, framework="megatron-deepspeed", nic_bytes_per_s=4 * 100e9 / 8 / 8),
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
    # "faster and uses less memory than torch.nn.CrossEntropyLoss").
    "FA2": dict(source="flash-attention-2", framework_then={"fused_cross_entropy": True}),
    "MDS": dict(source="megatron-deepspeed-examples"),
    "NEOX": dict(source="gpt-neox-20b"),
    # BloombergGPT trained on 64 AWS p4d.24xlarge, 400 Gb/s of EFA per node (arXiv 2303.17564 Sec. 3.3-3.4, as
    # its row's notes say), not a DGX A100's 8 x 200 Gb/s. It ran SageMaker's sharded data parallelism
    # on DeepSpeed's facts, not DeepSpeed's collectives: their fitted bandwidth scale is not its.
    "BBGPT": dict(source="bloomberggpt", nic_bytes_per_s=400e9 / 8 / 8, framework_then={"dp_bandwidth_scale": 1.0}),
    "DGXC": dict(source="dgxc-jax"),
    # torchao's float8 training table ran torchtitan 0.0.2, before 0.3.0's chunked loss.
    "TORCHAO": dict(source="torchao", framework_then={"loss_chunks": 1}),
    # Mixture-of-experts runs (2026-12, cost_model/data/published_sources/moe.md). They are scored
    # out of sample only: no constant is fitted on a row with moe_num_experts (cost_model/splits.py).
    "MOEZOO": dict(source="megatron-moe-modelzoo"),
    "MCOREMOERM": dict(source="megatron-core-moe-readme"),
    # KempnerForge pads every expert's tokens to the busiest expert's count before its grouped GEMM.
    "KEMPNERMOE": dict(source="kempnerforge-moe", framework_then={**KEMPNERFORGE_FACTS, "moe_padded_expert_gemm": True},
                       **KEMPNERFORGE_MEMORY_LOG),
    "FLAGPERF": dict(source="flagperf"),
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
_FP8_PARAMS = re.compile(r"FP8_PARAMS=True|fp8_params true|\bfp8 params\b")
"""How an MLPerf row's config or log states NeMo's fp8_params."""
_FSDP_FLOAT8_GATHER = re.compile(r"enable_fsdp_float8_all_gather|FSDP float8 all-gather", re.IGNORECASE)
"""How a torchtitan row's config or notes state torchao's float8 all-gather under FSDP2."""
_ASYNC_TP = re.compile(r"asyncTP|AsyncTP|enable_async_tensor_parallel\s*=\s*true")
"""How a torchtitan row states async TP (experimental.enable_async_tensor_parallel)."""
_GRAD_SYNC_BF16 = (
    # mlcommons/training_results_v3.0 NVIDIA/benchmarks/gpt3/implementations/pytorch/conf/
    # megatron_gpt_config.yaml (9f08e30): optim distributed_fused_adam, grad_sync_dtype: bf16.
    "MLPerf Training v3.0 NVIDIA dgxh100_",
    # mlcommons/training_results_v4.0 NVIDIA/benchmarks/gpt3/implementations/nemo/conf/optim/
    # distributed_fused_adam.yaml (62f111b): grad_sync_dtype: bf16.
    "NVIDIA/benchmarks/gpt3/implementations/nemo/config_DGXH100",
)
"""Where an MLPerf row's implementation reduces its gradients in bf16 (NVIDIA's own GPT-3 configs; the
partners' copies and v3.1's, whose optimizer config is not in their results, keep Megatron's fp32)."""
_HSDP_SHARD = re.compile(r"HSDP shard group (\d+)|shard group (\d+) GPUs")
"""How a row's notes state hybrid sharding: "HSDP shard group 8" (fms-fsdp's HYBRID_SHARD within a node,
BloombergGPT's 128), "shard group 256 GPUs" (OLMo-core's num_replicas)."""
_TORCHTITAN_COMPILED_LOSS = ("TORCHTITAN-2506-", "TORCHTITAN-H200-")
"""torchtitan rows made at commits that compile the loss (820504e and e7c0cae, both 2025-06-13, after
bbb1b616e): the async-TP benchmark's and the H200 benchmark's (their docs' "Versions and Dates")."""
_ETP = re.compile(r"--expert-tensor-parallel-size (\d+)|\bETP ?=? ?(\d+)\b")
_RECOMPUTE_MODULES = re.compile(r"--recompute-modules ((?:[a-z_]+ ?)+)")
"""Megatron-Core's selective recompute modules, as a run's notes quote its command line."""
_OLMO_CORE_MLP_AC = "selected_modules = blocks.*.feed_forward"
"""OLMo-core's per-module activation checkpointing of the feed-forward only (ActivationCheckpointingConfig
mode selected_modules, as a row's notes quote its script): Megatron-Core's "mlp" recompute module."""


def _hsdp_shard_group(notes: str, ranks: int) -> int:
    """The ZeRO shard group a row's notes state (ParallelPlan.zero_shard), 0 where they state none or
    the whole of its dp*cp ranks."""
    found = _HSDP_SHARD.search(notes)
    size = int(found.group(1) or found.group(2)) if found else 0
    return size if 0 < size < ranks and ranks % size == 0 else 0


def _recompute_modules(notes: str) -> tuple:
    """The submodules a selective-recompute row reruns, where its notes name them (Megatron-Core's
    --recompute-modules, OLMo-core's feed-forward-only checkpointing); () = the framework's own."""
    if _OLMO_CORE_MLP_AC in notes:
        return ("mlp",)
    return tuple(next(iter(_RECOMPUTE_MODULES.findall(notes)), "").split())


def _per_gpu(value, gpu: str):
    """A source's fact given once, or per GPU type ({gpu: value}) where its clusters differ."""
    return value.get(gpu) if isinstance(value, dict) else value


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


@dataclass(frozen=True)
class PublishedRun:
    id: str
    source: str
    """Short source key: narayanan2021, bigscience, llm-foundry, torchtitan."""
    gpu: str
    model: ModelSpec
    training: TrainingSpec
    cluster: ClusterSpec
    plan: ParallelPlan
    framework: str
    """Training framework (a name in autoplan.specs.frameworks)."""
    compiled: bool
    """torch.compile fused the elementwise ops (from the run's notes)."""
    async_tp: bool
    """Async tensor parallelism overlapped TP collectives with GEMMs (from the run's notes)."""
    fp8_rowwise: bool
    """fp8 with row-wise scales (torchao's "rowwise" recipe, from the run's id or fp8_recipe)."""
    measured_tokens_per_s_per_gpu: float
    flash_attention: bool | None = None
    """What the row states of fused attention where it differs from its framework's default: False
    for a paper's baseline row without it, True for a run that turned it on; None: the default."""
    tp_comm_overlap: bool = False
    """Megatron-Core's --tp-comm-overlap (Transformer Engine userbuffers) was on (column tp_comm_overlap)."""
    nic_bytes_per_s: float | None = None
    """Scale-out bandwidth per GPU when the cluster is not DGX-like (None: the profile's)."""
    reported_peak_memory_bytes: float | None = None
    """Peak GPU memory the source printed (its notes: "peak mem 82.4 GiB", "max GPU mem 49GB")."""
    reported_memory_is_allocated: bool = False
    """The reported peak is torch.cuda.max_memory_allocated (what tensors held: no allocator slack, no
    CUDA context), so it is compared with the predicted allocated peak; else with the whole peak."""
    reported_memory_of_rank0: bool = False
    """The reported peak is rank 0's, the first pipeline stage's, not the largest rank's."""
    assumptions: tuple = ()
    notes: str = ""
    sweep: str = field(default="")
    """Rows of one source, model and GPU that vary the plan (for rank correlation)."""
    framework_then: tuple = ()
    """(fact, value) pairs of the framework as it was when the run was made (SOURCES' framework_then)."""

    def framework_facts(self, constants: Constants | None = None, name: str | None = None) -> Framework:
        """The run's framework (or framework `name`) under the given (fitted) constants, with the
        run's own switches (torch.compile, async TP, row-wise fp8)."""
        framework = (constants or load_constants()).framework(name or self.framework)
        overrides = dict(self.framework_then)
        if self.compiled:
            overrides["fused_elementwise"] = framework.compiled_elementwise_factor
        if self.async_tp:
            overrides["tp_comm_overlap"] = framework.async_tp_overlap
        # What the run stated (an empty cell: off, Megatron-LM's default), not the framework's default.
        overrides["tp_comm_gemm_overlap"] = self.tp_comm_overlap
        if self.flash_attention is not None:
            overrides["flash_attention"] = self.flash_attention
        # The scaling the run states (tensorwise unless it says rowwise), not the framework's default.
        overrides["fp8_rowwise"] = self.fp8_rowwise
        return framework.with_overrides(**overrides)

    def profile(self) -> HardwareProfile:
        """The built-in profile of the run's GPU, on the run's network."""
        return builtin_profile(self.gpu, self.nic_bytes_per_s)


def _int(row: dict, key: str, default=None):
    value = row[key].strip()
    return int(value) if value else default


def _source_key(row_id: str) -> str:
    prefix = row_id.split("-")[0]
    if prefix not in SOURCES:
        raise AutoplanError(f"published run {row_id!r} has an unknown source prefix {prefix!r}; "
                            f"known: {', '.join(SOURCES)}")
    return prefix


_BOOL = {"true": True, "false": False}


def _row_facts(row: dict) -> dict:
    """The per-row facts of the newer sources' columns (absent or empty cells: the source's)."""
    facts = {}
    for key in ("norm", "position", "framework", "fp8_recipe"):
        if (row.get(key) or "").strip():
            facts[key] = row[key].strip().lower()
    for key in ("tied_embeddings", "linear_bias", "tp_comm_overlap", "compiled"):
        value = (row.get(key) or "").strip().lower()
        if value in _BOOL:
            facts[key] = _BOOL[value]
    if (row.get("gpus_per_node") or "").strip():
        facts["gpus_per_node"] = int(row["gpus_per_node"])
    return facts


def row_to_run(row: dict) -> PublishedRun:
    """One CSV row as cost-model inputs. Raises AutoplanError on a malformed row."""
    prefix = _source_key(row["id"])
    facts = {**SOURCES[prefix], **_row_facts(row)}
    assumptions = []
    layers, seq_len = _int(row, "num_layers"), _int(row, "seq_len")
    experts = _int(row, "moe_num_experts", 1) if "moe_num_experts" in row else 1
    moe = dict(num_experts=experts, num_experts_per_token=_int(row, "moe_top_k", 1),
               moe_ffn_hidden_size=_int(row, "moe_ffn_hidden_size", 0)) if experts > 1 else {}
    model = ModelSpec(
        name=row["model_name"], num_layers=layers, hidden_size=_int(row, "hidden_size"),
        num_heads=_int(row, "num_heads"), num_kv_heads=_int(row, "num_kv_heads"),
        ffn_hidden_size=_int(row, "ffn_hidden_size"), vocab_size=_int(row, "vocab_size"),
        mlp=row["mlp"], norm=facts["norm"], position=facts["position"],
        tied_embeddings=facts["tied_embeddings"], linear_bias=facts["linear_bias"],
        max_seq_len=seq_len, **moe, **MODEL_FACTS.get(row["model_name"], {}))
    training = TrainingSpec(global_batch_size=_int(row, "global_batch"), seq_len=seq_len,
                            dtype=row["precision"])
    cluster = ClusterSpec(name=row["gpu"], num_gpus=_int(row, "num_gpus"), gpus_per_node=facts.get("gpus_per_node", 8),
                          profile=f"builtin:{row['gpu']}")
    tp, pp, dp, cp = (_int(row, k) for k in ("tp", "pp", "dp", "cp"))
    mb = _int(row, "micro_batch")
    if mb is None:
        # Megatron-LM's runs in Narayanan 2021 Table 1 do not state it; their Table 2 PTD rows
        # use 1, so do we.
        mb = 1
        assumptions.append("micro_batch missing: 1 (as the paper's PTD rows)")
    if prefix == "TORCHTITAN" and pp > 1:
        # torchtitan's table gives the local (per-DP-rank) batch; its pipeline schedule splits it
        # into one micro-batch per pipeline stage when pipeline_parallel_microbatches is unset,
        # and its interleaved schedules default to 2 stages per rank.
        num_stages = pp * (2 if "interleaved" in row["notes"].lower() else 1)
        if mb % num_stages == 0:
            mb //= num_stages
            assumptions.append(f"micro_batch: local batch / {num_stages} pipeline stages = {mb}")
    m = training.global_batch_size // max(1, dp * mb)
    recompute = row["recompute"].strip()
    if not recompute:
        if prefix == "N21":
            recompute = "full"    # the paper recomputes activations in every run (section 5)
        else:
            recompute = "selective"  # torchtitan's llama3_8b.toml default activation checkpointing
        assumptions.append(f"recompute missing: {recompute}")
    vpp = _int(row, "vpp")
    if vpp and pp > 1 and pp * vpp > layers and "account-for-embedding" in row["notes"]:
        # Megatron-LM's --account-for-embedding/loss-in-pipeline-split counts the embedding and the
        # loss as a layer each (PP32 x VPP3 = 96 chunks for 94 layers); autoplan needs a layer in
        # every virtual stage: the most chunks that have one.
        vpp = layers // pp
        assumptions.append(f"vpp: {vpp} (the source's chunks count the embedding and the loss as layers)")
    if vpp is None:
        vpp = 1
        per_stage = layers // pp if pp else layers
        if prefix == "TORCHTITAN" and pp > 1 and "interleaved" in row["notes"].lower() and m % pp == 0:
            # torchtitan's interleaved default: 2 stages per rank (126 layers over 16 stages: its
            # generated split [7, 8 x14, 7] is ParallelPlan.virtual_stage_num_layers).
            vpp = 2
            assumptions.append("vpp missing: 2 (torchtitan's interleaved default)")
        elif prefix not in ("TORCHTITAN", "BLOOM", "LLMFOUNDRY") and "interleav" in row["notes"].lower() \
                and pp > 1 and m % pp == 0:
            # Interleaved 1F1B with an unstated chunk count: the smallest split of a stage.
            vpp = next((v for v in (2, 3, 5) if per_stage % v == 0), 1)
            assumptions.append(f"vpp missing: {vpp} (interleaved per the notes)")
    sp = row["sequence_parallel"].strip().lower() == "true"
    if sp and tp == 1:
        # Megatron-LM accepts --sequence-parallel at TP 1 and turns it off (megatron/training/
        # arguments.py core_v0.16.1 lines 904-913: "Disabling sequence parallelism because tensor
        # model parallelism is disabled").
        sp = False
        assumptions.append("sequence_parallel: false (the flag has no effect at tp = 1)")
    if not row["sequence_parallel"].strip() and tp > 1 and (row.get("framework") or "").strip() and \
            FRAMEWORK_FACTS.get(facts["framework"], facts["framework"]) == "megatron-core":
        # Megatron-Core's recipes (NeMo, Megatron-LM examples) turn sequence parallelism on with TP.
        sp = True
        assumptions.append("sequence_parallel missing: true (Megatron-Core recipes with tp > 1)")
    zero = _int(row, "zero_stage", 0)
    # Expert TP: what the notes state (Megatron's --expert-tensor-parallel-size, "ETP=1"), else tp
    # (Megatron's default, and the only choice before core 0.10).
    etp = next((int(a or b) for a, b in _ETP.findall(row["notes"])), 0) if moe else 0
    plan = ParallelPlan(dp=dp, tp=tp, pp=pp, cp=cp, vpp=vpp, sequence_parallel=sp, zero_stage=zero,
                        micro_batch_size=mb, num_microbatches=max(1, m), recompute=recompute,
                        recompute_num_layers=0, ep=(_int(row, "ep", 1) if moe else 1),
                        etp=0 if etp == tp else etp,
                        recompute_modules=_recompute_modules(row["notes"]) if recompute == "selective" else (),
                        zero_shard=_hsdp_shard_group(row["notes"], dp * cp) if zero else 0)
    if recompute == "full":
        # Every layer of every stage (the largest stage bounds the count).
        plan = plan.replace(recompute_num_layers=plan.layers_per_stage(layers))
    framework = facts["framework"]
    if (row.get("framework") or "").strip():
        # The software the row names, as the built-in framework whose facts predict it.
        framework = FRAMEWORK_FACTS.get(framework, framework)
    if prefix == "MTNLG":
        framework = "megatron-deepspeed"    # 2021: fused softmax, no flash attention
    then = dict(facts.get("framework_then", {}))
    if prefix == "N21" and zero == 3:
        # Table 2's ZeRO-3 baseline ran on DeepSpeed of early 2021 (ZeRO-3 came with v0.3.13, 2021-03,
        # the paper is of 2021-04) on the torch of its time: one gather and one reduce-scatter per
        # parameter tensor, gathers the compute waits for, and torch's copies around list collectives
        # (Framework.zero3_gather_per_tensor, zero3_gather_blocking, collective_list_copies).
        framework = "deepspeed"
        then.update(zero3_gather_per_tensor=True, zero3_gather_blocking=True, collective_list_copies=True)
    if plan.zero_shard and framework in FRAMEWORKS and plan.zero_stage not in FRAMEWORKS[framework].hsdp_zero_stages:
        # The stack the row ran shards so, whatever the built-in framework standing in for it can do
        # (BloombergGPT: SageMaker's sharded data parallelism, MiCS over 128 GPUs, on DeepSpeed's facts).
        then["hsdp_zero_stages"] = (plan.zero_stage,)
    if plan.recompute_modules and framework in FRAMEWORKS and not FRAMEWORKS[framework].recompute_modules:
        # The stack it ran names the submodules it recomputes (OLMo-core's selected_modules mode).
        then["recompute_modules"] = True
    stated = row["source"] + " " + row["notes"]
    if row["precision"] == "fp8" and _FP8_PARAMS.search(stated):
        # NeMo fp8_params (FP8_PARAMS=True in MLPerf's config_common.sh): the distributed optimizer
        # all-gathers the linears' weights in fp8 (Framework.fp8_param_gather).
        then["fp8_param_gather"] = True
    if row["precision"] == "fp8" and _FSDP_FLOAT8_GATHER.search(stated):
        # torchao's float8 all-gather (torchtitan [float8] enable_fsdp_float8_all_gather): FSDP2
        # gathers the linears' weights as fp8 tensors, 1 B each on the wire and in the gathered copy.
        then["fp8_weight_copy_bytes"] = 1.0
    compiled = facts["compiled"] if "compiled" in facts else "compile" in row["notes"]
    if prefix == "TORCHTITAN" and row["id"].startswith(_TORCHTITAN_COMPILED_LOSS) and compiled:
        # torchtitan from 2025-04-02 on (bbb1b616e, components/loss.py build_cross_entropy_loss) compiles the
        # loss with training.compile: Inductor fuses the fp32 cast into the cross-entropy, so the backward
        # holds the bf16 logits it saved and their bf16 gradient, 2 + 2 B per logit, not 10.
        then["loss_bytes_per_logit"] = 4.0
    if prefix == "FP8LM" and facts.get("fp8_recipe") == "fp8lm":
        # FP8-LM's own recipe (MS-AMP O3 on Megatron-LM): its states (memory only; the step time keeps
        # Megatron's facts). The GEMMs stay Transformer Engine's, with its fp8 weight workspaces.
        then["states"] = MSAMP_O3_STATES
    if any(where in row["source"] for where in _GRAD_SYNC_BF16):
        then["main_grad_reduce_bytes"] = 2.0
    if prefix == "INTERNEVO" and "shard group = all DP ranks" in row["notes"]:
        # InternEvo's Hybrid ZeRO over every DP rank syncs the weights by one broadcast per rank
        # (Framework.zero1_broadcast_sync); a shard group inside a node (zero1=8 or 4) broadcasts over
        # NVLink, below what the plan (ZeRO over all of dp) resolves.
        then["zero1_broadcast_sync"] = True
    notes = row["notes"]
    mem = _PEAK_MEMORY.search(notes)
    gib = mem and (mem.group(2) == "GiB" or facts.get("memory_gb_is_gib", False))
    reported_memory = float(mem.group(1)) * (2 ** 30 if gib else 1e9) if mem else None
    return PublishedRun(
        id=row["id"], source=facts["source"], gpu=row["gpu"], model=model, training=training,
        cluster=cluster, plan=plan, framework=framework,
        compiled=compiled,
        async_tp=bool(_ASYNC_TP.search(notes)) and framework == "torchtitan",
        tp_comm_overlap=facts.get("tp_comm_overlap", False) and framework == "megatron-core",
        fp8_rowwise="rowwise" in row["id"] or facts.get("fp8_recipe") == "rowwise",
        # The FlashAttention-2 paper's baselines name their attention in the model column; the
        # Megatron-DeepSpeed long-sequence README's "New" rows ran its script's --use-flash-attn-triton
        # (the rebase added FlashAttention: examples_deepspeed/rebase/README.md), its "Old" rows not.
        flash_attention=_stated_flash_attention(prefix, row),
        nic_bytes_per_s=_per_gpu(facts.get("nic_bytes_per_s"), row["gpu"]),
        reported_peak_memory_bytes=reported_memory,
        reported_memory_is_allocated=facts.get("memory_is_allocated", False),
        reported_memory_of_rank0=facts.get("memory_of_rank0", False),
        measured_tokens_per_s_per_gpu=float(row["tokens_per_s_per_gpu"]),
        assumptions=tuple(assumptions), notes=notes,
        # Every published run mapped onto torchtitan's facts predates 0.3.0's chunked loss (or is
        # another FSDP stack with its own whole-logit loss), so none takes that fact.
        framework_then=tuple({**({"loss_chunks": 1} if framework == "torchtitan" else {}),
                              **then, **(moe_run_facts(notes) if moe else {})}.items()),
        sweep=f"{facts['source']}/{row['model_name']}/{row['gpu']}/{row['precision']}")


def _stated_flash_attention(prefix: str, row: dict) -> bool | None:
    """Fused attention where a row states it against its framework's default. The FlashAttention-2
    paper's baselines name their attention in the model column. The Megatron-DeepSpeed long-sequence
    README compares its rebased code, whose script runs --use-flash-attn-triton, with the code before
    the rebase, which had no FlashAttention (the rebase added it: examples_deepspeed/rebase/README.md,
    "Enabled FlashAttention v1 and v2"): its "Old" rows ran the fused softmax."""
    if "no flashattention" in row["model_name"].lower():
        return False
    if prefix == "MDS" and "Old Megatron-DeepSpeed" in row["published_metric"]:
        return False
    return None


def load_published_runs(path: str | Path = PUBLISHED_RUNS_PATH) -> list:
    """Every row of the CSV as a PublishedRun (rows whose plan breaks a rule are still returned)."""
    p = Path(path)
    if not p.exists():
        raise AutoplanError(f"published-runs file {p} does not exist; pass an existing CSV")
    with p.open(newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows or "tokens_per_s_per_gpu" not in rows[0]:
        raise AutoplanError(f"{p} is not a published-runs CSV (no tokens_per_s_per_gpu column)")
    return [row_to_run(r) for r in rows]
