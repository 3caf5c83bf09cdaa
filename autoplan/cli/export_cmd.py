"""`autoplan export PLAN --to megatron|torchtitan|torchtitan-0.2|deepspeed [--launch torchrun|slurm] [-o FILE]`: a plan
as a framework config, or as a launch script that starts it on a cluster."""
from __future__ import annotations

import sys

from autoplan.cli.argtypes import ascii_int, output_path
from autoplan.exporters import target_names  # standard library only, like autoplan.specs


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "export", help="print a plan as Megatron-LM arguments, a torchtitan config module (or 0.2 TOML) or a DeepSpeed JSON",
        description="Translate a plan file into the configuration of a training framework. What does "
                    "not map is listed on stderr (and in the comment block of shell/Python/TOML output).")
    p.add_argument("plan", metavar="PLAN.json", help="plan file (schema autoplan.plan/v2), as written by `autoplan search -o`")
    p.add_argument("--to", dest="target", required=True, choices=target_names(), help="framework to export to")
    p.add_argument("--alternative", type=ascii_int, default=0, metavar="K",
                   help="export the K-th ranked alternative the search wrote into the plan file (default 0: the chosen plan)")
    p.add_argument("--force", action="store_true",
                   help="export a plan (or alternative) predicted not to fit in memory, by the plan file or by the "
                        "target framework's re-score (refused otherwise)")
    p.add_argument("--launch", choices=("torchrun", "slurm"),
                   help="write a bash script that starts the export with torchrun on every node, or as an sbatch job; "
                        "it refuses to run until its data/tokenizer placeholders are set")
    p.add_argument("-o", "--output", type=output_path, metavar="FILE",
                   help="write here (atomically) instead of printing")
    p.set_defaults(func=run)


def run(args) -> int:
    from autoplan.planning.planfiles import load_plan
    from autoplan.exporters import export_launch, export_plan, target_framework, with_alternative
    from autoplan.specs import AutoplanError, is_stdout, write_text_atomic
    from autoplan.specs.frameworks import base_framework_name

    doc = with_alternative(load_plan(args.plan), args.alternative, force=args.force)
    if doc.prediction.get("fits") is False:  # with_alternative refuses it without --force
        which = f"--alternative {args.alternative}" if args.alternative else "the plan"
        sys.stderr.write(f"autoplan export: warning: {which} is predicted NOT to fit in memory; exported because "
                         f"of --force\n")
    # Both re-check the plan against the target framework's rules.
    export = export_launch(doc, args.target, args.launch) if args.launch else export_plan(doc, args.target)
    framework = target_framework(args.target)
    if base_framework_name(doc.framework) != framework:
        note, fits = rescored_note(doc, framework, args.plan)
        if not fits and not args.force:  # the file's prediction was for another framework: today's is the truth
            raise AutoplanError(f"{args.target}: {note}; the plan does not fit under {framework}: pick another plan "
                                f"(--alternative N, or `autoplan search --framework {framework}`), or pass --force")
        sys.stderr.write(f"autoplan export: {args.target}: {note}\n")
        if not fits:
            sys.stderr.write(f"autoplan export: warning: the plan is predicted NOT to fit in memory under {framework}; "
                             f"exported because of --force\n")
    if args.output is not None:
        write_text_atomic(args.output, export.text)
    else:
        sys.stdout.write(export.text)
    for note in export.notes:
        sys.stderr.write(f"autoplan export: {args.target}: {note}\n")
    if args.output and not is_stdout(args.output):
        sys.stderr.write(f"autoplan export: wrote {args.output}\n")
    return 0


def rescored_note(doc, framework: str, plan_path) -> tuple[str, bool]:
    """A plan made for one framework, exported to another: it passed the target's rules; say how its
    prediction changes under the target's facts (what it stores, fuses and overlaps), and whether it
    fits there."""
    import copy
    from pathlib import Path

    from autoplan.planning.planner import estimate_document

    old = doc.prediction
    new_doc, scored = estimate_document(copy.deepcopy(doc), base_dir=Path(plan_path).parent, framework=framework)
    new = new_doc.prediction
    fits = "fits" if scored.estimate.fits else "does NOT fit"
    if not old.get("step_time_s"):
        return (f"plan made for {doc.framework}, re-checked against {framework}'s rules: accepted; predicted for "
                f"{framework}: step {new['step_time_s']:.3f} s, {new['peak_memory_bytes'] / 2**30:.1f} GiB ({fits})",
                scored.estimate.fits)
    return (f"plan made for {doc.framework}, re-checked against {framework}'s rules: accepted; its prediction "
            f"for {framework}: step {old['step_time_s']:.3f} -> {new['step_time_s']:.3f} s, memory "
            f"{old['peak_memory_bytes'] / 2**30:.1f} -> {new['peak_memory_bytes'] / 2**30:.1f} GiB ({fits})",
            scored.estimate.fits)
