"""One rank of the model-state oracle (tests/test_state_oracle.py): a framework's own training code
builds a tiny model on this rank of a 2-process gloo job, takes one optimizer step over
MICRO_BATCHES micro-batches, and this script counts the bytes it holds per rank, by what holds them.

`python tests/state_oracle_ranks.py FRAMEWORK OUT_DIR CASES_JSON` (RANK, WORLD_SIZE, MASTER_ADDR,
MASTER_PORT set as torchrun would); FRAMEWORK is megatron, deepspeed or fsdp2 (the module
tests/state_oracle_<FRAMEWORK>.py runs a case); OUT_DIR/rank<r>.json gets one count per case:
{"case", "error": "" or the framework's complaint, "numel": the model's parameters (unsharded),
"bytes": {"params", "grads", "optimizer", "buckets", "other"}}.

How the bytes are counted: every tensor the Python heap holds (gc), grouped by storage so a view or a
flat buffer's parameters count once. "params" are the storages of the module's parameters (after the
framework wrapped them), "optimizer" those of the optimizer's own parameters (the fp32 masters where
they are not the module's) and state (Adam's moments, after the step), "buckets" the framework's
communication buffers the case names. "grads" is what is alive between micro-batches (the larger of
snapshots after each micro-batch's backward, the last one's before the step)
and was not before the model was built, less the above (the largest of the snapshots after each
micro-batch's backward), the gradient holders a case names at the
snapshot, or, where it names none, all of it. "other" is the rest of it where the case names its
gradient holders -- so a copy nobody planned shows up either way.
"""
from __future__ import annotations

import gc
import json
import os
import sys
import traceback
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.state_oracle_<framework>

MICRO_BATCHES = 3
"""Three, not two: FSDP2 with gradient sync off converts the previous micro-batch's gradient to its
fp32 accumulator only in the next backward (torch _fsdp_param.py to_accumulated_grad_if_needed), so
the steady state between micro-batches shows from the second on."""


def _local(t: torch.Tensor) -> torch.Tensor:
    """The plain tensor that holds this rank's data (a DTensor's local shard)."""
    return t._local_tensor if hasattr(t, "_local_tensor") else t


def _storage(t):
    """The non-empty storage behind a tensor, or None (a freed FSDP storage has size 0; meta and
    fake tensors, none)."""
    if not isinstance(t, torch.Tensor):
        return None
    t = _local(t)
    if t.is_meta or type(t).__name__ == "FakeTensor":
        return None
    try:
        s = t.untyped_storage()
    except (RuntimeError, NotImplementedError):
        return None
    return s if s.nbytes() else None


def storages(tensors) -> dict:
    """data pointer -> bytes of the distinct storages behind `tensors`."""
    out = {}
    for s in filter(None, map(_storage, tensors)):
        out[s.data_ptr()] = max(out.get(s.data_ptr(), 0), s.nbytes())
    return out


def live_storages() -> tuple:
    """(data pointer -> bytes, data pointer -> a weak reference to its storage) of every live tensor:
    the references tell a storage still alive at the end from one freed since, whose address a later
    allocation (Adam's moments, say) may have taken."""
    from torch.multiprocessing.reductions import StorageWeakRef

    gc.collect()
    live = list(filter(None, (_storage(o) for o in gc.get_objects() if isinstance(o, torch.Tensor))))
    sizes, refs = {}, {}
    for s in live:
        sizes[s.data_ptr()] = max(sizes.get(s.data_ptr(), 0), s.nbytes())
        refs.setdefault(s.data_ptr(), StorageWeakRef(s))
    return sizes, refs


class Snapshots:
    """The live storages at the points a case marks: "baseline" (before the model is built: kept
    alive so no later allocation reuses its addresses) and the gradient-accumulation points."""

    def __init__(self):
        self.baseline_tensors = [o for o in gc.get_objects() if isinstance(o, torch.Tensor)]
        self.baseline = storages(self.baseline_tensors)
        self.accumulating = []

    def grads_held(self, holders=None, buckets=()) -> None:
        """A snapshot between micro-batches; `holders`: the tensors the framework keeps the
        gradients in at this point, where the case can name them; `buckets`: its communication
        buffers alive at this point (some are released before the step ends)."""
        self.accumulating.append((*live_storages(), None if holders is None else storages(holders),
                                  storages(buckets)))


def count(snap: Snapshots, numel: int, params, optimizer, buckets=()) -> dict:
    """The case's bytes per rank by holder (module docstring)."""
    p, b = storages(params), storages(buckets)
    o = {k: v for k, v in storages(optimizer).items() if k not in p}
    named = {**snap.baseline, **p, **o, **b}
    grads, other, bucket_bytes = 0, 0, sum(b.values())
    for live, refs, holders, buckets_then in snap.accumulating:
        bucket_bytes = max(bucket_bytes, sum(buckets_then.values()))
        # named now and then the same storage: alive all along (the baseline's are kept alive)
        then_named = {k for k in live if k in named and (k in snap.baseline or not refs[k].expired())}
        rest = {k: v for k, v in live.items() if k not in then_named and k not in buckets_then}
        held = rest if holders is None else {k: v for k, v in holders.items() if k not in then_named}
        grads = max(grads, sum(held.values()))
        other = max(other, sum(v for k, v in rest.items() if k not in held))
    return {"numel": numel, "bytes": {"params": sum(p.values()), "grads": grads, "optimizer": sum(o.values()),
                                      "buckets": bucket_bytes, "other": other}}


def optimizer_tensors(optimizer) -> list:
    """A torch optimizer's parameters and state tensors (Adam's step counter is a 0-d tensor; kept,
    it is 4-8 bytes)."""
    out = [p for group in optimizer.param_groups for p in group["params"]]
    for state in optimizer.state.values():
        out += [v for v in state.values() if isinstance(v, torch.Tensor)]
    return out


def main(framework: str, out_dir: str, cases_path: str) -> None:
    import importlib

    module = importlib.import_module(f"tests.state_oracle_{framework}")
    module.init_distributed()
    rank = torch.distributed.get_rank()
    results = []
    for case in json.loads(Path(cases_path).read_text()):
        try:
            results.append({"case": case["label"], "error": "", **module.run(case, Snapshots())})
        except Exception as exc:  # the framework's complaint, whatever its type, is the result
            where = traceback.extract_tb(exc.__traceback__)[-1]
            place = f"{where.filename.split('site-packages/')[-1]} line {where.lineno}"
            results.append({"case": case["label"], "error": f"{type(exc).__name__}: {str(exc).strip()[:300]} ({place})"})
        gc.collect()
    Path(out_dir, f"rank{rank}.json").write_text(json.dumps(results))
    torch.distributed.barrier()
    torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main(*sys.argv[1:4])
    sys.stdout.flush()
    os._exit(0)   # the counts are on disk: skip native destructors at interpreter exit
