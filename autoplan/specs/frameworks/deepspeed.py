"""deepspeed: Microsoft DeepSpeed ZeRO 1-3 and its pipeline engine, and the stacks of the published runs
it stands in for (Megatron-DeepSpeed, SageMaker's sharded data parallelism) as they ran."""
from __future__ import annotations

import math

from autoplan.specs.framework import NEVER, Framework, StateTerm


DEEPSPEED_STATES = {
    "params": StateTerm(2, 3, "bf16/fp16 weights the kernels read"),
    "grads": StateTerm(2, 2, "bf16/fp16 gradients (param.grad, reduced in their own dtype)"),
    "grad_partition": StateTerm(4, 1, "fp32 copy of this rank's gradient partition for the update"),
    "optimizer": StateTerm(12, 1, "fp32 master weights 4 + Adam momentum 4 + variance 4"),
}
"""DeepSpeed ZeRO (deepspeed/runtime/zero/stage_1_and_2.py, stage3.py): gradients stay in the
compute dtype until reduced; the optimizer works on an fp32 copy of its own partition."""
DEEPSPEED_BF16_STATES = {
    "params": StateTerm(2, 3, "bf16 weights the kernels read"),
    "grads": StateTerm(2, 2, "bf16 gradients (param.grad of the micro-batch)"),
    "grad_accumulator": StateTerm(4, 2, "fp32 gradients the micro-batches add into: full-size under "
                                        "BF16_Optimizer (ZeRO 0-1), the rank's partition at ZeRO 2-3"),
    "optimizer": StateTerm(12, 1, "fp32 master weights 4 + Adam momentum 4 + variance 4"),
}
"""DeepSpeed in bf16: at ZeRO 0-1 (and under its pipeline engine) BF16_Optimizer keeps
fp32_groups_gradients_flat, zeros_like the whole bf16 flat group in fp32, of which each rank's
partition is a view (deepspeed/runtime/bf16_optimizer.py); the fp32 master weights and Adam states
are partitioned. fp16 runs keep DEEPSPEED_STATES (ZeRO-1's fp32 gradient is the partition's)."""
DEEPSPEED_BF16_EXPORTED_STATES = {
    "params": StateTerm(2, 3, "bf16 weights the kernels read"),
    "grads": StateTerm(2, 2, "bf16 gradients: param.grad, whole, at ZeRO 0-1; from ZeRO-2 the rank's bf16 "
                             "partition each micro-batch's reduction adds into"),
    "optimizer": StateTerm(12, 1, "fp32 master weights 4 + Adam momentum 4 + variance 4"),
}
"""DeepSpeed 0.19.8 in bf16 as autoplan exports it (no data_types.grad_accum_dtype): gradients accumulate
in bf16, the model's dtype (runtime/engine.py get_data_types lines 1806-1807), so _do_optimizer_sanity_check
(lines 2294-2321) picks DDP_BFLOAT16 at ZeRO-0, whose FP16_UnfusedOptimizer keeps bf16 param.grad and
whole fp32 master weights and moments, and the ZeRO optimizers from ZeRO-1 (fp32 accumulation would take
BF16_Optimizer at ZeRO-1 only, and is refused at ZeRO-0 outside the pipeline: "unsupported mix"). ZeRO-1
does not partition gradients: param.grad accumulates whole until the accumulation boundary, where it is
reduced into the partition (zero/stage_1_and_2.py reduce_ready_partitions_and_remove_grads, line 2294);
ZeRO-2 and 3 reduce every micro-batch into the rank's bf16 partition (averaged_gradients with overlap_comm
and contiguous_gradients, as exported; zero/stage3.py grad_partitions_flat_buffer, line 791). The step's
fp32 copy of the partition lives only during the update. Counted on 2 gloo ranks by
tests/test_state_oracle.py: 2/2/12 at ZeRO-0, 2/2/6 at ZeRO-1, 2/1/6 at ZeRO-2, 1/1/6 at ZeRO-3."""
DEEPSPEED_BF16_PIPELINE_STATES = {
    "params": StateTerm(2, NEVER, "bf16 weights the kernels read"),
    "grads": StateTerm(2, NEVER, "bf16 param.grad, zeroed, not freed, between micro-batches"),
    "grad_accumulator": StateTerm(2, NEVER, "BF16_Optimizer's fp32_groups_gradients_flat in the accumulation "
                                            "dtype (bf16 as exported), whole"),
    "optimizer": StateTerm(12, 0, "fp32 master weights 4 + Adam momentum 4 + variance 4, over data parallelism"),
}
"""DeepSpeed 0.19.8's pipeline engine at ZeRO-0 in bf16 (Framework.pipeline_zero0_states): it takes
BF16_Optimizer (engine.py lines 2316-2320) with the model's dtype as its accumulation dtype (line 2628,
grad_acc_dtype=get_data_types()[1]); that optimizer partitions the fp32 master and Adam state over the
data-parallel group at any stage (bf16_optimizer.py lines 153-160: partition_count, partition_id), keeps
fp32_groups_gradients_flat as zeros_like the bf16 flat group in that dtype (line 191), and the pipeline
engine adds each micro-batch's param.grad into it with clear_lp_grads=False (pipe/engine.py lines
838-862, bf16_optimizer.py _update_hp_grad)."""
DEEPSPEED_GRAD_ACCUMULATION = {"bf16": (18.0, 18.0), "fp16": (0.0, 6.0)}
"""bf16 with fp32 accumulation (BF16_Optimizer's fp32_groups_gradients_flat: megatron-deepspeed's runs,
DeepSpeed with data_types.grad_accum_dtype fp32): each micro-batch's backward ends in update_hp_grads,
hp_grad.add_(lp.grad.to(float32)) per parameter: read bf16 2, write and read the fp32 cast 4 + 4, read
and write the fp32 accumulator 4 + 4 = 18 B (bf16_optimizer.py). fp16 (the ZeRO-1 and fp16 optimizers): autograd adds each later micro-batch's
gradient into param.grad in place, read 2 + 2, write 2 = 6 B; the first micro-batch's GEMM writes
param.grad itself."""
DEEPSPEED_BF16_EXPORTED_ACCUMULATION = {"bf16": (0.0, 6.0), "fp16": (0.0, 6.0)}
"""DeepSpeed 0.19.8 as autoplan exports it (DEEPSPEED_BF16_EXPORTED_STATES: bf16 accumulation) adds in the
model's dtype as fp16 does: DDP_BFLOAT16's FP16_UnfusedOptimizer at ZeRO-0 and the ZeRO-1 optimizer leave
each micro-batch's gradient to autograd's AccumulateGrad, in place into param.grad (bf16: read 2 + 2,
write 2 = 6 B); ZeRO-1 reduces it only at the accumulation boundary (zero/stage_1_and_2.py
reduce_ready_partitions_and_remove_grads, line 2294; no grad_accum attribute where the accumulation dtype
is the model's, lines 397-404); both set param.grad to None after the step (unfused_optimizer.py zero_grad,
stage_1_and_2.py zero_grad), so the first micro-batch's GEMM writes it (0 B)."""
DEEPSPEED_BF16_PIPELINE_ACCUMULATION = {"bf16": (6.0, 14.0)}
"""DeepSpeed 0.19.8's pipeline engine at ZeRO-0 in bf16 (Framework.pipeline_zero0_grad_accumulation_bytes):
BF16_Optimizer with the accumulation dtype bf16. Before each micro-batch's backward the engine zeroes the
bf16 param.grad (pipe/engine.py line 839, bf16_optimizer.py clear_lp_grads: write 2 B; the last stage via
engine.backward's backward_prologue), autograd adds the micro-batch's gradient into it in place (read 2 + 2,
write 2 = 6 B), and update_hp_grads adds it into the accumulator (bf16_optimizer.py _update_hp_grad line
523: .to(bf16) of a bf16 tensor copies nothing; read 2 + 2, write 2 = 6 B): 2 + 6 + 6 = 14 B. After the
step zero_grad sets param.grad to None (set_to_none=True), so the first micro-batch has nothing to zero
and its GEMM writes param.grad: the accumulator add alone, 6 B."""

_DEEPSPEED_OVERLAP_SOURCE = (
    "deepspeed/runtime/zero/config.py overlap_comm_valid: overlap_comm defaults to stage == 3; without it "
    "engine.backward reduces the gradients after loss.backward() (engine.py allreduce_gradients)")

DEEPSPEED = Framework(
    name="deepspeed", version="DeepSpeed 0.16 (2025) with Megatron-DeepSpeed",
    description="Microsoft DeepSpeed ZeRO 1-3 and its pipeline engine",
    states=DEEPSPEED_STATES, zero3_max_live_params=1e9, zero3_reduce_bucket_params=5e8, dp_bucket_params=5e8,
    zero3_recompute_reuse_params=1e9,
    pp_scatter_gather=False, max_zero_with_pp=1, max_zero_with_moe=2, max_cp=1, max_vpp=1, mla=False,
    dp_overlap_zero_stages=(3,), grad_accumulation_bytes=DEEPSPEED_BF16_EXPORTED_ACCUMULATION,
    pipeline_zero0_grad_accumulation_bytes=DEEPSPEED_BF16_PIPELINE_ACCUMULATION,
    by_dtype={"bf16": {"states": DEEPSPEED_BF16_EXPORTED_STATES,
                       "pipeline_zero0_states": DEEPSPEED_BF16_PIPELINE_STATES}}, sp_regathers_in_backward=True,
    sources={"mla": "Megatron-DeepSpeed has no multi-latent attention",
             "sp_regathers_in_backward": "Megatron-DeepSpeed megatron/core/tensor_parallel/layers.py: Megatron's "
                                         "sequence-parallel linears, which all-gather their saved sharded input "
                                         "again in backward",
             "by_dtype": "deepspeed/runtime/engine.py get_data_types, _do_optimizer_sanity_check (0.19.8): "
                         "bf16 accumulation as exported; BF16_Optimizer under the pipeline engine",
             "grad_accumulation_bytes": "deepspeed/runtime/engine.py get_data_types (0.19.8): bf16 accumulates "
                                        "in bf16 as exported; torch autograd AccumulateGrad into param.grad",
             "pipeline_zero0_grad_accumulation_bytes": "deepspeed/runtime/pipe/engine.py _exec_backward_pass, "
                                                       "bf16_optimizer.py clear_lp_grads, _update_hp_grad (0.19.8)",
             "dp_overlap_zero_stages": _DEEPSPEED_OVERLAP_SOURCE,
             "hsdp_zero_stages": "DeepSpeed 0.19 removed MiCS, its hybrid ZeRO-3 (runtime/config.py "
                                 "_REMOVED_ZERO_CONFIG_KEYS: mics_shard_size)",
             "max_zero_with_moe": "deepspeedai/DeepSpeed deepspeed/runtime/engine.py (commit 007cca6), "
                                  "DeepSpeedEngine._configure_zero_optimizer, the ZeroStageEnum.weights "
                                  "branch: assert not self.has_moe_layers, \"MoE not supported with Stage 3\"",
             "states": "deepspeed/runtime/zero/stage_1_and_2.py, stage3.py: 16-bit grads, fp32 partitions",
             "zero3_recompute_reuse_params": "DeepSpeed config docs: stage3_max_reuse_distance 1e9 "
                                             "(default); partitioned_param_coordinator.py __params_to_release",
             "zero3_max_live_params": "DeepSpeed config docs: stage3_max_live_parameters 1e9, "
                                      "reduce_bucket_size 5e8 (defaults)",
             "dp_bucket_params": "deepspeed/runtime/zero/config.py: reduce_bucket_size and "
                                 "allgather_bucket_size default 5e8 elements (ZeRO 1/2)",
             "max_zero_with_pp": "deepspeed/runtime/pipe/engine.py: ZeRO-2/3 are incompatible with "
                                 "pipeline parallelism",
             "max_cp": "DeepSpeed's sequence parallelism is Ulysses (all-to-all over heads), not the "
                       "context parallelism planned here",
             "max_vpp": "the pipeline engine has no interleaved schedule",
             "pp_scatter_gather": "the pipeline engine sends whole activations from every TP rank",
             "uneven_stages": "deepspeed/runtime/pipe/module.py: PipelineModule partition_method "
                              "'parameters' balances stages by parameter count, not layer count"})

LISTED_AT = 4
FRAMEWORKS = (DEEPSPEED,)
STANDS_IN_FOR = ("megatron-deepspeed", "sagemaker-smp")
AS_RAN = {
    # BloombergGPT ran SageMaker's sharded data parallelism on DeepSpeed's facts, not DeepSpeed's
    # collectives: their fitted bandwidth scale is not its, and neither is DeepSpeed's parameter
    # coordinator that releases modules between recompute and backward.
    "bloomberggpt": {"dp_bandwidth_scale": 1.0, "zero3_recompute_reuse_params": math.inf},
}
DEEPSPEED_V0_3_13_ZERO3 = {"zero3_gather_per_tensor": True, "zero3_gather_blocking": True, "collective_list_copies": True}
"""DeepSpeed of early 2021 (ZeRO-3 came with v0.3.13, 2021-03) on the torch of its time, as Narayanan et
al. 2021's Table 2 ZeRO-3 baseline ran it: one gather and one reduce-scatter per parameter tensor,
gathers the compute waits for, and torch's copies around list collectives (Framework.
zero3_gather_per_tensor, zero3_gather_blocking, collective_list_copies)."""
