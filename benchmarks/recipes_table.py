"""Public training recipes, as their configs state them: the table benchmarks/recipes_side_by_side.py
costs and plans against.

Each row is what one public config file (or one published layout) sets: model, GPU type and count,
global batch, sequence length, precision, framework and every parallel knob. Only configurations are
written here, never a throughput, step time or MFU of any source (those stay out of the project's
data, DESIGN.md); where a source leaves a value open, `assumed` says what was chosen and why. Sources
are cited by repository, path, commit and lines (read with the search/fetch tools, 2026-11-29).

Kept aside on purpose (never used): the Llama 3 paper's Table 4 layout and the NeMo / Megatron-Bridge
performance pages. Llama 3.1 405B's published layout is therefore the MLPerf Training v5.0 NVIDIA
submission's config, already a row of cost_model/data/published_runs.csv.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from autoplan.specs import ParallelPlan

DEFAULT_PLAN = ParallelPlan()

MLM = "NVIDIA/Megatron-LM"
BRIDGE = "NVIDIA-NeMo/Megatron-Bridge"
TITAN = "pytorch/torchtitan"
TITAN_TOML = "238fa9953e4aec2a62582121564273d7cbb1e9f1"
"""torchtitan's last commit with TOML train configs (the next, 9810191b 2026-02-23, moved them to a
Python registry with the same values)."""
MDS = "deepspeedai/Megatron-DeepSpeed"


@dataclass(frozen=True)
class Recipe:
    key: str
    family: str
    """"dense" or "moe"."""
    source: str
    """repository path @commit (lines): where every knob below is read."""
    model: str
    """An `autoplan models` catalog name."""
    gpu: str
    num_gpus: int
    global_batch: int
    """Sequences per optimizer step."""
    seq_len: int
    framework: str
    """The autoplan framework entry that stands for the recipe's software (its options after '+'); TP
    communication overlap is a knob (tp_comm_overlap), not an option."""
    knobs: dict = field(default_factory=dict)
    """ParallelPlan fields the recipe sets (tp, pp, vpp, cp, ep, etp, sequence_parallel, zero_stage,
    micro_batch_size, recompute, recompute_num_layers, recompute_modules, tp_comm_overlap); dp and num_microbatches
    follow from the GPU count and the batch; unset ones take ParallelPlan's defaults."""
    dtype: str = "bf16"
    assumed: str = ""
    """What the source leaves open, or states in terms autoplan has no knob for, and what was taken."""


PLAN_KNOBS = ("tp", "pp", "vpp", "cp", "ep", "etp", "sequence_parallel", "zero_stage", "micro_batch_size",
              "recompute", "recompute_num_layers", "recompute_modules", "tp_comm_overlap")


def from_published(key: str, family: str, run_id: str, source: str, model: str, framework: str,
                   assumed: str = "") -> Recipe:
    """A recipe whose layout is already a row of cost_model/data/published_runs.csv: its GPUs, batch,
    sequence, precision and knobs read from there (written once), never its measured figures."""
    from cost_model.published_rows import load_published_runs

    run = next(r for r in load_published_runs() if r.id == run_id)
    knobs = {k: getattr(run.plan, k) for k in PLAN_KNOBS if getattr(run.plan, k) != getattr(DEFAULT_PLAN, k)}
    return Recipe(key, family, f"{source} (published_runs.csv {run_id}'s plan columns)", model, run.cluster.name,
                  run.cluster.num_gpus, run.training.global_batch_size, run.training.seq_len, framework, knobs,
                  run.training.dtype, assumed)


RECIPES = (
    Recipe("megatron-lm-gpt3-175b", "dense",
           f"{MLM} examples/gpt3/train_gpt3_175b_distributed.sh @779c5b748d (lines 29-57)",
           "gpt3-175b", "a100-80gb", 1024, 1536, 2048, "megatron-core",
           dict(tp=8, pp=16, micro_batch_size=1), dtype="fp16",
           assumed="GPU count: the script's NUM_NODES=1 cannot hold tp8 x pp16; 1024 A100s (8 replicas) as in "
                   "Narayanan et al. 2021 Table 1's 175B row. No --use-distributed-optimizer, no "
                   "--sequence-parallel, no recompute flag: zero 0, no SP, no recompute."),
    Recipe("megatron-lm-mixtral-8x7b", "moe",
           f"{MLM} examples/mixtral/train_mixtral_8x7b_distributed.sh @779c5b748d (lines 30-87)",
           "mixtral-8x7b", "h100-80gb", 64, 256, 4096, "megatron-core",
           dict(tp=1, pp=4, ep=8, zero_stage=1, micro_batch_size=1),
           assumed="GPU count left to SLURM_NNODES: 64 H100s (8 nodes, the smallest multiple of "
                   "pp4 x ep8 with 2 expert-data replicas). --sequence-parallel with tp 1 is a no-op in "
                   "Megatron (it is switched off), so no SP."),
    Recipe("megatron-lm-mfsdp-deepseek-v3", "moe",
           f"{MLM} examples/megatron_fsdp/sbatch_mfsdp_deepseek_v3.sh @adfe9e11d9 (lines 18-51, 136-152)",
           "deepseek-v3", "h100-80gb", 256, 2048, 4096, "megatron-core",
           dict(tp=1, ep=8, etp=1, zero_stage=3, micro_batch_size=4, recompute="selective",
                recompute_modules=("mlp", "moe", "mla_up_proj", "layernorm")),
           assumed="Node count is your_own_num_nodes: 256 H100s (as benchmarks/moe_plan_note.py). "
                   "Megatron-FSDP optim_grads_params = ZeRO-3. The MTP layer is not modelled."),
    Recipe("bridge-llama3-70b", "dense",
           f"{BRIDGE} src/megatron/bridge/recipes/llama/h100/llama3.py @061468b782 "
           "(llama3_70b_pretrain_32gpu_h100_bf16_config, lines 717-790)",
           "llama-3-70b", "h100-80gb", 32, 512, 8192, "megatron-core",
           dict(tp=4, pp=4, vpp=5, cp=2, sequence_parallel=True, zero_stage=1, micro_batch_size=1,
                tp_comm_overlap=True)),
    Recipe("bridge-llama31-405b-128k", "dense",
           f"{BRIDGE} src/megatron/bridge/recipes/llama/h100/llama3.py @061468b782 "
           "(llama31_405b_pretrain_256gpu_h100_bf16_config, lines 1200-1275)",
           "llama-3-405b", "h100-80gb", 256, 512, 131072, "megatron-core",
           dict(tp=8, pp=8, vpp=2, cp=4, sequence_parallel=True, zero_stage=1, micro_batch_size=1,
                tp_comm_overlap=True),
           assumed="The catalog's llama-3-405b (8k context) stands for Llama 3.1 405B (same shape, 128k "
                   "RoPE scaling)."),
    Recipe("bridge-qwen3-235b-a22b", "moe",
           f"{BRIDGE} src/megatron/bridge/recipes/qwen/h100/qwen3_moe.py @16846a8da7 "
           "(qwen3_235b_a22b_pretrain_256gpu_h100_bf16_config, lines 228-345); "
           "global batch from src/megatron/bridge/recipes/common.py _pretrain_common",
           "qwen3-235b-a22b", "h100-80gb", 256, 32, 4096, "megatron-core",
           dict(tp=4, pp=16, cp=2, ep=8, etp=1, sequence_parallel=True, zero_stage=1, micro_batch_size=1),
           assumed="The recipe sets no global batch: _pretrain_common's 32 stands."),
    Recipe("bridge-deepseek-v3", "moe",
           f"{BRIDGE} src/megatron/bridge/recipes/deepseek/h100/deepseek_v3.py @2967dfa544 "
           "(deepseek_v3_pretrain_1024gpu_h100_bf16_config, lines 105-250)",
           "deepseek-v3", "h100-80gb", 1024, 4096, 4096, "megatron-core",
           dict(tp=2, pp=16, ep=64, etp=1, sequence_parallel=True, zero_stage=1, micro_batch_size=1),
           assumed="Its hand-written pipeline layout (embedding and MTP as stages of their own) is "
                   "costed as autoplan's even split of the 61 layers; the MTP layer is not modelled."),
    from_published("moe-modelzoo-qwen3-235b", "moe", "MOEZOO-q3235b-01",
                   "yanring/Megatron-MoE-ModelZoo best_practice/Qwen3/readme.md @b0b92ff329 (H100 layout, run_235b.sh)",
                   "qwen3-235b-a22b", "megatron-core"),
    Recipe("torchtitan-llama3-8b", "dense",
           f"{TITAN} torchtitan/models/llama3/train_configs/llama3_8b.toml @{TITAN_TOML[:10]} (lines 1, 31-59)",
           "llama-3-8b", "a100-80gb", 64, 64, 8192, "torchtitan",
           dict(zero_stage=3, micro_batch_size=1, recompute="selective"),
           assumed="'preset for 64 A100 GPUs' (line 1); data_parallel_shard_degree -1 = FSDP over all 64, "
                   "global batch = local_batch_size 1 x 64; selective_ac_option 'op' = torchtitan's op-level "
                   "selective recompute."),
    Recipe("torchtitan-llama3-70b", "dense",
           f"{TITAN} torchtitan/models/llama3/train_configs/llama3_70b.toml @{TITAN_TOML[:10]} (lines 1, 31-54)",
           "llama-3-70b", "a100-80gb", 64, 64, 8192, "torchtitan",
           dict(tp=8, sequence_parallel=True, zero_stage=3, micro_batch_size=8, recompute="full",
                recompute_num_layers=80),
           assumed="'preset for 64 A100 GPUs'; FSDP over the 8 dp ranks, global batch = 8 x 8; "
                   "torchtitan's TP plan shards the norms on the sequence (SequenceParallel on attention_norm / "
                   "ffn_norm in parallelize_llama): Megatron-style SP."),
    Recipe("torchtitan-llama3-405b", "dense",
           f"{TITAN} torchtitan/models/llama3/train_configs/llama3_405b.toml @{TITAN_TOML[:10]} (lines 1, 17-62)",
           "llama-3-405b", "h100-80gb", 128, 32, 8192, "torchtitan",
           dict(tp=8, sequence_parallel=True, zero_stage=3, micro_batch_size=2, recompute="full",
                recompute_num_layers=126), dtype="fp8",
           assumed="'preset for 128 H100 GPUs'; converters float8 (fp8 linears, fp8 FSDP all-gather); "
                   "compile and async TP are on in the recipe, which autoplan's torchtitan entry does not "
                   "price apart; TP with sequence-parallel norms as for 70B."),
    Recipe("torchtitan-qwen3-32b", "dense",
           f"{TITAN} torchtitan/models/qwen3/train_configs/qwen3_32b.toml @{TITAN_TOML[:10]} (lines 1, 31-55)",
           "qwen3-32b", "h100-96gb-500w", 8, 16, 4096, "torchtitan",
           dict(zero_stage=3, micro_batch_size=2, recompute="full", recompute_num_layers=64),
           assumed="'preset for 8 H100 GPUs (with 96GiB memory)': the h100-96gb-500w profile."),
    Recipe("deepspeed-azure-gpt3-175b", "dense",
           f"{MDS} examples_deepspeed/azure/run-175b.sh @c79e3fbf6d (lines 18-66, 105-139)",
           "gpt3-175b", "a100-80gb", 128, 512, 1024, "deepspeed",
           dict(zero_stage=3, micro_batch_size=4, recompute="full", recompute_num_layers=96), dtype="fp16",
           assumed="NODES=1 in the script (8 GPUs cannot hold 175B under ZeRO-3 without the CPU offload the "
                   "script comments on): 16 nodes of 8 A100 80GB, global batch = GPN x MICRO_BATCH x NODES."),
    from_published("bigscience-bloom-176b", "dense", "BLOOM-176B-prod",
                   "bigscience-workshop/bigscience train/tr11-176B-ml/tr11-176B-ml.slurm @003b25057e "
                   "(#SBATCH --nodes=48, TP_SIZE..SEQ_LEN, --checkpoint-activations, ZERO_STAGE)",
                   "bloom-176b", "megatron-deepspeed",
                   assumed="ZERO_STAGE=0 in the script, whose comment says DeepSpeed's bf16 optimizer 'implements "
                           "its own zero stage 1 equivalent': ZeRO-1."),
    Recipe("deepseek-v3-report", "moe",
           "DeepSeek-V3 technical report arXiv:2412.19437 sec. 3.1 (2,048 H800), 3.2 (16-way PP, 64-way EP "
           "spanning 8 nodes, ZeRO-1 DP, no TP), 3.2.3 (RMSNorm and MLA up-projections recomputed), 3.3 (FP8 "
           "training), 4.2 (batch 15,360 sequences of 4K)",
           "deepseek-v3", "h100-80gb", 2048, 15360, 4096, "megatron-core",
           dict(tp=1, pp=16, ep=64, etp=1, zero_stage=1, micro_batch_size=1, recompute="selective",
                recompute_modules=("layernorm", "mla_up_proj")), dtype="fp8",
           assumed="H800 costed as h100-80gb (same matmul peak; the report's NVLink is 160 GB/s against the "
                   "profile's 450); their HAI-LLM with DualPipe costed as Megatron-Core 1F1B; their block-wise "
                   "FP8 as autoplan's fp8; micro-batch not published (1)."),
    from_published("mlperf-llama31-405b", "dense", "MLPERF-v50-nv405-n64-01",
                   "mlcommons/training_results_v5.0 NVIDIA/benchmarks/llama31_405b/implementations/"
                   "eos-dfw_n64_ngc25.01_nemo/config_DGXH100_64x8x288xtp8pp8cp2.sh @0fdc28f013",
                   "llama-3-405b", "megatron-core",
                   assumed="Llama 3.1 405B's published layout (the paper's Table 4 is kept aside); MLPerf's 32k "
                           "vocabulary costed as the catalog's 128k; FP8_PARAMS=True (weights kept in fp8 only) "
                           "has no knob in autoplan."),
)
