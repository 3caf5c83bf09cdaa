"""Local launch: spawn one worker process per rank on this machine (gloo on CPU, nccl on GPUs)
and collect their Measurements. Clusters use torchrun with `python -m executor` instead."""
from __future__ import annotations

import json
import os
import pickle
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from autoplan.specs import AutoplanError, Measurement, PlanDocument, is_stdout

from executor.backend_common import RunInterrupted
from executor.options import RunOptions
from executor.parent_link import launcher_env

GRACE_S = 10.0
"""How long the other ranks get to notice a failed rank (collectives time out) before we end them."""


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


ALLOC_CONF = "PYTORCH_CUDA_ALLOC_CONF"
EXPANDABLE_SEGMENTS = "expandable_segments:True"
"""The CUDA caching allocator maps memory in growable segments instead of fixed blocks, so freed
memory of one size can serve a later request of another (PyTorch "CUDA memory management" notes).
Measured on the H100 (../shared/data/h100_runs): Llama-3.2-1B in micro-batches of 8 OOMs with the
default allocator and runs with expandable segments."""


def allocator_env(options: RunOptions, environ) -> dict:
    """The PYTORCH_CUDA_ALLOC_CONF to add to `environ` before CUDA starts: expandable segments on
    CUDA unless turned off or the user set the variable (their setting wins)."""
    if options.device != "cuda" or not options.uses("expandable-segments") or ALLOC_CONF in environ:
        return {}
    return {ALLOC_CONF: EXPANDABLE_SEGMENTS}


def worker_env(rank: int, nproc: int, port: int, options: RunOptions) -> dict:
    env = dict(os.environ)
    env.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(nproc), LOCAL_WORLD_SIZE=str(nproc),
               MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), **allocator_env(options, os.environ),
               **launcher_env())  # the rank ends with this process, however it ends (executor/parent_link.py)
    # One thread per rank: tiny CPU correctness runs are several times slower with more (measured:
    # 35 ms vs 2-3.7 s per step of a 4-layer model on a loaded 2-core machine), and GPU ranks need none.
    env.setdefault("OMP_NUM_THREADS", "1")
    return env


def _forward(stream, sink) -> None:
    """Pass a worker's output through, minus gloo's line per connected peer per process group,
    which no log level turns off and which would bury the progress lines."""
    for line in stream:
        if "[Gloo] Rank" not in line:
            sink.write(line)
            sink.flush()


def stop_processes(procs: list, grace_s: float = GRACE_S) -> None:
    """Terminate every process still running, wait up to `grace_s`, then kill what is left."""
    for p in procs:
        if p.poll() is None:
            p.terminate()
    deadline = time.monotonic() + grace_s
    for p in procs:
        try:
            p.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def wait_for_ranks(procs: list[subprocess.Popen]) -> list[int]:
    """Wait for every rank; once one fails, give the rest GRACE_S and then terminate them."""
    failed_at = None
    while any(p.poll() is None for p in procs):
        if failed_at is None and any(p.returncode not in (None, 0) for p in procs):
            failed_at = time.monotonic()
        if failed_at is not None and time.monotonic() - failed_at > GRACE_S:
            for p in procs:
                if p.poll() is None:
                    p.terminate()
        time.sleep(0.05)
    return [p.returncode for p in procs]


def launch(docs: list[PlanDocument], options: RunOptions, nproc: int) -> list[Measurement]:
    """Run the plans one after another in groups of `nproc` local processes; one Measurement per
    plan. When a plan fails in a way its processes cannot continue from (several ranks, or an error
    other than out-of-memory: `worker.run_plans`), its failure is recorded and new processes run
    the plans after it."""
    records: list[Measurement] = []
    while len(records) < len(docs):
        remaining = docs[len(records):]
        try:
            batch = _launch_once(remaining, options, nproc)
        except RunInterrupted as exc:
            exc.records[:0] = records  # the earlier launches' plans finished too
            raise
        except AutoplanError:
            if not records:
                raise
            break  # the new processes recorded nothing; keep what the earlier ones did
        records.extend(batch)
        if len(batch) < len(remaining) and batch and batch[-1].status != "ok":
            left = len(remaining) - len(batch)
            sys.stderr.write(f"[autoplan run] plan {batch[-1].plan_id} failed ({batch[-1].status}) and its "
                             f"{nproc} process(es) stopped: {batch[-1].extra.get('stopped_because', 'see above')}; "
                             f"starting new processes for the {left} plan(s) after it\n")
            continue
        if len(batch) < len(remaining):  # a launch that ended without a record of its failure
            break
    return records


def _failure_order(path: Path) -> tuple:
    """Which rank's failure record tells what happened: an out-of-memory first (the other ranks'
    records then say only that a peer went away), else the earliest written."""
    status = json.loads(path.read_text(encoding="utf-8")).get("status")
    return status != "oom", path.stat().st_mtime


def _finished(result: Path) -> list[Measurement]:
    """The records rank 0 wrote to `result` (after each plan it finished); [] before the first."""
    if not result.is_file():
        return []
    return [Measurement.from_dict(d) for d in json.loads(result.read_text(encoding="utf-8"))]


def hand_plans(proc: subprocess.Popen, handed: bytes) -> None:
    """Give a rank the plans `autoplan run` read and checked, pickled on its stdin (worker.
    read_handed_plans): each rank starts from the validated PlanDocuments instead of reading a
    temporary plan file and validating it again. Pickle is safe here: this process wrote the bytes
    to a child it started, nothing else can reach that pipe."""
    proc.stdin.buffer.write(handed)
    proc.stdin.close()


def _launch_once(docs: list[PlanDocument], options: RunOptions, nproc: int) -> list[Measurement]:
    """One group of processes over `docs`: the records of the plans it ran, ending with the failure
    record of the plan that stopped it, if one did."""
    with tempfile.TemporaryDirectory(prefix="autoplan-run-") as tmp:
        result = Path(tmp) / "result.json"
        port = free_port()
        cmd = [sys.executable, "-m", "executor.torch_backend.worker", "--options-json",
               json.dumps(options.to_dict()), "--result", str(result)]
        procs, handed = [], pickle.dumps(list(docs))
        try:
            # Own session: a Ctrl-C in the terminal reaches this process only, which stops the
            # workers itself (no traceback from each rank, none left behind).
            for rank in range(nproc):
                procs.append(subprocess.Popen(cmd, env=worker_env(rank, nproc, port, options), stdout=subprocess.PIPE,
                                              stderr=subprocess.PIPE, stdin=subprocess.PIPE, text=True,
                                              start_new_session=True))
                hand_plans(procs[-1], handed)
            # The workers' step lines go to stderr when the records themselves are on stdout (-o -).
            out = sys.stderr if is_stdout(options.out) else sys.stdout
            forwarders = [threading.Thread(target=_forward, args=(stream, sink), daemon=True)
                          for p in procs for stream, sink in ((p.stdout, out), (p.stderr, sys.stderr))]
            for thread in forwarders:
                thread.start()
            codes = wait_for_ranks(procs)
            for thread in forwarders:
                thread.join(timeout=5)
        except BaseException as exc:
            stop_processes(procs)
            if isinstance(exc, KeyboardInterrupt) and not isinstance(exc, RunInterrupted):
                # rank 0 wrote the finished plans' records before the signal: hand them on
                raise RunInterrupted(_finished(result)) from None
            raise
        records = _finished(result)
        failures = sorted(Path(tmp).glob("result.json.rank*"), key=_failure_order)
        if failures:
            records.append(Measurement.from_dict(json.loads(failures[0].read_text(encoding="utf-8"))))
        if not records:
            raise AutoplanError(f"the {nproc} worker processes exited with codes {codes} and recorded nothing; "
                                "see their output above")
        return records
