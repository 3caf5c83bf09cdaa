"""The `xla` backend's contract: `check(doc, options)` refuses what it cannot run before anything
starts; `run(doc, options)` runs the plan in a torch_xla SPMD worker process and returns its
Measurement. `run_many` runs several plans in one worker (one runtime start, one process)."""
from __future__ import annotations

import collections
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from autoplan.specs import AutoplanError, Measurement, PlanDocument, get_framework, write_json_atomic
from executor.backend_common import check_framework
from executor.data import open_tokens
from executor.model import check_buildable
from executor.options import RunOptions
from executor.xla_backend.compiled import DUMP_DIR_ENV, dump_flags
from executor.parent_link import launcher_env

_STDERR_TAIL_LINES = 20
FRAMEWORK = "autoplan-xla"


def check(doc: PlanDocument, options: RunOptions) -> None:
    """Raise AutoplanError naming the plan feature (or option) this backend cannot run."""
    par = doc.parallel
    # Plans made for the torch executor are run here too when the XLA rules allow them.
    check_framework(doc, (FRAMEWORK, "autoplan"))
    par.check(doc.model, doc.training, doc.cluster, allow_tp_across_nodes=True)
    check_buildable(doc.model)
    if par.pp > 1:
        raise AutoplanError(
            f"pp={par.pp}: the xla backend runs a plan as one SPMD program and has no pipeline "
            f"schedule; run this plan with --backend torch, or pick a plan with pp=1")
    get_framework(FRAMEWORK).check(doc.model, doc.training, par)
    if options.device != "cpu":
        raise AutoplanError(
            f"--device {options.device}: the xla backend runs on XLA's CPU devices (torch_xla 2.9 from "
            f"PyPI ships no CUDA plugin); run GPU plans with --backend torch")
    if doc.training.seq_len > doc.model.max_seq_len:
        raise AutoplanError(f"seq_len={doc.training.seq_len} exceeds model {doc.model.name!r} "
                            f"max_seq_len={doc.model.max_seq_len}; plan a shorter sequence")
    open_tokens(options.data, options.data_dtype, options.seed, doc.model.vocab_size)  # missing file -> error
    if options.nproc not in (0, par.num_gpus):
        raise AutoplanError(
            f"--nproc {options.nproc}: the xla backend runs one process with one XLA device per GPU of "
            f"the plan ({par.num_gpus}); leave out --nproc")
    if options.checkpoint_dir or options.resume:
        raise AutoplanError("--checkpoint-dir/--resume: the xla backend does not save checkpoints; "
                            "use --backend torch for checkpointed runs")


def run(doc: PlanDocument, options: RunOptions) -> Measurement:
    return run_many([doc], options)[0]


def run_many(docs: list, options: RunOptions) -> list:
    """Run the plans one after another in one worker; they must use the same number of devices."""
    for doc in docs:
        check(doc, options)
    runs = [(doc, options) for doc in docs]
    counts = sorted({doc.parallel.num_gpus for doc in docs})
    if len(counts) != 1:
        raise AutoplanError(f"plans run together must use one device count, got {counts}; run them separately")
    env = dict(os.environ)
    # PJRT reads these when torch_xla starts: one virtual CPU device per GPU of the plan.
    env.update(PJRT_DEVICE="CPU", CPU_NUM_DEVICES=str(counts[0]))
    # XLA logs a GSPMD deprecation warning at every compilation; errors still show. A user who
    # wants XLA's warnings sets TF_CPP_MIN_LOG_LEVEL=0 (or 1) themselves.
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    env.update(launcher_env())  # the worker ends with this process, however it ends (executor/parent_link.py)
    with tempfile.TemporaryDirectory(prefix="autoplan-xla-") as tmp:
        request, result = Path(tmp) / "request.json", Path(tmp) / "result.json"
        env[DUMP_DIR_ENV] = str(Path(tmp) / "hlo")
        env["XLA_FLAGS"] = f"{env.get('XLA_FLAGS', '')} {dump_flags(env[DUMP_DIR_ENV])}".strip()
        write_json_atomic(request, {"runs": [{"plan": d.to_dict(), "options": o.to_dict()} for d, o in runs]})
        returncode, tail = _run_worker([str(request), str(result)], env)
        data = json.loads(result.read_text(encoding="utf-8")) if result.exists() else {}
    if "error" in data:
        raise AutoplanError(data["error"])
    if returncode != 0 or "measurements" not in data:
        reason = f"the xla worker exited with code {returncode}: {tail[-1] if tail else 'no output'}"
        return [_crashed(doc, options, reason) for doc, options in runs]
    return [Measurement.from_dict(m) for m in data["measurements"]]


def _run_worker(args: list, env: dict) -> tuple:
    """Run the worker, passing its stderr (progress lines) through and keeping the last lines."""
    tail = collections.deque(maxlen=_STDERR_TAIL_LINES)
    from executor.torch_backend.launch import stop_processes

    # Own session, as in the torch launcher: Ctrl-C reaches this process, which stops the worker.
    proc = subprocess.Popen([sys.executable, "-m", "executor.xla_backend.worker", *args], env=env,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        for line in proc.stderr:
            tail.append(line.rstrip())
            sys.stderr.write(line)
        proc.wait()
    except BaseException:
        stop_processes([proc])
        raise
    finally:
        proc.stderr.close()
    return proc.returncode, list(tail)


def _crashed(doc: PlanDocument, options: RunOptions, reason: str) -> Measurement:
    return Measurement(plan_id=doc.plan_id, plan=doc.to_dict(), prediction=dict(doc.prediction), backend="xla",
                       status="error", error=reason, environment={"backend": "xla"},
                       num_warmup_steps=options.warmup_steps, tokens_per_step=doc.training.tokens_per_step,
                       num_gpus=doc.cluster.num_gpus)
