"""DataParallelFacts: what a training framework's data-parallel and ZeRO collectives do -- when they
start and what hides them, how it splits them into collectives, and the bytes they and the copies
around them move.

One part of `Framework` (autoplan.specs.framework), its base class, kept in a module of its own because
these facts change for their own reasons (a framework's ZeRO implementation, its bucketing, its reduce
dtype) and have their own readers: cost_model/dp_time.py (the collectives'
time), step_time.py and terms.py (the copies around them), memory.py and stage_memory.py (what ZeRO
holds gathered or unsharded). The fitted ones (dp_comm_overlap, dp_bandwidth_scale) take their published
frameworks' values from cost_model/data/constants.json, as every Framework field does.
"""
from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class DataParallelFacts:
    """A framework's data-parallel and ZeRO facts; `Framework` inherits them (every field has a
    default, so a framework states only where it differs)."""
    # -- when its collectives run and what hides them ------------------------------------------------
    dp_comm_overlap: float = 0.8
    """Fraction of the overlappable compute window the DP/FSDP collectives can hide behind."""
    dp_overlap_zero_stages: tuple = (0, 1, 2, 3)
    """The ZeRO stages at which its DP collectives start under the backward (or, sharded, the
    forward); at the others they start once the backward is done and every byte is exposed
    (DeepSpeed: overlap_comm defaults to ZeRO-3 only; its pipeline engine reduces after the whole
    schedule)."""
    dp_param_gather_overlap: bool = False
    """ZeRO-1/2: the updated weights' all-gather runs under the next step's first forward, chunked
    per layer (per virtual stage with a pipeline), so the forward adds to the window the gradient
    reduce-scatter has in the last backward (Megatron-Core --overlap-param-gather with
    --overlap-grad-reduce: only one chunk stays exposed, NeMo docs "Communication Overlap")."""
    dp_sync_per_virtual_stage: bool = False
    """With an interleaved schedule, each virtual stage's gradients are reduced (and its weights
    gathered) as soon as its own last micro-batch is done, under the other virtual stages' compute
    (cost_model.dp_time.interleaved_window_factor); else the whole rank's after its last backward."""
    dp_bandwidth_scale: float = 1.0
    """Fraction of the profile's bus bandwidth its DP/ZeRO collectives reach."""
    overlap_contention: float = 0.0
    """Fraction of overlapped DP/FSDP collective time that still slows the step (NCCL kernels hold
    SMs and HBM bandwidth while the GEMMs run)."""
    # -- how it splits them into collectives ---------------------------------------------------------
    dp_bucket_params: float = 0.0
    """Parameters per data-parallel gradient bucket at ZeRO 0-2: each bucket is its own collective
    (and pays its own latency). 0: one bucket per layer (FSDP wraps each block as a unit);
    math.inf: the whole gradient in one collective. ZeRO-3 gathers and reduces per layer always."""
    dp_bucket_params_per_rank: float = 0.0
    """Parameters per data-parallel rank a bucket holds at least (Megatron-Core: max(40M, 1M x dp),
    so that rings at large dp stay bandwidth-bound)."""
    zero3_reduce_bucket_params: float = 0.0
    """ZeRO-3 gradients awaiting reduce-scatter (DeepSpeed reduce_bucket_size); 0: one layer's."""
    zero3_max_live_params: float = 0.0
    """ZeRO-3 gathered parameters held at once (DeepSpeed stage3_max_live_parameters); 0: FSDP units
    (one layer and its prefetched neighbour)."""
    zero3_gather_per_tensor: bool = False
    """ZeRO-3 gathers and reduce-scatters each parameter tensor with its own collective (DeepSpeed's
    ZeRO-3 as first released, v0.3.13 of 2021, before its collectives were coalesced:
    partition_parameters.py `_allgather_param`, one torch.distributed.all_gather per parameter, and
    `_reduce_scatter_gradients`, one reduce_scatter per parameter), each paying the collective's
    latency; else one of each per layer."""
    zero2_reduce_every_microbatch: bool = False
    """ZeRO-2 reduce-scatters the gradients of every micro-batch into their shard (FSDP2 with gradient
    sync on, Megatron-FSDP optim_grads); False: once per step, after the last micro-batch (a framework
    that keeps whole gradients until then). Either way a pipeline over FSDP2 syncs once
    (cost_model.memory.grads_accumulate_unsharded)."""
    pipeline_defers_grad_sync: bool = True
    """Under a pipeline, the schedule keeps FSDP's gradient sync off until a stage's last backward
    (torch.distributed.pipelining stage.py backward_maybe_with_nosync), so ZeRO-3, and ZeRO-2 over
    sharded weights, hold whole gradients across the micro-batches (grads_accumulate_unsharded).
    False: its FSDP reduces every backward under its own pipeline schedule."""
    zero3_reduce_every_microbatch: bool = True
    """ZeRO-3 reduce-scatters the gradients of every micro-batch (FSDP2 as torchtitan and OLMo-core run
    it: neither turns gradient sync off between micro-batches). False: sync is off until the last
    micro-batch (FSDP2 set_requires_gradient_sync(False); KempnerForge's maybe_no_sync), so the step
    reduces once, and every local parameter's unsharded gradient is held in between, accumulated in
    the reduce dtype (torch 2.9 distributed/fsdp/_fully_shard/_fsdp_param.py
    to_accumulated_grad_if_needed and accumulate_unsharded_grad_if_needed)."""
    zero3_recompute_reuse_params: float = math.inf
    """Under full activation recompute, ZeRO-3 gathers a layer's modules for the forward, again for the
    recompute and, where it released them in between, a third time for their backward. DeepSpeed keeps a
    module gathered after its recompute only if fewer than this many parameters are fetched before its
    backward needs it again: twice those of the modules after it in the layer, run in the recompute and
    then in the backward (stage3_max_reuse_distance, 1e9 by default: deepspeed/runtime/zero/
    partitioned_param_coordinator.py `__params_to_release`, counted from the step after the module;
    v0.3.13 stage3.py `get_reuse_distance_in_numel` counts the same modules). So a 530B's layers keep
    only their last MLP matrix, and a 13B's keep all. inf: the recompute and the backward share one gather
    (FSDP's pre-backward unshard)."""
    zero3_gather_blocking: bool = False
    """ZeRO-3's weight gathers stall the compute they feed: nothing of them hides (DeepSpeed v0.3.13
    stage3.py `fetch_sub_module`, "This call is blocking": it waits on every gather in flight and
    then torch.cuda.synchronize(); `_allgather_param` synchronizes the device before each gather too).
    Its gradient reduce-scatters still run on their own stream under the backward."""
    zero1_broadcast_sync: bool = False
    """ZeRO-1/2 brings the updated weights back by each rank of the ZeRO group broadcasting its own
    shard (InternEvo HybridZeroOptimizer.broadcast_params: one dist.broadcast per rank, after the step
    and a device synchronize; its configs leave overlap_sync_param off): group-many collectives of a
    1/group share each, none hidden. Else one bucketed all-gather (Megatron-Core, DeepSpeed)."""
    collective_list_copies: bool = False
    """The ZeRO collectives hand torch.distributed a list of world-size tensors (DeepSpeed v0.3.13
    `_allgather_param` and `_reduce_scatter_gradient`), which torch's ProcessGroupNCCL of that time
    flattens: one copy kernel per rank of the group after each all-gather and before each
    reduce-scatter (ProcessGroupNCCL::allgather / reduce_scatter with flatten_for_scatter_gather,
    before `_allgather_base`). Each copy, one kernel, is priced on the profile's HBM copy table at the bytes it moves."""
    # -- the bytes they move and the copies around them -----------------------------------------------
    main_grad_reduce_bytes: float = 4.0
    """Bytes per gradient on the wire of the ZeRO 0-2 gradient reduction: the fp32 main gradients
    (Megatron-LM turns accumulate_allreduce_grads_in_fp32 on with --bf16, "bfloat16 requires gradient
    accumulation and all-reduce to be done in fp32": megatron/training/arguments.py); 2 where a run
    reduces in bf16 (NeMo's distributed_fused_adam grad_sync_dtype: bf16, Megatron-Core
    grad_reduce_in_fp32 False). DeepSpeed's BF16_Optimizer all-reduces its fp32 accumulators cast to
    bf16 (engine.py allreduce_bucket, communication_data_type): 2 x 2 B on the wire, as a 4 B
    reduce-scatter; its fp16 ZeRO-1 reduces 2 B, which this field does not tell apart."""
    sharded_reduce_bytes_per_grad: float = 2.0
    """Bytes per gradient on the wire of a ZeRO-3 reduce-scatter (the reduce dtype: 2 for bf16, 4 for
    fp32; ZeRO 0-2 reduce the fp32 main gradients)."""
    fp8_param_gather: bool = False
    """An fp8 run keeps its linears' weights in fp8 and all-gathers them so, 1 B each instead of 2
    (Megatron-Core --fp8-param-gather, NeMo fp8_params: "conducts the parameter all-gather in fp8,
    reducing the all-gather overhead by half", NeMo docs features/optimizations/communication_overlap).
    Memory is unchanged: Transformer Engine's Float8Tensor keeps each weight's fp8 transpose beside its
    data (Hopper's fp8 GEMMs take TN operands only), 2 B per weight as in bf16."""
    gather_copy_bytes_per_param: float = 0.0
    """HBM bytes per gathered parameter that each all-gather of sharded weights costs on the compute
    stream besides the collective: FSDP2 copies the all-gather output into every parameter (read +
    write the compute dtype: 4). 0: the gather lands in the parameters' own storage (FSDP1's flat
    parameter, Megatron's and DeepSpeed's contiguous buffers)."""
    reduce_copy_bytes_per_param: float = 0.0
    """HBM bytes per gradient that each reduce-scatter of sharded gradients costs on the compute stream:
    FSDP2 copies the unsharded gradients into the reduce-scatter input in its reduce dtype (read bf16 2
    + write fp32 4: 6). 0: gradients are reduced where they were accumulated."""
