"""What each published source states about the cluster its runs ran on and how it reports them, beyond
the CSV's columns: the per-source facts (network, how it logs memory), the models' architecture details
and the facts its measured rows chose (RowDerivedFact).

The software a row names and the framework as the source ran it live with the framework whose facts
predict it (autoplan/specs/frameworks/, STANDS_IN_FOR and AS_RAN); nanotron, MaxText and Paxml have no
built-in entry, so their rows are listed as skipped. cost_model/published_rows.py reads the rows with these;
a new source's facts go here.
"""
from __future__ import annotations

from dataclasses import dataclass

from cost_model.splits import Where
from cost_model.tables import BUS_FACTOR

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
    takes its framework's fitted or documented value, or for a plan fact the row's own rule for the cell,
    as a new source would), and
    benchmarks/fit_constants.py withholds it from the refit's training rows the same way."""
    field: str
    """The field it sets on the source's rows: a Framework field, or with `on_plan` a ParallelPlan field
    that the rows leave empty (withheld, the row's own rule for the empty cell applies)."""
    value: float
    source: str
    """The source whose measured rows chose it."""
    how: str
    """How the rows chose it, and the script that does it."""
    evidence: tuple
    """Where (cost_model.splits) each measurement it came from was made: its source, GPU, GPU count
    and precision, which need not be rows of the CSV."""
    on_plan: bool = False
    """A fact of the runs' plans (a knob the source leaves unstated), not of their framework."""


def nccl_tests_busbw(reported_bytes_per_s: float, reported_ranks: int, ranks: int) -> float:
    """An all-reduce bus bandwidth reported with 2 (r - 1) / r at `reported_ranks`, restated at the
    `ranks` that ran it, as nccl-tests defines busbw (cost_model.tables.BUS_FACTOR)."""
    factor = BUS_FACTOR["all_reduce"]
    return reported_bytes_per_s * factor(ranks) / factor(reported_ranks)


FLAGPERF_A100_NIC_BYTES_PER_S = 25e9
"""One of the BAAI A100 servers' RDMA NICs: "RDMA网卡：25GB/s" (200 Gb/s), FlagPerf
base/benchmarks/interconnect-P2P_interserver/nvidia/A100/README.md @97012624, where one GPU pair across
two servers reached 19.33 GB/s of it."""
FLAGPERF_A100_ALLREDUCE_BUSBW = nccl_tests_busbw(45.11e9, reported_ranks=8, ranks=16)
"""FlagPerf's own 2-server, 16-GPU all-reduce on its DGX A100 40GB servers (the machines its
mixtral_7b-megatron A100x2x8 case names): 45.11 GB/s, FlagPerf base/benchmarks/
interconnect-MPI_interserver/nvidia/A100/README.md @97012624, fp32 buffers of 4 GiB, 1,000 iterations.
Its main.py computes busbw with node_size = 8 where 16 ranks ran: 48.3 GB/s as nccl-tests counts it."""
FLAGPERF_A100_NICS_PER_NODE = round(FLAGPERF_A100_ALLREDUCE_BUSBW / FLAGPERF_A100_NIC_BYTES_PER_S)
"""2: a ring all-reduce across nodes runs at the node's NIC total, and 48.3 GB/s is 1.93 of those NICs, not
the 8 of a DGX A100 as shipped (the profile's default). A measurement of the cluster, not of any training
row: not a RowDerivedFact."""


BLOOM_NETWORK = RowDerivedFact(
    "dp_bandwidth_scale", 0.265, "bigscience",
    "solved from BigScience's 200B one-vs-two-replica step times on Jean Zay (chronicles-prequel.md "
    "'Best TFLOPs', fp16 and bf16): benchmarks/bigscience_network.py",
    evidence=tuple(Where("bigscience", "a100-80gb", n, dtype) for n in (80, 160) for dtype in ("fp16", "bf16")))
"""The fraction of Jean Zay's Omni-Path bandwidth BLOOM's data-parallel collectives reached, measured on
BigScience's one-vs-two-replica pairs (tests/test_cost_model_published.py re-solves it with the
shipped constants)."""
BLOOM_DP_BANDWIDTH_SCALE = BLOOM_NETWORK.value

MTNLG_MICRO_BATCH = RowDerivedFact(
    "micro_batch_size", 2, "mt-nlg",
    "solved from MT-NLG's three step times at 8, 10 and 12 replicas of one 280-GPU pipeline (Smith et al. "
    "2022 sec. 2.4: 60.1, 50.2, 44.4 s at batch 1920): the step's part that does not shrink with the "
    "replicas is the pipeline's fill and drain, (p - 1) micro-batch times, and it holds 1.9 micro-batches "
    "of one sample: benchmarks/mtnlg_micro_batch.py",
    evidence=tuple(Where("mt-nlg", "a100-80gb", n, "bf16") for n in (2240, 2800, 3360)), on_plan=True)
"""MT-NLG's micro-batch, which the paper does not state (BigScience's reconstruction of its config,
tr8-104B-wide/chronicles.md, wrote 1 from Narayanan et al.'s Table 1, a Megatron-LM run of another batch
and schedule). At 1 the three step times leave ~6 s a step that no part of DeepSpeed's 1F1B pipeline step
explains (tests/test_pipeline_bubble.py runs its own schedule); at 2 the fill and drain account for it."""
ROW_DERIVED_FACTS = (BLOOM_NETWORK, MTNLG_MICRO_BATCH)
"""Every fact solved or chosen from a source's measured rows (each applied through SOURCES "derived").
Not here, because read from code rather than chosen by the rows, though the rows were checked against
them: DeepSpeed v0.3.13's ZeRO-3 terms of Narayanan et al. 2021's baseline rows (cost_model/published_rows.py,
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
    "TORCHTITAN": dict(source="torchtitan", norm="rmsnorm", position="rope", tied_embeddings=False,
                       linear_bias=False, framework="torchtitan"),
    # The sources added in 2026-11 state their software and architecture per row (columns framework,
    # norm, position, tied_embeddings, linear_bias, gpus_per_node): only the source key lives here,
    # and the scale-out network where it is not a DGX's (each row's notes cite it).
    # InternEvo's A100 cluster: 4 x 100 Gb/s RoCE per 8-GPU node (its hardware table).
    "INTERNEVO": dict(source="internevo", nic_bytes_per_s=4 * 100e9 / 8 / 8),
    # fms-fsdp's README's throughput table: "A100 80G 128 GPUs with 400Gbps", "H100 96 GPUs
    # with 800 Gbps", per 8-GPU node: 6.25 and 12.5 GB/s per GPU.
    "FMS": dict(source="fms-fsdp", nic_bytes_per_s={"a100-80gb": 400e9 / 8 / 8, "h100-80gb": 800e9 / 8 / 8}),
    # Kempner's H200 nodes: 4 GPUs, NVLink inside, "InfiniBand (NDR 400Gbps)" between nodes (KempnerForge
    # benchmarks/config_validation/config_validation.md @dbf29da), priced at the profile's default, one
    # 400 Gb/s link per GPU (50 GB/s). Not one link per node (12.5 GB/s per GPU): its 8-node 70B run
    # moved >= 20.3 GB/s per GPU, counted bytes over its step (tests/test_kempner_network.py). The MoE
    # rows (KEMPNERMOE) ran on 2 of the same nodes (moe_packed_benchmark.md).
    "KEMPNER": dict(source="kempnerforge", **KEMPNERFORGE_MEMORY_LOG),
    # Only its 32B rows span nodes, and they ran on Ai2's Augusta cluster: the script (OLMo2-32B.py at
    # eaecf879c, a commit of the branch for "uploading checkpoints augusta") saves to gs://, and at that
    # commit olmo_core/distributed/utils.py sets NCCL's FASTRAK (GPUDirect-TCPXO) plugin on "augusta"
    # hosts. That is Google Cloud's A3 Mega: 8 H100 80GB with eight 200 Gb/s NICs for GPU traffic
    # (Google Cloud docs, "Networking and GPU machines"), 25 GB/s per GPU, half a DGX H100's.
    "OLMOCORE": dict(source="olmo-core", nic_bytes_per_s=200e9 / 8),
    "TTDOCS": dict(source="torchtitan-docs"),
    "NANOTRON": dict(source="nanotron"),
    "MLPERF": dict(source="mlperf"),
    "MTNLG": dict(source="mt-nlg", derived=(MTNLG_MICRO_BATCH,)),
    "NEMOTRON": dict(source="nemotron"),
    "FP8LM": dict(source="fp8-lm"),
    "ZB": dict(source="zero-bubble"),
    "FA2": dict(source="flash-attention-2"),
    "MDS": dict(source="megatron-deepspeed-examples"),
    "NEOX": dict(source="gpt-neox-20b"),
    # BloombergGPT trained on 64 AWS p4d.24xlarge, 400 Gb/s of EFA per node (arXiv 2303.17564 Sec. 3.3-3.4, as
    # its row's notes say), not a DGX A100's 8 x 200 Gb/s.
    "BBGPT": dict(source="bloomberggpt", nic_bytes_per_s=400e9 / 8 / 8),
    "DGXC": dict(source="dgxc-jax"),
    "TORCHAO": dict(source="torchao"),
    # Mixture-of-experts runs (2026-12, cost_model/data/published_sources/moe.md). They are scored
    # out of sample only: no constant is fitted on a row with moe_num_experts (cost_model/splits.py).
    "MOEZOO": dict(source="megatron-moe-modelzoo"),
    "MCOREMOERM": dict(source="megatron-core-moe-readme"),
    "KEMPNERMOE": dict(source="kempnerforge-moe", **KEMPNERFORGE_MEMORY_LOG),
    # FlagPerf's "mem" column (its READMEs: "显存", in GiB, as "used/total") is the device memory its
    # monitor reads from nvidia-smi's Memory-Usage (training/nvidia/nvidia_monitor.py): everything the
    # process holds, compared with the whole predicted peak (allocated + allocator slack + CUDA context).
    # Its A100 servers' scale-out network from its own interconnect benchmarks (FLAGPERF_A100_NICS_PER_NODE);
    # none of its H100 servers were measured so, and those keep the DGX default.
    "FLAGPERF": dict(source="flagperf", memory_used_of_total_gib=True,
                     nic_bytes_per_s={"a100-40gb": FLAGPERF_A100_NICS_PER_NODE * FLAGPERF_A100_NIC_BYTES_PER_S / 8}),
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
