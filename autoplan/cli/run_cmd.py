"""`autoplan run PLAN.json [PLAN2.json ...]`: train with a plan and record what was measured.

Checks every plan against the backend before anything starts (a plan for 128 GPUs on 4 local
processes, a missing data file or an unknown backend is one line and exit code 2), then runs the
plans in one launch and appends one Measurement per plan to -o/--output. Torch and the executor are
imported inside `run` only.
"""
from __future__ import annotations

import sys
from pathlib import Path


def register(subparsers) -> None:
    from executor.options import add_run_arguments

    parser = subparsers.add_parser(
        "run", help="train with a plan file and record the measurement",
        description="Train with one or more plan files (schema autoplan.plan/v1) and append one "
                    "measurement per plan to -o/--output. Plans with the same GPU count share one launch.")
    parser.add_argument("plans", nargs="+", metavar="PLAN", help="plan file(s) from `autoplan search -o`")
    add_run_arguments(parser)
    parser.add_argument("--print-launch", choices=("torchrun", "slurm"), metavar="torchrun|slurm",
                        help="print a bash script that runs the plan on its cluster (torchrun on every node, or "
                             "an sbatch job) instead of running it here")
    parser.set_defaults(func=run)


def run(args) -> int:
    from autoplan.planning.planfiles import load_plan
    from executor.backends import get_backend
    from executor.options import options_from_args

    options = options_from_args(args)
    # The executor runs the plan; its prediction, if the file carries one, is only compared afterwards.
    # The framework's rules are the backend's (check_plan; print_launch's "autoplan"), not the file's.
    docs = [load_plan(path, score_missing=False, framework_rules=False) for path in args.plans]
    if args.print_launch:
        return print_launch(docs, args, options)
    backend = get_backend(options.backend)
    check_paths(options)
    for doc in docs:
        check_plan(backend, doc, options)
    records = run_and_record(backend, docs, [Path(path).parent for path in args.plans], options)
    if len(records) < len(docs):
        sys.stderr.write(f"autoplan run: {len(docs) - len(records)} plan(s) after {records[-1].plan_id} were not run: "
                         "its processes ended without recording why (see their output above); run them again\n")
    return 0 if all(r.status == "ok" for r in records) and len(records) == len(docs) else 1


def check_plan(backend, doc, options) -> None:
    """What refuses a plan before any process starts: the backend's rules, and on the CPU whether the
    model's weights, gradients and optimizer states fit in free memory."""
    from autoplan.specs.compat import check_host_memory

    backend.check(doc, options)
    if options.device == "cpu":
        check_host_memory(doc.model, doc.parallel, options.nproc or doc.parallel.num_gpus, doc.plan_id)


def run_and_record(backend, docs: list, base_dirs: list, options, command: str = "run",
                   summaries: bool = True) -> list:
    """Run checked plans with the backend (one launch where it can run several), append each
    Measurement to options.out, print its summary line (unless not `summaries`: the caller tabulates
    them) and any hardware-mismatch warning. A Ctrl-C
    keeps the records of the plans that finished before it (appended, then the interruption goes on)."""
    from autoplan.specs import append_measurement
    from executor.backend_common import RunInterrupted

    # Starting processes, importing torch and forming the process group take seconds before the
    # first step line: say what is happening meanwhile.
    sys.stderr.write(f"autoplan {command}: starting {len(docs)} plan(s) on the {options.backend} backend "
                     f"({options.device}, {options.steps} steps each)...\n")
    sys.stderr.flush()
    by_id = {doc.plan_id: (doc, base_dir) for doc, base_dir in zip(docs, base_dirs)}
    records = []

    def keep(record) -> None:
        records.append(record)
        if options.out:
            append_measurement(options.out, record)

    try:
        if hasattr(backend, "run_many"):
            for record in backend.run_many(docs, options):
                keep(record)
        else:
            for doc in docs:
                keep(backend.run(doc, options))
    except RunInterrupted as exc:
        for record in exc.records:
            keep(record)
        raise
    from autoplan.specs import is_stdout

    for record in records:
        if summaries:  # `-o -`: the records alone on stdout
            print(summary(record, options.out), file=sys.stderr if is_stdout(options.out) else sys.stdout)
        warning = mismatch_warning(record, *by_id.get(record.plan_id, (None, None)))
        if warning:
            sys.stderr.write(f"autoplan {command}: warning: {warning}\n")
    return records


def print_launch(docs: list, args, options) -> int:
    """The cluster launch script of one plan for the executor; checked like a run (framework, rules)."""
    from autoplan.exporters.launch import executor_launch
    from autoplan.specs import AutoplanError, get_framework
    from executor.backend_common import check_framework

    if len(docs) != 1:
        raise AutoplanError(f"--print-launch writes the script of one plan, got {len(docs)}; run it once per plan")
    if options.backend != "torch":
        raise AutoplanError(f"--print-launch starts the torch backend under torchrun, got --backend {options.backend}")
    doc = docs[0]
    check_framework(doc, ("autoplan",))
    doc.parallel.check(doc.model, doc.training, doc.cluster, allow_tp_across_nodes=True)
    get_framework("autoplan").check(doc.model, doc.training, doc.parallel)
    run_args = [("--steps", options.steps), ("--warmup-steps", options.warmup_steps), ("--seed", options.seed),
                ("--lr", options.lr), ("--data-dtype", options.data_dtype), ("--out", options.out)]
    if options.fp8_recipe:  # else the plan's framework's recipe, read by the job from the plan file
        run_args.append(("--fp8-recipe", options.fp8_recipe))
    run_args += launch_run_args(options)
    sys.stdout.write(executor_launch(doc, Path(args.plans[0]).read_text(encoding="utf-8"), args.print_launch, run_args))
    return 0


# Run options the launch script passes on to `python -m executor` when given (the same parser reads
# them there); without this a --grad-clip or --checkpoint-dir given with --print-launch was dropped.
FORWARDED = {"min_lr": "--min-lr", "warmup": "--lr-warmup", "grad_clip": "--grad-clip", "log_every": "--log-every",
             "checkpoint_dir": "--checkpoint-dir", "checkpoint_every": "--checkpoint-every",
             "loss_chunk_tokens": "--loss-chunk-tokens"}
DECIDED_BY_LAUNCH = {"data": "--data: the script reads the token file from its DATA placeholder; set DATA=PATH "
                             "where you launch it",
                     "nproc": "--nproc: torchrun starts one process per GPU of the plan"}


def launch_run_args(options) -> list:
    """The run options a launch script forwards (those differing from RunOptions' defaults); the
    ones the launch itself decides are refused rather than dropped."""
    from dataclasses import fields

    from autoplan.specs import AutoplanError
    from executor.options import RunOptions

    default = {f.name: f.default for f in fields(RunOptions)}
    for key, why in DECIDED_BY_LAUNCH.items():
        if getattr(options, key) != default[key]:
            raise AutoplanError(f"--print-launch does not take {why}")
    args = [(flag, getattr(options, key)) for key, flag in FORWARDED.items() if getattr(options, key) != default[key]]
    args += [("--resume",)] if options.resume else []
    args += [] if options.compile is None else [("--compile" if options.compile else "--no-compile",)]
    return args + [("--without", name) for name in options.without]


def check_paths(options, out_flag: str = "-o/--output") -> None:
    """Paths the executor would trip over only after starting its processes (a traceback each);
    `out_flag` is how the command spells the flag of options.out."""
    from autoplan.specs import AutoplanError, check_output

    if options.out:  # the one writer's rules (a folder, device or FIFO refused; - is stdout)
        check_output(options.out, flag=out_flag, example="runs.jsonl")
    if options.data and Path(options.data).is_file() and Path(options.data).stat().st_size == 0:
        raise AutoplanError(f"--data {options.data!r} is empty; pass a flat {options.data_dtype} token-id file "
                            f"or leave out --data for synthetic tokens")
    if options.checkpoint_dir and Path(options.checkpoint_dir).exists() and not Path(options.checkpoint_dir).is_dir():
        raise AutoplanError(f"--checkpoint-dir {options.checkpoint_dir!r} is a file; give a folder (it is created "
                            f"if missing)")


def mismatch_warning(record, doc, base_dir) -> str | None:
    """One line when the run and the prediction it carries describe different hardware/frameworks."""
    from autoplan.inputs.clusters import cluster_for_plan_file
    from autoplan.specs import AutoplanError
    from autoplan.specs.compat import MISMATCH_ADVICE, measurement_mismatch

    if doc is None or record.status != "ok":
        return None
    try:
        planned = cluster_for_plan_file(doc.cluster, base_dir)
    except AutoplanError:
        return None  # the plan's profile file is gone: nothing to compare against
    mismatch = measurement_mismatch(record, planned, doc.framework)
    return f"{mismatch}: its predicted and measured numbers are not comparable; {MISMATCH_ADVICE}" if mismatch else None


def summary(record, out: str) -> str:
    """One line per plan: status, median step time, tokens/s, MFU, peak memory, loss trend."""
    head = f"plan {record.plan_id} [{record.backend}]: {record.status}"
    if record.status != "ok":
        return f"{head}: {record.error}" + (f" (recorded in {out})" if out else "")
    mfu = record.extra.get("mfu", 0.0)
    kind = {"cpu_rss_high_water": "RSS high-water",
            "xla_compiled_bytes_per_device": "XLA compiled step, per device"}.get(
        record.extra.get("peak_memory_kind"), "max allocated")
    parts = [
        f"median step {record.median_step_time_s:.4f} s over {len(record.step_times_s)} steps" if record.step_times_s
        else "no measured steps",
        f"{record.tokens_per_s:,.0f} tokens/s" if record.step_times_s else "",
        f"MFU {mfu:.1%}" if record.peak_flops_per_s else "MFU n/a (no datasheet peak for this device)",
        f"peak memory {record.peak_memory_bytes / 2**30:.2f} GiB ({kind})",
        f"loss {record.losses[0]:.4f} -> {record.losses[-1]:.4f}" if record.losses else "",
    ]
    tail = f"; appended to {out}" if out else ""
    return f"{head}, " + ", ".join(p for p in parts if p) + tail
