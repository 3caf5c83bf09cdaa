"""DeepSpeed 0.19.8's engine on a gloo CPU rank, for the model-state oracle (tests/state_oracle_ranks.py
runs `run` once per case; tests/test_state_oracle.py compares its counts with the cost model).

A case's "config" is what `autoplan export --to deepspeed` writes for the plan (its ZeRO stage, bf16),
run as tests/deepspeed_engine_check.py runs it: deepspeed.initialize with the training script's
AdamW, forward, engine.backward and engine.step per micro-batch, MICRO_BATCHES of them. A case with
"moe" trains TinyMoE (DeepSpeed's own MoE layer) with the optimizer groups DeepSpeed asks for
(split_params_into_different_moe_groups_for_optimizer); one with "pipeline", a PipelineModule. DeepSpeed's CPU
accelerator (DS_ACCELERATOR=cpu) allocates on the CPU with the same code paths; nothing is stood in
for. The gradient holders are not named (DeepSpeed keeps them in several places: param.grad, the
BF16_Optimizer's fp32_groups_gradients_flat, ZeRO's averaged_gradients and ipg buckets, ZeRO-3's
partitioned grad buffers), so "grads" is everything alive between micro-batches that is neither a
weight nor optimizer state.
"""
from __future__ import annotations

import torch

from tests.deepspeed_engine_check import TinyLM
from tests.state_oracle_ranks import MICRO_BATCHES, count, optimizer_tensors

VOCAB, HIDDEN = 1024, 160
"""About 0.53 M parameters (TinyLM's embedding, MLP and untied head), every matrix above ZeRO-3's
stage3_param_persistence_threshold (1e5 elements by default: smaller parameters stay whole on every
rank, deepspeed/runtime/zero/config.py), as a real model's matrices are; only the biases stay whole."""


def init_distributed() -> None:
    import deepspeed
    import deepspeed.ops

    # As tests/deepspeed_engine_check.py main() does: never build or start the shm all-reduce op.
    deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False
    deepspeed.init_distributed(dist_backend="gloo")


def _weights(engine) -> list:
    """The module's weights as the rank holds them: ZeRO-3's partition (param.ds_tensor) where the
    parameter's own data is released between uses."""
    return [getattr(p, "ds_tensor", p) for p in engine.module.parameters()]


def _buckets(engine) -> list:
    """ZeRO's reduce buckets: reduce_bucket_size elements each, two under overlap_comm
    (stage_1_and_2.py:3260-3277, stage3.py:779-784): communication buffers, not model states. With
    ZeRO on, a parameter's own .grad still alive is a gradient waiting in such a bucket for its
    reduce-scatter into the partition (ZeRO-3 frees it after the reduce, stage3.py
    __add_grad_to_ipg_bucket), bounded by the bucket size, not the model: counted here too. Without
    ZeRO, and at ZeRO-1, .grad is where the micro-batches accumulate: ZeRO-1 does not partition gradients
    and reduces only at the accumulation boundary (stage_1_and_2.py reduce_ready_partitions_and_remove_grads,
    line 2294: partition_gradients or is_gradient_accumulation_boundary)."""
    optimizer = engine.optimizer   # not BF16_Optimizer (no ipg_buckets), whose .grad is the micro-batch's
    waiting = hasattr(optimizer, "ipg_buckets") and getattr(optimizer, "partition_gradients", True)
    out = [p.grad for p in engine.module.parameters() if p.grad is not None] if waiting else []
    for bucket in getattr(engine.optimizer, "ipg_buckets", {}).values():
        out += bucket.buffer if isinstance(bucket.buffer, list) else [bucket.buffer]
    return out


class _Embed(torch.nn.Embedding):
    def forward(self, tokens):
        return super().forward(tokens)


class _Residual(torch.nn.Module):
    """TinyLM's MLP block with its residual, as one pipeline layer."""

    def __init__(self):
        super().__init__()
        self.mlp = torch.nn.Sequential(torch.nn.Linear(HIDDEN, 4 * HIDDEN), torch.nn.GELU(),
                                       torch.nn.Linear(4 * HIDDEN, HIDDEN))

    def forward(self, x):
        return x + self.mlp(x)


def _loss(logits, labels):
    return torch.nn.functional.cross_entropy(logits.float().flatten(0, 1), labels.flatten())


def pipeline_model(stages: int) -> tuple:
    """(the tiny LM as a DeepSpeed PipelineModule over `stages` stages, its parameter count over every
    stage): embedding, a residual block, the head, and the loss its pipeline engine calls."""
    from deepspeed.pipe import PipelineModule

    layers = [_Embed(VOCAB, HIDDEN), _Residual(), torch.nn.Linear(HIDDEN, VOCAB, bias=False)]
    numel = sum(p.numel() for layer in layers for p in layer.parameters())
    return PipelineModule(layers=layers, num_stages=stages, loss_fn=_loss, partition_method="uniform"), numel


def _snapshot_after_each_backward(engine, snap) -> None:
    """Observe the pipeline engine's schedule: after each BackwardPass instruction it runs (its
    _INSTRUCTION_MAP, pipe/engine.py line 1386, shadowed on this engine only), a snapshot of
    BF16_Optimizer's gradient holders, named: param.grad and fp32_groups_gradients_flat (the micro-batch's
    fp32 logits the engine keeps would read as gradients on a tiny model)."""
    from deepspeed.runtime.pipe import schedule

    backward = engine._INSTRUCTION_MAP[schedule.BackwardPass]

    def backward_then_snapshot(self, **kwargs):
        backward(self, **kwargs)
        lp = [p.grad for p in self.module.parameters() if p.grad is not None]
        snap.grads_held(holders=lp + list(self.optimizer.fp32_groups_gradients_flat))

    engine._INSTRUCTION_MAP = {**engine._INSTRUCTION_MAP, schedule.BackwardPass: backward_then_snapshot}


def run_pipeline(case: dict, snap) -> dict:
    """TinyLM's layers as a PipelineModule of case["stages"] stages (2: pp = 2, dp = 1; 1: the pipeline
    engine over dp = 2) under DeepSpeed's pipeline engine, one train_batch of MICRO_BATCHES
    micro-batches: which optimizer the engine picks for the exported config, and what it holds after
    each backward instruction of its schedule at one stage (between micro-batches, as the other cases
    snapshot: after the step BF16_Optimizer has freed param.grad, zero_grad(set_to_none=True)), after the
    step at two (its gradients are not compared: the micro-batches in flight between stages hold
    activation buffers as large as a tiny model's gradients)."""
    import deepspeed

    torch.manual_seed(0)
    stages = case["stages"]
    model, numel = pipeline_model(stages)
    dp = torch.distributed.get_world_size() // stages
    config = {**case["config"], "gradient_accumulation_steps": MICRO_BATCHES, "train_micro_batch_size_per_gpu": 2,
              "train_batch_size": 2 * MICRO_BATCHES * dp}
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    engine, *_ = deepspeed.initialize(model=model, optimizer=optimizer, config=config)
    if stages == 1:
        _snapshot_after_each_backward(engine, snap)
    batches = [(t[:, :-1], t[:, 1:]) for t in (torch.randint(0, VOCAB, (2, 33)) for _ in range(MICRO_BATCHES))]
    engine.train_batch(iter(batches))
    if stages > 1:
        snap.grads_held()
    inner = engine.optimizer.optimizer if hasattr(engine.optimizer, "optimizer") else engine.optimizer
    # numel: the whole model's; this rank holds one stage of it
    stage_numel = sum(p.numel() for p in engine.module.parameters())
    result = count(snap, stage_numel, params=_weights(engine), optimizer=optimizer_tensors(inner))
    result.update(optimizer_class=type(engine.optimizer).__name__, model_numel=numel)
    return result


class TinyMoE(torch.nn.Module):
    """TinyLM with its MLP replaced by DeepSpeed's own MoE layer (deepspeed/moe/layer.py): `experts`
    copies of the MLP, top-1 routing, expert parallel over `ep` ranks."""

    def __init__(self, experts: int, ep: int):
        from deepspeed.moe.layer import MoE

        super().__init__()
        self.embed = torch.nn.Embedding(VOCAB, HIDDEN)
        mlp = torch.nn.Sequential(torch.nn.Linear(HIDDEN, 4 * HIDDEN), torch.nn.GELU(),
                                  torch.nn.Linear(4 * HIDDEN, HIDDEN))
        self.moe = MoE(HIDDEN, mlp, num_experts=experts, ep_size=ep, k=1, capacity_factor=4.0)
        self.head = torch.nn.Linear(HIDDEN, VOCAB, bias=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens[:, :-1])
        y, aux_loss, _ = self.moe(x)
        logits = self.head(x + y).float()
        return torch.nn.functional.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten()) + 0.0 * aux_loss


def run(case: dict, snap) -> dict:
    import deepspeed

    if case.get("pipeline"):
        return run_pipeline(case, snap)

    torch.manual_seed(0)
    model = TinyMoE(**case["moe"]) if case.get("moe") else TinyLM(vocab=VOCAB, hidden=HIDDEN)
    numel = sum(p.numel() for p in model.parameters())
    params = model.parameters()
    if case.get("moe"):
        from deepspeed.moe.utils import split_params_into_different_moe_groups_for_optimizer

        params = split_params_into_different_moe_groups_for_optimizer({"params": list(params), "name": "all"})
    optimizer = torch.optim.AdamW(params, lr=1e-4)
    config = {**case["config"], "gradient_accumulation_steps": MICRO_BATCHES, "train_micro_batch_size_per_gpu": 2}
    config["train_batch_size"] = 2 * MICRO_BATCHES * torch.distributed.get_world_size()
    engine, *_ = deepspeed.initialize(model=model, optimizer=optimizer, config=config)
    for _ in range(engine.gradient_accumulation_steps()):
        tokens = torch.randint(0, VOCAB, (engine.train_micro_batch_size_per_gpu(), 33))
        engine.backward(engine(tokens))
        grads = [p.grad for p in engine.module.parameters()]   # gives autograd's .grad a Python object
        snap.grads_held(buckets=_buckets(engine))              # (the walk sees only those)
        del grads
        engine.step()
    inner = engine.optimizer.optimizer if hasattr(engine.optimizer, "optimizer") else engine.optimizer
    # ZeRO-3's fp32 master partitions (stage3.py:1118-1151) are the optimizer's parameters only during
    # its step: named here.
    masters = list(getattr(engine.optimizer, "fp32_partitioned_groups_flat", []))
    result = count(snap, numel, params=_weights(engine), optimizer=masters + optimizer_tensors(inner),
                   buckets=_buckets(engine))
    result.update(stage=engine.zero_optimization_stage(), optimizer_class=type(engine.optimizer).__name__)
    engine.destroy()
    return result
