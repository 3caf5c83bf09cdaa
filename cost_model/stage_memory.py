"""Peak memory of one pipeline rank: the framework's states, its saved activations as its recipe
keeps them, and the phase of the step where the sum is largest.

The peak is a maximum over phases of the step, each a full breakdown (terms sum to its total):

- "loss backward" (last rank): every stored activation of the micro-batches in flight, the head's
  saved tensors and the loss's backward working set (the eager recipes: one chunk of fp32 logits
  of the fused loss, or the fp32 gradients of the whole log-probabilities and logits,
  cost_model/eager_activations.py);
- "layer backward": the stored activations, the layer being differentiated (recomputed first under
  full recompute) and its activation gradients;
- "optimizer step": the states and the optimizer's temporaries (PyTorch's for-each AdamW
  materializes sqrt(v) for every parameter, torch/optim/adamw.py `_multi_tensor_adamw`).

Two terms are device memory outside the allocated peak: `cuda_context` (Framework.runtime_bytes,
what the process holds outside the allocator) and `allocator_overhead` (the caching allocator's
headroom: one largest transient block, since a request larger than every cached free block needs a
fresh segment; at the 4 H100 out-of-memory records the reserved-but-free memory was 0.2-1.0x the
failing request, cost_model/data/h100_runs). `allocated_peak_bytes` (the total without them) is
what torch.cuda.max_memory_allocated measures.
"""
from __future__ import annotations

import dataclasses
import math
import operator
from dataclasses import dataclass
from typing import NamedTuple

from autoplan.specs import ParallelPlan
from cost_model import eager_activations as eager
from cost_model.stages import stage_split
from cost_model.moe_time import stacked_weight_bytes
from cost_model.memory import (
    BYTES_ACT, BYTES_GRAD, BYTES_LOGITS, BYTES_LOGITS_UNFUSED, BYTES_WEIGHT, grads_accumulate_unsharded,
    in_flight_microbatches, model_state_bytes, shards_weights,
)

DEVICE_TERMS = ("cuda_context", "allocator_overhead", "cpu_runtime")
"""Memory terms outside what torch.cuda.max_memory_allocated counts (`cpu_runtime`: CPU plans only)."""
CPU_DEVICE_TERM_BYTES = 0.0
"""On a CPU profile (`autoplan profile --device cpu`, device_kind "cpu") both GPU device terms are 0:
a CPU process has no CUDA context, and PyTorch's CPU allocator (c10/core/impl/alloc_cpu.cpp) hands
each request to the C library's malloc/free without a caching pool, so there is no cached block to
predict. What the process holds beyond its tensors after its first step (the modules that step
imports, gloo's and the heap's buffers) is the profile's measured `runtime_memory_bytes`
(profiler/runtime_memory.py), the `cpu_runtime` term; `autoplan run` on a CPU records how far the
resident set grew over the process before the model was built (`cpu_rss_growth_bytes`), and the
report compares it with the tensors plus that term (autoplan/report/tables.py)."""
FOREACH_ADAMW_TEMP_BYTES = 4
"""fp32 sqrt(exp_avg_sq) per parameter, alive during the for-each AdamW update."""


RECOMPUTE_FIELDS = ("recompute", "recompute_num_layers")
"""ParallelPlan fields that Estimator.memory and stage_memory take as arguments instead."""


def plan_memory_key(plan) -> tuple:
    """The plan's fields but its recompute ones: what its memory depends on besides the policy and
    layer count it is priced under (the estimator's memory caches are keyed by it)."""
    return _MEMORY_KEY(plan)


_MEMORY_KEY = operator.attrgetter(*(f.name for f in dataclasses.fields(ParallelPlan) if f.name not in RECOMPUTE_FIELDS))


def allocated_peak_bytes(breakdown: dict) -> float:
    """The breakdown's total without the device terms: comparable to max_memory_allocated."""
    return sum(v for k, v in breakdown.items() if k not in DEVICE_TERMS)


def min_full_recompute_layers(est, plan) -> int | None:
    """Fewest layers per stage to recompute fully so `est.memory(plan, ...)` fits the profile's
    capacity less the user's headroom: 0 when it fits without recompute, None when not even with
    every layer recomputed.

    Memory falls monotonically with the count n (each rank recomputes min(n, its layers)), so the
    answer is the smallest n that fits, found by narrowing (lo, hi] with lo over and hi within the
    capacity. For n >= 1 every phase of every rank is affine in min(n, its layers) and the worst
    rank's peak is their maximum, so it is convex in n: the chord between lo and hi lies above it and
    crosses the capacity at or past the answer. Each round tries where the chord crosses and the
    count below it (one evaluation each when the peak is affine, the common case), then halves what
    is left, so it never takes more rounds than bisection; the evaluations alone decide, so a peak
    that is not convex only costs rounds, never the answer."""
    capacity = est.usable_memory_bytes

    def peak(n: int) -> float:
        return sum(est.memory(plan, "full", n).values())

    if sum(est.memory(plan, "none", 0).values()) <= capacity:
        return 0
    per_stage = plan.layers_per_stage(est.model.num_layers)
    hi, hi_peak = per_stage, peak(per_stage)
    if hi_peak > capacity:
        return None
    lo, lo_peak = 1, peak(1)
    if lo_peak <= capacity:
        return 1
    while hi - lo > 1:
        crossing = lo + math.ceil((lo_peak - capacity) * (hi - lo) / (lo_peak - hi_peak))
        for n in dict.fromkeys((min(max(crossing, lo + 1), hi - 1), crossing - 1, (lo + hi) // 2)):
            if lo < n < hi:
                n_peak = peak(n)
                if n_peak <= capacity:
                    hi, hi_peak = n, n_peak
                else:
                    lo, lo_peak = n, n_peak
    return hi


def weights_floor_bytes(est, plan) -> float:
    """A lower bound on the plan's peak memory under any recompute policy: the model states and the
    weight copies of the rank holding the most, its gradients left out (a phase may not hold them
    yet). The peak is at least every phase's total, and each phase but the optimizer step holds both,
    so a plan over the capacity by this alone needs no breakdown to be ruled out. Cached per what
    they depend on: many plans of a search (micro-batches, recompute, sequence parallelism,
    interleaving) share them."""
    split = stage_split(plan, est.model.num_layers)
    floor = 0.0
    for rank in split.memory_ranks:
        weights = _rank_weights(est, plan, split.num_layers[rank], rank == 0, rank == plan.pp - 1)
        floor = max(floor, weights.floor)
    return floor


@dataclass(slots=True)
class _RankWeights:
    """A rank's parameters and what it keeps of them: states (ZeRO-sharded) and compute copies."""
    dense: float
    expert: float
    states: dict
    fp8_params: float
    copies: float
    """The compute-dtype copy of the weights held from forward to backward (weight_copies)."""
    executor_on_cpu: bool
    states_total: float
    states_total_without_grads: float
    floor: float
    """The states without the gradients, plus the copies: what every phase but the optimizer step's
    holds (and there is always one such phase)."""


def _rank_weights(est, plan, per_stage: int, first: bool, last: bool) -> _RankWeights:
    """Cached per what it reads: many plans of a search (micro-batches, recompute, sequence
    parallelism, interleaving) share a rank's weights. Read-only to its callers."""
    key = ("weights", per_stage, first, last, plan.tp, plan.expert_tp, plan.ep, plan.zero_stage,
           plan.zero_shard_group, plan.expert_dp, plan.dp * plan.cp)  # all _count_rank_weights reads
    weights = est.cache.get(key)
    if weights is None:
        weights = est.cache[key] = _count_rank_weights(est, plan, per_stage, first, last)
    return weights


def _count_rank_weights(est, plan, per_stage: int, first: bool, last: bool) -> _RankWeights:
    dense, expert = est.params.local(plan, per_stage, first, last)
    shard = plan.zero_shard_group
    fw = est.framework
    states = model_state_bytes(dense, plan.zero_stage, shard, fw.states)
    if expert:
        # Expert states shard over the expert data-parallel ranks (tp*cp*dp / (etp*ep)).
        for k, v in model_state_bytes(expert, plan.zero_stage, plan.expert_dp, fw.states).items():
            states[k] += v
    # A compute-dtype copy of the weights held from forward to backward (autocast's cast cache,
    # FSDP2's gathered weights at ZeRO 1/2), the fp8-gathered linears at their own bytes; at ZeRO 3
    # only the layers in flight, in comm_buffers.
    layer_params = per_stage * est.params.dense_per_layer / plan.tp    # the rank's layers' dense parameters
    fp8_params = _fp8_gathered_fraction(est, plan) * layer_params
    # Where ZeRO 1/2 shards the weights themselves (FSDP2 without resharding after forward, as torchtitan
    # runs ZeRO-2), the gathered compute-dtype weights are that copy even without autocast.
    copy_bytes = max(fw.compute_weight_copy_bytes, BYTES_WEIGHT if shards_weights(fw, plan) else 0.0)
    copies = (copy_bytes * (dense + expert - fp8_params)
              + fw.fp8_weight_copy_bytes * fp8_params) if plan.zero_stage < 3 else 0.0
    if est.training.dtype == "fp8" and fw.fp8_weight_workspace_bytes and not fw.fp8_param_gather:
        # Transformer Engine's fp8 weight workspaces: every dense linear's weight cast (and transposed)
        # once per step and kept for the later micro-batches and the backward.
        linears = fp8_linear_share(est.model, est.params.dense_per_layer)
        copies += fw.fp8_weight_workspace_bytes * linears * layer_params
    executor_on_cpu = _on_cpu(est.profile) and fw.activation_recipe in eager.RECIPES
    if executor_on_cpu:
        # The executor on a CPU runs fp32 (no autocast, no mixed precision off CUDA): no cast cache;
        # where FSDP2 wraps the model (ZeRO over several replicas) it keeps its gathered fp32
        # weights from forward to backward at ZeRO 1/2 (specs.plan compute_mode, parallelize.py).
        copies = eager.FP32 * (dense + expert) if 0 < plan.zero_stage < 3 and shard > 1 else 0.0
    if fw.moe_stacked_expert_weights and est.model.is_moe:
        # Unpacked experts: the stacked copy of a MoE layer's local expert weights, which
        # torch._grouped_mm keeps for its input gradient from the layer's (re)computed forward to its
        # backward (KempnerForge kempnerforge/model/moe.py @abbbac33 lines 50-53, 66-72). One layer's,
        # as in its full-recompute runs: the published unpacked - packed peaks, 0.4 and 1.2 GiB at 8
        # and 16 experts (moe_packed_benchmark.md), are one set (0.70 and 1.41 GB), not two.
        matrices, tensor_bytes = stacked_weight_bytes(est.model, plan.ep, plan.expert_tp or plan.tp)
        copies += matrices * tensor_bytes
    without_grads = sum(v for k, v in states.items() if k != "grads")
    return _RankWeights(dense, expert, states, fp8_params, copies, executor_on_cpu, sum(states.values()),
                        without_grads, without_grads + copies)


def stage_memory(est, plan, stage: int, recompute: str, num_recompute: int, per_stage: int,
                 plan_key: tuple | None = None) -> dict:
    """Memory breakdown of pipeline rank `stage` (holding `per_stage` layers) at its peak phase."""
    return stage_breakdown(stage_peak(est, plan, stage, recompute, num_recompute, per_stage, plan_key))


class Phase(NamedTuple):
    """A phase of the step other than the optimizer's, by what it holds besides the rank's states."""
    activations: float
    working: float
    """The backward working set: a layer's activation gradients, or the loss's."""
    logits: float
    grads_absent: bool
    """The gradients are not yet allocated (the first micro-batch's backward of a one-micro-batch step)."""


class StagePeak(NamedTuple):
    total_bytes: float
    """The peak phase's breakdown summed, bit for bit (stage_breakdown builds it)."""
    held: "_Held"
    phase: Phase | None
    """The peak phase, or None for the optimizer step."""


def stage_peak(est, plan, stage: int, recompute: str, num_recompute: int, per_stage: int,
               plan_key: tuple | None = None) -> StagePeak:
    """The peak of pipeline rank `stage` (holding `per_stage` layers): its total and its phase, from
    which stage_breakdown builds the breakdown (a caller comparing ranks builds only the worst one's).
    What the rank holds whatever its recompute policy is worked out once per plan and rank
    (`plan_key`: plan_memory_key(plan), when the caller has it) and kept in the estimator's cache:
    the search prices one plan under several policies and layer counts."""
    key = ("stage", stage, per_stage, plan_key if plan_key is not None else plan_memory_key(plan))
    held = est.cache.get(key)
    if held is None:
        held = est.cache[key] = _held_whatever_recompute(est, plan, stage, per_stage)
    kept = per_stage - (min(num_recompute, per_stage) if recompute == "full" else 0)
    saved = held.layer_bytes
    stored = (kept * (saved.selective if recompute == "selective" else saved.full)
              + (per_stage - kept) * saved.input_only)
    if held.first_rank_saved:
        stored += held.first_rank_saved
    activations = stored * held.in_flight
    # Backward of one layer: its activation gradients (about its saved tensors), plus the
    # recomputed layer itself under full recompute. Where sequence-parallel linears gather their input
    # again in backward (Framework.sp_regathers_in_backward), the recomputed layer holds what it stores
    # without recompute (saved.full, sharded), not a second unsharded working set.
    doubled = kept < per_stage if held.eager else recompute == "full"
    regathers = est.framework.sp_regathers_in_backward and not held.eager
    recomputed = (saved.full if regathers else held.working_layer) if doubled else 0.0
    phases = [Phase(activations, held.working_layer + recomputed, held.logits, False)]
    if held.loss_phase is not None:
        phases.append(Phase(activations, *held.loss_phase))
    # The phase with the largest total, as max(candidates, key=sum) would pick it, first one on a tie,
    # each total summed in its breakdown's key order (so bit for bit that sum) without building the
    # breakdowns that lose.
    best, best_total = None, -math.inf
    for phase in phases:
        total = held.states_total_without_grads if phase.grads_absent or held.accumulating else held.states_total
        total = total + held.weight_copies + phase.activations + phase.working + phase.logits + held.comm + 0.0
        for value in held.device.values():
            total += value
        if total > best_total:
            best, best_total = phase, total
    if held.optimizer is not None and held.optimizer_total > best_total:
        return StagePeak(held.optimizer_total, held, None)
    return StagePeak(best_total, held, best)


def stage_breakdown(peak: StagePeak) -> dict:
    """The breakdown (bytes per term) of a stage_peak's phase: the optimizer step's, or the one it names."""
    held, phase = peak.held, peak.phase
    if phase is None:
        return dict(held.optimizer)
    return {**held.states,
            **({"grads": 0.0} if (phase.grads_absent or held.accumulating) and "grads" in held.states else {}),
            **_ZERO_TERMS, "weight_copies": held.weight_copies, "activations": phase.activations,
            "activation_working": phase.working, "logits": phase.logits, "comm_buffers": held.comm, **held.device}


_ZERO_TERMS = {"weight_copies": 0.0, "activations": 0.0, "activation_working": 0.0, "logits": 0.0,
               "comm_buffers": 0.0, "optimizer_working": 0.0}
"""Every phase's breakdown has these keys, in this order, whether the phase holds them or not."""


class LayerSaved(NamedTuple):
    """What one layer saves per micro-batch, by recompute policy."""
    full: float
    """Without recompute."""
    selective: float
    """Under selective recompute."""
    input_only: float
    """Under full recompute: the layer's input alone."""


class LossPhase(NamedTuple):
    """The last rank's loss backward (eager recipes), besides the stored activations."""
    working: float
    logits: float
    grads_absent: bool


class ActivationShape(NamedTuple):
    """What a rank's activations look like under its framework's recipe, whatever the recompute policy."""
    layer_bytes: LayerSaved
    first_rank_saved: float
    """The embedding's saved tensors per micro-batch on the first rank of an eager recipe (else 0)."""
    working_layer: float
    """One layer's backward working set (doubled where the layer is recomputed first)."""
    logits: float
    loss_phase: LossPhase | None
    largest_block: float
    """The largest transient allocation of any phase: the allocator's headroom (allocator_overhead)."""


@dataclass(slots=True, kw_only=True)
class _Held:
    """What one pipeline rank holds whatever its recompute policy (stage_peak adds the saved
    activations that the policy decides)."""
    states: dict
    weight_copies: float
    comm: float
    device: dict
    """The device terms, the allocator's block the largest transient of any phase."""
    accumulating: bool
    in_flight: float
    layer_bytes: LayerSaved
    first_rank_saved: float
    working_layer: float
    logits: float
    loss_phase: LossPhase | None
    optimizer: dict | None
    """The optimizer step's breakdown (eager recipes): activations and the autocast cache gone."""
    eager: bool
    states_total: float = 0.0
    """sum(states.values()), in their order."""
    states_total_without_grads: float = 0.0
    """The same with the gradients not yet allocated (0.0 in their place adds nothing)."""
    optimizer_total: float = 0.0


def _held_whatever_recompute(est, plan, stage: int, per_stage: int) -> _Held:
    p, m = plan.pp, plan.num_microbatches
    first, last = stage == 0, stage == p - 1
    weights = _rank_weights(est, plan, per_stage, first, last)
    dense, expert, states, shard = weights.dense, weights.expert, weights.states, plan.zero_shard_group
    fw, on_cpu = est.framework, _on_cpu(est.profile)
    b, s_local = plan.micro_batch_size, est.training.seq_len // plan.cp
    gathered_bytes = eager.FP32 if weights.executor_on_cpu else BYTES_WEIGHT
    comm = _comm_buffers(est, plan, dense + expert, shard, weights.fp8_params, gathered_bytes)
    in_flight = in_flight_microbatches(p, plan.vpp, m, stage,
                                       stage_split(plan, est.model.num_layers).chunk_layers[stage])
    is_eager = fw.activation_recipe in eager.RECIPES
    shape = _eager_shape(est, plan, first, last, b, s_local) if is_eager else _megatron_shape(est, plan, last, b,
                                                                                               s_local)
    device = {"allocator_overhead": shape.largest_block, "cuda_context": fw.runtime_bytes}
    if on_cpu:
        device = {"allocator_overhead": CPU_DEVICE_TERM_BYTES, "cuda_context": CPU_DEVICE_TERM_BYTES,
                  "cpu_runtime": float(est.profile.runtime_memory_bytes)}
    optimizer = None
    if is_eager:
        # The optimizer step: activations and the autocast cache are gone by then.
        local = (dense + expert) / (shard if plan.zero_stage >= 1 else 1)
        temp = 0.0 if fw.fused_adamw_on_cuda and not on_cpu else FOREACH_ADAMW_TEMP_BYTES
        optimizer = {**states, **_ZERO_TERMS, "optimizer_working": temp * local, **device}
    return _Held(states=states, weight_copies=weights.copies, comm=comm, device=device,
                 accumulating=accumulates_unsharded_grads(fw, plan), in_flight=in_flight,
                 layer_bytes=shape.layer_bytes, first_rank_saved=shape.first_rank_saved,
                 working_layer=shape.working_layer, logits=shape.logits, loss_phase=shape.loss_phase,
                 optimizer=optimizer, eager=is_eager, states_total=weights.states_total,
                 states_total_without_grads=weights.states_total_without_grads,
                 optimizer_total=sum(optimizer.values()) if optimizer is not None else 0.0)


def _eager_shape(est, plan, first: bool, last: bool, b: int, s: int) -> ActivationShape:
    """The rank's activations under the eager recipes (cost_model/eager_activations.py)."""
    model, tp, sp = est.model, plan.tp, plan.sequence_parallel
    # One micro-batch: grads are set to None each step and first written in its backward.
    grads_absent = plan.num_microbatches == 1 and plan.pp == 1
    # All it reads: the recipe's own inputs (Estimator.eager_recipe) rather than the recipe, whose hash
    # costs more than the rest of a lookup.
    shape_key = ("eager shape", tp, plan.cp, plan.dp, plan.zero_stage, b, s, sp, first, last, grads_absent)
    shape = est.cache.get(shape_key)
    if shape is not None:   # per shape and rank, as the search asks for the same ones many times
        return shape
    recipe = est.eager_recipe(plan)
    key = ("eager", recipe, b, s, tp, sp)
    sizes = est.cache.get(key)
    if sizes is None:
        sizes = est.cache[key] = tuple(sum(f(model, b, s, tp, sp, recipe).values()) for f in (
            eager.layer_saved, eager.selective_layer_saved, eager.full_layer_saved, eager.head_saved))
    full_layer, selective_layer, input_only, head = sizes
    first_saved = sum(eager.embedding_saved(model, b, s).values()) if first else 0.0
    # The layer backward's working set: the layer's activation gradients, about its saved tensors.
    block = BYTES_ACT * b * s * model.ffn_hidden_size / tp   # the MLP's widest activation
    loss_phase = None
    if last:
        loss_phase = LossPhase(eager.loss_backward_working(model, b, s, recipe), head, grads_absent)
        block = max(block, eager.largest_transient_block(model, b, s, recipe))
    shape = est.cache[shape_key] = ActivationShape(LayerSaved(full_layer, selective_layer, input_only), first_saved,
                                                   full_layer, 0.0, loss_phase, block)
    return shape


def _megatron_shape(est, plan, last: bool, b: int, s: int) -> ActivationShape:
    """The rank's activations as Korthikanti et al. 2022 name their tensors (cost_model/memory.py)."""
    full_layer, selective_layer, input_only, working_layer = est.layer_activation_bytes(
        b, s, plan.tp, plan.sequence_parallel, plan.expert_tp, plan.recompute_modules, plan.ep,
        plan.moe_capacity_factor)
    # The backward working set holds the SP-gathered inputs at full length (one at a time where the
    # framework gathers them again in backward: Framework.sp_regathers_in_backward).
    fw = est.framework
    fused_loss = fw.fused_cross_entropy and plan.tp <= fw.fused_cross_entropy_max_tp
    per_logit = fw.loss_bytes_per_logit or (BYTES_LOGITS if fused_loss else BYTES_LOGITS_UNFUSED)
    # A chunked loss holds one chunk's logits at a time, and the fp32 gradient of the final hidden
    # states it accumulates over the chunks (torchtitan components/loss.py ChunkedLossWrapper).
    logit_elems = b * s * est.model.vocab_size / (1 if fw.loss_gathers_logits else plan.tp) / fw.loss_chunks
    hidden_grad = BYTES_GRAD * b * s * est.model.hidden_size if fw.loss_chunks > 1 else 0.0
    logits = per_logit * logit_elems + hidden_grad if last else 0.0
    block = max(BYTES_ACT * logit_elems if last else 0.0, BYTES_ACT * b * s * est.model.ffn_hidden_size / plan.tp)
    return ActivationShape(LayerSaved(full_layer, selective_layer, input_only), 0.0, working_layer, logits, None,
                           block)


def fp8_gathered_fraction(fw, dtype: str, plan, linear_share: float) -> float:
    """Share of a layer's dense parameters whose gathered compute copy is fp8
    (Framework.fp8_weight_copy_bytes): the block linears (`linear_share`, fp8_linear_share), where
    an fp8 plan's ZeRO shards the weights over several replicas (torchao's float8 all-gather under
    FSDP2); 0 otherwise."""
    if dtype != "fp8" or not fw.fp8_weight_copy_bytes or plan.zero_stage == 0 or plan.dp * plan.cp == 1:
        return 0.0
    return linear_share


def fp8_linear_share(model, dense_params_per_layer: float) -> float:
    """Share of a layer's dense parameters in its linears (all but the norms and a MoE layer's router,
    which stays in the compute dtype: executor/fp8.py; Megatron-Core's router is no Transformer Engine
    module), on average over the model's layers: the weights an fp8 run computes, and may gather, in
    fp8. The routed experts are not dense parameters (Framework.fp8_expert_gemms says where they run)."""
    routers = model.num_moe_layers * model.hidden_size * model.num_experts / model.num_layers
    return 1.0 - (model.num_layer_norms * model.norm_params() + routers) / dense_params_per_layer


def _fp8_gathered_fraction(est, plan) -> float:
    """fp8_gathered_fraction of the estimator's framework, dtype and model."""
    return fp8_gathered_fraction(est.framework, est.training.dtype, plan,
                                 fp8_linear_share(est.model, est.params.dense_per_layer))


def _on_cpu(profile) -> bool:
    return getattr(profile, "device_kind", "gpu") == "cpu"


def _comm_buffers(est, plan, local_params: float, shard: int, fp8_params: float = 0.0,
                  gathered_bytes: float = BYTES_WEIGHT) -> float:
    """ZeRO-3's gathered weights (`gathered_bytes` each: bf16, fp32 for the executor on a CPU) and
    unsharded gradients; `fp8_params` of the local parameters are gathered in fp8
    (Framework.fp8_weight_copy_bytes) instead."""
    fw = est.framework
    if plan.zero_stage < 3 or shard <= 1:
        # Sharded weights under a pipeline at ZeRO 1/2: their unsharded gradients are held in the
        # reduce dtype until the last backward (accumulates_unsharded_grads).
        return fw.sharded_reduce_bytes_per_grad * local_params if accumulates_unsharded_grads(fw, plan) else 0.0
    fp8_saving = gathered_bytes - fw.fp8_weight_copy_bytes  # per fp8-gathered parameter
    if plan.pp > 1:
        # FSDP under a pipeline keeps the stage's weights gathered from the first forward to the
        # last backward (torchtitan sets reshard_after_forward=False with PP, as step_time
        # assumes) and accumulates its unsharded fp32 gradients over the micro-batches
        # (torch.distributed.pipelining turns FSDP's gradient sync off until the last backward).
        return (gathered_bytes + BYTES_GRAD) * local_params - fp8_saving * fp8_params
    # FSDP: the gathered bf16 weights of the current and prefetched layer + one layer's unsharded
    # gradients awaiting reduce-scatter; DeepSpeed bounds both by its buckets.
    layer = est.params.dense_per_layer / plan.tp + est.params.expert_per_layer / (plan.ep * plan.expert_tp)
    gathered, grads = 2 * layer, layer
    if fw.zero3_max_live_params:
        gathered = min(gathered, fw.zero3_max_live_params)
    if fw.zero3_reduce_bucket_params:
        grads = min(grads, fw.zero3_reduce_bucket_params)
    fp8_gathered = gathered * _fp8_gathered_fraction(est, plan) * est.params.dense_per_layer / plan.tp / layer
    held = gathered_bytes * gathered - fp8_saving * fp8_gathered + BYTES_GRAD * grads
    if accumulates_unsharded_grads(fw, plan):
        # Every local parameter's unsharded gradient, in the reduce dtype, from the first backward on.
        held += fw.sharded_reduce_bytes_per_grad * local_params
    return held


def accumulates_unsharded_grads(fw, plan) -> bool:
    """Gradients held unsharded across micro-batches (cost_model.memory.grads_accumulate_unsharded),
    the sharded gradients only replacing them, layer by layer, in the last backward (so not held
    besides); ZeRO-3 under a pipeline is counted with its gathered weights in _comm_buffers instead."""
    return grads_accumulate_unsharded(fw, plan) and not (plan.zero_stage >= 3 and plan.pp > 1)
