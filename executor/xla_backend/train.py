"""The training loop shared by the SPMD run and its single-device reference.

One loop, two placements: on XLA the model is annotated (sharding.py) and each step ends with
`torch_xla.sync()`; as the reference it runs eagerly on the CPU with no annotation at all. The
math (micro-batches, loss scaling, AdamW, clipping, learning rate) is the same code, which is what
makes the losses comparable number for number.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

import torch
import torch.nn.functional as F

from autoplan.specs import PlanDocument
from executor.data import batch, local_slice, open_tokens
from executor.options import RunOptions
from executor.record import step_line
from executor.schedule import lr_at
from executor.schedule import ADAMW_BETAS, WEIGHT_DECAY


@dataclass
class Placement:
    """Where tensors go and how a step ends; the defaults are the eager single-device reference."""
    place_tokens: Callable = lambda t: t
    """Move a (batch, seq) token tensor to the device and mark its sharding."""
    before_update: Callable = lambda: None
    """Runs after the last backward of a step (ZeRO-2 marks the gradients here)."""
    end_step: Callable = lambda: None
    """Ends the step on the device and waits for it (XLA: sync, then wait for the device ops)."""


@dataclass
class TrainResult:
    losses: list = field(default_factory=list)
    step_times_s: list = field(default_factory=list)
    """Wall time of every step, warm-up included (the caller drops the warm-up steps)."""
    grad_norms: list = field(default_factory=list)
    """Global gradient L2 norm of every step, before clipping. Unlike the loss under AdamW (which
    normalizes the update), it shows a gradient scaled wrongly, e.g. a sum where a mean belongs."""
    learning_rates: list = field(default_factory=list)
    """The learning rate of every step (the schedule of executor.schedule.lr_at)."""


def microbatch_rows(doc: PlanDocument) -> list:
    """Rows of the global batch in each micro-batch: data-parallel rank r's j-th micro-batch for
    every r, so each micro-batch's batch dimension splits over dp into the ranks' own sequences
    (the rows a torch.distributed rank would read, see executor.data.local_slice)."""
    par = doc.parallel
    starts = [local_slice(doc.training.global_batch_size, par.dp, r)[0] for r in range(par.dp)]
    return [torch.cat([torch.arange(s + j * par.micro_batch_size, s + (j + 1) * par.micro_batch_size)
                       for s in starts]) for j in range(par.num_microbatches)]


def make_optimizer(model: torch.nn.Module, options: RunOptions) -> torch.optim.AdamW:
    # The torch backend's hyperparameters, so both backends train a plan the same way. foreach=False:
    # the per-tensor update keeps each tensor's own sharding annotation visible to the partitioner.
    return torch.optim.AdamW(model.parameters(), lr=options.lr, betas=ADAMW_BETAS, weight_decay=WEIGHT_DECAY,
                             foreach=False)


def train(model: torch.nn.Module, optimizer: torch.optim.Optimizer, doc: PlanDocument, options: RunOptions,
          placement: Placement, log: Callable = lambda _msg: None) -> TrainResult:
    source = open_tokens(options.data, options.data_dtype, options.seed, doc.model.vocab_size)
    rows = microbatch_rows(doc)
    params = [p for p in model.parameters()]
    result = TrainResult()
    for step in range(options.steps):
        # Host work (token generation) stays outside the timed region; placement is asynchronous.
        inputs, labels = batch(source, step, 0, doc.training.global_batch_size, doc.training.seq_len)
        micro = [(placement.place_tokens(inputs[r]), placement.place_tokens(labels[r])) for r in rows]
        lr = lr_at(step, options.lr, options.min_lr, options.warmup, options.steps)
        for group in optimizer.param_groups:
            group["lr"] = lr
        start = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        total = None
        for tokens, targets in micro:
            logits = model(tokens)
            # Mean over the micro-batch's tokens, scaled so the accumulated gradient is the mean
            # over the whole global batch (all sequences have the same length).
            loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten()) / len(micro)
            loss.backward()
            total = loss.detach() if total is None else total + loss.detach()
        placement.before_update()
        grad_norm = torch.nn.utils.get_total_norm([p.grad for p in params if p.grad is not None], foreach=False)
        if options.grad_clip > 0:  # scale by min(1, clip / (norm + 1e-6)), as torch's clip_grad_norm_
            torch.nn.utils.clip_grads_with_norm_(params, options.grad_clip, grad_norm, foreach=False)
        optimizer.step()
        placement.end_step()
        result.step_times_s.append(time.perf_counter() - start)
        result.losses.append(float(total))
        result.grad_norms.append(float(grad_norm))
        result.learning_rates.append(lr)
        if (step + 1) % options.log_every == 0 or step + 1 == options.steps:
            elapsed_s = result.step_times_s[-1]
            # no MFU: this backend computes in fp32 and records no datasheet peak (peak_flops_per_s 0)
            log(step_line(step + 1, options.steps, result.losses[-1], result.grad_norms[-1], lr, elapsed_s,
                          doc.training.tokens_per_step / elapsed_s, None))
    return result
