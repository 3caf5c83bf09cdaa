"""Megatron-Core 0.16.1's own data-parallel wrappers and optimizers on a gloo CPU rank, for the
model-state oracle (tests/state_oracle_ranks.py runs `run` once per case; tests/test_state_oracle.py
compares its counts with the cost model).

A case is what `autoplan export --to megatron` turns on for a ZeRO stage (autoplan/exporters/
megatron.py): DistributedDataParallel(DistributedDataParallelConfig(**case["ddp"])) around a tiny
GPTModel in Float16Module (bf16, as --bf16 does: grad_reduce_in_fp32 True), or Megatron-FSDP's
FullyShardedDataParallel when case["ddp"] has use_megatron_fsdp, then get_megatron_optimizer (Adam,
bf16, use_distributed_optimizer as the DDP config), MICRO_BATCHES micro-batches (all but the last
under no_sync, as Megatron-LM's forward_backward_no_pipelining runs them), finish_grad_sync and one step.

Where megatron-core 0.16.1 needs CUDA, and what is done instead (nothing here holds memory; every
buffer, shard and optimizer state is megatron-core's own, allocated by its own code):
1. Devices: "cuda" / cuda:N / a CUDA ordinal given to a factory function, .cuda() and .to("cuda")
   are answered on the CPU (a TorchFunctionMode), and torch.cuda.current_device() answers 0
   (param_and_grad_buffer.py:783-806, optimizer.py:473-485, megatron_fsdp.py:181-184).
2. Streams and events: torch.cuda.Stream/Event/current_stream/stream are no-ops; CPU kernels run in
   order (megatron_fsdp.py:361, fsdp param_and_grad_buffer.py:3205-3212).
3. Megatron-FSDP's DeviceMesh.from_group(device_type="cuda") (mcore_fsdp_adapter.py:249-276) is
   built with device_type "cpu", the gloo group's.
4. The type checks `model_param.type() in ['torch.cuda.HalfTensor', 'torch.cuda.BFloat16Tensor']`
   (distrib_optimizer.py:361 and 420, optimizer.py:671 and 690): a Parameter reports the CUDA name.
5. The CUDA RNG tracker's fork (tensor_parallel/random.py:243-248; dropout's random stream) is a
   no-op; model_parallel_cuda_manual_seed needs CUDA.
6. clip_grad=0 (Megatron-LM's --clip-grad 0): clip_grads.py:167 asserts torch.cuda.FloatTensor grads.
7. Megatron-FSDP with gradient_reduce_div_fusion=False: with it, gradients are reduced with NCCL's
   PREMUL_SUM (fsdp param_and_grad_buffer.py:3771-3772), which gloo refuses; without it they are
   scaled first and SUM-reduced (3773-3775), the same bytes.
"""
from __future__ import annotations

import contextlib

import torch
from torch.overrides import TorchFunctionMode

from tests.state_oracle_ranks import MICRO_BATCHES, count, optimizer_tensors

TINY = dict(num_layers=2, hidden_size=128, num_attention_heads=4, vocab_size=512, seq_len=32, micro_batch=2)
"""About 0.5 M parameters: the states per parameter dominate what else lives on the rank."""


def _is_cuda(device) -> bool:
    return isinstance(device, (str, torch.device)) and str(device).startswith("cuda")


class CudaOnCpu(TorchFunctionMode):
    """Stand-in 1 of the module docstring."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        if func is torch.Tensor.cuda:
            return args[0]
        device = kwargs.get("device")
        if _is_cuda(device) or type(device) is int:
            kwargs["device"] = "cpu"
        return func(*("cpu" if _is_cuda(a) else a for a in args), **kwargs)


class _CpuEvent:
    def __init__(self, *args, **kwargs):
        pass

    def record(self, *args, **kwargs):
        pass

    wait = synchronize = record

    def query(self) -> bool:
        return True


class _CpuStream(_CpuEvent):
    def record_event(self, *args, **kwargs):
        return _CpuEvent()

    wait_stream = wait_event = _CpuEvent.record


def _stand_ins() -> None:
    """Stand-ins 1-5 of the module docstring, for this whole process."""
    from megatron.core import tensor_parallel
    from megatron.core.distributed.fsdp import mcore_fsdp_adapter

    torch.cuda.current_device = lambda: 0
    torch.cuda.Stream, torch.cuda.Event = _CpuStream, _CpuEvent
    torch.cuda.current_stream = torch.cuda.default_stream = lambda *args, **kwargs: _CpuStream()
    torch.cuda.stream = lambda *args, **kwargs: contextlib.nullcontext()
    torch.cuda.synchronize = torch.cuda.empty_cache = lambda *args, **kwargs: None
    from_group = mcore_fsdp_adapter.DeviceMesh.from_group

    class CpuMesh:
        @staticmethod
        def from_group(*args, **kwargs):
            return from_group(*args, **{**kwargs, "device_type": "cpu"})

    mcore_fsdp_adapter.DeviceMesh = CpuMesh
    tensor_type = torch.Tensor.type

    def cuda_type_name(self, *args, **kwargs):
        if args or kwargs:
            return tensor_type(self, *args, **kwargs)
        return tensor_type(self).replace("torch.", "torch.cuda.", 1)

    torch.nn.Parameter.type = cuda_type_name
    tensor_parallel.get_cuda_rng_tracker().fork = lambda *args, **kwargs: contextlib.nullcontext()


def init_distributed() -> None:
    from megatron.core import parallel_state

    torch.distributed.init_process_group("gloo")
    _stand_ins()
    parallel_state.initialize_model_parallel(tensor_model_parallel_size=1, pipeline_model_parallel_size=1)


def _model(config):
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.transformer.module import Float16Module

    gpt = GPTModel(config=config, transformer_layer_spec=get_gpt_layer_local_spec(),
                   vocab_size=TINY["vocab_size"], max_sequence_length=TINY["seq_len"])
    return Float16Module(config, gpt)


def _wrap(config, ddp_kwargs: dict, model):
    from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig
    from megatron.core.distributed.fsdp.mcore_fsdp_adapter import FullyShardedDataParallel

    ddp_config = DistributedDataParallelConfig(**ddp_kwargs)
    if ddp_config.use_megatron_fsdp:
        ddp_config.gradient_reduce_div_fusion = False   # stand-in 7
        return FullyShardedDataParallel(config, ddp_config, model, device=torch.device("cpu"))
    return DistributedDataParallel(config, ddp_config, model)


def _inner_optimizers(optimizer) -> list:
    return [o.optimizer for o in getattr(optimizer, "chained_optimizers", [optimizer])]


def _buffers(wrapped) -> dict:
    """What holds the weights, the gradients and the fp32 masters, by megatron-core's own names:
    DDP's _ParamAndGradBuffer.param_data / grad_data (param_and_grad_buffer.py:797-808), Megatron-FSDP's
    parameter groups' model_weight_buffer / main_grad_buffer / main_weight_buffer (fsdp
    param_and_grad_buffer.py:1960-2037) with the temporary full-size buckets alive now (fetch_bucket,
    936-953). DDP's masters are the optimizer's own parameters (distrib_optimizer.py:399)."""
    if hasattr(wrapped, "param_and_grad_buffer"):
        held = {"params": [], "grads": [], "masters": [], "gathered": []}
        for group in wrapped.param_and_grad_buffer.parameter_groups:
            for name, buffer in (("params", group.model_weight_buffer), ("grads", group.main_grad_buffer),
                                 ("masters", group.main_weight_buffer)):
                if buffer is not None:
                    temporary = [b.data for b in buffer.temporary_bucket_allocator.buckets.values()]
                    held[name].append(buffer.data)
                    # gathered weights are communication buffers; gathered gradients, gradients
                    held["gathered" if name == "params" else name] += temporary
        return held
    buffers = wrapped.buffers + wrapped.expert_parallel_buffers
    return {"params": [b.param_data for b in buffers if b.param_data is not None] + list(wrapped.parameters()),
            "grads": [b.grad_data for b in buffers] + [p.grad for p in wrapped.parameters()], "masters": [],
            "gathered": []}


def run(case: dict, snap) -> dict:
    from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer
    from megatron.core.transformer.transformer_config import TransformerConfig

    torch.manual_seed(0)
    config = TransformerConfig(num_layers=TINY["num_layers"], hidden_size=TINY["hidden_size"],
                               num_attention_heads=TINY["num_attention_heads"], use_cpu_initialization=True,
                               bf16=True, params_dtype=torch.bfloat16, pipeline_dtype=torch.bfloat16,
                               gradient_accumulation_fusion=False, hidden_dropout=0.0, attention_dropout=0.0)
    with CudaOnCpu():
        model = _model(config)
        numel = sum(p.numel() for p in model.parameters())
        wrapped = _wrap(config, case["ddp"], model)
        optimizer = get_megatron_optimizer(
            OptimizerConfig(optimizer="adam", lr=1e-4, bf16=True, clip_grad=0.0,
                            use_distributed_optimizer=case["ddp"].get("use_distributed_optimizer", False)),
            [wrapped])
        optimizer.zero_grad()
        b, s = TINY["micro_batch"], TINY["seq_len"]
        for micro_batch in range(MICRO_BATCHES):
            tokens = torch.randint(0, TINY["vocab_size"], (b, s))
            position_ids = torch.arange(s).expand(b, -1)
            last = micro_batch == MICRO_BATCHES - 1
            with contextlib.nullcontext() if last else wrapped.no_sync():
                wrapped(tokens, position_ids, None, labels=tokens).float().mean().backward()
            snap.grads_held(_buffers(wrapped)["grads"])
        wrapped.finish_grad_sync()
        optimizer.step()
    held = _buffers(wrapped)
    optimizer_held = held["masters"] + [t for o in _inner_optimizers(optimizer) for t in optimizer_tensors(o)]
    return count(snap, numel, params=held["params"], optimizer=optimizer_held, buckets=held["gathered"])
