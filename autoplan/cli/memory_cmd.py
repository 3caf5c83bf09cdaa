"""`autoplan memory`: per-GPU memory of a model on N GPUs across ZeRO stage, dtype, recompute and
micro-batch, with activations (like `accelerate estimate-memory`, which counts weights and states only).

The parallel layout is --tp/--pp/--cp/--vpp/--ep/--etp (1 when left out, etp = tp; dp is what the GPU count leaves),
or, with none of them, the layout `autoplan search` picks. Each row is the cost model's breakdown
(weights, grads, optimizer, activations, other) and sums to its peak; "fits" is peak <= capacity -
--memory-headroom. Rows the framework or the plan rules refuse are left out of the table and counted
by rule tag under it (`--json` lists them). `-o FILE.csv` or `-o FILE.md` writes the table.
"""
from __future__ import annotations

import argparse
import sys

from autoplan.cli.argtypes import ascii_int, output_path, positive_int
from autoplan.cli.search_cmd import RECOMPUTE_CHOICES, add_problem_arguments

GIB = 2**30
LAYOUT_FLAGS = ("tp", "pp", "cp", "vpp", "ep", "etp")


def register(subparsers) -> None:
    p = subparsers.add_parser("memory", help="memory per GPU across ZeRO stage, dtype, recompute and micro-batch",
                              description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n")[1])
    add_problem_arguments(p)
    g = p.add_argument_group("layout (left out: the layout `autoplan search` picks)")
    for flag in LAYOUT_FLAGS:
        g.add_argument(f"--{flag}", type=positive_int, default=None, metavar="N",
                       help=f"{flag} degree (default {'tp' if flag == 'etp' else 1})")
    g.add_argument("--sequence-parallel", action=argparse.BooleanOptionalAction, default=None,
                   help="Megatron sequence parallelism in the tp group (default: on when tp > 1 and the framework has it)")
    r = p.add_argument_group("rows (left out: all)")
    r.add_argument("--zero", type=ascii_int, choices=(0, 1, 2, 3), default=None, help="only this ZeRO stage")
    r.add_argument("--recompute", choices=RECOMPUTE_CHOICES, default=None, help="only this recompute policy")
    r.add_argument("--micro-batch", type=positive_int, default=None, metavar="N", help="only this micro-batch size")
    r.add_argument("--fits-only", action="store_true", help="only the rows that fit")
    p.add_argument("-o", "--output", type=output_path, default=None, metavar="FILE.csv|FILE.md",
                   help="write the table as CSV or Markdown (by the file's extension)")
    p.add_argument("--json", action="store_true", help="print the table as JSON (refused rows included)")
    p.set_defaults(func=run)


def _layout(args, model, training, cluster, profile, framework):
    """The layout from the flags, or the searched plan's; and a line saying where it came from."""
    from autoplan.planning.memory_table import Layout
    from autoplan.specs import AutoplanError, get_framework

    given = {f: getattr(args, f) for f in LAYOUT_FLAGS if getattr(args, f) is not None}
    if not given:
        from autoplan.planning.planner import PlanRequest, plan_search
        from autoplan.planning.space import Pins
        from autoplan.specs import InfeasiblePlan

        # --sequence-parallel / --no-sequence-parallel alone pins the searched layout (not dropped)
        request = PlanRequest(model=args.model, num_gpus=args.gpus, gpu=args.gpu, gpus_per_node=args.gpus_per_node,
                              profile_path=args.profile, global_batch_size=training.global_batch_size,
                              seq_len=training.seq_len, dtype=training.dtype, framework=framework,
                              moe_load_imbalance=training.moe_load_imbalance, memory_headroom=args.memory_headroom,
                              pins=Pins(sequence_parallel=args.sequence_parallel))
        try:
            p = plan_search(request).best.plan
        except InfeasiblePlan as exc:
            if exc.reason != "out_of_memory":
                raise
            return Layout(dp=cluster.num_gpus, tp=1, pp=1), ("no plan fits, so plain data parallelism; "
                                                              "set --tp/--pp to see others")
        layout = Layout(p.dp, p.tp, p.pp, p.cp, p.vpp, p.ep, p.sequence_parallel, p.etp)
        pinned = "" if args.sequence_parallel is None else \
            f" with {'--sequence-parallel' if args.sequence_parallel else '--no-sequence-parallel'}"
        return layout, f"the one `autoplan search` picks{pinned}; set --tp/--pp/--cp/--vpp/--ep/--etp to choose another"
    tp, pp, cp = given.get("tp", 1), given.get("pp", 1), given.get("cp", 1)
    if cluster.num_gpus % (tp * pp * cp):
        raise AutoplanError(f"tp*pp*cp must divide --gpus, got tp={tp} * pp={pp} * cp={cp} = {tp * pp * cp}, "
                            f"gpus={cluster.num_gpus}")
    sp = args.sequence_parallel
    if sp is None:
        sp = tp > 1 and get_framework(framework).sequence_parallel != "never"
    ep = given.get("ep", 1)
    layout = Layout(cluster.num_gpus // (tp * pp * cp), tp, pp, cp, given.get("vpp", 1), ep, sp,
                    given.get("etp", get_framework(framework).default_etp(model, ep)))
    return layout, "from the flags"


def run(args) -> int:
    from autoplan.inputs.catalog import resolve_model
    from autoplan.cli.progress import Progress
    from autoplan.inputs.clusters import resolve_cluster
    from autoplan.planning.memory_table import DTYPES, ZERO_STAGES, memory_rows
    from autoplan.planning.planner import make_estimator
    from autoplan.planning.training_shape import training_shape
    from autoplan.specs import DEFAULT_FRAMEWORK, RECOMPUTE_POLICIES, AutoplanError, is_stdout, resolve_headroom
    from autoplan.specs.headroom import headroom_default_line

    if args.output is not None and not is_stdout(args.output) and not args.output.lower().endswith((".csv", ".md")):
        raise AutoplanError(f"-o {args.output}: give a file ending in .csv or .md (the table's format follows the "
                            f"extension), or - for the Markdown table on stdout")
    model = resolve_model(args.model)
    cluster, profile = resolve_cluster(args.gpus, args.gpu, args.gpus_per_node, args.profile)
    framework = args.framework or DEFAULT_FRAMEWORK
    headroom = resolve_headroom(args.memory_headroom, profile.memory_capacity_bytes, cluster.name)
    training, defaults = training_shape(model, cluster, args.seq_len, args.global_batch, args.dtype or "bf16",
                                        args.moe_load_imbalance or 0.0)
    defaults += headroom_default_line(args.memory_headroom, profile.memory_capacity_bytes)
    with Progress("memory") as progress:
        progress.stage(f"choosing the layout of {model.name} on {cluster.num_gpus} GPUs")
        layout, where = _layout(args, model, training, cluster, profile, framework)
        if args.micro_batch is not None and training.global_batch_size % (layout.dp * args.micro_batch):
            raise AutoplanError(f"--micro-batch {args.micro_batch}: global batch {training.global_batch_size} is not a "
                                f"multiple of dp*micro_batch = {layout.dp}*{args.micro_batch}; set --global-batch")
        progress.stage("estimating every row")
        rows = memory_rows(
            model, training, cluster, profile, layout,
            lambda shape: make_estimator(model, shape, cluster, profile, True, None, framework, headroom),
            dtypes=(args.dtype,) if args.dtype else DTYPES,
            zero_stages=(args.zero,) if args.zero is not None else ZERO_STAGES,
            recomputes=(args.recompute,) if args.recompute else RECOMPUTE_POLICIES,
            micro_batch_sizes=[args.micro_batch] if args.micro_batch else None)
    if all(r.refused for r in rows):
        raise AutoplanError(f"no row of the layout {layout.describe()} can run: {rows[0].reason}")
    shown = [r for r in rows if not r.refused and (r.fits or not args.fits_only)]
    facts = {"model": model.name, "num_gpus": cluster.num_gpus, "gpu": cluster.name, "profile": cluster.profile,
             "framework": framework, "global_batch_size": training.global_batch_size, "seq_len": training.seq_len,
             "layout": layout.describe(), "memory_capacity_bytes": profile.memory_capacity_bytes,
             "memory_headroom_bytes": headroom}
    if args.output is not None:
        _write(args.output, shown)
    if args.output is not None and is_stdout(args.output):
        return 0  # the table went to stdout: nothing else there
    if args.json:
        from autoplan.specs.jsonio import dumps

        sys.stdout.write(dumps({"schema": "autoplan.memory/v1", **facts,
                                "rows": [r.to_dict() for r in rows if not (args.fits_only and not r.fits)]}))
    else:
        sys.stdout.write(_render(facts, defaults, where, rows, shown, args))
        if args.output:
            sys.stdout.write(f"\ntable written: {args.output}\n")
    return 0


def _cells(r) -> list:
    c = r.columns
    return [r.dtype, str(r.zero_stage), r.recompute, str(r.micro_batch_size),
            *[f"{c[k] / GIB:.1f}" for k in ("weights", "grads", "optimizer", "activations", "other")],
            f"{r.peak_bytes / GIB:.1f}", "yes" if r.fits else "no", f"{r.step_time_s:,.2f}"]


HEADERS = ["dtype", "zero", "recompute", "mbs", "weights", "grads", "optim", "activ", "other", "peak GiB", "fits",
           "step s"]


def _render(facts: dict, defaults: list, where: str, rows: list, shown: list, args) -> str:
    from autoplan.rendering.text import text_table, wrap_line

    cap, headroom = facts["memory_capacity_bytes"], facts["memory_headroom_bytes"]
    usable = f"{(cap - headroom) / GIB:.1f} GiB usable ({cap / GIB:.1f} GiB less {headroom / GIB:.1f} GiB headroom)" \
        if headroom else f"{cap / GIB:.1f} GiB"
    head = [f"model    {facts['model']} on {facts['num_gpus']} x {facts['gpu']}, framework {facts['framework']}, "
            f"global batch {facts['global_batch_size']} x seq {facts['seq_len']}",
            *[f"default  {d}" for d in defaults], f"layout   {facts['layout']} ({where})",
            f"memory   per GPU in GiB (worst pipeline stage); fits = peak <= {usable}; full recompute = every layer"]
    lines = [w for line in head for w in wrap_line(line, 9)] + [""]
    lines += text_table(HEADERS, [_cells(r) for r in shown], "lrlrrrrrrrlr") if shown else ["  (no row fits)"]
    refused: dict = {}
    for r in rows:
        if r.refused:
            refused[r.refused] = refused.get(r.refused, 0) + 1
    num_fit = sum(1 for r in rows if not r.refused and r.fits)
    summary = f"{len(rows)} rows: {num_fit} fit, {sum(1 for r in rows if not r.refused) - num_fit} do not"
    if refused:
        summary += (f", {sum(refused.values())} refused and left out ("
                    + ", ".join(f"{n} {tag}" for tag, n in sorted(refused.items())) + "; --json lists why)")
    experts = {r.zero_stage: r.experts_bytes for r in shown if r.experts_bytes}
    if experts:  # a MoE model: how much of weights + grads + optim the routed experts are
        lines += ["", *wrap_line("experts  routed experts' weights + grads + optimizer states per GPU (part of those "
                                 "columns): " + ", ".join(f"zero {z} {b / GIB:.1f} GiB" for z, b in sorted(experts.items())),
                                 9)]
    lines += ["", *wrap_line(summary, 2),
              *wrap_line("columns: weights = params + compute-dtype copy; optim = optimizer states + step temporaries; "
                         "activ = saved activations + backward working set + logits; other = CUDA context, allocator, "
                         "comm buffers. Each row sums to its peak.", 9)]
    return "\n".join(lines) + "\n"


def _write(path: str, rows: list) -> None:
    from autoplan.specs import AutoplanError, is_stdout, write_text_atomic

    if path.lower().endswith(".csv"):
        import csv
        import io

        buf = io.StringIO()
        writer = csv.writer(buf)
        writer.writerow(["dtype", "zero_stage", "recompute", "micro_batch_size", "weights_gib", "grads_gib",
                         "optimizer_gib", "activations_gib", "other_gib", "peak_gib", "fits", "step_time_s"])
        writer.writerows([[r.dtype, r.zero_stage, r.recompute, r.micro_batch_size,
                           *[f"{r.columns[k] / GIB:.3f}" for k in ("weights", "grads", "optimizer", "activations",
                                                                   "other")],
                           f"{r.peak_bytes / GIB:.3f}", "yes" if r.fits else "no", f"{r.step_time_s:.4f}"]
                          for r in rows])
        write_text_atomic(path, buf.getvalue())
    elif path.lower().endswith(".md") or is_stdout(path):
        lines = ["| " + " | ".join(HEADERS) + " |", "|" + "---|" * len(HEADERS)]
        lines += ["| " + " | ".join(_cells(r)) + " |" for r in rows]
        write_text_atomic(path, "\n".join(lines) + "\n")
    else:
        raise AutoplanError(f"-o {path}: give a file ending in .csv or .md")
