"""`autoplan export PLAN --to megatron|torchtitan|deepspeed [-o FILE]`: a plan as a framework config."""
from __future__ import annotations

import sys

from autoplan.cli.argtypes import output_path
from autoplan.exporters import target_names  # standard library only, like autoplan.specs


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "export", help="print a plan as Megatron-LM arguments, a torchtitan TOML or a DeepSpeed JSON",
        description="Translate a plan file into the configuration of a training framework. What does "
                    "not map is listed on stderr (and in the comment block of shell/TOML output).")
    p.add_argument("plan", metavar="PLAN.json", help="plan file (schema autoplan.plan/v1), as written by `autoplan search -o`")
    p.add_argument("--to", dest="target", required=True, choices=target_names(), help="framework to export to")
    p.add_argument("--alternative", type=int, default=0, metavar="K",
                   help="export the K-th ranked alternative the search wrote into the plan file (default 0: the chosen plan)")
    p.add_argument("-o", "--output", type=output_path, metavar="FILE",
                   help="write here (atomically) instead of printing")
    p.set_defaults(func=run)


def run(args) -> int:
    from autoplan.exporters import export_plan, with_alternative
    from autoplan.specs import PlanDocument, write_text_atomic

    doc = with_alternative(PlanDocument.load(args.plan), args.alternative)
    export = export_plan(doc, args.target)
    if args.output is not None:
        write_text_atomic(args.output, export.text)
    else:
        sys.stdout.write(export.text)
    for note in export.notes:
        sys.stderr.write(f"autoplan export: {args.target}: {note}\n")
    if args.output:
        sys.stderr.write(f"autoplan export: wrote {args.output}\n")
    return 0
