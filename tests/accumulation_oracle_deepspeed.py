"""What DeepSpeed 0.19.8 reads and writes to accumulate gradients, counted on its own engine: one gloo CPU rank.

`python tests/accumulation_oracle_deepspeed.py CASE...` (each a key of tests/test_state_oracle.py's
DEEPSPEED_CASES without a pipeline, or "zero0 pipeline dp2": the pipeline engine over one stage), with
RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 MASTER_ADDR MASTER_PORT and DS_ACCELERATOR=cpu set, trains
TinyLM (tests/state_oracle_deepspeed.py) on the config autoplan exports for that case, two steps of
MICRO_BATCHES micro-batches, and prints as JSON, per case, the HBM bytes per parameter each micro-batch of the
second step spends on the gradient holders outside the weight-gradient GEMMs: every aten op that
writes into a parameter's .grad or into BF16_Optimizer's accumulator (an in-place add reads both
operands and writes one: 3 elements; a zero writes 1), and every cast read out of them (read 1,
write 1). The ops are seen with a TorchDispatchMode around each micro-batch's backward, the pipeline
engine's BackwardPass instruction included; the boundary micro-batch's reduction into buckets is
the data-parallel term's, not this one's (its copies go into bucket storage, not counted).
"""
from __future__ import annotations

import json
import os
import sys

import torch
from torch.utils._python_dispatch import TorchDispatchMode

MICRO_BATCHES = 3
_WRITES = {"aten.add_.Tensor": 3, "aten.zero_.default": 1, "aten._foreach_zero_.default": 1,
           "aten._foreach_add_.List": 3}
"""In-place ops on the gradient holders: elements moved per element of the mutated tensor."""
_CASTS = ("aten._to_copy.default",)
"""Casts read out of a holder: read it, write the output in its own dtype."""


class _Recorder(TorchDispatchMode):
    """The bytes of a micro-batch's backward on the gradient holders, each op resolved against the holders
    as it finds them (ZeRO's boundary hooks then move param.grad into a bucket: its storage changes)."""

    def __init__(self, engine):
        super().__init__()
        self.engine, self.bytes = engine, 0.0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = str(func)
        if name not in _WRITES and name not in _CASTS:
            return func(*args, **(kwargs or {}))
        holders = _holders(self.engine)
        tensors = args[0] if isinstance(args[0], (list, tuple)) else [args[0]]
        held = [t for t in tensors if isinstance(t, torch.Tensor) and _storage(t) in holders]
        out = func(*args, **(kwargs or {}))
        for t in held:
            if name in _WRITES:
                self.bytes += _WRITES[name] * t.numel() * t.element_size()
            else:  # a cast: read the holder, write the output
                self.bytes += t.numel() * t.element_size() + out.numel() * out.element_size()
        return out


def _storage(t: torch.Tensor) -> int:
    return t.untyped_storage().data_ptr()


def _holders(engine) -> set:
    grads = [p.grad for p in engine.module.parameters() if p.grad is not None]
    accumulators = list(getattr(engine.optimizer, "fp32_groups_gradients_flat", []))
    return {_storage(t) for t in grads + accumulators}


def _traced_backward(backward, engine, log):
    def traced(*args, **kwargs):
        with _Recorder(engine) as recorder:
            result = backward(*args, **kwargs)
        log.append(recorder.bytes)
        return result
    return traced


def _pipeline_engine(config: dict, log: list):
    import deepspeed
    from deepspeed.runtime.pipe import schedule
    from tests import state_oracle_deepspeed as o

    model, _ = o.pipeline_model(1)
    engine, *_ = deepspeed.initialize(model=model, optimizer=torch.optim.AdamW(model.parameters(), lr=1e-4),
                                      config=config)
    backward = engine._INSTRUCTION_MAP[schedule.BackwardPass]
    traced = _traced_backward(lambda *a, **k: backward(engine, **k), engine, log)
    engine._INSTRUCTION_MAP = {**engine._INSTRUCTION_MAP, schedule.BackwardPass: lambda self, **k: traced(**k)}

    def step():
        batches = [(t[:, :-1], t[:, 1:]) for t in (torch.randint(0, o.VOCAB, (2, 33)) for _ in range(MICRO_BATCHES))]
        engine.train_batch(iter(batches))
    return engine, step


def _plain_engine(config: dict, log: list):
    import deepspeed
    from tests import state_oracle_deepspeed as o

    model = o.TinyLM(vocab=o.VOCAB, hidden=o.HIDDEN)
    engine, *_ = deepspeed.initialize(model=model, optimizer=torch.optim.AdamW(model.parameters(), lr=1e-4),
                                      config=config)
    backward = _traced_backward(engine.backward, engine, log)

    def step():
        for _ in range(MICRO_BATCHES):
            backward(engine(torch.randint(0, o.VOCAB, (2, 33))))
            engine.step()
    return engine, step


def _measure(case: str) -> dict:
    from tests.test_state_oracle import DEEPSPEED_CASES

    torch.manual_seed(0)
    config = {**DEEPSPEED_CASES[case]["config"], "gradient_accumulation_steps": MICRO_BATCHES,
              "train_micro_batch_size_per_gpu": 2, "train_batch_size": 2 * MICRO_BATCHES}
    log: list = []
    engine, step = (_pipeline_engine if "pipeline" in case else _plain_engine)(config, log)
    step()
    log.clear()
    step()   # the second step: param.grad as the first step's optimizer left it
    numel = sum(p.numel() for p in engine.module.parameters())
    return {"optimizer": type(engine.optimizer).__name__, "bytes_per_param": [b / numel for b in log]}


def main(cases: list) -> None:
    from tests import state_oracle_deepspeed

    state_oracle_deepspeed.init_distributed()
    print(json.dumps({case: _measure(case) for case in cases}))


if __name__ == "__main__":
    sys.path.insert(0, os.getcwd())
    main(sys.argv[1:])
