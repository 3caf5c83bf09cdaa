"""Run `autoplan export --to deepspeed` configs through DeepSpeed's own engine: one rank of a gloo job.

`python tests/deepspeed_engine_check.py CONFIGS.json OUT.json`, started once per rank with RANK,
WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT and DS_ACCELERATOR=cpu set (what torchrun would
set; DeepSpeed's CPU accelerator talks gloo when oneccl_bindings_for_pytorch is absent, and runs on
torch's CPU kernels, bf16 and fp16 included). CONFIGS.json is a list of {"label", "config"}; for
each, in one process group: deepspeed.initialize with a tiny language model and a client AdamW (the
export leaves the optimizer to the training script), then one optimizer step: as many micro-batches
of forward, engine.backward and engine.step as the config's gradient_accumulation_steps. OUT.json
gets one verdict per config: {"label", "error": "" or DeepSpeed's complaint, "stage": the engine's
zero_optimization_stage(), "loss": the last micro-batch's loss, "global_steps", "train_batch_size",
"gradient_accumulation_steps", "dtype": the engine's parameter dtype}.
"""
from __future__ import annotations

import json
import math
import os
import sys
import traceback

import torch


class TinyLM(torch.nn.Module):
    """Embedding, one MLP block and an untied head: every kind of parameter ZeRO partitions."""

    def __init__(self, vocab: int = 64, hidden: int = 32):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, hidden)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(hidden, 4 * hidden), torch.nn.GELU(),
                                       torch.nn.Linear(4 * hidden, hidden))
        self.head = torch.nn.Linear(hidden, vocab, bias=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens[:, :-1])
        logits = self.head(x + self.mlp(x)).float()
        return torch.nn.functional.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten())


def one_step(config: dict) -> dict:
    import deepspeed

    torch.manual_seed(0)
    model = TinyLM()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    engine, *_ = deepspeed.initialize(model=model, optimizer=optimizer, config=config)
    loss = None
    for _ in range(engine.gradient_accumulation_steps()):
        tokens = torch.randint(0, 64, (engine.train_micro_batch_size_per_gpu(), 17))
        loss = engine(tokens)
        engine.backward(loss)
        engine.step()
    verdict = {"error": "", "stage": engine.zero_optimization_stage(), "loss": loss.item(),
               "global_steps": engine.global_steps, "train_batch_size": engine.train_batch_size(),
               "gradient_accumulation_steps": engine.gradient_accumulation_steps(),
               "dtype": str(next(engine.module.parameters()).dtype).replace("torch.", "")}
    engine.destroy()
    return verdict


def main(configs_path: str, out_path: str) -> None:
    import deepspeed
    import deepspeed.ops

    # DeepSpeed's TorchBackend JIT-compiles its shared-memory all-reduce op (deepspeed_shm_comm) in every
    # rank whenever its builder reports compatible (0.19.8 comm/torch.py build_shm_op), then starts it.
    # Training never calls it (only inference_all_reduce does; all_reduce is torch.distributed's), but the
    # compile takes minutes per fresh venv on 2 cores, and on a CPU without avx512bw its kernels fault
    # and the peer ranks wait on its shm flags (the CI hang and the SIGABRT on AMD EPYC). Marking the op
    # incompatible, through the table DeepSpeed itself consults, leaves the engine on gloo as it trains.
    deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False
    deepspeed.init_distributed(dist_backend="gloo")
    verdicts = []
    for item in json.loads(open(configs_path).read()):
        try:
            verdict = one_step(item["config"])
        except Exception as exc:  # DeepSpeed's complaint, whatever its type, is the verdict
            where = traceback.extract_tb(exc.__traceback__)[-1]
            verdict = {"error": f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''} "
                                f"({where.filename.split('site-packages/')[-1]} line {where.lineno})"}
        if verdict.get("loss") is not None and not math.isfinite(verdict["loss"]):
            verdict["loss"] = str(verdict["loss"])  # JSON has no inf/nan
        verdicts.append({"label": item["label"], **verdict})
    with open(out_path, "w") as f:
        json.dump(verdicts, f)
    # Leave together and tear the groups down before the interpreter does: about 1 run in 40 on a 2-core
    # AMD EPYC, a rank aborted with "terminate called without an active exception" (SIGABRT) when the
    # gloo/shm groups were left to interpreter shutdown.
    torch.distributed.barrier()
    torch.distributed.destroy_process_group()


if __name__ == "__main__":
    import faulthandler

    faulthandler.enable()   # a native abort prints where Python was
    main(sys.argv[1], sys.argv[2])
    sys.stdout.flush()
    os._exit(0)             # the verdicts are on disk: skip native destructors at interpreter exit
