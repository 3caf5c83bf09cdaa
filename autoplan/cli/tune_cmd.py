"""`autoplan tune PLAN.json`: run the plan file's top-k plans for a few steps, keep the fastest.

    autoplan tune plan.json --top 5 --steps 5 -o best.json --calibration-out calibration.json

Takes the chosen plan and its ranked alternatives in the order of their predicted step time, skips
(and says why) those predicted not to fit (unless --force) or that the backend refuses, runs the first --top of the
rest with `autoplan run`'s code path (one launch), appends every measurement to --records, prints
them ranked by measured step time (median of the timed steps) beside their predictions, writes the
fastest as a plan file (its `tuning` block says it was chosen by measurement) and, from at least
calibrate's minimum of timed runs, a calibration. A run that fails or runs out of memory is a row
of the table, not the end of the loop. Ctrl-C stops the run in progress, keeps the records of the
finished ones, exit 130.
"""
from __future__ import annotations

import argparse
import contextlib
import functools
import math
import sys
from pathlib import Path

from autoplan.cli.argtypes import ascii_int, output_path, positive_int

MAX_TOP = 64
"""More candidates than a search writes down (the chosen plan + its alternatives) is a typo."""


def register(subparsers) -> None:
    from executor.options import add_run_arguments

    p = subparsers.add_parser(
        "tune", help="run a plan file's top-k plans for a few steps each and keep the fastest measured",
        description=__doc__.split("\n\n")[0] + " The winner is written as a plan file, the runs as measurements, "
                    "and from enough runs a calibration.")
    p.add_argument("plan", metavar="PLAN", help="plan file from `autoplan search -o` (its alternatives are the candidates)")
    p.add_argument("--top", type=positive_int, default=5, metavar="K",
                   help="run the K plans predicted fastest among those that can run (default %(default)s)")
    p.add_argument("-o", "--output", type=output_path, default=None, metavar="BEST.json",
                   help="write the fastest measured plan here (schema autoplan.plan/v2, with a `tuning` block)")
    p.add_argument("--calibration-out", type=output_path, default=None, metavar="CAL.json",
                   help="fit a calibration from these runs (as `autoplan calibrate`) and write it here")
    p.add_argument("--force", action="store_true",
                   help="also run plans the plan file predicts not to fit in memory (passed over otherwise)")
    p.add_argument("--records", default="runs.jsonl", metavar="PATH",
                   help="JSONL file every run's measurement is appended to (default %(default)s)")
    add_run_arguments(p, output=False, checkpoints=False)
    # `--warmup W` as the DeepSpeed autotuner spells it; --warmup-steps as `autoplan run` does.
    p.add_argument("--warmup", dest="warmup_steps", type=ascii_int, default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    p.set_defaults(func=run, steps=5)


def _scored(plan, plan_path: str):
    """An alternative that carries no prediction, scored as `autoplan estimate` would score it."""
    from autoplan.planning.planner import estimate_document

    return estimate_document(plan, base_dir=Path(plan_path).parent)[0]


def _write_calibration(args, timed: list, minimum: int, records: str, report) -> int:
    """Fit and write --calibration-out from the timed runs (at least `minimum`), printing calibrate's
    report; 1 when it cannot be written."""
    from autoplan.cli.progress import Progress
    from autoplan.planning import tune
    from autoplan.specs import AutoplanError

    if len(timed) < minimum:
        sys.stderr.write(f"autoplan tune: calibration not written: {len(timed)} plan(s) ran to the end, calibrate "
                         f"needs at least {minimum}\n")
        return 1
    with Progress("tune") as progress:
        progress.stage("fitting the calibration")
        try:
            calibration, lines = tune.fit_calibration([c.record for c in timed], Path(args.plan).parent,
                                                      f"autoplan tune {args.plan}: {len(timed)} runs in {records}")
        except AutoplanError as exc:
            sys.stderr.write(f"autoplan tune: calibration not written: {exc}\n")
            return 1
    calibration.save(args.calibration_out)
    from autoplan.rendering.text import wrap_line

    for line in lines:  # calibrate's report, wrapped to the output's 120 columns
        warning = line.startswith("warning:")
        text = "\n".join(wrap_line(f"autoplan tune: {line}" if warning else line, 2))
        (sys.stderr if warning else report).write(text + "\n")
    print(f"wrote {args.calibration_out} (use it with `autoplan search --calibration {args.calibration_out}`)",
          file=report)
    return 0


def run(args) -> int:
    from autoplan.planning import tune
    from autoplan.planning.planfiles import load_plan
    from autoplan.cli.run_cmd import check_paths, check_plan, run_and_record
    from autoplan.specs import AutoplanError, is_stdout
    from executor.backends import get_backend
    from executor.options import options_from_args

    if args.top > MAX_TOP:
        raise AutoplanError(f"--top must be at most {MAX_TOP}, got {args.top}; a plan file holds the chosen plan and "
                            "a handful of alternatives")
    if not args.records:
        raise AutoplanError("--records is empty; tune keeps every run's measurement, give the JSONL file to append to")
    args.out = args.records
    options = options_from_args(args)
    doc = load_plan(args.plan)
    backend = get_backend(options.backend)
    check_paths(options, "--records")
    candidates, skipped = tune.pick_candidates(doc, args.top, lambda plan: check_plan(backend, plan, options),
                                               force=args.force, score=lambda plan: _scored(plan, args.plan))
    if not candidates:
        raise AutoplanError(tune.none_runnable(args.plan, skipped))
    minimum = tune.min_calibration_runs()
    if args.calibration_out and len(candidates) < minimum:
        raise AutoplanError(
            f"--calibration-out needs at least {minimum} timed runs (fewer cannot constrain the correction's ~20 plan "
            f"features), but only {len(candidates)} plan(s) can run (--top {args.top}, {len(skipped)} skipped); "
            f"raise --top or leave out --calibration-out")
    for source, why in skipped:
        sys.stderr.write(f"autoplan tune: skipped {source}: {why}\n")
    # A JSON written to stdout (-o -, --calibration-out -, --records -) has stdout to itself: the
    # report and the workers' step lines go to stderr then, as `run -o -` does.
    on_stdout = any(is_stdout(p) for p in (args.output, args.calibration_out, options.out) if p)
    report = sys.stderr if on_stdout else sys.stdout
    workers_aside = on_stdout and not is_stdout(options.out)  # the launcher itself moves them for --records -
    with contextlib.redirect_stdout(sys.stderr) if workers_aside else contextlib.nullcontext():
        records = run_and_record(backend, [c.doc for c in candidates], [Path(args.plan).parent] * len(candidates),
                                 options, command="tune", summaries=False)
    rows = tune.ranked(candidates, records)
    say = functools.partial(print, file=report)
    say(f"tuned {len(rows)} plan(s) of {Path(args.plan).name} on the {options.backend} backend ({options.device}), "
          f"{options.steps} steps each, ranked by the median of the last {options.steps - options.warmup_steps}")
    for line in tune.table_lines(rows):
        say(line)
    note = tune.memory_note(rows)
    if note:
        say(note)
    say(f"measurements appended to {options.out}")
    timed = [c for c in rows if c.status == "ok"]
    if not timed:
        sys.stderr.write("autoplan tune: no plan ran to the end (see the status column); no winner written\n")
        return 1
    best = timed[0]
    predicted = f"{best.predicted_s:.4f} s predicted" if math.isfinite(best.predicted_s) else "no prediction"
    say(f"winner: {best.source}, {best.measured_s:.4f} s per step measured ({predicted})")
    say(f"  {best.label}")
    if args.output:
        tune.winner_document(doc, rows, skipped, options, options.out).save(args.output)
        say(f"wrote {args.output} (the winner, chosen by measurement: `autoplan run` takes it)")
    if args.calibration_out:
        return _write_calibration(args, timed, minimum, options.out, report)
    elif len(timed) >= minimum:
        say(f"({len(timed)} timed runs: --calibration-out CAL.json would fit a calibration from them)")
    return 0
