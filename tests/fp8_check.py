"""fp8 plans through the torch backend with torchao's float8 training, emulated on the CPU.

Run with the python of a venv that has torch and torchao (the side venv of `make torchtitan-0.3`:
torch 2.13.0+cpu, torchao 0.18.0), the repository on PYTHONPATH: `python tests/fp8_check.py`.
tests/test_fp8.py runs it in a subprocess, so torchao never meets the main venv's torch 2.9.0. The
last line printed is one JSON object:

- "runs": per plan, {"label", "status", "error", "losses", "grad_norms", "fp8"} from the executor's
  own records (`autoplan run`'s launcher, gloo): a single-process unquantized reference, fp8
  tensorwise and rowwise (the framework option `autoplan+fp8-rowwise`) on one process, and on two
  processes FSDP2 ZeRO-3 with the float8 all-gather and TP + SP, and the same two plans unquantized
  (the torch backend's parity on this venv's newer torch, tests/test_torch_backend.py's tolerances);
  and a MoE model (experts bf16, attention fp8): its unquantized and fp8 single-process runs, and fp8
  under expert parallelism with FSDP2 ZeRO-3 and under TP + SP;
- "saved": bytes autograd keeps per forward of one block (saved-tensor hooks, each storage once),
  split into activations and weight copies, for the block in bf16 and in fp8 (tensorwise, under
  FSDP2 with the float8 all-gather on a one-process group, so its gathered weights are what a
  sharded run keeps), with the block's fp8-linear parameter count; and the same for a MoE block
  ("moe_bf16", "moe_fp8").
"""
from __future__ import annotations

import json
import os
import sys
import tempfile

import torch

from autoplan.specs import ClusterSpec, ModelSpec, ParallelPlan, PlanDocument, TrainingSpec
from executor import RunOptions
from executor.torch_backend import run_many
from tests.memory_counting_ranks import from_parameter

MODEL = ModelSpec("tiny-llama", 2, 64, 4, 2, 128, 256, max_seq_len=64)
"""Every block linear 16-divisible (64, 32 for the grouped K/V, 128), so all 14 run in fp8."""
MOE = ModelSpec("tiny-moe", 2, 64, 4, 2, 128, 256, num_experts=4, num_experts_per_token=2, max_seq_len=64)
"""The same attention, a MoE MLP in every layer: its 8 attention linears run in fp8, the router and the
4 experts' grouped weights in the compute dtype (executor/fp8.py)."""
GLOBAL_BATCH, SEQ_LEN = 8, 32
OPTIONS = RunOptions(steps=4, warmup_steps=1, lr=1e-2, out="", log_every=100, loss_chunk_tokens=16,
                     fsdp_one_replica_on_cpu=True)  # the GPU's code path at dp*cp = 1, as before
SINGLE = [("reference", "bf16", "autoplan", {}), ("tensorwise", "fp8", "autoplan", {}),
          ("rowwise", "fp8", "autoplan+fp8-rowwise", {}),
          ("moe-reference", "bf16", "autoplan", {}, MOE), ("moe-tensorwise", "fp8", "autoplan", {}, MOE)]
"""One process, 8 micro-batches: on a CPU "bf16" runs fp32, the unquantized reference."""
PARALLEL = [("fsdp-float8-all-gather", "fp8", "autoplan", dict(dp=2, zero_stage=3)),
            ("tp-sp", "fp8", "autoplan", dict(tp=2, sequence_parallel=True)),
            ("fsdp-unquantized", "bf16", "autoplan", dict(dp=2, zero_stage=3)),
            ("tp-sp-unquantized", "bf16", "autoplan", dict(tp=2, sequence_parallel=True)),
            ("moe-ep-fsdp", "fp8", "autoplan", dict(dp=2, ep=2, zero_stage=3), MOE),
            ("moe-ep-fsdp-unquantized", "bf16", "autoplan", dict(dp=2, ep=2, zero_stage=1), MOE),
            ("moe-tp-sp", "fp8", "autoplan", dict(tp=2, sequence_parallel=True), MOE)]
"""Two processes, tensorwise (rowwise runs the same TP code; emulated it is ~10x slower per step)."""


def plan_doc(dtype: str, framework: str, parallel: dict, model: ModelSpec = MODEL) -> PlanDocument:
    plan = ParallelPlan(**parallel, num_microbatches=GLOBAL_BATCH // parallel.get("dp", 1))
    return PlanDocument(model=model, training=TrainingSpec(GLOBAL_BATCH, SEQ_LEN, dtype),
                        cluster=ClusterSpec("cpu", plan.num_gpus, gpus_per_node=8), parallel=plan,
                        framework=framework)


def runs() -> list:
    out = []
    for cases, nproc in ((SINGLE, 1), (PARALLEL, 2)):
        records = run_many([plan_doc(*case[1:]) for case in cases], OPTIONS.replace(nproc=nproc))
        out += [{"label": case[0], "status": r.status, "error": r.error[-2000:], "losses": r.losses,
                 "grad_norms": r.extra.get("grad_norms"), "fp8": r.extra.get("runtime", {}).get("fp8")}
                for case, r in zip(cases, records)]
    return out


def _block_saved(fp8: bool, model: ModelSpec = MODEL) -> dict:
    """One block's forward in bf16 under FSDP2 (one process): saved bytes that are weights (a
    parameter, its gathered copy or its cast) and the rest (activations)."""
    import torch.distributed as dist
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    from executor import fp8 as executor_fp8
    from executor.blocks import Kernels, TransformerBlock
    from executor.model import rope_cache

    block = TransformerBlock(model, 0, Kernels())
    linears = sum(m.weight.numel() for name, m in block.named_modules() if executor_fp8.is_fp8_linear(
        f"layers.0.{name}", m))
    if fp8:
        executor_fp8.convert(torch.nn.ModuleDict({"layers": torch.nn.ModuleDict({"0": block})}), "tensorwise",
                             emulate=True, all_gather=True)
    fully_shard(block, mesh=dist.device_mesh.init_device_mesh("cpu", (1,)),
                mp_policy=MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32))
    x = torch.randn(2, SEQ_LEN, model.hidden_size, dtype=torch.bfloat16, requires_grad=True)
    rope = rope_cache(model.rope_dim, model.max_seq_len).to(torch.bfloat16)
    seen, saved = {x.untyped_storage().data_ptr()}, {"weights": 0, "fp8_weights": 0, "activations": 0}

    def pack(t):
        # A Float8TrainingTensor (the fp8-gathered weight) holds its fp8 data and fp32 scale apart.
        parts = [t._data, t._scale] if hasattr(t, "_data") else [t]
        for part in parts:
            storage = part.untyped_storage()
            if storage.data_ptr() not in seen:
                seen.add(storage.data_ptr())
                kind = ("fp8_weights" if hasattr(t, "_data") else "weights") if from_parameter(t) else "activations"
                saved[kind] += storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        block(x, rope).float().sum().backward()
    return {**saved, "fp8_linear_params": linears}


def saved() -> dict:
    import torch.distributed as dist

    with tempfile.NamedTemporaryFile() as store:
        dist.init_process_group("gloo", init_method=f"file://{store.name}", rank=0, world_size=1)
        try:
            return {"bf16": _block_saved(False), "fp8": _block_saved(True),
                    "moe_bf16": _block_saved(False, MOE), "moe_fp8": _block_saved(True, MOE)}
        finally:
            dist.destroy_process_group()


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    result = {"runs": runs() if "--saved-only" not in sys.argv else [], "saved": saved()}
    print(json.dumps(result))
