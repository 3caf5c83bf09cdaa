"""What each built-in framework keeps per parameter (its model states) and the per-dtype facts that
change them: the tables autoplan/specs/frameworks.py's entries point to, kept apart because they
change with a framework's optimizer and mixed-precision code, not with its parallelism rules.
Megatron-LM's own default (megatron_states) is Framework's default, in autoplan/specs/framework.py."""
from __future__ import annotations

from autoplan.specs.framework import NEVER, StateTerm, megatron_states


def fsdp2_states(what: str) -> dict:
    """FSDP2 with a bf16 MixedPrecisionPolicy: the sharded parameter IS the fp32 master (PyTorch
    FSDP2 docs, `fully_shard(mp_policy=MixedPrecisionPolicy(param_dtype=bfloat16,
    reduce_dtype=float32))`); gradients land in fp32 on the sharded parameter; AdamW keeps two fp32
    moments."""
    return {
        "params": StateTerm(4, 1, f"fp32 parameters ({what})"),
        "grads": StateTerm(4, 2, "fp32 gradients"),
        "optimizer": StateTerm(8, 1, "AdamW momentum 4 + variance 4 (fp32)"),
    }


TORCHTITAN_STATES = {
    **fsdp2_states("FSDP2-sharded master"),
    "grads": StateTerm(4, 1, "fp32 gradients, reduce-scattered into the shard every micro-batch from ZeRO-1"),
}
"""torchtitan has no ZeRO-1 of its own: autoplan exports its ZeRO-1 as it does ZeRO-2, fully_shard with
reshard_after_forward "never" (autoplan/exporters/torchtitan/shared.py data_parallel_degrees), and torchtitan
0.3.0's train step never turns FSDP2's gradient sync off between micro-batches (train.py), so the fp32
gradients are reduce-scattered into the shard every micro-batch at ZeRO-1 too: 2 B per parameter on 2 gloo
ranks (tests/test_state_oracle.py, "torchtitan never reshard")."""
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
MEGATRON_FP16 = {
    "states": {**megatron_states(),
               "params": StateTerm(2, 3, "fp16 weights the kernels read"),
               "grads": StateTerm(2, 2, "fp16 main-grad buffer (gradients accumulated over micro-batches)")},
    "main_grad_reduce_bytes": 2.0,
}
"""Megatron-LM in fp16: only --bf16 turns accumulate_allreduce_grads_in_fp32 on ("bfloat16 requires
gradient accumulation and all-reduce to be done in fp32", megatron/training/arguments.py, core_v0.6.0
lines 279-288 and main of 2026-08); without that flag the gradient buffers take the parameters' dtype
(core_v0.6.0 megatron/core/distributed/distributed_data_parallel.py line 105, `grad_dtype = torch.float
if accumulate_allreduce_grads_in_fp32 else param.dtype`; param_and_grad_buffer.py on main), so an fp16
run keeps and reduces 2 B gradients. The fp32 master weights and Adam moments stay."""
DEEPSPEED_GRAD_ACCUMULATION = {"bf16": (18.0, 18.0), "fp16": (0.0, 6.0)}
"""bf16 (BF16_Optimizer, which DeepSpeed picks for bf16 at ZeRO-1 and under its pipeline engine:
engine.py _do_optimizer_sanity_check): each micro-batch's backward ends in update_hp_grads,
hp_grad.add_(lp.grad.to(float32)) per parameter: read bf16 2, write and read the fp32 cast 4 + 4,
read and write the fp32 accumulator 4 + 4 = 18 B (bf16_optimizer.py). fp16 (the ZeRO-1 and fp16
optimizers): autograd adds each later micro-batch's gradient into param.grad in place, read 2 + 2,
write 2 = 6 B; the first micro-batch's GEMM writes param.grad itself."""
AUTOPLAN_STATES = {
    "params": StateTerm(4, 1, "fp32 parameters: the master weights (FSDP2-sharded at ZeRO 1-3 and at one "
                              "replica; DDP or plain at ZeRO 0 with several)"),
    "grads": StateTerm(4, 2, "fp32 gradients, accumulated in fp32 over the micro-batches; ZeRO 1 keeps them "
                             "whole until the last micro-batch"),
    "optimizer": StateTerm(8, 1, "AdamW momentum 4 + variance 4 (fp32)"),
}
