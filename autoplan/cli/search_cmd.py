"""`autoplan search`: the best parallel plan for a model on a cluster, its predicted step time and
memory as breakdowns, the runners-up and why they lost, and the plan file (`-o`, `--json`).

Thin: parse, build a PlanRequest, call `autoplan.planning.planner.plan_search`, print or write.
The argument helpers here are shared with `autoplan estimate`.
"""
from __future__ import annotations

import argparse
import sys

from autoplan.cli.argtypes import (
    MAX_GLOBAL_BATCH, MAX_NUM_GPUS, MAX_SEQ_LEN, MAX_TRIALS, add_memory_headroom, ascii_int, check_storage_url,
    capacity_factors, framework_name, int_at_most, load_imbalance, one_line_name, output_path, positive_int,
    seed_int,
)
from autoplan.specs.frameworks import DEFAULT_FRAMEWORK, FRAMEWORK_NAMES

RECOMPUTE_CHOICES = ("none", "selective", "full")
DEFAULT_DTYPE = "bf16"


def add_problem_arguments(p: argparse.ArgumentParser, model_required: bool = True) -> None:
    """Model, cluster and training shape: what both `search` and `estimate` plan for."""
    g = p.add_argument_group("model and cluster")
    g.add_argument("--model", required=model_required,
                   help="catalog name (see `autoplan models`), a Hugging Face config.json, or a folder holding one")
    g.add_argument("--gpus", type=int_at_most(MAX_NUM_GPUS, "GPUs"), required=model_required, metavar="N",
                   help="number of GPUs (world size)")
    g.add_argument("--gpu", default=None, metavar="TYPE",
                   help="built-in GPU type, e.g. a100-80gb, h100-80gb, h200 (default: h100-80gb)")
    g.add_argument("--gpus-per-node", type=positive_int, default=None, metavar="N",
                   help="GPUs per node (default: 8, or the measured profile's figure)")
    g.add_argument("--profile", default=None, metavar="PATH",
                   help="a measured hardware profile JSON (from `autoplan profile`) instead of --gpu")
    g.add_argument("--framework", default=None, metavar="NAME", type=framework_name,
                   help=f"the framework that will run the plan: its rules bound the search and its facts "
                        f"are costed; one of {', '.join(FRAMEWORK_NAMES)} (default: {DEFAULT_FRAMEWORK}, "
                        f"the plan `autoplan run` executes)")
    add_memory_headroom(g)
    t = p.add_argument_group("training shape (defaults are printed)")
    t.add_argument("--global-batch", type=int_at_most(MAX_GLOBAL_BATCH, "sequences"), default=None, metavar="N",
                   help="global batch in sequences per optimizer step, like Megatron's --global-batch-size "
                        "(default: ~4M tokens)")
    t.add_argument("--seq-len", type=int_at_most(MAX_SEQ_LEN, "tokens"), default=None, metavar="TOKENS",
                   help="tokens per sequence (default: 4096, capped at the model's context)")
    # Default None (read as bf16) so that `estimate plan.json --dtype fp8` can be refused, not ignored.
    t.add_argument("--dtype", choices=("bf16", "fp16", "fp8"), default=None,
                   help=f"training precision of the matmuls (default: {DEFAULT_DTYPE})")
    t.add_argument("--moe-load-imbalance", type=load_imbalance, default=None, metavar="F",
                   help="MoE only: routed tokens of the busiest expert-parallel rank over the mean, as your run "
                        "measured them (e.g. from torchtitan's per-layer tokens_per_expert_E buffer); the "
                        "expert GEMMs and all-to-all of every MoE layer wait for that rank (default: the "
                        "framework's, 1.25 for a dropless router with a balance loss; `autoplan frameworks NAME`)")


def add_pin_arguments(p: argparse.ArgumentParser, title: str = "pins (fix a knob; the rest is searched)") -> None:
    g = p.add_argument_group(title)
    sizes = {
        "dp": "data-parallel size (default: what --gpus leaves after tp*pp*cp)",
        "tp": "tensor-parallel size (Megatron --tensor-model-parallel-size)",
        "pp": "pipeline-parallel stages (Megatron --pipeline-model-parallel-size)",
        "cp": "context-parallel size: sequence split over ranks (Megatron --context-parallel-size)",
        "vpp": "virtual stages per pipeline rank, interleaved 1F1B (Megatron "
               "--num-layers-per-virtual-pipeline-stage = layers / (pp*vpp))",
        "ep": "expert-parallel size, MoE models only (Megatron --expert-model-parallel-size)",
        "etp": "expert tensor-parallel size, MoE models only: the experts' own TP inside the ep x etp group "
               "(Megatron --expert-tensor-parallel-size; default: searched in search, tp in estimate)",
    }
    for flag, text in sizes.items():
        g.add_argument(f"--{flag}", type=positive_int, default=None, metavar="N", help=text)
    g.add_argument("--micro-batch", type=positive_int, default=None, metavar="N",
                   help="micro-batch size in sequences (Megatron --micro-batch-size)")
    g.add_argument("--zero", type=ascii_int, choices=(0, 1, 2, 3), default=None,
                   help="ZeRO stage: 1 shards optimizer states over dp (Megatron --use-distributed-optimizer), "
                        "2 also gradients, 3 also weights (FSDP)")
    g.add_argument("--zero-shard", type=positive_int, default=None, metavar="N",
                   help="hybrid sharding (HSDP): shard the ZeRO states over groups of N consecutive dp*cp ranks "
                        "and replicate across the groups (FSDP HYBRID_SHARD, torchtitan "
                        "data_parallel_shard_degree x cp, Megatron --num-distributed-optimizer-instances = "
                        "dp*cp/N); default: over every dp*cp rank")
    g.add_argument("--recompute", choices=RECOMPUTE_CHOICES, default=None,
                   help="activation recomputation: selective = attention core only (Megatron "
                        "--recompute-activations), full = whole layers (--recompute-granularity full)")
    g.add_argument("--sequence-parallel", action=argparse.BooleanOptionalAction, default=None,
                   help="Megatron --sequence-parallel: shard norms and dropout over the tp group (needs tp > 1)")
    g.add_argument("--tp-comm-overlap", action=argparse.BooleanOptionalAction, default=None,
                   help="overlap the TP collectives with the GEMMs: megatron-core --tp-comm-overlap (needs "
                        "--sequence-parallel), torchtitan async TP (with torch.compile); needs tp > 1 "
                        "(search default: tried where the framework has it; estimate: off)")
    g.add_argument("--allow-tp-across-nodes", action="store_true", help="let tp exceed the GPUs of one node")


def pins_from_args(args):
    from autoplan.planning.space import Pins

    return Pins(dp=args.dp, tp=args.tp, pp=args.pp, cp=args.cp, vpp=args.vpp, ep=args.ep, etp=args.etp,
                micro_batch_size=args.micro_batch, zero_stage=args.zero, zero_shard=args.zero_shard,
                recompute=args.recompute, sequence_parallel=args.sequence_parallel,
                tp_comm_overlap=args.tp_comm_overlap,
                moe_capacity_factor=getattr(args, "moe_capacity_factor", None))


def add_budget_arguments(p: argparse.ArgumentParser) -> None:
    from autoplan.cli.argtypes import price, token_count

    g = p.add_argument_group("time and cost of a training run")
    g.add_argument("--train-tokens", type=token_count, default=None, metavar="N",
                   help="tokens to train on (2e12, 2T, 300B): prints days and GPU-hours on every plan line")
    g.add_argument("--gpu-hour-price", type=price, default=None, metavar="PRICE",
                   help="price of one GPU-hour (e.g. 2.50): with --train-tokens, prints the cost of every plan")


def set_budget(doc, args) -> None:
    """Record --train-tokens/--gpu-hour-price in the plan file; the renderer prints days and cost."""
    from autoplan.specs import AutoplanError

    if args.gpu_hour_price is not None and args.train_tokens is None:
        raise AutoplanError(f"--gpu-hour-price {args.gpu_hour_price:g} needs --train-tokens N (how many tokens to "
                            f"train on) to price a run")
    if args.train_tokens is not None:
        doc.extra["train_budget"] = {"train_tokens": args.train_tokens, "gpu_hour_price": args.gpu_hour_price}


def add_output_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("-o", "--output", type=output_path, default=None, metavar="PLAN.json",
                   help="write the plan file (atomically: a failed run leaves an existing file untouched)")
    p.add_argument("--json", action="store_true", help="print the plan file (schema autoplan.plan/v2) to stdout")


def emit(doc, text: str, args) -> None:
    """Write the plan file first (so a bad -o path fails before anything is printed), then print;
    `-o -` puts the plan file on stdout and nothing else there."""
    from autoplan.specs import is_stdout, write_json_atomic
    from autoplan.specs.jsonio import dumps

    if args.output is not None:
        write_json_atomic(args.output, doc.to_dict())
        if is_stdout(args.output):
            return
    if args.json:
        sys.stdout.write(dumps(doc.to_dict()))
    else:
        sys.stdout.write(text)
        if args.output:
            sys.stdout.write(f"\nplan file written: {args.output}\n")


def register(subparsers) -> None:
    p = subparsers.add_parser("search", help="find the best parallel plan for a model on a cluster",
                              description=__doc__.split("\n\n")[0])
    add_problem_arguments(p)
    add_pin_arguments(p)
    p.add_argument("--moe-capacity-factor", type=capacity_factors, default=None, metavar="C[,C...]",
                   help="MoE only: tokens per expert capped at C x the mean, the rest dropped (Megatron-Core "
                        "--moe-expert-capacity-factor; 0 = dropless). One value pins it, several are searched "
                        "with the other knobs (e.g. 0,1,1.25); default: dropless only, since dropping tokens "
                        "changes what the model trains on")
    s = p.add_argument_group("search")
    s.add_argument("--sampler", choices=("auto", "tpe", "nsga2"), default="auto",
                   help="auto: the exact optimum, every plan enumerated and those a lower bound on step time "
                        "rules out left unscored (TPE with --storage or --calibration); tpe: Optuna's TPE "
                        "sampler and a local polish; nsga2: step-time/memory Pareto front")
    s.add_argument("--trials", type=int_at_most(MAX_TRIALS, "trials"), default=None, metavar="N",
                   help="Optuna trials (default: 200 for tpe, then a local polish; 600 for nsga2)")
    s.add_argument("--seed", type=seed_int, default=0, help="sampler seed, 0 to 2**32-1 (default: 0)")
    s.add_argument("--exhaustive", action="store_true", help="score every valid plan (slow on big spaces; exact)")
    s.add_argument("--storage", default=None, metavar="URL", help="Optuna storage URL to keep/resume the study, e.g. sqlite:///plans.db")
    s.add_argument("--study-name", default=None, metavar="NAME", type=one_line_name,
                   help="study name in --storage (default: one per model/shape/cluster/pins, so reruns resume)")
    s.add_argument("--recompute-layers", type=positive_int, default=None, metavar="N",
                   help="full recompute of N layers per pipeline stage (Megatron --recompute-num-layers; N at "
                        "least a stage's layers = every layer, Megatron's --recompute-method uniform); implies "
                        "--recompute full (default: the fewest layers that fit)")
    s.add_argument("--calibration", default=None, metavar="PATH",
                   help="a calibration file from `autoplan calibrate` (learned profile and step-time correction)")
    add_budget_arguments(p)
    add_output_arguments(p)
    p.set_defaults(func=run)


def run(args) -> int:
    from autoplan.planning.planner import PlanRequest, plan_search
    from autoplan.rendering.render import render_document
    from autoplan.specs import AutoplanError

    if args.study_name and not args.storage:
        raise AutoplanError("--study-name needs --storage (e.g. --storage sqlite:///plans.db)")
    if args.exhaustive and args.sampler != "auto":
        raise AutoplanError(f"--exhaustive scores every plan, which no sampler chooses; drop --sampler "
                            f"{args.sampler} (or --exhaustive)")
    if args.exhaustive and args.storage:
        raise AutoplanError("--exhaustive scores every plan without a study; drop --storage (or --exhaustive)")
    if args.storage is not None:
        args.storage = check_storage_url(args.storage)
    if args.recompute_layers is not None:
        if args.recompute not in (None, "full"):
            raise AutoplanError(f"--recompute-layers needs --recompute full, got --recompute {args.recompute}")
        args.recompute = "full"
    request = PlanRequest(
        model=args.model, num_gpus=args.gpus, gpu=args.gpu, gpus_per_node=args.gpus_per_node,
        profile_path=args.profile, global_batch_size=args.global_batch, seq_len=args.seq_len,
        dtype=args.dtype or DEFAULT_DTYPE, moe_load_imbalance=args.moe_load_imbalance or 0.0,
        pins=pins_from_args(args), allow_tp_across_nodes=args.allow_tp_across_nodes, sampler=args.sampler,
        num_trials=args.trials, seed=args.seed, exhaustive=args.exhaustive, storage=args.storage,
        study_name=args.study_name, calibration_path=args.calibration,
        framework=args.framework or DEFAULT_FRAMEWORK, memory_headroom=args.memory_headroom,
        recompute_layers=args.recompute_layers, log=lambda line: sys.stderr.write(f"autoplan search: {line}\n"))
    from autoplan.cli.progress import Progress

    calibrated = f", scored with the calibration {args.calibration}" if args.calibration else ""
    try:
        with Progress("search") as progress:
            progress.stage(f"searching the plans of {args.model} on {args.gpus} GPUs ({args.sampler}{calibrated})")
            outcome = plan_search(request)
    except Exception as exc:
        # A storage that parsed but cannot be opened (locked, read-only, server down) fails inside
        # SQLAlchemy; anything else is a bug and keeps its traceback.
        if args.storage is None or not _from_the_storage(exc):
            raise
        raise AutoplanError(f"cannot use --storage {args.storage!r} (study {args.study_name or 'named by the problem'}): "
                            f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}; start afresh with another "
                            f"--study-name or a new --storage file") from None
    set_budget(outcome.document, args)
    emit(outcome.document, render_document(outcome.document, outcome.defaults), args)
    return 0


def _from_the_storage(exc: BaseException) -> bool:
    """An error raised inside SQLAlchemy or Optuna's storage and study code (a locked or read-only
    database, a schema another process is creating, a study whose stored trials do not fit this
    search): said in one line that names what to change. Anything else is a bug and keeps its
    traceback."""
    if type(exc).__module__.startswith(("sqlalchemy", "optuna.storages", "optuna.exceptions")):
        return True
    frame = exc.__traceback__
    while frame is not None and frame.tb_next is not None:
        frame = frame.tb_next
    where = frame.tb_frame.f_globals.get("__name__", "") if frame is not None else ""
    return where.startswith(("optuna.storages", "optuna.study", "optuna.trial", "optuna.distributions"))
