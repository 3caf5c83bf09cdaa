"""`autoplan report`: predicted vs measured figures and a plan's breakdowns, as PNGs + index.html.

    autoplan report runs.jsonl [more.jsonl] [--published] [--plan plan.json] [--calibration c.json] -o report/
"""
from __future__ import annotations


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "report", help="plots of predicted vs measured, breakdowns, Pareto front and scaling (HTML + PNG)",
        description="Write a folder with PNG figures and one index.html: predicted vs measured step time "
                    "(analytical and calibrated under grouped cross-validation), error per source and model, "
                    "the time/memory breakdown of a plan and its alternatives, the throughput-memory Pareto "
                    "front of its search space and the scaling of its model over GPU counts.")
    p.add_argument("inputs", nargs="*", metavar="FILE",
                   help="measurement JSONL files from `autoplan run`, and/or one plan.json (schema autoplan.plan/v1)")
    p.add_argument("--published", action="store_true", help="use the shipped published runs as measured data")
    p.add_argument("--plan", metavar="PATH", help="plan file whose breakdowns/alternatives to plot")
    p.add_argument("--calibration", metavar="PATH", help="calibration file from `autoplan calibrate` to apply")
    p.add_argument("-o", "--output", required=True, metavar="DIR", help="folder to write the report into")
    p.set_defaults(func=run)


def _split_inputs(inputs: list[str], plan: str | None) -> tuple[list[str], str | None]:
    """JSONL files are measurements; a .json file is the plan (at most one)."""
    from autoplan.specs import AutoplanError

    measurements = [f for f in inputs if not f.endswith(".json")]
    plans = [f for f in inputs if f.endswith(".json")] + ([plan] if plan else [])
    if len(plans) > 1:
        raise AutoplanError(f"give at most one plan file, got {', '.join(plans)}")
    return measurements, (plans[0] if plans else None)


def run(args) -> int:
    from autoplan.cli.progress import Progress
    from autoplan.report.build import build_report

    measurements, plan = _split_inputs(args.inputs, args.plan)
    with Progress("report") as progress:  # SIGTERM unwinds through its cleanup (cli/main.py Terminated)
        files = build_report(args.output, measurements, args.published, plan, args.calibration, progress.stage)
    for f in files:
        print(f)
    return 0
