"""megatron-deepspeed: Megatron-DeepSpeed as BigScience ran BLOOM (2022), and the 2021-2022 runs on the
same stack it stands in for (GPT-NeoX 20B; MT-NLG, cost_model/published_rows.py)."""
from __future__ import annotations

from autoplan.specs.framework import Framework
from autoplan.specs.frameworks.deepspeed import (
    DEEPSPEED_BF16_STATES, DEEPSPEED_GRAD_ACCUMULATION, DEEPSPEED_STATES)


_DEEPSPEED_PIPE_REDUCE_SOURCE = (
    "deepspeed/runtime/pipe/schedule.py TrainSchedule.steps: ReduceTiedGrads, ReduceGrads and OptimizerStep "
    "follow the last micro-batch's backward (Megatron-DeepSpeed trains GPTModelPipe on this engine)")

MEGATRON_DEEPSPEED = Framework(
    name="megatron-deepspeed", version="Megatron-DeepSpeed as BigScience ran BLOOM (2022)",
    description="historical: Megatron-DeepSpeed (fused softmax, ZeRO-1, DeepSpeed pipeline engine)",
    states=DEEPSPEED_STATES, flash_attention=False, pp_scatter_gather=False, max_zero_with_pp=1, dp_bucket_params=5e8,
    max_zero_with_moe=2, max_cp=1, max_vpp=1, sequence_parallel="never", mla=False, dp_overlap_zero_stages=(),
    grad_accumulation_bytes=DEEPSPEED_GRAD_ACCUMULATION, by_dtype={"bf16": {"states": DEEPSPEED_BF16_STATES}},
    sources={"dp_overlap_zero_stages": _DEEPSPEED_PIPE_REDUCE_SOURCE,
             "by_dtype": "deepspeed/runtime/bf16_optimizer.py: fp32_groups_gradients_flat (full-size)",
             "grad_accumulation_bytes": "deepspeed/runtime/pipe/engine.py _exec_backward_pass: "
                                        "optimizer.update_hp_grads after every micro-batch's backward (bf16)",
             "max_zero_with_moe": "deepspeedai/DeepSpeed deepspeed/runtime/engine.py (commit 007cca6), "
                                  "DeepSpeedEngine._configure_zero_optimizer, the ZeroStageEnum.weights "
                                  "branch: assert not self.has_moe_layers, \"MoE not supported with Stage 3\"",
             "states": "DeepSpeed ZeRO-1 (deepspeed/runtime/zero/stage_1_and_2.py): fp16 grads, fp32 partitions",
             "flash_attention": "BLOOM training (2022) predates flash attention in Megatron-DeepSpeed",
             "pp_scatter_gather": "DeepSpeed's pipeline engine sends whole activations"})

LISTED_AT = 7
FRAMEWORKS = (MEGATRON_DEEPSPEED,)
# GPT-NeoX 20B (2022) and MT-NLG (2021): fused softmax without flash attention, DeepSpeed pipeline.
STANDS_IN_FOR = ("gpt-neox",)
