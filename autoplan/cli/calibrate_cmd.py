"""`autoplan calibrate`: learn corrections from measurements and write a calibration file.

    autoplan calibrate runs.jsonl [more.jsonl] [--published] [--profile cluster.json] -o calibration.json

Malformed measurement lines are skipped and counted; an empty training set is one line and exit 2;
the output is written atomically, so a failed run leaves any previous calibration untouched.
"""
from __future__ import annotations

import json
import sys

from autoplan.cli.argtypes import framework_name, output_path


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "calibrate", help="learn step-time and memory corrections (and a learned profile) from measurements",
        description="Fit the learned cost model: a plan-level correction of the analytical step time "
                    "from measured runs and/or the shipped published runs, a memory correction from "
                    "measured peaks and out-of-memory runs, both scored out of sample (grouped "
                    "cross-validation, or leave-one-run-out with fewer than 3 groups), and op-level "
                    "regressors from a measured hardware profile.")
    p.add_argument("measurements", nargs="*", help="measurement JSONL files written by `autoplan run`")
    p.add_argument("--published", action="store_true",
                   help="also train on the shipped published runs (their bf16 and fp16 rows)")
    p.add_argument("--profile", metavar="PATH", help="measured hardware profile (from `autoplan profile`) "
                   "to learn matmul/attention/collective models from")
    p.add_argument("--kind", choices=("trees", "ridge"), default="trees",
                   help="correction model: boosted shallow trees (default) or ridge regression")
    p.add_argument("-o", "--output", type=output_path, required=True, metavar="PATH",
                   help="calibration JSON to write (atomically: a failed run leaves an existing file untouched)")
    p.add_argument("--include-mismatched", action="store_true",
                   help="also train on runs measured on other hardware or frameworks than their plan was predicted "
                        "for (left out by default: they would teach the gap between two machines)")
    p.add_argument("--json", action="store_true", help="print the training summary as JSON")
    p.add_argument("--framework", default=None, metavar="NAME", type=framework_name,
                   help="estimate every measured plan as made for this framework (default: the framework each "
                        "plan file names; autoplan for `autoplan run` records); published rows keep their own")
    p.set_defaults(func=run)


def run(args) -> int:
    from autoplan.cli.progress import Progress
    from autoplan.specs import is_stdout
    from cost_model.learned.calibrate import build_calibration

    with Progress("calibrate") as progress:  # the published rows' fit and cross-validation take seconds
        progress.stage("re-scoring the measured plans and fitting the corrections")
        calibration, lines = build_calibration(args.measurements, args.published, args.profile, args.kind,
                                               args.framework, args.include_mismatched)
    calibration.save(args.output)
    out = sys.stderr if is_stdout(args.output) else sys.stdout  # `-o -`: stdout holds the calibration only
    for line in lines:  # warnings reach the user in --json mode too
        if line.startswith("warning:"):
            sys.stderr.write(f"autoplan calibrate: {line}\n")
    lines = [line for line in lines if not line.startswith("warning:")]
    if args.json:
        json.dump({"output": args.output, "training": calibration.training, "op_models": calibration.op_models},
                  out, indent=2)
        out.write("\n")
    else:
        for line in lines:
            print(line, file=out)
        parts = (["correction"] if calibration.correction is not None else []) + \
                (["memory correction"] if calibration.memory_correction is not None else []) + \
                (["learned profile"] if calibration.profile is not None else [])
        print(f"wrote {args.output} ({' + '.join(parts)})", file=out)
    return 0
