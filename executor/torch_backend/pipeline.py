"""Pipeline parallelism: split the layer stack into stages and pick the schedule.

With pp ranks and vpp virtual stages per rank there are pp*vpp stages of consecutive layers, as
the plan splits them (ParallelPlan.virtual_stage_num_layers; uneven when pp or pp*vpp does not
divide the layers: the middle ranks, then the last, take the extra layers, and a rank's smaller
chunks come first, on the last rank last).
Rank r holds stages r, r+pp, r+2pp, ... (the looping placement of Narayanan et al. 2021,
arXiv 2104.04473, section 2.2.1), which is what ScheduleInterleaved1F1B expects. The first stage
keeps the embeddings, the last the final norm and the head.
"""
from __future__ import annotations

import torch

from autoplan.specs import ModelSpec, ParallelPlan

from executor.model import Kernels, Transformer, build_model


def stage_layer_counts(plan: ParallelPlan, num_layers: int) -> list[int]:
    """Layers of each of the pp*vpp stages, in stage order."""
    return plan.virtual_stage_num_layers(num_layers)


def stage_layer_ids(layer_counts: list[int], stage_index: int) -> list[int]:
    start = sum(layer_counts[:stage_index])
    return list(range(start, start + layer_counts[stage_index]))


def stage_indices(pp_rank: int, pp: int, vpp: int) -> list[int]:
    """The (virtual) stages pipeline rank `pp_rank` holds, in execution order."""
    return [pp_rank + k * pp for k in range(vpp)]


def build_stage(spec: ModelSpec, stage_index: int, layer_counts: list[int],
                kernels: Kernels | None = None) -> Transformer:
    """The whole model on the meta device, then everything this stage does not own removed."""
    num_stages = len(layer_counts)
    model = build_model(spec, "meta", kernels)
    keep = {str(i) for i in stage_layer_ids(layer_counts, stage_index)}
    for key in [k for k in model.layers.keys() if k not in keep]:
        del model.layers[key]
    if stage_index > 0:
        model.tok_embeddings = None
        model.pos_embeddings = None
    if stage_index < num_stages - 1:
        model.norm = None
        model.output = None
    return model


def build_schedule(stage_models: list, stage_ids: list[int], num_stages: int, num_microbatches: int,
                   device, pp_group):
    """Schedule1F1B for one stage per rank, ScheduleInterleaved1F1B for several.

    The last stage computes the loss itself (the labels reach every stage as a keyword argument
    of `step`, which the stages without the head ignore), so the head and the loss can be fused;
    the schedule's loss function only scales it. The loss of each micro-batch is divided by
    num_microbatches here (so gradients add up to the
    mean over the batch), instead of the schedules' `scale_grads`, which divides each gradient in
    place: on a Partial DTensor (a norm weight's gradient under sequence parallelism) that
    in-place division is lost in torch 2.9 (measured: those gradients came out num_microbatches
    times too large). The per-micro-batch losses the schedule returns are therefore pre-divided."""
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleInterleaved1F1B
    from torch.distributed.pipelining.microbatch import _CustomReducer

    def scaled_loss(loss, target):
        return loss / num_microbatches

    stages = [PipelineStage(model, index, num_stages, device, group=pp_group)
              for model, index in zip(stage_models, stage_ids)]
    for stage in stages:
        _match_init_p2p_dtypes(stage)
    # The stage outputs are scalar losses, which the default merge (a cat along dim 0) refuses.
    merge = _CustomReducer(torch.zeros(()), lambda a, b: a + b.detach())
    if len(stages) == 1:
        return Schedule1F1B(stages[0], n_microbatches=num_microbatches, loss_fn=scaled_loss, scale_grads=False,
                            output_merge_spec=merge)
    return ScheduleInterleaved1F1B(stages, n_microbatches=num_microbatches, loss_fn=scaled_loss, scale_grads=False,
                                   output_merge_spec=merge)


def _match_init_p2p_dtypes(stage) -> None:
    """Work around torch 2.9: the schedules' first "hello" exchange between neighbour stages sends
    an int64 scalar (`torch.tensor(stage_index)`) into a float32 receive buffer (`torch.zeros(1)`),
    which NCCL lets pass and gloo aborts on ("8 vs 4. Received data size doesn't match"). Sending
    the same value as float32 makes the sizes agree on every backend."""
    original = stage._get_init_p2p_neighbors_ops

    def ops_with_matching_dtypes():
        ops = original()
        for op in ops:
            if op.tensor.dtype != torch.float32:
                op.tensor = op.tensor.float().reshape(1)
        return ops

    stage._get_init_p2p_neighbors_ops = ops_with_matching_dtypes
