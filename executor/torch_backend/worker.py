"""One training process. Started by the local launcher (`launch.py`) or by torchrun through
`python -m executor`; the rendezvous comes from the environment (RANK, WORLD_SIZE, MASTER_ADDR,
MASTER_PORT, LOCAL_RANK). Several plans of the same world size run one after another in the same
process group, which saves a launch per plan.

Results: with `--result PATH` (the local launcher) rank 0 writes the list of Measurement dicts to
PATH and a failing rank that stops writes its own failure record to PATH.rank<r>; without it
(torchrun) rank 0 appends to --out, and a failing rank appends its failure record itself.
"""
from __future__ import annotations

import argparse
import json
import os
import pickle
import sys
import traceback
import warnings

from autoplan.specs import AutoplanError, Measurement, PlanDocument, append_measurement, write_json_atomic

from executor.options import RunOptions
from executor.parent_link import die_with_launcher


def init_distributed(device_type: str):
    import torch
    import torch.distributed as dist

    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    if device_type == "cuda":
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
        dist.init_process_group("nccl", device_id=device)
    else:
        device = torch.device("cpu")
        dist.init_process_group("gloo")
    return device


def failure_record(doc: PlanDocument, exc: BaseException, options: RunOptions) -> Measurement:
    """The record of a plan that failed: its status, the error, and the options it ran with (which
    speed-ups were on decides which framework's facts describe it, autoplan.specs.compat)."""
    import torch

    from executor.record import build_measurement, environment

    status = "oom" if isinstance(exc, (torch.OutOfMemoryError, MemoryError)) else "error"
    message = " ".join(f"{type(exc).__name__}: {exc}".split())[:2000]
    world = int(os.environ.get("WORLD_SIZE", 1))
    return build_measurement(doc, "torch", status, step_times_s=[], losses=[], peak_memory_bytes=0,
                             env=environment(options.device, world, "torch"), num_warmup_steps=0, peak=0.0,
                             error=message, extra={"failed_rank": int(os.environ.get("RANK", 0)),
                                                   "pid": os.getpid(), "options": options.to_dict()})


def _release_memory(device_type: str) -> dict:
    """Free the finished (or failed) plan's model and optimizer before the next plan is built (its
    peak is measured anew); say whether they are gone and, on GPU, what is still allocated."""
    import gc

    import torch

    from executor.torch_backend.train import runner_released

    gc.collect()
    released = {"memory_released": runner_released()}
    if device_type == "cuda":
        torch.cuda.empty_cache()
        released["cuda_allocated_after_release_bytes"] = torch.cuda.memory_allocated()
    return released


def _can_continue(status: str, world_size: int) -> str:
    """"" when this process can go on with the next plan after a failed one, else why not."""
    if world_size > 1:
        return (f"the other {world_size - 1} rank(s) may be blocked in a collective with the failed one, so this "
                "process group cannot run another plan")
    if status != "oom":
        return "after an error other than out-of-memory the process state is not trusted"
    return ""


def run_plans(docs: list[PlanDocument], options: RunOptions, result_path: str | None = None) -> int:
    """Train the plans one after another. A plan that runs out of memory in a single-process run is
    recorded (status "oom"), its memory freed, and the next plan runs in the same process; any other
    failure, or one with several ranks, ends this process (the local launcher starts new processes
    for the remaining plans; under torchrun they are reported as not run)."""
    import torch
    import torch.distributed as dist

    from executor.torch_backend.train import train

    # DCP's filesystem writer calls the deprecated tensor.storage() on every tensor it saves.
    warnings.filterwarnings("ignore", message="TypedStorage is deprecated")
    if options.device == "cpu":
        torch.set_num_threads(omp_outer_threads(os.environ.get("OMP_NUM_THREADS", "")) or torch.get_num_threads())
    device = init_distributed(options.device)
    rank, world, records, code = dist.get_rank(), dist.get_world_size(), [], 0
    try:
        for index, doc in enumerate(docs):
            try:
                record = train(doc, options, device)
            except Exception as exc:  # an OOM or a crash is a record, not a lost run
                if isinstance(exc, AutoplanError):  # bad input found while running: its one line is enough
                    sys.stderr.write(f"rank {rank}: {exc}\n")
                else:
                    traceback.print_exc()
                record, code = failure_record(doc, exc, options), 1
            record.extra.update(_release_memory(options.device))
            why_not = _can_continue(record.status, world) if record.status != "ok" else ""
            if why_not:
                left = len(docs) - index - 1
                sys.stderr.write(f"rank {rank}: plan {doc.plan_id} failed ({record.status}); {why_not}"
                                 + (f"; {left} plan(s) after it are not run by this process\n" if left else "\n"))
                record.extra["stopped_because"] = why_not
                if result_path is not None:
                    write_json_atomic(f"{result_path}.rank{rank}", record.to_dict())
                elif options.out:
                    append_measurement(options.out, record)
                return 1
            records.append(record)
            if rank == 0 and result_path is not None:  # after every plan: a later crash keeps it
                write_json_atomic(result_path, [r.to_dict() for r in records])
            elif rank == 0 and options.out:
                append_measurement(options.out, record)
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
    return code


def omp_outer_threads(value: str) -> int | None:
    """The thread count OMP_NUM_THREADS gives the outermost parallel region: an integer, or a list of
    one per nesting level ("4,2", OpenMP 5.2 sec. 21.1.3) whose first entry is that count; None when it
    names none (unset, empty or not a positive integer), so torch keeps its own."""
    first = value.split(",")[0].strip()
    return int(first) if first.isdigit() and int(first) > 0 else None


def read_handed_plans(stream) -> list[PlanDocument]:
    """The plans the local launcher checked and handed over on stdin (launch.hand_plans): the same
    PlanDocument objects, not a file to read and validate again in every rank."""
    docs = pickle.load(stream)
    assert all(isinstance(doc, PlanDocument) for doc in docs), "the launcher hands PlanDocuments"
    return docs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="executor.torch_backend.worker",
                                     description="one rank of `autoplan run`; the plans come on stdin")
    parser.add_argument("--options-json", required=True, help="RunOptions as a JSON object")
    parser.add_argument("--result", default=None, help="where rank 0 writes the Measurement list")
    args = parser.parse_args(argv)
    die_with_launcher()
    options = RunOptions(**json.loads(args.options_json))
    return run_plans(read_handed_plans(sys.stdin.buffer), options, args.result)


if __name__ == "__main__":
    sys.exit(main())
