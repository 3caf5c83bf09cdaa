"""The data-parallel collectives of one step: what the ZeRO stages move per rank, in how many calls,
over which group, and how much of it hides under compute.

Volumes after ZeRO (arXiv 1910.02054, section 7): plain DP all-reduces gradients (2*Psi on the wire per
rank), stages 1-2 reduce-scatter gradients and all-gather updated weights (same 2*Psi), stage 3 adds a
weight all-gather in forward and backward (3*Psi), per micro-batch unless weights stay gathered across
micro-batches (pipeline schedules). Each call is priced on the profile's collective table at its own
size, so a framework that splits the same bytes into more calls pays their latency.
"""
from __future__ import annotations

import math
from typing import NamedTuple

from autoplan.specs import ParallelPlan
from cost_model.layer_time import memory_time_s
from cost_model.memory import BYTES_WEIGHT, grads_accumulate_unsharded, shards_grads
from cost_model.stage_memory import fp8_gathered_fraction, fp8_linear_share


def grad_reduce_bytes(sw, zero_stage: int) -> float:
    """Bytes per gradient on the wire of the framework's gradient reduction at `zero_stage`: ZeRO 0-2
    reduce the main gradients (Framework.main_grad_reduce_bytes, fp32 for Megatron and DeepSpeed),
    ZeRO-3 reduce-scatters in the framework's reduce dtype (Framework.sharded_reduce_bytes_per_grad)."""
    return sw.sharded_reduce_bytes_per_grad if zero_stage >= 3 else sw.main_grad_reduce_bytes


def fp8_gathered_params(est, plan: ParallelPlan, per_stage: int) -> float:
    """Of a rank's `per_stage` layers' dense parameters, how many its data-parallel all-gathers move
    in fp8 (1 B): the blocks' linears of an fp8 run whose framework gathers them so
    (Framework.fp8_param_gather, or torchao's float8 all-gather under FSDP2:
    cost_model.stage_memory.fp8_gathered_fraction); the norms, the embedding and the head stay bf16."""
    if est.training.dtype != "fp8":
        return 0.0
    linears = fp8_linear_share(est.model, est.params.dense_per_layer)
    fw = est.framework
    share = linears if fw.fp8_param_gather else fp8_gathered_fraction(fw, "fp8", plan, linears)
    return share * per_stage * est.params.dense_per_layer / plan.tp


def _gathers_every_backward(plan: ParallelPlan, sw) -> bool:
    """A pipeline whose FSDP frees the weights after each forward (Framework.pp_reshard_after_forward)
    gathers them for every backward that follows a forward."""
    return plan.pp > 1 and sw.pp_reshard_after_forward


def reduces_every_microbatch_at_zero2(plan: ParallelPlan, sw) -> bool:
    """ZeRO-2 (and a ZeRO-1 that shards the gradients as its ZeRO-2 does: shards_grads) whose framework
    reduce-scatters each micro-batch's gradients into their shard (Framework.zero2_reduce_every_microbatch),
    unless a pipeline over FSDP keeps the sync off until the last backward (grads_accumulate_unsharded)."""
    return (plan.zero_stage in (1, 2) and shards_grads(sw, plan) and sw.zero2_reduce_every_microbatch
            and not grads_accumulate_unsharded(sw, plan))


def dp_rounds(plan: ParallelPlan, m: int, sw, regathered_share: float = 0.0) -> tuple:
    """(weight all-gathers, gradient reductions) of the sharded states per step: ZeRO 0-2 reduce
    once (ZeRO-2 every micro-batch where the framework does, reduces_every_microbatch_at_zero2) and
    (ZeRO 1-2) gather the updated weights once; ZeRO-3 gathers for forward and again for
    backward and reduces every micro-batch (or once, Framework.zero3_reduce_every_microbatch), or
    does each once per step with a pipeline (weights stay gathered across micro-batches: torchtitan
    does not reshard after forward under PP; a framework whose FSDP reduces every backward under its
    own pipeline, Framework.pipeline_defers_grad_sync False, still reduces m times). A pipeline whose
    FSDP reshards after each forward (Framework.pp_reshard_after_forward) gathers m + 1 times at
    ZeRO-2's memory. At ZeRO-3,
    `regathered_share` of each round's weights is gathered a third time (recompute_regathered_share)."""
    if plan.zero_stage == 0:
        return 0, 1
    if plan.zero_stage in (1, 2):
        return (m + 1 if _gathers_every_backward(plan, sw) else 1), (m if reduces_every_microbatch_at_zero2(plan, sw) else 1)
    rounds = 1 if plan.pp > 1 else m
    if plan.pp > 1 and not sw.pipeline_defers_grad_sync:
        return (2 + regathered_share) * rounds, m      # its FSDP reduces every backward under the pipeline
    return (2 + regathered_share) * rounds, rounds if sw.zero3_reduce_every_microbatch else 1


def recompute_regathered_share(model, plan: ParallelPlan, sw, per_stage: int) -> float:
    """The share of a rank's layer parameters ZeRO-3 gathers a third time per micro-batch: what it
    releases between a fully recomputed layer's recompute and its backward
    (Framework.zero3_recompute_reuse_params), over the recomputed layers. A linear's reuse distance is
    twice the parameters after it in the layer: they run after it in the recompute and again, reversed,
    before its backward. Norms and biases are left out of both counts."""
    if plan.zero_stage < 3 or plan.recompute != "full" or math.isinf(sw.zero3_recompute_reuse_params):
        return 0.0
    h, t = model.hidden_size, plan.tp
    mlp = [h * model.ffn_hidden_size / t] * model.num_mlp_matrices
    linears = [h * (model.q_size + model.kv_size + model.v_size) / t, model.attn_out_size * h / t] + mlp
    released, later = 0.0, 0.0
    for numel in reversed(linears):
        if 2 * later >= sw.zero3_recompute_reuse_params:
            released += numel
        later += numel
    return released / sum(linears) * min(plan.recompute_num_layers, per_stage) / per_stage


def _dp_ranks_per_node(plan: ParallelPlan, gpus_per_node: int) -> int:
    """Gradient-reduction ranks (dp x cp replicas) sit tp apart (Megatron order tp, cp, dp, pp):
    how many of them share a node."""
    return max(1, min(plan.dp * plan.cp, gpus_per_node // plan.tp))


def _expert_dp_ranks_per_node(plan: ParallelPlan, gpus_per_node: int) -> int:
    """Expert data-parallel ranks sit etp x ep apart: Megatron-Core orders the expert ranks tp-ep-dp
    (parallel_state.py core_v0.16.1, expert_decoder_rank_generator: order tp-cp-ep-dp-pp with cp = 1;
    core_v0.6.0's data-modulo-expert groups stride tp x ep), torchtitan 0.3.0 unflattens its sparse mesh
    as (pp, dp_replicate, efsdp, ep) with ep innermost and etp 1 (parallel_dims.py build_mesh). How many
    of them share a node."""
    return max(1, min(plan.expert_dp, gpus_per_node // (plan.expert_tp * plan.ep)))


class DPGroup(NamedTuple):
    """One set of data-parallel collectives: a buffer of a rank's parameters and the ranks it syncs over."""
    params: float
    fp8_params: float
    """Of `params`, those gathered in fp8 (fp8_gathered_params)."""
    group: int
    """The ZeRO shard group (every rank of the data-parallel group without hybrid sharding)."""
    ranks_per_node: int
    replicas: int
    """Copies of the shard group (hybrid sharding), all-reduced after each reduction."""
    replica_ranks_per_node: int
    calls: int
    """Collectives of each kind per reduction (dp_collective_calls)."""
    tensors_per_call: int
    """ZeRO-3 collectives per call where the framework issues one per parameter tensor."""


def dp_groups(est, plan: ParallelPlan, per_stage: int, dense: float, expert: float) -> list:
    """The rank's data-parallel buffers (DPGroup). Under expert parallelism the expert parameters sync in
    a buffer of their own over the expert data-parallel ranks (tp*cp*dp / (etp*ep), ParallelPlan.expert_dp),
    beside the dense parameters' over the dp x cp ranks: Megatron-Core marks expert weights
    allreduce = not expert_parallel (tensor_parallel/layers.py, extensions/transformer_engine.py
    core_v0.16.1; moe/experts.py core_v0.6.0), puts them in expert_parallel_buffers over the expert
    data-parallel group (distributed_data_parallel.py core_v0.16.1 _allocate_buffers_for_parameters(
    expert_parallel_params, intra_expt_dp_group); core_v0.6.0 over expert_data_parallel_group, with a
    distributed optimizer of their own over get_data_modulo_expert_parallel_group: optimizer/__init__.py),
    and Megatron-FSDP does the same (mcore_fsdp_adapter.py, expt_dp_group); torchtitan 0.3.0 shards them
    over its efsdp mesh (distributed/fsdp.py apply_fsdp_to_decoder, ep_degree > 1). Without expert
    parallelism both frameworks keep the experts with the dense parameters. A group of one rank syncs
    nothing. Hybrid sharding is planned for dense models only (framework_rules: zero_shard_moe), so the
    expert group is never split into replicas."""
    sw, gpn = est.framework, est.gpus_per_node
    separate = plan.ep > 1
    groups = []
    # The bucket size reads the dense data-parallel size for both buffers (Megatron-Core training.py
    # core_v0.16.1: max(40M, 1M x get_data_parallel_world_size(with_context_parallel=True))).
    bucket_group = plan.zero_shard_group
    if plan.dp * plan.cp > 1:
        # Every dp*cp rank, or with hybrid sharding (ParallelPlan.zero_shard) consecutive ones, tp apart.
        params = dense if separate else dense + expert
        group, dp_rpn = plan.zero_shard_group, _dp_ranks_per_node(plan, gpn)
        fp8 = min(dense, fp8_gathered_params(est, plan, per_stage))
        tensors = est.model.dense_param_tensors_per_layer if plan.zero_stage >= 3 and sw.zero3_gather_per_tensor else 1
        groups.append(DPGroup(params, fp8, group, min(group, dp_rpn), plan.zero_replicas, max(1, dp_rpn // group),
                              dp_collective_calls(sw, plan.zero_stage, bucket_group, params, per_stage), tensors))
    if separate and expert > 0 and plan.expert_dp > 1:
        group = plan.expert_dp
        # The expert weights are gathered in bf16 (fp8_gathered_params counts the dense linears only).
        groups.append(DPGroup(expert, 0.0, group, min(group, _expert_dp_ranks_per_node(plan, gpn)), 1, 1,
                              dp_collective_calls(sw, plan.zero_stage, bucket_group, expert, per_stage), 1))
    return groups


class _GroupTerms(NamedTuple):
    """One group's collectives in seconds before the framework's bandwidth scale (copies after it)."""
    overlappable_s: float
    stalled_s: float
    """Exposed whatever the overlap: ZeRO-1/2 weights synced by broadcasts (Framework.zero1_broadcast_sync),
    ZeRO-3 gathers (Framework.zero3_gather_blocking)."""
    hidden_copies_s: float
    stalled_copies_s: float
    """HBM copies around list collectives (Framework.collective_list_copies): not wire time, so the bandwidth
    scale leaves them alone; each hides or stalls with the collective it serves."""
    wire_bytes: float
    gather_per_layer_s: float
    """One layer's ZeRO-3 weight gather, scaled, where it hides under the compute (host_sync_exposed_s)."""


def _group_terms(est, plan: ParallelPlan, g: DPGroup, per_stage: int, m: int) -> _GroupTerms:
    """The ZeRO stage's collectives over one data-parallel group `g`."""
    tables, sw = est.tables, est.framework
    grad_bytes = grad_reduce_bytes(sw, plan.zero_stage) * g.params
    weight_bytes = BYTES_WEIGHT * g.params - (BYTES_WEIGHT - 1) * g.fp8_params

    def collectives_s(op: str, num_bytes: float, n: int = g.calls) -> float:
        # Each bucket is one collective and pays its own latency (the table's time at the bucket's size).
        return n * tables.collective_time_s(op, num_bytes / n, g.group, g.ranks_per_node)

    stalled_s = hidden_copies_s = stalled_copies_s = gather_layer_s = 0.0
    if plan.zero_stage == 0:
        total = collectives_s("all_reduce", grad_bytes)
        wire = 2.0 * grad_bytes
    elif plan.zero_stage in (1, 2) and sw.zero1_broadcast_sync:
        total, stalled_s, wire = broadcast_synced_s(tables, g, grad_bytes, weight_bytes)
    elif plan.zero_stage in (1, 2):
        gathers, reductions = dp_rounds(plan, m, sw)
        total = reductions * collectives_s("reduce_scatter", grad_bytes) + gathers * collectives_s("all_gather", weight_bytes)
        wire = reductions * grad_bytes + gathers * weight_bytes
    else:
        gathers, reductions = dp_rounds(plan, m, sw, recompute_regathered_share(est.model, plan, sw, per_stage))
        # One call per layer, or per parameter tensor where the framework issues them so.
        tensor_calls = g.calls * g.tensors_per_call
        round_s = collectives_s("all_gather", weight_bytes, tensor_calls)
        gather_s = gathers * round_s
        total = reductions * collectives_s("reduce_scatter", grad_bytes, tensor_calls)
        copies = sw.collective_list_copies
        gather_copies_s = gathers * list_copies_s(tables, weight_bytes, tensor_calls, g.group) if copies else 0.0
        hidden_copies_s = reductions * list_copies_s(tables, grad_bytes, tensor_calls, g.group) if copies else 0.0
        if sw.zero3_gather_blocking:
            stalled_s, stalled_copies_s = gather_s, gather_copies_s
        else:
            total, hidden_copies_s = total + gather_s, hidden_copies_s + gather_copies_s
            gather_layer_s = round_s / g.calls / sw.dp_bandwidth_scale
        wire = gathers * weight_bytes + reductions * grad_bytes
    if g.replicas > 1 and not sw.zero1_broadcast_sync:
        # Hybrid sharding: after each reduction in the shard group, each bucket's shard of the
        # gradients is all-reduced over the replicas holding the same shard, one rank per shard group.
        _, reductions = dp_rounds(plan, m, sw)
        total += reductions * g.calls * tables.collective_time_s("all_reduce", grad_bytes / g.group / g.calls,
                                                                 g.replicas, g.replica_ranks_per_node)
        wire += reductions * 2.0 * grad_bytes / g.group
    return _GroupTerms(total, stalled_s, hidden_copies_s, stalled_copies_s, wire, gather_layer_s)


def dp_time(est, plan: ParallelPlan, per_stage: int, dense: float, expert: float, lt, busy_mb: float,
            m: int) -> tuple:
    """(exposed_s, total_s, bytes) of the data-parallel collectives of one step on a rank with
    `per_stage` layers and (dense, expert) local parameters, each set over its own group (dp_groups)."""
    groups = dp_groups(est, plan, per_stage, dense, expert)
    if not groups:
        return 0.0, 0.0, 0.0
    sw = est.framework
    total = stalled_s = wire = gather_layer_s = tail = 0.0
    for g in groups:
        terms = _group_terms(est, plan, g, per_stage, m)
        group_total = terms.overlappable_s / sw.dp_bandwidth_scale + terms.hidden_copies_s
        # The last backward bucket of either buffer stays exposed, whatever the host syncs of the forward.
        tail = max(tail, group_total / g.calls)
        total += group_total
        stalled_s += terms.stalled_s / sw.dp_bandwidth_scale + terms.stalled_copies_s
        wire += terms.wire_bytes
        gather_layer_s += terms.gather_per_layer_s
    # Forward gathers issued only after a MoE layer's host sync (Framework.moe_host_sync).
    synced_s = host_sync_exposed_s(est, plan, lt, per_stage, m, gather_layer_s) if gather_layer_s else 0.0
    window = overlap_window_s(plan, sw, lt, per_stage, busy_mb, m)
    total, stalled_s = total - synced_s, stalled_s + synced_s
    overlap = sw.dp_comm_overlap if plan.zero_stage in sw.dp_overlap_zero_stages else 0.0
    hidden = min(total, overlap * window)
    # Hidden traffic is not free: NCCL kernels hold SMs and HBM bandwidth while the GEMMs run,
    # so a fitted fraction of the overlapped time still lands on the step.
    exposed = max(total - hidden, tail) + sw.overlap_contention * hidden + stalled_s
    return exposed, total + stalled_s, wire


def broadcast_synced_s(tables, g: DPGroup, grad_bytes: float, weight_bytes: float) -> tuple:
    """(gradient seconds, exposed weight-sync seconds, wire bytes) of a ZeRO-1/2 whose weights come back
    by broadcasts (Framework.zero1_broadcast_sync), over one data-parallel group `g`. The gradients are
    all-reduced over every rank of the group's replicas, whatever the ZeRO group (InternEvo @34fc28d760
    hybrid_zero_optim.py: reduce_rank None, so utils.reduce_tensor runs dist.all_reduce over
    ParallelMode.DATA), in `g.calls` buckets; the weights come back after the step as one broadcast from
    each rank of the ZeRO group (NCCL prices a broadcast as a ring, as it does an all-gather:
    src/graph/tuning.cc), every one of them exposed: inside a node when the group is (ParallelPlan.zero_shard)."""
    everyone = g.group * g.replicas
    everyone_per_node = min(everyone, g.ranks_per_node * g.replica_ranks_per_node)
    grads_s = g.calls * tables.collective_time_s("all_reduce", grad_bytes / g.calls, everyone, everyone_per_node)
    weights_s = g.group * tables.collective_time_s("all_gather", weight_bytes / g.group, g.group, g.ranks_per_node)
    return grads_s, weights_s, 2.0 * grad_bytes + weight_bytes


def host_sync_exposed_s(est, plan: ParallelPlan, lt, per_stage: int, m: int, gather_per_layer_s: float) -> float:
    """Seconds of ZeRO-3 forward all-gathers left exposed when every MoE layer syncs the host
    (Framework.moe_host_sync): the next layer's gather (`gather_per_layer_s`) is issued after the sync
    and hides only under the rest of this layer, its MoE block's forward (LayerTimes.moe_fwd_s, whose
    router GEMM before the sync is a few microseconds); what is longer shows, in each MoE layer of each
    forward round (one per micro-batch, one per step under a pipeline, as dp_rounds)."""
    model = est.model
    if not (est.framework.moe_host_sync and model.is_moe):
        return 0.0
    share = model.num_moe_layers / model.num_layers
    moe_block_fwd_s = lt.moe_fwd_s / share   # lt is the mean over the layers; dense ones have none
    rounds = 1 if plan.pp > 1 else m
    return rounds * per_stage * share * max(0.0, gather_per_layer_s - moe_block_fwd_s)


def overlap_window_s(plan: ParallelPlan, sw, lt, per_stage: int, busy_mb: float, m: int) -> float:
    """The time the data-parallel collectives can hide under: ZeRO 0-2 reduce during the last
    micro-batch's backward GEMMs and attention; ZeRO-3 prefetches the next layer's weights while the
    GPU runs anything of this one, its GEMMs, attention, memory-bound kernels and recompute alike
    (`busy_mb`, one micro-batch's busy time: torch FSDP2 issues the next all-gather on its own stream at
    the layer's pre-forward / pre-backward hook, `_fsdp_param_group.py`, whatever the layer runs).
    One layer's share always stays exposed (the last bucket, dp_time's tail)."""
    if plan.zero_stage >= 3:
        return m * busy_mb
    # The last micro-batch's backward, or every backward where each gathers the weights again or
    # reduces its own gradients.
    backwards = m if _gathers_every_backward(plan, sw) or reduces_every_microbatch_at_zero2(plan, sw) else 1
    window = backwards * per_stage * (lt.gemm_bwd_s + lt.attn_bwd_s)
    if sw.dp_param_gather_overlap and plan.zero_stage >= 1:
        # The weights' all-gather hides under the next step's first forward, layer by layer
        # (NeMo docs, "Communication Overlap": one chunk stays exposed).
        window += per_stage * (lt.gemm_fwd_s + lt.attn_fwd_s)
    return window * interleaved_window_factor(sw, plan.pp, plan.vpp, m)


def list_copies_s(tables, num_bytes: float, calls: int, group: int) -> float:
    """Seconds of the copies torch makes around `calls` list collectives moving `num_bytes` in all
    over `group` ranks: group copies per call, each one kernel reading and writing one rank's share,
    priced on the profile's HBM copy table at the bytes it moves (the table's fixed per-kernel cost
    counts once per copy)."""
    moved_bytes = 2.0 * num_bytes / calls / group
    return calls * group * memory_time_s(tables, moved_bytes, moved_bytes)


def dp_collective_calls(sw, zero_stage: int, group: int, params: float, per_stage: int) -> int:
    """How many collectives of each kind one reduction of a rank's `params` gradients takes: one per
    layer for ZeRO-3 and for frameworks that wrap each block as a unit (FSDP), else one per bucket of
    max(Framework.dp_bucket_params, dp_bucket_params_per_rank x the group), at least one."""
    layers = max(1, per_stage)
    if zero_stage >= 3 or sw.dp_bucket_params <= 0:
        return layers
    bucket = max(sw.dp_bucket_params, sw.dp_bucket_params_per_rank * group)
    return 1 if math.isinf(bucket) else max(1, math.ceil(params / bucket))


def interleaved_window_factor(sw, p: int, v: int, m: int) -> float:
    """How many micro-batches' worth of a stage's compute the DP collectives of ZeRO 0-2 hide under
    when each virtual stage syncs on its own (Framework.dp_sync_per_virtual_stage): virtual stage c's
    gradients are final after its last micro-batch's backward, and the interleaved schedule runs the
    last min(m, p) micro-batches' backward virtual stage by virtual stage (v-1 first, 0 last), so
    stage c's reduction overlaps the c/v that follows; the first virtual stage's reduction overlaps its
    own last backward only, as without interleaving. The weights' gather mirrors it over the next
    step's first forwards. Summed: (v-1)/v x min(m, p) + 1/v; 1 without interleaving."""
    if v <= 1 or not sw.dp_sync_per_virtual_stage:
        return 1.0
    return (v - 1) / v * min(m, p) + 1 / v
