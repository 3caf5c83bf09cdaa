"""The step-time terms of one plan: per-stage micro-batch time, bubble, DP, optimizer.

Each term is exposed seconds per optimizer step on the slowest pipeline stage (with uneven
stages, the rank whose layers and extras take longest per micro-batch); their sum is the step time. Sources: Narayanan et al. 2021 (arXiv 2104.04473) for the pipeline
schedule, bubble and point-to-point volume; the data-parallel collectives are cost_model/dp_time.py's; the
wait for the slowest GPU cost_model/scale_terms.py's.
"""
from __future__ import annotations

import math

from autoplan.specs import ParallelPlan
from autoplan.specs.framework_facts import StepWorkFacts, TensorParallelFacts
from cost_model.layer_time import BYTES_ACT, memory_time_s
from cost_model.dp_time import dp_rounds, dp_time, recompute_regathered_share
from cost_model.host_time import microbatch_host_wait_s
from cost_model.memory import grads_accumulate_unsharded
from cost_model.scale_terms import sync_wait_s
from cost_model.stages import bubble_in_slowest_rank_times, stage_split


def unsharded_accumulation_bytes_per_param(plan: ParallelPlan, m: int, sw) -> float:
    """HBM bytes per local parameter that accumulating unsharded gradients over the micro-batches
    costs where FSDP holds them across the step (cost_model.memory.grads_accumulate_unsharded): the
    first micro-batch casts its bf16 gradient to the reduce dtype (read 2, write r), each later one
    adds its bf16 gradient into the accumulator (read 2 + r, write r)."""
    if not grads_accumulate_unsharded(sw, plan):
        return 0.0
    r = sw.sharded_reduce_bytes_per_grad
    return (BYTES_ACT + r) + (m - 1) * (BYTES_ACT + 2 * r)


def grad_accumulation_bytes_per_param(work: StepWorkFacts, plan: ParallelPlan, dtype: str) -> tuple:
    """(first micro-batch, each later one): HBM bytes per local parameter of adding a micro-batch's
    gradients to the accumulated ones outside the GEMM (Framework.grad_accumulation_bytes), at ZeRO
    0-1 only: at 2-3 the gradients are reduced into the rank's partition as they come. At ZeRO-0 under a
    pipeline, the pipeline engine's (`pipeline_zero0_grad_accumulation_bytes`), where the framework has them."""
    if plan.zero_stage >= 2:
        return 0.0, 0.0
    by_dtype = work.grad_accumulation_bytes
    if work.pipeline_zero0_grad_accumulation_bytes and plan.pp > 1 and plan.zero_stage == 0:
        by_dtype = work.pipeline_zero0_grad_accumulation_bytes
    first, later = by_dtype.get(dtype, (0.0, 0.0))
    return float(first), float(later)


def step_time_terms(est, plan: ParallelPlan, costs) -> tuple:
    """(time_breakdown_s, details, hardware_flops_per_step) for a checked plan.

    `costs` (estimator.StageCosts) holds the per-micro-batch costs of the plan's shapes; `est` gives
    the problem (model, training, framework, constants, tables, gpus_per_node, model FLOPs)."""
    lt = costs.layer
    extras = (costs.head_compute_s, costs.head_memory_s, costs.embed_s)
    p, v, m = plan.pp, plan.vpp, plan.num_microbatches
    split = stage_split(plan, est.model.num_layers)
    sw = est.framework

    layer_compute = lt.gemm_fwd_s + lt.gemm_bwd_s + lt.attn_fwd_s + lt.attn_bwd_s
    layer_memory = lt.memory_fwd_s + lt.memory_bwd_s
    tp_exposed = tp_exposed_s(plan, sw.facts(TensorParallelFacts), lt)
    cp_exposed = lt.cp_fwd_s + lt.cp_bwd_s
    ep_exposed = lt.ep_fwd_s + lt.ep_bwd_s
    # Layer overhead: host time per layer; torch.compile fuses kernels, so it launches fewer of them too.
    layer_overhead_s = sw.layer_overhead_s
    even = len(split.layer_groups) == 1
    bubble_ranks, slowest = 0.0, 0
    if p > 1:
        per_layer_s = (layer_compute + layer_memory + tp_exposed + cp_exposed + ep_exposed
                       + layer_overhead_s * sw.fused_elementwise)
        bubble_ranks, slowest = _bubble_ranks(plan, sw, lt, split, per_layer_s, extras)
    per_stage = split.num_layers[slowest]
    extra_compute, extra_memory = _rank_extras(p, slowest, *extras)
    recompute_s, recompute_flops_mb = _recompute_terms(plan, sw, lt, per_stage)
    pp_s = pp_p2p_s(est, plan, per_stage, layer_compute, layer_memory) if p > 1 else 0.0

    compute_mb = per_stage * layer_compute + extra_compute
    memory_mb = per_stage * layer_memory + extra_memory
    comm_mb = per_stage * (tp_exposed + cp_exposed + ep_exposed) + pp_s
    overhead_mb = per_stage * layer_overhead_s * sw.fused_elementwise + (sw.microbatch_overhead_s if p > 1 else 0.0)
    # Host issue: where the host cannot issue the layers' kernels as fast as the GPU runs them, the
    # micro-batch waits for the host (cost_model/host_time.py).
    host_mb = microbatch_host_wait_s(est.profile, sw, compute_mb + memory_mb + comm_mb + recompute_s, per_stage)
    t_mb = compute_mb + memory_mb + comm_mb + recompute_s + overhead_mb + host_mb
    bubble_s = bubble_ranks / v * t_mb

    dense, expert, state_layers = _state_rank_params(plan, costs, split, per_stage, even)
    # ZeRO-3's prefetched gathers run beside every kernel of the layers, not only their GEMMs.
    busy_mb = compute_mb + memory_mb + recompute_s
    dp_s, dp_total_s, dp_bytes = dp_time(est, plan, state_layers, dense, expert, lt, busy_mb, m)
    # Optimizer: memory-bound AdamW over the local shard of the stage's parameters, moving the
    # framework's bytes per parameter (fused vs for-each implementation).
    shard = plan.zero_shard_group if plan.zero_stage >= 1 else 1
    local = dense / shard + expert / (plan.expert_dp if plan.zero_stage >= 1 else 1)
    opt_bytes = sw.optimizer_bytes_per_param * local
    optimizer_s = memory_time_s(est.tables, opt_bytes, opt_bytes)
    cast_mb_s, accum_mb_s = _microbatch_casts_s(sw.facts(StepWorkFacts), est.tables, est.training.dtype, plan,
                                                dense + expert, state_layers, per_stage, lt)
    bubble_s += bubble_ranks / v * accum_mb_s

    time = {
        "compute": m * compute_mb,
        "memory_bound": m * memory_mb,
        "weight_casts": m * cast_mb_s,
        "sharded_copies": _sharded_copies_s(est, plan, dense + expert, state_layers, per_stage),
        "recompute": m * recompute_s,
        "tp_comm": m * per_stage * tp_exposed,
        "cp_comm": m * per_stage * cp_exposed,
        "ep_comm": m * per_stage * ep_exposed,
        "pp_comm": m * pp_s,
        "pp_bubble": bubble_s,
        "dp_comm": dp_s,
        "optimizer": optimizer_s,
        "overhead": m * overhead_mb,
        "host_issue": m * host_mb,
    }
    # The step ends when its slowest GPU does (cost_model/scale_terms.py).
    time["sync_wait"] = sync_wait_s(sum(time.values()), plan.num_gpus)
    details = _details(est, plan, lt, per_stage, slowest, bubble_ranks / (v * m), t_mb, dp_total_s, dp_bytes, pp_s)
    return time, details, _hardware_flops(est, plan, lt, split, even, recompute_flops_mb)


def _bubble_ranks(plan: ParallelPlan, sw, lt, split, per_layer_s: float, extras: tuple) -> tuple:
    """(the bubble in micro-batch times of the slowest rank, the slowest rank). The slowest rank sets
    the pace. 1F1B's fill and drain run every other rank's forward and backward of one micro-batch
    once, so with per-rank micro-batch times t_i the step is (m-1)·max t + sum t (Narayanan et al.
    2021 sec. 2.2; with equal t_i it is the familiar (p-1) bubble): the bubble is sum t - max t, for
    even and uneven splits alike (the head and the embedding make the ranks unequal even when their
    layers are not)."""
    p = plan.pp

    def rank_time_s(rank: int) -> float:
        layers = split.num_layers[rank]
        return layers * per_layer_s + sum(_rank_extras(p, rank, *extras)) + _recompute_terms(plan, sw, lt, layers)[0]

    times = {rank: rank_time_s(rank) for rank in split.time_ranks}
    slowest = max(reversed(split.time_ranks), key=times.__getitem__)
    # Every rank's time, summed by layer count; the first and last add their extras.
    total_s = sum(num_ranks * (layers * per_layer_s + _recompute_terms(plan, sw, lt, layers)[0])
                  for layers, num_ranks in split.layer_groups)
    total_s += sum(_rank_extras(p, 0, *extras))
    total_s += sum(_rank_extras(p, p - 1, *extras))
    # sum - max over all ranks, with every rank's time summed by layer count above.
    return bubble_in_slowest_rank_times(times[slowest], total_s), slowest


def pp_p2p_s(est, plan: ParallelPlan, per_stage: int, layer_compute_s: float, layer_memory_s: float) -> float:
    """Pipeline point-to-point per micro-batch: one activation forward and one gradient backward per
    virtual stage, b*s*h/t bytes with the scatter/gather optimisation (Narayanan sec. 4.1)."""
    sw, v = est.framework, plan.vpp
    p2p_bytes = BYTES_ACT * plan.micro_batch_size * (est.training.seq_len // plan.cp) * est.model.hidden_size
    if sw.pp_scatter_gather:
        p2p_bytes /= plan.tp
    inside = plan.tp * plan.cp * plan.dp * plan.pp <= est.gpus_per_node
    pp_rpn = 2 if inside else 1
    send_s = est.tables.collective_time_s("send_recv", p2p_bytes, 2, pp_rpn)
    if sw.pp_p2p_overlap and v > 1:
        # Each virtual stage's send runs under the next virtual stage's compute.
        chunk_s = per_stage / v * (layer_compute_s + layer_memory_s)
        send_s = max(0.0, send_s - chunk_s)
    return 2 * v * send_s


def _state_rank_params(plan: ParallelPlan, costs, split, per_stage: int, even: bool) -> tuple:
    """(dense, expert, layers) of the rank whose data-parallel traffic and optimizer step are priced:
    the rank with the most parameters, the last (head) or, when uneven, the largest middle rank; the
    first never holds more layers than the last, and its embedding is the head's size. The last wins ties."""
    p = plan.pp
    state_layers = per_stage if even else split.num_layers[p - 1]
    dense, expert = costs.params.local(plan, state_layers, first=(p == 1), last=True)
    if not even and len(split.time_ranks) > 2:
        middle_layers = split.num_layers[split.time_ranks[2]]
        middle = costs.params.local(plan, middle_layers, first=False, last=False)
        if sum(middle) > dense + expert:
            (dense, expert), state_layers = middle, middle_layers
    return dense, expert, state_layers


def _microbatch_casts_s(work: StepWorkFacts, tables, dtype: str, plan: ParallelPlan, params: float, state_layers: int,
                        per_stage: int, lt) -> tuple:
    """(weight casts and gradient accumulation per micro-batch, the accumulation alone) over the rank's
    `params` unsharded parameters: memory-bound terms of every micro-batch."""
    m = plan.num_microbatches
    # Weight casts (autocast over fp32 weights), left out of the bubble: the frameworks that pay it
    # here run without a pipeline in every measured run.
    cast_bytes = work.weight_cast_bytes_per_param * params
    cast_mb_s = memory_time_s(tables, cast_bytes, cast_bytes / max(1, state_layers)) if cast_bytes else 0.0
    # Gradient accumulation outside the weight-gradient GEMM (DeepSpeed), in every micro-batch's
    # backward, so in the pipeline's fill and drain too (step_time_terms adds it to the bubble).
    first_mb_bytes, later_mb_bytes = grad_accumulation_bytes_per_param(work, plan, dtype)
    accum_bytes = (first_mb_bytes + (m - 1) * later_mb_bytes) / m * params
    accum_mb_s = memory_time_s(tables, accum_bytes, accum_bytes / max(1, state_layers)) if accum_bytes else 0.0
    cast_mb_s += accum_mb_s
    # fp8 weights: cast for forward and again for backward in every micro-batch (torchao), or once
    # per step with the transpose written too (Transformer Engine: 3 B + 1 B per weight).
    if work.fp8_weight_cast_per_microbatch:
        cast_mb_s += 2.0 * per_stage * lt.fp8_weight_cast_s
    else:
        cast_mb_s += (4.0 / 3.0) * per_stage * lt.fp8_weight_cast_s / m
    return cast_mb_s, accum_mb_s


def _sharded_copies_s(est, plan: ParallelPlan, params: float, state_layers: int, per_stage: int) -> float:
    """Sharded-state copies on the compute stream around each gather and reduction (FSDP2: all-gather
    output into the parameters, gradients into the reduce-scatter input), over the rank's `params`
    unsharded parameters, a layer at a time."""
    if plan.zero_stage < 1 or plan.dp * plan.cp <= 1:
        return 0.0
    sw, m = est.framework, plan.num_microbatches
    gathers, reductions = dp_rounds(plan, m, sw, recompute_regathered_share(est.model, plan, sw, per_stage))
    copy_bytes = (gathers * sw.gather_copy_bytes_per_param + reductions * sw.reduce_copy_bytes_per_param
                  + unsharded_accumulation_bytes_per_param(plan, m, sw)) * params
    if not copy_bytes:
        return 0.0
    return memory_time_s(est.tables, copy_bytes, copy_bytes / max(1, state_layers * (gathers + reductions)))


def _hardware_flops(est, plan: ParallelPlan, lt, split, even: bool, recompute_flops_mb: float) -> float:
    """The model's FLOPs per step plus what every rank recomputes (each on its own layers)."""
    m, sw = plan.num_microbatches, est.framework
    if even:
        return est.model_flops_per_step + recompute_flops_mb * m * plan.dp * plan.tp * plan.cp * plan.pp
    return est.model_flops_per_step + sum(
        _recompute_terms(plan, sw, lt, layers)[1] * m * plan.dp * plan.tp * plan.cp * num_ranks
        for layers, num_ranks in split.layer_groups)


def _details(est, plan: ParallelPlan, lt, per_stage: int, slowest: int, bubble_fraction: float, t_mb: float,
             dp_total_s: float, dp_bytes: float, pp_s: float) -> dict:
    m = plan.num_microbatches
    return {
        "bubble_fraction": bubble_fraction,
        "microbatch_time_s": t_mb,
        "layer_fwd_s": lt.gemm_fwd_s + lt.attn_fwd_s + lt.memory_fwd_s,
        "layer_bwd_s": lt.gemm_bwd_s + lt.attn_bwd_s + lt.memory_bwd_s,
        "layer_gemm_fwd_s": lt.gemm_fwd_s,
        "layer_attention_fwd_s": lt.attn_fwd_s,
        "layer_gemm_fwd_flops": lt.gemm_fwd_flops,
        "gemm_fraction_of_peak": lt.gemm_fwd_flops / (lt.gemm_fwd_s * est.peak_flops_per_s),
        "layer_tp_comm_total_s": lt.tp_fwd_s + lt.tp_bwd_s,
        "tp_comm_total_s": m * per_stage * (lt.tp_fwd_s + lt.tp_bwd_s),
        "tp_bytes_per_layer_microbatch": lt.tp_bytes,
        "dp_comm_total_s": dp_total_s,
        "dp_bytes_per_step": dp_bytes,
        "pp_p2p_s_per_microbatch": pp_s,
        "tokens_per_microbatch": plan.micro_batch_size * est.training.seq_len,
        "layers_per_stage": per_stage,
        "slowest_stage": slowest,
        "software": est.framework.name,
    }


def tp_exposed_s(plan: ParallelPlan, tp_facts: TensorParallelFacts, lt) -> float:
    """TP/SP collective seconds per layer and micro-batch that the GEMMs do not hide.

    Pipelined (Framework.tp_comm_gemm_overlap, with SP as Megatron requires): each pass's all-gather
    and reduce-scatter move in tp chunks, each chunk's transfer running under the previous chunk's
    GEMM, so the first chunk stays exposed and so does whatever traffic outlasts the GEMMs of the
    pass (Wang et al. 2023, "Overlap communication with dependent computation via decomposition",
    ASPLOS; Transformer Engine userbuffers). Otherwise the framework's hidden fraction (async TP)."""
    if tp_facts.tp_comm_gemm_overlap and plan.sequence_parallel and plan.tp > 1:
        return sum(max(comm - gemm, comm / plan.tp)
                   for comm, gemm in ((lt.tp_fwd_s, lt.gemm_fwd_s), (lt.tp_bwd_s, lt.gemm_bwd_s)))
    return (1.0 - tp_facts.tp_comm_overlap) * (lt.tp_fwd_s + lt.tp_bwd_s)


def _tp_exposed_fwd_s(plan: ParallelPlan, tp_facts: TensorParallelFacts, lt) -> float:
    """The forward pass's share of `tp_exposed_s` (what a recomputed forward pays again)."""
    if tp_facts.tp_comm_gemm_overlap and plan.sequence_parallel and plan.tp > 1:
        return max(lt.tp_fwd_s - lt.gemm_fwd_s, lt.tp_fwd_s / plan.tp)
    return (1.0 - tp_facts.tp_comm_overlap) * lt.tp_fwd_s


def _recompute_terms(plan: ParallelPlan, sw, lt, per_stage: int) -> tuple:
    """(seconds, flops) recomputed per micro-batch on a rank with `per_stage` layers.

    Korthikanti 2022 sec. 5: selective reruns the attention core of every layer (or the submodules
    the plan names, Megatron-Core's --recompute-modules); full reruns the whole forward (with its TP
    traffic) of min(recompute_num_layers, per_stage) layers. The recomputed FLOPs count the attention
    core only for the named modules (the GEMM FLOPs of moe/mlp recompute are left out of the hardware
    FLOPs: a known undercount of MFU's hardware counterpart, not of time)."""
    if plan.recompute == "selective" and plan.recompute_modules:
        # Megatron-Core --recompute-modules: each named submodule's forward runs again in backward.
        mods = plan.recompute_modules
        seconds = {"core_attn": lt.attn_fwd_s, "layernorm": lt.norm_fwd_s, "mlp": lt.mlp_fwd_s,
                   "mla_up_proj": lt.mla_up_fwd_s, "moe": lt.moe_fwd_s,
                   # inside "moe" when both are named
                   "moe_act": 0.0 if "moe" in mods else lt.moe_act_fwd_s,
                   "shared_experts": 0.0 if "moe" in mods else lt.shared_fwd_s}
        flops = lt.attn_fwd_flops if "core_attn" in mods else 0.0
        return per_stage * sum(seconds[m] for m in set(mods)), per_stage * flops
    if plan.recompute == "selective" and sw.selective_recompute == "ops":
        # Every other matmul and all memory-bound ops rerun; attention's output is saved, and so are
        # the reduce-scatters' outputs but not the all-gathers' or the all-reduces' (torchtitan's save
        # list: torchtitan/distributed/activation_checkpoint.py, comm ops reduce_scatter_tensor and
        # all_to_all_single only): with SP the forward's all-gathers, half its TP traffic, run again
        # to give the matmuls their inputs; without SP its all-reduces do.
        tp_rerun_s = (0.5 if plan.sequence_parallel else 1.0) * _tp_exposed_fwd_s(plan, sw, lt)
        return (per_stage * (0.5 * lt.gemm_fwd_s + lt.memory_fwd_s + tp_rerun_s),
                per_stage * 0.5 * lt.gemm_fwd_flops)
    if plan.recompute == "selective":
        return per_stage * lt.attn_fwd_s, per_stage * lt.attn_fwd_flops
    if plan.recompute == "full":
        r = min(plan.recompute_num_layers, per_stage)
        return (r * (lt.gemm_fwd_s + lt.attn_fwd_s + lt.memory_fwd_s
                     + _tp_exposed_fwd_s(plan, sw, lt) + lt.cp_fwd_s + lt.ep_fwd_s),
                r * (lt.gemm_fwd_flops + lt.attn_fwd_flops))
    return 0.0, 0.0


def _rank_extras(p: int, rank: int, head_compute_s: float, head_memory_s: float, embed_s: float) -> tuple:
    """(compute, memory-bound) seconds per micro-batch beyond the layers: the first rank embeds,
    the last computes the logits and the loss."""
    if p == 1:
        return head_compute_s, head_memory_s + embed_s
    if rank == p - 1:
        return head_compute_s, head_memory_s
    return (0.0, embed_s) if rank == 0 else (0.0, 0.0)
