"""What the software behind each published row ran, where its notes or source say so against its
framework's defaults: fp8 parameter gathers, bf16 gradient sync, a compiled loss, its own optimizer
states, its attention kernel, InternEvo's Hybrid ZeRO. Each rule names the code or config it reads.
The reader that applies them is cost_model/published_rows.py."""
from __future__ import annotations

import re

from autoplan.specs.frameworks._eager import EAGER_GPT_HOST_S_PER_KERNEL, EAGER_GPT_KERNELS_PER_LAYER
from autoplan.specs.frameworks.megatron_core import MSAMP_O3_STATES, NEMO2_MLPERF_LLAMA31

_FP8_PARAMS = re.compile(r"FP8_PARAMS=True|fp8_params true|\bfp8 params\b")
"""How an MLPerf row's config or log states NeMo's fp8_params."""

_FLASH1_MODEL = re.compile(r"(?<!no )FlashAttention(-1)?\)")
"""How a FlashAttention-2 source row names FlashAttention-1 in its model column ("..., FlashAttention)",
"..., FlashAttention-1)"), not "no FlashAttention)" or "FlashAttention-2)"."""

_FSDP_FLOAT8_GATHER = re.compile(r"enable_fsdp_float8_all_gather|FSDP float8 all-gather", re.IGNORECASE)
"""How a torchtitan row's config or notes state torchao's float8 all-gather under FSDP2."""

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

_TORCHTITAN_COMPILED_LOSS = ("TORCHTITAN-2506-", "TORCHTITAN-H200-")
"""torchtitan rows made at commits that compile the loss (820504e and e7c0cae, both 2025-06-13, after
bbb1b616e): the async-TP benchmark's and the H200 benchmark's (their docs' "Versions and Dates")."""

_FLASH_ATTN_ROWS = {"MLPERF-v30-": "flash1", "MLPERF-v31-": "flash2", "FP8LM-": "flash2"}
"""Rows whose Megatron stack attended with the flash-attn package on Hopper, not cuDNN's fused attention,
and the package's kernel.
Transformer Engine before v1.2 (2023-12-15) returns flash-attn first whenever it applies
(transformer_engine/pytorch/attention.py, v0.12-v1.1: `if use_flash_attention:` before the fused
backend; v0.8, transformer.py: flash-attn only); v1.2 added "Select FusedAttention on sm90". MLPerf v3.0
ran TE release_v0.8, v3.1 TE 09ba842 (2023-10-01; Azure's 4ee8e8e, 2023-10-02) with flash-attn 2.0.8
(its Dockerfile, mlcommons/training_results_v3.1 NVIDIA/benchmarks/gpt3/implementations/pytorch);
FP8-LM's notes say "FlashAttention used" (its version unstated: FlashAttention-2, the release of its
time). TE v0.8 calls flash-attn 1.x (flash_attn_unpadded_func): FlashAttention-1."""

_LLMFOUNDRY_FLASH2 = ("MPT-1b", "MPT-3b", "MPT-7b", "MPT-70b")
"""The models llm-foundry's large-scale H100 sweep ran on FlashAttention-2 (scripts/train/benchmarking/
sweep.py @5e85bd62d: `--attn_impl flash`, installed as '.[gpu-flash2]'; its 13b and 30b pass `--attn_impl
triton`). Every other benchmark row ran submit_benchmarks.py's default, `--attn_impl triton` (@b2a43a147 and
@5e85bd62d, line 144): llmfoundry/models/layers/flash_attn_triton.py, flash-attn's Triton kernel copied
at eff9fe6b."""


def _llmfoundry_kernel(row: dict) -> str:
    flash2 = "Large Scale" in row["source"] and row["model_name"] in _LLMFOUNDRY_FLASH2
    return "flash2" if flash2 else "flash-triton"


def _attention_kernel(prefix: str, row: dict, stated: str) -> str | None:
    """The attention kernel a row's stack ran where it differs from its framework's (None: the framework's)."""
    for start, kernel in _FLASH_ATTN_ROWS.items():
        if row["id"].startswith(start):
            return kernel
    if prefix == "FA2" and _FLASH1_MODEL.search(row["model_name"]):
        # FlashAttention-2's Table 1 baselines "FlashAttention" and the flash-attn training README's GPT3
        # rows (FlashAttention-1 + fused kernels): the package before 2.0
        return "flash1"
    if prefix == "LLMFOUNDRY":
        return _llmfoundry_kernel(row)
    if "--use-flash-attn-triton" in stated and stated_flash_attention(prefix, row) is not False:
        # Megatron-DeepSpeed's FlashSelfAttentionTriton (megatron/model/transformer.py): flash-attn's
        # Triton kernel, whose tiles pad the head width to a power of two (cost_model/layer_terms.py
        # tile_head_dim). Rows that ran without FlashAttention say so (stated_flash_attention).
        return "flash-triton"
    return None


def stack_facts(prefix: str, row: dict, facts: dict, compiled: bool) -> dict:
    """The facts of the software a row ran that its notes or source state (fp8 parameter gathers,
    bf16 gradient sync, a compiled loss, its own states or attention kernel), over its framework's."""
    then = {}
    stated = row["source"] + " " + row["notes"]
    if row["precision"] == "fp8" and _FP8_PARAMS.search(stated):
        # NeMo fp8_params (FP8_PARAMS=True in MLPerf's config_common.sh): the distributed optimizer
        # all-gathers the linears' weights in fp8 (Framework.fp8_param_gather).
        then["fp8_param_gather"] = True
    if prefix == "MLPERF" and "MLPerf llama31" in row["model_name"]:
        then.update(NEMO2_MLPERF_LLAMA31)       # bf16 main gradients (grad_reduce_in_fp32=False)
    if row["precision"] == "fp8" and _FSDP_FLOAT8_GATHER.search(stated):
        # torchao's float8 all-gather (torchtitan [float8] enable_fsdp_float8_all_gather): FSDP2
        # gathers the linears' weights as fp8 tensors, 1 B each on the wire and in the gathered copy.
        then["fp8_weight_copy_bytes"] = 1.0
    if prefix == "TORCHTITAN" and row["id"].startswith(_TORCHTITAN_COMPILED_LOSS) and compiled:
        # torchtitan from 2025-04-02 on (bbb1b616e, components/loss.py build_cross_entropy_loss) compiles the
        # loss with training.compile: Inductor fuses the fp32 cast into the cross-entropy, so the backward
        # holds the bf16 logits it saved and their bf16 gradient, 2 + 2 B per logit, not 10.
        then["loss_bytes_per_logit"] = 4.0
    if prefix == "FP8LM" and facts.get("fp8_recipe") == "fp8lm":
        # FP8-LM's own recipe (MS-AMP O3 on Megatron-LM): its states (memory only; the step time keeps
        # Megatron's facts). The GEMMs stay Transformer Engine's, with its fp8 weight workspaces.
        then["states"] = MSAMP_O3_STATES
    kernel = _attention_kernel(prefix, row, stated)
    if kernel:
        then["attention_kernel"] = kernel
    if any(where in row["source"] for where in _GRAD_SYNC_BF16):
        then["main_grad_reduce_bytes"] = 2.0
    if prefix == "BLOOM":
        # BigScience's tr11 runs on 48 Jean Zay nodes launched every kernel synchronously
        # (CUDA_LAUNCH_BLOCKING=1, Framework.launch_blocking): tr11-176B-ml.slurm exports it ("do not remove
        # or the training will hang"); chronicles-prequel.md, "dealing with JZ hanging", measured
        # asynchronous launches hanging always at 320 GPUs, before its 384-GPU topology rows. The host issue
        # time then adds to every micro-batch. Its count and cost per kernel are a stand-in: eager
        # PyTorch's on a GPT layer (LayerNorm, GeLU, biases: the executor's GPT-2, forward and backward; the
        # recompute's second forward is not counted); Megatron-DeepSpeed's fused GPT layer was not counted.
        then.update(launch_blocking=True, kernels_per_layer=EAGER_GPT_KERNELS_PER_LAYER,
                    host_s_per_kernel=EAGER_GPT_HOST_S_PER_KERNEL)
    if prefix == "INTERNEVO":
        # InternEvo's Hybrid ZeRO all-reduces the gradients over every DP rank and syncs the weights by
        # one broadcast per rank of its ZeRO group (Framework.zero1_broadcast_sync): over every DP rank
        # (zero1=-1), or inside a node (zero1=8 or 4, ParallelPlan.zero_shard), over NVLink. It reduces
        # the bf16 model weights' own gradients in their dtype (@34fc28d760 hybrid_zero_optim.py
        # _reduce_and_copy -> solver/optimizer/utils.py reduce_tensor: dtype = tensor.dtype): 2 B each.
        then["zero1_broadcast_sync"] = True
        then["main_grad_reduce_bytes"] = 2.0
    return then

def stated_flash_attention(prefix: str, row: dict) -> bool | None:
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
