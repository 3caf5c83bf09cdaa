"""The training loop of one plan inside an initialized process group (one call per plan).

AdamW, gradient clipping on the global norm, linear warm-up + cosine LR, checkpoint/resume; logs
loss, step time, tokens/s, MFU and peak memory; returns the Measurement (on every rank; rank 0's
is the one recorded). Memory is torch.cuda.max_memory_allocated on GPU and the process's RSS
high-water mark on CPU (which includes the Python interpreter and torch itself), maximum over ranks.
"""
from __future__ import annotations

import os
import time
import weakref

import torch
import torch.distributed as dist

from autoplan.specs import Measurement, PlanDocument

from executor import fp8
from executor.data import batch, local_slice, open_tokens
from executor.loss import auto_chunk_tokens
from executor.model import Kernels, build_model, model_notes
from executor.options import RunOptions
from autoplan.specs.flops import mfu
from autoplan.specs.gpus import datasheet_peak_flops_per_s
from autoplan.specs.plan import compute_mode
from executor.record import (
    build_measurement, cpu_peak_rss_bytes, cpu_rss_baseline, cpu_rss_growth_bytes, cpu_wait_s, environment,
    reset_cpu_peak_rss, run_extra, step_line, wait_share,
)
from executor.schedule import lr_at
from executor.torch_backend import checkpoint, faults
from executor.torch_backend.context_parallel import apply_cp_attention, local_tokens, localize_rope
from executor.torch_backend import expert_parallel
from executor.torch_backend.parallel_dims import ParallelDims
from executor.torch_backend.parallelize import (
    all_reduce_grads, apply_compile, apply_fsdp, apply_recompute, apply_tp, mixed_precision,
)
from executor.torch_backend.pipeline import build_schedule, build_stage, stage_indices, stage_layer_counts
from executor.schedule import ADAMW_BETAS, WEIGHT_DECAY

PPM = 1_000_000
"""A share travels between ranks as whole millionths (max_over_ranks reduces int64 tensors)."""


def _optimizers(model, lr: float, fused: bool) -> list:
    """AdamW over the model's parameters: one optimizer for DTensor parameters and one for plain
    ones (tensor parallel without sequence parallel leaves the norms plain), since the fused
    and multi-tensor updates cannot mix the two kinds. `fused`: one CUDA kernel for the whole
    update (else the for-each implementation, a few kernels per parameter group)."""
    from torch.distributed.tensor import DTensor

    kinds: dict = {}  # plain tensors, and DTensors per mesh (expert parallelism shards experts on its own)
    for p in model.parameters():
        if p.requires_grad:
            kinds.setdefault(id(p.device_mesh) if isinstance(p, DTensor) else None, []).append(p)
    impl = {"fused": True} if fused else {"foreach": True}
    return [torch.optim.AdamW(group, lr=lr, betas=ADAMW_BETAS, weight_decay=WEIGHT_DECAY, **impl)
            for group in kinds.values()]


def kernels_for(doc: PlanDocument, options: RunOptions) -> Kernels:
    """The model's kernel choices for this plan and these options. Under tensor parallelism the fused
    head + loss is vocabulary-parallel: a chunk's logits span this rank's V/tp rows, so the default
    chunk holds tp times the tokens for the same bytes."""
    local_vocab = -(-doc.model.vocab_size // doc.parallel.tp)
    return Kernels(native_gqa=options.uses("native-gqa"),
                   rope_in_compute_dtype=options.uses("rope-compute-dtype"),
                   grouped_experts=options.uses("grouped-experts"),
                   loss_chunk_tokens=(options.loss_chunk_tokens or auto_chunk_tokens(local_vocab))
                   if options.uses("chunked-loss") else 0)


class PlanRunner:
    """One plan's sharded model chunks, optimizers and (with pp > 1) pipeline schedule."""

    def __init__(self, doc: PlanDocument, options: RunOptions, device: torch.device):
        self.doc, self.options, self.device = doc, options, device
        plan, spec = doc.parallel, doc.model
        self.dims = ParallelDims.from_plan(plan, dist.get_world_size())
        self.mesh = self.dims.build_mesh(device.type)
        self.rank = {name: self.mesh[name].get_local_rank() for name in ("pp", "dp", "cp", "tp")}
        # Gradients are averaged over every rank that holds the same weights: dp replicas, and the
        # cp ranks, which saw different tokens of the same sequences.
        self.num_replicas = plan.dp * plan.cp
        self.replica_mesh = self.mesh["dp_cp"]
        self.fsdp_mesh = self.dims.fsdp_mesh(self.mesh)
        num_stages = plan.pp * plan.vpp
        self.stage_ids = stage_indices(self.rank["pp"], plan.pp, plan.vpp) if plan.pp > 1 else [0]
        self.is_last_stage = num_stages - 1 in self.stage_ids
        layer_counts = stage_layer_counts(plan, spec.num_layers)
        kernels = kernels_for(doc, options)
        self.models = [build_stage(spec, i, layer_counts, kernels) if plan.pp > 1 else build_model(spec, kernels=kernels)
                       for i in self.stage_ids]
        self.fsdp, bf16_copies = compute_mode(plan, spec, options.uses("bf16-params"))
        if self.fsdp and self.num_replicas == 1 and device.type != "cuda" and not options.fsdp_one_replica_on_cpu:
            self.fsdp = False  # one replica on a CPU: fp32, so FSDP2 would cast nothing (RunOptions says more)
        self.fp8_recipe = fp8.recipe_for(doc, options)
        self.fp8_all_gather = fp8.float8_all_gather(
            self.fp8_recipe, self.fsdp and plan.zero_stage > 0 and plan.dp * plan.cp > 1)
        self.fp8_linears = 0
        self.mp_policy = mixed_precision(device.type, doc.training.dtype, options.uses("bf16-params"))
        # ep > 1: experts sharded over an (edp, ep) mesh of the replicas (expert_parallel.py).
        self.expert_mesh = expert_parallel.build_expert_mesh(device.type, self.dims, plan.ep) \
            if plan.ep > 1 else None
        self._parallelize()
        self.expert_params = [p for m in self.models for p in expert_parallel.expert_params(m)] \
            if self.expert_mesh else []
        if plan.zero_stage == 0 and self.num_replicas > 1 and plan.tp == 1 and plan.pp == 1:
            from torch.nn.parallel import DistributedDataParallel
            if self.expert_mesh is not None:  # reduced over their own group (reduce_expert_grads)
                DistributedDataParallel._set_params_and_buffers_to_ignore_for_model(
                    self.models[0], expert_parallel.expert_param_names(self.models[0]))
            # broadcast_buffers=False: the only buffer is the RoPE table, which differs per cp rank.
            self.models = [DistributedDataParallel(self.models[0], process_group=self.replica_mesh.get_group(),
                                                   broadcast_buffers=False)]
        fused = device.type == "cuda" and options.uses("fused-adamw")
        self.optimizers = [_optimizers(m, options.lr, fused) for m in self.models]
        self.schedule = None
        if plan.pp > 1:
            self.schedule = build_schedule(self.models, self.stage_ids, num_stages, plan.num_microbatches,
                                           device, self.mesh["pp"].get_group())
        # Autocast only where parameters are not already bf16 copies (no FSDP2, or it disabled).
        bf16_everywhere = bf16_copies and self.mp_policy.param_dtype is not None
        self.autocast_dtype = {"bf16": torch.bfloat16, "fp8": torch.bfloat16}.get(doc.training.dtype) \
            if device.type == "cuda" and not bf16_everywhere else None

    def _parallelize(self) -> None:
        """fp8 -> TP -> recompute -> compile -> FSDP -> materialize, per chunk (torchtitan's order)."""
        plan = self.doc.parallel
        remaining_full = plan.recompute_num_layers
        for model in self.models:
            if self.fp8_recipe:  # emulated off CUDA: the same fp8 rounding, GEMMs in the compute dtype
                self.fp8_linears += fp8.convert(model, self.fp8_recipe, emulate=self.device.type != "cuda",
                                                all_gather=self.fp8_all_gather)
            if self.expert_mesh is not None:  # before TP: the experts kept are then split over tp
                expert_parallel.apply_ep(model, self.expert_mesh)
            if plan.tp > 1:
                apply_tp(model, self.mesh["tp"], plan.sequence_parallel,
                         self.expert_mesh["etp"] if self.expert_mesh is not None else None)
            if plan.cp > 1:
                apply_cp_attention(model, self.mesh["cp"].get_group(), self.doc.training.seq_len, plan.cp,
                                   self.rank["cp"])
            # Full recompute covers the first recompute_num_layers layers of the pipeline rank,
            # spread over its virtual chunks in execution order.
            apply_recompute(model, plan.recompute, min(remaining_full, len(model.layers)))
            remaining_full -= min(remaining_full, len(model.layers))
            # MoE blocks stay eager: their per-expert token counts change every step (recompiles).
            if self.options.compiles and not self.doc.model.is_moe:
                apply_compile(model)
            if plan.zero_stage > 0 and self.expert_mesh is not None:
                expert_parallel.apply_expert_fsdp(model, self.expert_mesh, plan.zero_stage, self.mp_policy)
            if self.fsdp:
                apply_fsdp(model, self.fsdp_mesh, plan.zero_stage, self.mp_policy)
            model.to_empty(device=self.device)
            model.init_weights(self.options.seed)
            if plan.cp > 1:
                localize_rope(model, self.doc.training.seq_len, plan.cp, self.rank["cp"])
            model.train()

    def describe(self) -> dict:
        """What this run computes how: the speed-ups in effect for this plan on this device."""
        kernels = self.models[0].kernels if hasattr(self.models[0], "kernels") else \
            self.models[0].module.kernels  # DDP wraps the model
        mp = self.mp_policy.param_dtype
        return {"compute_weights": f"FSDP2 {str(mp).removeprefix('torch.')} copies of fp32 master weights"
                if self.fsdp and mp is not None else "fp32 weights" + (" under bf16 autocast" if self.autocast_dtype
                                                                        else ""),
                "fsdp": self.fsdp, "autocast": str(self.autocast_dtype or "off").removeprefix("torch."),
                "compiled_blocks": self.options.compiles and not self.doc.model.is_moe,
                "native_gqa": kernels.native_gqa, "rope_in_compute_dtype": kernels.rope_in_compute_dtype,
                "loss_chunk_tokens": kernels.loss_chunk_tokens,
                "fp8": {"recipe": self.fp8_recipe, "linears": self.fp8_linears,
                        "float8_all_gather": self.fp8_all_gather, "emulated": self.device.type != "cuda"}
                if self.fp8_recipe else None,
                "adamw": "fused" if self.device.type == "cuda" and self.options.uses("fused-adamw") else "foreach",
                "weights_held_fraction": self.weights_held_fraction()}

    def weights_held_fraction(self) -> float:
        """This rank's share of its chunks' weights as stored (sharded DTensors count their local
        part): 1/(tp x the FSDP shard group) under FSDP and TP, what the memory model divides by."""
        from torch.distributed.tensor import DTensor

        params = [p for m in self.models for p in m.parameters()]
        local = sum(p.to_local().numel() if isinstance(p, DTensor) else p.numel() for p in params)
        return local / max(1, sum(p.numel() for p in params))

    # -- one optimizer step ------------------------------------------------------------------
    def load_batch(self, source, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        """This replica's slice of the step's global batch, on the device (outside the timing:
        the cost model predicts compute and communication, not the data pipeline)."""
        plan, training = self.doc.parallel, self.doc.training
        first, count = local_slice(training.global_batch_size, plan.dp, self.rank["dp"])
        inputs, labels = batch(source, step, first, count, training.seq_len)
        if plan.cp > 1:
            inputs, labels = (local_tokens(t, plan.cp, self.rank["cp"]) for t in (inputs, labels))
        return inputs.to(self.device), labels.to(self.device)

    def step(self, inputs: torch.Tensor, labels: torch.Tensor, step: int) -> float:
        plan = self.doc.parallel
        lr = self.lr = lr_at(step, self.options.lr, self.options.min_lr, self.options.warmup, self.options.steps)
        for opt in self._all_optimizers():
            opt.zero_grad(set_to_none=True)
            for group in opt.param_groups:
                group["lr"] = lr
        with torch.autocast(self.device.type, dtype=self.autocast_dtype, enabled=self.autocast_dtype is not None):
            loss = self._pipeline_step(inputs, labels) if self.schedule else self._local_step(inputs, labels)
        if plan.zero_stage == 0 and self.num_replicas > 1 and (plan.tp > 1 or plan.pp > 1):
            all_reduce_grads(self.models, self.replica_mesh.get_group(), skip=self.expert_params)
        if plan.zero_stage == 0 and self.expert_params:
            expert_parallel.reduce_expert_grads(self.expert_params, self.expert_mesh["edp"].get_group(),
                                                self.num_replicas)
        elif self.expert_params:  # FSDP2 summed them over edp (apply_expert_fsdp)
            expert_parallel.divide_expert_grads(self.expert_params, self.num_replicas)
        # Always measured (and recorded): unlike the loss under AdamW, it is sensitive to the scale
        # of the gradients, so the tests catch a missing average over replicas with it.
        grad_norm = self._clip_grad_norm(self.options.grad_clip)
        for opt in self._all_optimizers():
            opt.step()
        if self.fp8_all_gather:
            fp8.precompute_scales(self.models)
        mean_loss = self._global_loss(loss)  # the step's one wait for the device
        self.grad_norm = grad_norm.item()  # computed long before: no second wait
        return mean_loss

    def _all_optimizers(self) -> list:
        return [opt for chunk in self.optimizers for opt in chunk]

    def _local_step(self, inputs, labels) -> torch.Tensor:
        """Gradient accumulation over micro-batches; gradients synchronized on the last one only
        where that is what the ZeRO stage means (DDP always, FSDP for zero 1)."""
        plan, model = self.doc.parallel, self.models[0]
        total = torch.zeros((), device=self.device)
        chunks = list(zip(inputs.chunk(plan.num_microbatches), labels.chunk(plan.num_microbatches)))
        for i, (x, y) in enumerate(chunks):
            last = i == len(chunks) - 1
            self._set_grad_sync(model, last)
            loss = model(x, labels=y) / len(chunks)
            loss.backward()
            total += loss.detach()
        return total

    def _set_grad_sync(self, model, last: bool) -> None:
        plan = self.doc.parallel
        if hasattr(model, "require_backward_grad_sync"):  # DDP: the no_sync() flag
            model.require_backward_grad_sync = last
        elif self.fsdp:
            if plan.zero_stage <= 1 or self.num_replicas == 1:
                # ZeRO-1 (and one replica): gradients stay whole, accumulated in fp32, until the
                # last micro-batch, then one reduce-scatter (at one replica: a copy).
                model.set_requires_gradient_sync(last)
            if plan.zero_stage <= 2 or self.num_replicas == 1:
                # Parameters stay gathered (bf16 copies) across the step's micro-batches and are
                # freed after the last backward, so the optimizer's update reaches the next gather.
                model.set_reshard_after_backward(last)

    def _pipeline_step(self, inputs, labels) -> torch.Tensor:
        args = (inputs,) if 0 in self.stage_ids else ()
        losses: list = []
        kwargs = {"target": labels, "losses": losses} if self.is_last_stage else {}
        self.schedule.step(*args, labels=labels, **kwargs)
        if not self.is_last_stage:
            return torch.zeros((), device=self.device)
        return torch.stack([l.detach().float() for l in losses]).sum()  # each already divided by their count

    def _clip_grad_norm(self, max_norm: float) -> torch.Tensor:
        """Global L2 norm over every rank's gradients (DTensors grouped by mesh, plus plain tensors,
        then summed over pipeline ranks), and every gradient scaled by min(1, max_norm/norm) unless
        max_norm is 0. Returns the norm before clipping, on the device: the scale is applied there
        (torch.nn.utils.clip_grad_norm_'s rule), so the host queues the optimizer step without
        waiting for the backward to finish."""
        from torch.distributed.tensor import DTensor

        from torch.distributed.tensor import Replicate

        params = [p for m in self.models for p in m.parameters() if p.grad is not None]
        for p in params:
            # Replicated parameters fed by sequence-sharded activations (the norms under sequence
            # parallelism) get Partial gradients (one addend per TP rank); sum them before taking
            # the norm, since the norm of a sum is not the sum of the addends' norms.
            if isinstance(p.grad, DTensor) and any(pl.is_partial() for pl in p.grad.placements):
                p.grad = p.grad.redistribute(placements=[Replicate() if pl.is_partial() else pl
                                                         for pl in p.grad.placements])
        grads = [p.grad for p in params]
        experts = {id(p) for p in self.expert_params}
        squared = self._squared_norm([p.grad for p in params if id(p) in experts])
        if self.expert_mesh is not None:  # each ep rank holds other experts: add their parts
            dist.all_reduce(squared, group=self.expert_mesh["ep"].get_group())
        squared += self._squared_norm([p.grad for p in params if id(p) not in experts])
        if self.dims.pp > 1:
            dist.all_reduce(squared, group=self.mesh["pp"].get_group())
        total = squared.sqrt()
        if max_norm > 0 and grads:
            coef = torch.clamp(max_norm / (total + 1e-6), max=1.0)
            # One for-each multiply over the local tensors: a shard scales as its whole tensor does,
            # and a DTensor's own mul_ would pay DTensor's dispatch once per gradient (measured on
            # CPU: the clip took more host time than the plain loop's whole clip_grad_norm_).
            torch._foreach_mul_([g.to_local() if isinstance(g, DTensor) else g for g in grads], coef)
        return total

    def _squared_norm(self, grads: list) -> torch.Tensor:
        """Sum of squares of the full gradients (DTensors grouped by mesh)."""
        from torch.distributed.tensor import DTensor

        groups: dict = {}
        for g in grads:
            groups.setdefault(id(g.device_mesh) if isinstance(g, DTensor) else None, []).append(g)
        squared = torch.zeros((), device=self.device)
        for key, group in groups.items():
            norm = torch.nn.utils.get_total_norm(group, foreach=True)
            squared += (norm.full_tensor() if key is not None else norm).float() ** 2
        return squared

    def _global_loss(self, loss: torch.Tensor) -> float:
        """Mean loss over the global batch: summed from one rank per dp replica and cp shard (last
        stage, tp rank 0; equal token counts), divided by dp*cp."""
        owner = self.is_last_stage and self.rank["tp"] == 0
        value = (loss.detach().float() if owner else torch.zeros((), device=self.device)).reshape(1).clone()
        if dist.get_world_size() > 1:  # one rank: nothing to add (gloo would still hand it to a thread)
            dist.all_reduce(value)
        return value.item() / self.num_replicas

    def allocator_peaks(self) -> dict:
        """The caching allocator's reserved peak and fragmentation statistics (max over ranks) on a
        GPU; on a CPU an empty dict: its allocator reserves nothing beyond malloc (the record's peak
        is then the process's RSS high water)."""
        if self.device.type != "cuda":
            return {}
        stats = torch.cuda.memory_stats(self.device)
        local = {"peak_memory_reserved_bytes": torch.cuda.max_memory_reserved(self.device),
                 "allocator_inactive_split_peak_bytes": stats.get("inactive_split_bytes.all.peak", 0),
                 "allocator_num_alloc_retries": stats.get("num_alloc_retries", 0),
                 "allocator_num_ooms": stats.get("num_ooms", 0),
                 "allocator_segments_peak": stats.get("segment.all.peak", 0)}
        values = torch.tensor(list(local.values()), dtype=torch.int64, device=self.device)
        dist.all_reduce(values, op=dist.ReduceOp.MAX)
        return dict(zip(local, (int(v) for v in values.tolist())))

    def peak_memory_bytes(self) -> int:
        return self.max_over_ranks(
            torch.cuda.max_memory_allocated(self.device) if self.device.type == "cuda" else cpu_peak_rss_bytes())

    def max_over_ranks(self, local: int) -> int:
        value = torch.tensor([local], dtype=torch.int64, device=self.device)
        dist.all_reduce(value, op=dist.ReduceOp.MAX)
        return int(value.item())


_last_runner = None
"""A weak reference to the newest PlanRunner: dead once a finished or failed plan's model and
optimizer are really freed (`runner_released`)."""


def runner_released() -> bool:
    return _last_runner is None or _last_runner() is None


def train(doc: PlanDocument, options: RunOptions, device: torch.device) -> Measurement:
    """Run one plan for options.steps steps (fewer after a resume) and return its Measurement."""
    rank0 = dist.get_rank() == 0
    if rank0:
        for note in model_notes(doc.model):
            print(f"[autoplan run] note: {note}", flush=True)
    rss_baseline = (0, 0)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    else:
        reset_cpu_peak_rss()
        rss_baseline = cpu_rss_baseline()
    if options.compiles:
        # Each plan compiles afresh: the blocks of the plans before it (other shapes) would count
        # against dynamo's recompile limit and turn its shapes dynamic.
        torch._dynamo.reset()
    runner = PlanRunner(doc, options, device)
    global _last_runner
    _last_runner = weakref.ref(runner)
    source = open_tokens(options.data, options.data_dtype, options.seed, doc.model.vocab_size)
    # Each ep rank keeps other experts under the same names: its index keys them apart in checkpoints.
    ep_rank = runner.expert_mesh["ep"].get_local_rank() if runner.expert_mesh is not None else None
    start = checkpoint.load(options.checkpoint_dir, runner.models, runner.optimizers, runner.rank["pp"],
                            doc.plan_id, ep_rank) if options.resume else 0
    peak = datasheet_peak_flops_per_s(torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
                            doc.training.dtype)
    losses, step_times, grad_norms, learning_rates, waits = [], [], [], [], []
    for step in range(start, options.steps):
        inputs, labels = runner.load_batch(source, step)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        t0, wait0 = time.perf_counter(), cpu_wait_s()
        faults.maybe_oom(doc.plan_id, step, dist.get_rank())
        losses.append(runner.step(inputs, labels, step))  # its loss all-reduce ends the step on every rank
        grad_norms.append(runner.grad_norm)
        learning_rates.append(runner.lr)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        elapsed = time.perf_counter() - t0
        if step - start >= options.warmup_steps:
            step_times.append(elapsed)
            waits.append(None if wait0 is None else cpu_wait_s() - wait0)
        if rank0 and ((step + 1) % options.log_every == 0 or step + 1 == options.steps):
            tps = doc.training.tokens_per_step / elapsed
            util = mfu(doc.model, doc.training.seq_len, tps, doc.parallel.num_gpus, peak) if peak else None
            print(step_line(step + 1, options.steps, losses[-1], grad_norms[-1], runner.lr, elapsed, tps, util),
                  flush=True)
        if options.checkpoint_every and (step + 1) % options.checkpoint_every == 0:
            checkpoint.save(options.checkpoint_dir, step + 1, runner.models, runner.optimizers, runner.rank["pp"],
                            doc.plan_id, ep_rank)
    peak_memory = runner.peak_memory_bytes()
    env = environment(device.type, dist.get_world_size(), "torch")
    extra = {**run_extra(options, grad_norms, learning_rates, start,
                         "cuda_max_memory_allocated" if device.type == "cuda" else "cpu_rss_high_water",
                         model_notes(doc.model)),
             "pid": os.getpid(), "runtime": runner.describe(), **runner.allocator_peaks()}
    if device.type != "cuda":
        # the most of any rank, like the peak itself
        extra["cpu_rss_growth_bytes"] = runner.max_over_ranks(cpu_rss_growth_bytes(rss_baseline))
        share = wait_share(waits, step_times)
        if share is not None:  # the most contended rank decides whether the step time is comparable
            extra["cpu_wait_share"] = runner.max_over_ranks(round(share * PPM)) / PPM
    return build_measurement(doc, "torch", "ok", step_times_s=step_times, losses=losses,
                             peak_memory_bytes=peak_memory, env=env,
                             num_warmup_steps=min(options.warmup_steps, len(losses)), peak=peak, extra=extra)
