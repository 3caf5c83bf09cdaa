"""`autoplan estimate`: predict the step time and memory of one plan, with breakdowns.

Either re-score a plan file (`autoplan estimate plan.json`, with the profile and framework the file
names, or with `--framework`, `--gpu`, `--profile` or `--calibration` instead, printed beside the
file's own prediction), or
score one plan given on the command line (`--model ... --gpus ... --tp 8 --pp 4 ...`); knobs left
out take their plain value (cp 1, vpp 1, micro-batch 1, ZeRO 0, no recompute, no SP) and dp is
whatever the GPU count leaves. `--recompute full` recomputes the fewest layers per stage that fit
(at least one), or `--recompute-layers N`.

Exit code: 0 the plan fits, 1 it does not (the answer says by how much and suggests the nearest
plan that fits: the fastest changing only the ZeRO stage, recompute and micro-batch, else tp/pp
too), 2 bad input, 130 Ctrl-C.
"""
from __future__ import annotations

from pathlib import Path

from autoplan.cli.search_cmd import (
    DEFAULT_DTYPE, add_budget_arguments, add_output_arguments, add_pin_arguments, add_problem_arguments, emit,
    positive_int, set_budget,
)
from autoplan.specs.choices import RECOMPUTE_MODULES
from autoplan.specs.frameworks import DEFAULT_FRAMEWORK, get_framework


def register(subparsers) -> None:
    p = subparsers.add_parser("estimate", help="predict step time and memory of one plan (a plan file or pins)",
                              description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n")[-1])
    p.add_argument("plan", nargs="?", default=None, metavar="PLAN.json", help="a plan file to re-score")
    add_problem_arguments(p, model_required=False)
    add_pin_arguments(p, "the plan (left out: cp, vpp, ep and micro-batch 1, ZeRO 0, no recompute, no SP; "
                         "dp what --gpus leaves)")
    p.add_argument("--recompute-layers", type=positive_int, default=None, metavar="N",
                   help="with --recompute full: layers per stage to recompute (default: the fewest that fit, at least 1)")
    p.add_argument("--recompute-modules", nargs="+", default=None, metavar="NAME", choices=RECOMPUTE_MODULES,
                   help="with --recompute selective: the submodules to recompute, Megatron-Core's names "
                        f"({', '.join(RECOMPUTE_MODULES)}; megatron-core only)")
    p.add_argument("--moe-capacity-factor", type=float, default=None, metavar="C",
                   help="MoE only: tokens per expert capped at C x the mean, the rest dropped "
                        "(Megatron-Core --moe-expert-capacity-factor; default: dropless)")
    p.add_argument("--calibration", default=None, metavar="PATH",
                   help="a calibration file from `autoplan calibrate` to apply")
    add_budget_arguments(p)
    add_output_arguments(p)
    p.set_defaults(func=run)


# Flags that describe a plan; with a plan file they would be silently ignored, so they are refused.
# (--framework, --gpu, --profile and --calibration re-score the file's plan another way: allowed.)
_PLAN_FLAGS = ("--model", "--gpus", "--gpus-per-node", "--global-batch", "--seq-len",
               "--dp", "--tp", "--pp", "--cp", "--vpp", "--ep", "--etp", "--micro-batch", "--zero", "--zero-shard", "--recompute",
               "--sequence-parallel", "--tp-comm-overlap", "--recompute-layers", "--dtype", "--recompute-modules", "--moe-capacity-factor")


def _plan_from_file(args):
    from autoplan.planning.planfiles import load_plan
    from autoplan.planning.planner import estimate_document
    from autoplan.specs import AutoplanError

    given = [flag for flag in _PLAN_FLAGS if getattr(args, flag.lstrip("-").replace("-", "_")) is not None]
    given += ["--allow-tp-across-nodes"] if args.allow_tp_across_nodes else []
    if given:
        raise AutoplanError(f"give either a plan file or {', '.join(given)}, not both "
                            f"(edit the plan file, or describe the whole plan with flags)")
    if args.gpu is not None and args.profile is not None:
        raise AutoplanError(f"pass either --gpu {args.gpu} or --profile {args.profile}, not both "
                            f"(a measured profile already names its GPU)")
    doc = load_plan(args.plan, score_missing=False, rescore_stale=False,  # re-scored below
                    own_profile=args.gpu is None and args.profile is None)
    # The file's own figures to compare with, when they were made for its plan (a hand edit voids them).
    before = {"framework": doc.framework, "profile": doc.cluster.profile, **doc.prediction} \
        if doc.prediction_current else None
    doc.extra.pop("nearest_fitting", None)  # a suggestion made for the old prediction
    if args.moe_load_imbalance is not None:
        # Re-score the file's plan with a measured routing load (like --framework, another way to cost it).
        from dataclasses import replace

        from autoplan.planning.training_shape import training_shape
        training, _ = training_shape(doc.model, doc.cluster, doc.training.seq_len, doc.training.global_batch_size,
                                     doc.training.dtype, args.moe_load_imbalance)
        doc = replace(doc, training=training)
    doc, scored = estimate_document(doc, base_dir=Path(args.plan).parent, framework=args.framework, gpu=args.gpu,
                                    profile_path=args.profile, calibration_path=args.calibration,
                                    memory_headroom=args.memory_headroom)
    return doc, scored, before


def _plan_from_flags(args):
    from autoplan.inputs.catalog import resolve_model
    from autoplan.inputs.clusters import check_dtype, resolve_cluster
    from autoplan.planning.planner import score_one
    from autoplan.planning.prediction import prediction_block
    from autoplan.planning.training_shape import training_shape
    from autoplan.specs import AUTOPLAN_VERSION, AutoplanError, ParallelPlan, PlanDocument, resolve_headroom
    from autoplan.specs.headroom import headroom_default_line

    if args.model is None or args.gpus is None:
        raise AutoplanError("give a plan file (autoplan estimate plan.json) or --model and --gpus with the plan's pins")
    model = resolve_model(args.model)
    cluster, profile = resolve_cluster(args.gpus, args.gpu, args.gpus_per_node, args.profile)
    dtype = args.dtype or DEFAULT_DTYPE
    check_dtype(profile, dtype)
    headroom = resolve_headroom(args.memory_headroom, profile.memory_capacity_bytes, cluster.name)
    training, defaults = training_shape(model, cluster, args.seq_len, args.global_batch, dtype,
                                        args.moe_load_imbalance or 0.0)
    defaults += headroom_default_line(args.memory_headroom, profile.memory_capacity_bytes)
    tp, pp, cp = args.tp or 1, args.pp or 1, args.cp or 1
    if args.dp is None and cluster.num_gpus % (tp * pp * cp):
        raise AutoplanError(f"tp*pp*cp must divide --gpus, got tp={tp} * pp={pp} * cp={cp} = {tp * pp * cp}, "
                            f"gpus={cluster.num_gpus}")
    dp = args.dp or cluster.num_gpus // (tp * pp * cp)
    mbs = args.micro_batch or 1
    if training.global_batch_size % (dp * mbs):
        raise AutoplanError(f"global batch {training.global_batch_size} is not a multiple of dp*micro_batch = "
                            f"{dp}*{mbs}; set --global-batch or --micro-batch")
    recompute = args.recompute or "none"
    etp = args.etp or get_framework(args.framework or DEFAULT_FRAMEWORK).default_etp(model, args.ep or 1)
    plan = ParallelPlan(dp=dp, tp=tp, pp=pp, cp=cp, vpp=args.vpp or 1, ep=args.ep or 1, etp=etp,
                        sequence_parallel=bool(args.sequence_parallel), zero_stage=args.zero or 0,
                        tp_comm_overlap=bool(args.tp_comm_overlap),
                        micro_batch_size=mbs, num_microbatches=training.global_batch_size // (dp * mbs),
                        recompute=recompute,
                        recompute_num_layers=-(-model.num_layers // pp) if recompute == "full" else 0,
                        recompute_modules=tuple(args.recompute_modules or ()),
                        moe_capacity_factor=args.moe_capacity_factor or 0.0, zero_shard=args.zero_shard or 0)
    if args.recompute_modules and recompute != "selective":
        raise AutoplanError(f"--recompute-modules needs --recompute selective, got --recompute {recompute}")
    if args.recompute_layers is not None and recompute != "full":
        raise AutoplanError(f"--recompute-layers needs --recompute full, got --recompute {recompute}")
    if recompute == "full":
        from autoplan.planning.planner import make_estimator

        if args.recompute_layers is not None:
            plan = plan.replace(recompute_num_layers=args.recompute_layers)
        else:  # the fewest layers that fit (at least one: full recompute was asked for); all if none fit
            plan.check(model, training, cluster, allow_tp_across_nodes=args.allow_tp_across_nodes)
            fewest = make_estimator(model, training, cluster, profile, framework=args.framework or DEFAULT_FRAMEWORK,
                                    memory_headroom_bytes=headroom).min_full_recompute_layers(plan)
            plan = plan.replace(recompute_num_layers=plan.recompute_num_layers if fewest is None else max(1, fewest))
    framework = args.framework or DEFAULT_FRAMEWORK
    calibration = None
    if args.calibration:
        from cost_model.learned.calibration import load_calibration

        calibration = load_calibration(args.calibration)
    scored = score_one(model, training, cluster, profile, plan, args.allow_tp_across_nodes, framework, calibration,
                       headroom)
    doc = PlanDocument(model=model, training=training, cluster=cluster, parallel=plan,
                       prediction=prediction_block(scored.estimate, model, training, cluster, framework,
                                                   calibrated=calibration is not None), framework=framework,
                       provenance={"autoplan_version": AUTOPLAN_VERSION, "cost_model": scored.estimate.cost_model})
    return doc, scored, defaults


def _suggest(doc, scored, args) -> str:
    """For a plan that does not fit: by how much, and the nearest plan that does (recorded in the
    plan file as `nearest_fitting`)."""
    from cost_model.learned.calibration import load_calibration
    from autoplan.inputs.clusters import cluster_for_plan_file, resolve_cluster
    from autoplan.planning.nearest import nearest_fitting
    from autoplan.planning.planner import make_estimator
    from autoplan.rendering.render import GIB, fits_phrase, plan_line

    e = scored.estimate
    over = f"{(e.peak_memory_bytes - e.usable_memory_bytes) / GIB:.1f} GiB"
    lines = [f"", f"does not fit: {e.peak_memory_bytes / GIB:.1f} GiB per GPU is {over} over the "
             f"{e.usable_memory_bytes / GIB:.1f} GiB usable" + (f" ({e.memory_headroom_bytes / GIB:.1f} GiB headroom)"
                                                               if e.memory_headroom_bytes else "")]
    if args.plan is not None and args.gpu is None and args.profile is None:
        profile = cluster_for_plan_file(doc.cluster, Path(args.plan).parent)
    else:
        profile = resolve_cluster(doc.cluster.num_gpus, args.gpu, doc.cluster.gpus_per_node, args.profile)[1]
    calibration = load_calibration(args.calibration) if args.calibration else None
    estimator = make_estimator(doc.model, doc.training, doc.cluster, profile, True if args.plan else
                               args.allow_tp_across_nodes, calibration, doc.framework, e.memory_headroom_bytes)
    found = nearest_fitting(doc.model, doc.training, doc.cluster, estimator, doc.parallel,
                            allow_tp_across_nodes=bool(args.plan) or args.allow_tp_across_nodes)
    if found is None:
        return "\n".join(lines + [f"no plan on {doc.cluster.num_gpus} GPUs fits by changing the ZeRO stage, recompute, "
                                  f"micro-batch, tp, pp or vpp; `autoplan search` says how many GPUs it needs"]) + "\n"
    s = found.scored.estimate
    slower = 100 * (s.step_time_s / e.step_time_s - 1)
    doc.extra["nearest_fitting"] = {"changed_flags": found.flags(), "parallel": found.scored.plan.to_dict(),
                                    "prediction": s.to_prediction()}
    lines += [f"nearest plan that fits ({found.num_scored} plans scored): {' '.join(found.flags())}",
              f"  {plan_line(found.scored.plan.to_dict())}",
              f"  step time {s.step_time_s:.3f} s ({slower:+.1f}%), memory {s.peak_memory_bytes / GIB:.1f} GiB per GPU: "
              f"{fits_phrase(s.peak_memory_bytes, s.memory_capacity_bytes, s.memory_headroom_bytes)}"]
    return "\n".join(lines) + "\n"


def run(args) -> int:
    from autoplan.rendering.render import comparison_lines, render_document

    before = None
    if args.plan is not None:
        (doc, scored, before), defaults = _plan_from_file(args), []
    else:
        doc, scored, defaults = _plan_from_flags(args)
    set_budget(doc, args)
    text = render_document(doc, defaults, title="plan", with_search=False)
    if before is not None:
        text += "\n" + "\n".join(comparison_lines(before, {"framework": doc.framework, "profile": doc.cluster.profile,
                                                           **doc.prediction})) + "\n"
    note = "".join(f"note: {line}\n" for line in getattr(scored.estimate, "notes", ()))
    fits = scored.estimate.fits
    if not fits:
        from autoplan.cli.progress import Progress

        with Progress("estimate") as progress:
            progress.stage("looking for the nearest plan that fits")
            note += _suggest(doc, scored, args)
    emit(doc, text + note, args)
    return 0 if fits else 1  # 1: answered, and the answer is "does not fit"
