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

from cost_model import eager_activations as eager
from cost_model.stages import stage_split
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


def allocated_peak_bytes(breakdown: dict) -> float:
    """The breakdown's total without the device terms: comparable to max_memory_allocated."""
    return sum(v for k, v in breakdown.items() if k not in DEVICE_TERMS)


def min_full_recompute_layers(est, plan) -> int | None:
    """Fewest layers per stage to recompute fully so `est.memory(plan, ...)` fits the profile's
    capacity less the user's headroom: 0 when it fits without recompute, None when not even with every layer recomputed.
    Memory falls monotonically with the count (each rank recomputes min(count, its layers)), so bisect."""
    capacity = est.usable_memory_bytes
    if sum(est.memory(plan, "none", 0).values()) <= capacity:
        return 0
    per_stage = plan.layers_per_stage(est.model.num_layers)
    if sum(est.memory(plan, "full", per_stage).values()) > capacity:
        return None
    lo, hi = 1, per_stage
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if sum(est.memory(plan, "full", mid).values()) <= capacity else (mid + 1, hi)
    return lo


def stage_memory(est, plan, stage: int, recompute: str, num_recompute: int, per_stage: int) -> dict:
    """Memory breakdown of pipeline rank `stage` (holding `per_stage` layers) at its peak phase."""
    p, m = plan.pp, plan.num_microbatches
    first, last = stage == 0, stage == p - 1
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
    fp8_params = fp8_gathered_fraction(est, plan) * per_stage * est.params.dense_per_layer / plan.tp
    # Where ZeRO 1/2 shards the weights themselves (FSDP2 without resharding after forward, as torchtitan
    # runs ZeRO-2), the gathered compute-dtype weights are that copy even without autocast.
    copy_bytes = max(fw.compute_weight_copy_bytes, BYTES_WEIGHT if shards_weights(fw, plan) else 0.0)
    weight_copies = (copy_bytes * (dense + expert - fp8_params)
                     + fw.fp8_weight_copy_bytes * fp8_params) if plan.zero_stage < 3 else 0.0
    executor_on_cpu = _on_cpu(est) and fw.activation_recipe in eager.RECIPES
    if executor_on_cpu:
        # The executor on a CPU runs fp32 (no autocast, no mixed precision off CUDA): no cast cache;
        # where FSDP2 wraps the model (ZeRO over several replicas) it keeps its gathered fp32
        # weights from forward to backward at ZeRO 1/2 (train.py compute_mode, parallelize.py).
        weight_copies = eager.FP32 * (dense + expert) if 0 < plan.zero_stage < 3 and shard > 1 else 0.0
    b, s_local = plan.micro_batch_size, est.training.seq_len // plan.cp
    kept = per_stage - (min(num_recompute, per_stage) if recompute == "full" else 0)
    gathered_bytes = eager.FP32 if executor_on_cpu else BYTES_WEIGHT
    comm = _comm_buffers(est, plan, dense + expert, shard, fp8_params, gathered_bytes)
    in_flight = in_flight_microbatches(p, plan.vpp, m, stage,
                                       stage_split(plan, est.model.num_layers).chunk_layers[stage])
    if fw.activation_recipe in eager.RECIPES:
        phases = _eager_phases(est, plan, recompute, kept, per_stage, first, last, in_flight, b, s_local)
    else:
        phases = _megatron_phases(est, plan, recompute, kept, per_stage, last, in_flight, b, s_local)
    block = max(ph[4] for ph in phases)
    zero = {"weight_copies": 0.0, "activations": 0.0, "activation_working": 0.0, "logits": 0.0,
            "comm_buffers": 0.0, "optimizer_working": 0.0}
    device = {"allocator_overhead": block, "cuda_context": fw.runtime_bytes}
    if _on_cpu(est):
        device = {"allocator_overhead": CPU_DEVICE_TERM_BYTES, "cuda_context": CPU_DEVICE_TERM_BYTES,
                  "cpu_runtime": float(est.profile.runtime_memory_bytes)}
    candidates = []
    accumulating = accumulates_unsharded_grads(fw, plan)
    for activations, working, logits, grads_absent, _ in phases:
        candidates.append({**states, **({"grads": 0.0} if (grads_absent or accumulating) and "grads" in states else {}),
                           **zero, "weight_copies": weight_copies, "activations": activations,
                           "activation_working": working, "logits": logits, "comm_buffers": comm, **device})
    if fw.activation_recipe in eager.RECIPES:
        # The optimizer step: activations and the autocast cache are gone by then.
        local = (dense + expert) / (shard if plan.zero_stage >= 1 else 1)
        candidates.append({**states, **zero, "optimizer_working": FOREACH_ADAMW_TEMP_BYTES * local, **device})
    return max(candidates, key=lambda c: sum(c.values()))


def _eager_phases(est, plan, recompute, kept, per_stage, first, last, in_flight, b, s) -> list:
    """(activations, working, logits, grads not yet allocated, largest block) per phase, for the
    eager recipes (cost_model/eager_activations.py)."""
    model, tp, sp = est.model, plan.tp, plan.sequence_parallel
    recipe = eager.recipe_for(est.framework.activation_recipe, model, plan, on_cpu=_on_cpu(est))
    key = ("eager", recipe, b, s, tp, sp)
    sizes = est._layer_cache.get(key)
    if sizes is None:   # per shape, as the search asks for the same shapes many times
        sizes = est._layer_cache[key] = tuple(sum(f(model, b, s, tp, sp, recipe).values()) for f in (
            eager.layer_saved, eager.selective_layer_saved, eager.full_layer_saved, eager.head_saved))
    full_layer, selective_layer, input_only, head = sizes
    layer = selective_layer if recompute == "selective" else full_layer
    stored = kept * layer + (per_stage - kept) * input_only
    if first:
        stored += sum(eager.embedding_saved(model, b, s).values())
    activations = stored * in_flight
    # Layer backward: the layer's activation gradients (about its saved tensors), plus the
    # recomputed layer itself under full recompute.
    layer_working = full_layer * (2 if kept < per_stage else 1)
    mlp_block = BYTES_ACT * b * s * model.ffn_hidden_size / tp
    phases = [(activations, layer_working, 0.0, False, mlp_block)]
    if last:
        # One micro-batch: grads are set to None each step and first written in its backward.
        grads_absent = plan.num_microbatches == 1 and plan.pp == 1
        phases.append((activations, eager.loss_backward_working(model, b, s, recipe), head, grads_absent,
                       eager.largest_transient_block(model, b, s, recipe)))
    block = max(ph[4] for ph in phases)
    return [(*ph[:4], block) for ph in phases]


def _megatron_phases(est, plan, recompute, kept, per_stage, last, in_flight, b, s) -> list:
    """One phase: every stored activation, one layer's backward working set and the logits
    (Korthikanti et al. 2022 named tensors, cost_model/memory.py)."""
    full_layer, selective_layer, input_only, working_layer = est._layer_activation_bytes(
        b, s, plan.tp, plan.sequence_parallel, plan.expert_tp, plan.recompute_modules)
    layer_bytes = selective_layer if recompute == "selective" else full_layer
    stored = kept * layer_bytes + (per_stage - kept) * input_only
    # Backward of one layer: its activation gradients (about one layer's activations, with the
    # SP-gathered inputs at full length), plus its recomputed activations under full recompute.
    working = working_layer * (2 if recompute == "full" else 1)
    fw = est.framework
    fused_loss = fw.fused_cross_entropy and plan.tp <= fw.fused_cross_entropy_max_tp
    per_logit = fw.loss_bytes_per_logit or (BYTES_LOGITS if fused_loss else BYTES_LOGITS_UNFUSED)
    # A chunked loss holds one chunk's logits at a time, and the fp32 gradient of the final hidden
    # states it accumulates over the chunks (torchtitan components/loss.py ChunkedLossWrapper).
    logit_elems = b * s * est.model.vocab_size / (1 if fw.loss_gathers_logits else plan.tp) / fw.loss_chunks
    hidden_grad = BYTES_GRAD * b * s * est.model.hidden_size if fw.loss_chunks > 1 else 0.0
    logits = per_logit * logit_elems + hidden_grad if last else 0.0
    block = max(BYTES_ACT * logit_elems if last else 0.0, BYTES_ACT * b * s * est.model.ffn_hidden_size / plan.tp)
    return [(stored * in_flight, working, logits, False, block)]


def fp8_gathered_fraction(est, plan) -> float:
    """Share of a layer's dense parameters whose gathered compute copy is fp8
    (Framework.fp8_weight_copy_bytes): the block linears, all but the norms (executor/fp8.py), where
    an fp8 plan's ZeRO shards the weights over several replicas (torchao's float8 all-gather under
    FSDP2); 0 otherwise."""
    fw, model = est.framework, est.model
    if est.training.dtype != "fp8" or not fw.fp8_weight_copy_bytes or plan.zero_stage == 0 \
            or plan.dp * plan.cp == 1 or model.is_moe:
        return 0.0
    return fp8_linear_share(est)


def fp8_linear_share(est) -> float:
    """Share of a layer's dense parameters in its linears (all but the norms): the weights an fp8 run
    computes, and may gather, in fp8."""
    return 1.0 - est.model.num_layer_norms * est.model.norm_params() / est.params.dense_per_layer


def _on_cpu(est) -> bool:
    return getattr(est.profile, "device_kind", "gpu") == "cpu"


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
    fp8_gathered = gathered * fp8_gathered_fraction(est, plan) * est.params.dense_per_layer / plan.tp / layer
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
