"""`autoplan cluster`: the cluster to ask for -- GPU type and count -- to train N tokens by a deadline
and/or within a budget, with a scaling table per GPU type and the runners-up at other sizes.

Exit codes: 0 a cluster meets the goal, 1 none searched does (the fastest found and by how much it
misses are printed), 2 bad input. Thin: parse, build a ClusterRequest, call
`autoplan.planning.cluster_search.cluster_search`, print or write.
"""
from __future__ import annotations

import sys

from autoplan.cli.argtypes import (
    MAX_GLOBAL_BATCH, MAX_NUM_GPUS, MAX_SEQ_LEN, MAX_TRIALS, add_memory_headroom, days, framework_name,
    gpu_hour_prices, int_at_most, load_imbalance, money, output_path, seed_int, token_count,
)


def register(subparsers) -> None:
    from autoplan.planning.cluster_search import CLUSTER_TRIALS, DEFAULT_GPUS_MAX, DEFAULT_GPUS_MIN

    p = subparsers.add_parser("cluster",
                              help="the GPU type and count to ask for: train N tokens by a deadline or budget",
                              description=__doc__.split("\n\n")[0])
    g = p.add_argument_group("what to train and the goal")
    g.add_argument("--model", required=True,
                   help="catalog name (see `autoplan models`), a Hugging Face config.json, or a folder holding one")
    g.add_argument("--train-tokens", type=token_count, required=True, metavar="N",
                   help="tokens to train on (2e12, 2T, 300B)")
    g.add_argument("--deadline-days", type=days, default=None, metavar="D",
                   help="train within D days (steady-state throughput): picks the cheapest cluster that meets it")
    g.add_argument("--budget", type=money, default=None, metavar="USD",
                   help="spend at most this much (1.5M, $250K); needs --gpu-hour-price; alone it picks the fastest "
                        "cluster within it")
    c = p.add_argument_group("the clusters searched")
    c.add_argument("--gpu", action="append", default=None, metavar="TYPE[,TYPE...]",
                   help="built-in GPU types to search (default: every built-in type, or the ones priced)")
    c.add_argument("--profile", action="append", default=[], metavar="PATH",
                   help="a measured hardware profile (from `autoplan profile`) to search too; repeatable")
    c.add_argument("--gpu-hour-price", type=gpu_hour_prices, default=None, metavar="PRICE|TYPE=PRICE,...",
                   help="price of one GPU-hour, for all types (2.50) or per type (h100-80gb=2.5,a100-80gb=1.6); "
                        "without it the cost is unknown and clusters are ranked by GPU-hours")
    c.add_argument("--gpus-min", type=int_at_most(MAX_NUM_GPUS, "GPUs"), default=DEFAULT_GPUS_MIN, metavar="N",
                   help=f"smallest GPU count searched (default: {DEFAULT_GPUS_MIN})")
    c.add_argument("--gpus-max", type=int_at_most(MAX_NUM_GPUS, "GPUs"), default=DEFAULT_GPUS_MAX, metavar="N",
                   help=f"largest GPU count searched (default: {DEFAULT_GPUS_MAX:,}); counts are powers of two up to "
                        f"a node, then whole nodes in powers of two")
    c.add_argument("--framework", default=None, metavar="NAME", type=framework_name,
                   help="the framework that will run the plan (default: autoplan); see `autoplan frameworks`")
    add_memory_headroom(c)
    t = p.add_argument_group("training shape (the same on every cluster; defaults are printed)")
    t.add_argument("--global-batch", type=int_at_most(MAX_GLOBAL_BATCH, "sequences"), default=None, metavar="N",
                   help="global batch in sequences per optimizer step (default: ~4M tokens)")
    t.add_argument("--dtype", choices=("bf16", "fp16", "fp8"), default="bf16",
                   help="training precision of the matmuls; GPU types without it are left out (default: bf16)")
    t.add_argument("--seq-len", type=int_at_most(MAX_SEQ_LEN, "tokens"), default=None, metavar="TOKENS",
                   help="tokens per sequence (default: 4096, capped at the model's context)")
    t.add_argument("--moe-load-imbalance", type=load_imbalance, default=None, metavar="F",
                   help="MoE only: your run's routed tokens of the busiest expert-parallel rank over the mean "
                        "(default: the framework's; see `autoplan search --help`)")
    s = p.add_argument_group("search")
    s.add_argument("--trials", type=int_at_most(MAX_TRIALS, "trials"), default=CLUSTER_TRIALS, metavar="N",
                   help=f"Optuna trials per GPU type and count, then a short local polish (default: {CLUSTER_TRIALS})")
    s.add_argument("--seed", type=seed_int, default=0, help="sampler seed, the same at every count (default: 0)")
    p.add_argument("-o", "--output", type=output_path, default=None, metavar="PLAN.json",
                   help="write the chosen plan as a plan file (autoplan.plan/v2) that estimate/export/run read")
    p.add_argument("--json", action="store_true",
                   help="print the chosen plan file (the fastest found when none meets the goal), with the "
                        "whole scaling table under cluster_search")
    p.set_defaults(func=run)


def run(args) -> int:
    from autoplan.cli.progress import Progress
    from autoplan.rendering.cluster_render import render_cluster
    from autoplan.planning.cluster_search import ClusterRequest, Goal, cluster_search, gpu_options
    from autoplan.specs import DEFAULT_FRAMEWORK, is_stdout, write_json_atomic
    from autoplan.specs.jsonio import dumps

    gpus = [g for item in args.gpu for g in item.split(",") if g.strip()] if args.gpu else None
    if args.gpu is not None and not gpus:
        from autoplan.specs import AutoplanError

        raise AutoplanError("--gpu is empty; give built-in GPU types such as h100-80gb,a100-80gb")
    goal = Goal(args.train_tokens, args.deadline_days, args.budget)
    with Progress("cluster") as progress:
        progress.stage(f"reading the GPU types of {args.model}'s search")
        options = gpu_options(gpus, args.profile, args.gpu_hour_price)
        request = ClusterRequest(model=args.model, goal=goal, options=options, gpus_min=args.gpus_min,
                                 gpus_max=args.gpus_max, framework=args.framework or DEFAULT_FRAMEWORK,
                                 seq_len=args.seq_len, global_batch_size=args.global_batch, num_trials=args.trials,
                                 seed=args.seed, memory_headroom=args.memory_headroom, dtype=args.dtype,
                                 moe_load_imbalance=args.moe_load_imbalance or 0.0,
                                 progress=lambda at: progress.stage(f"searching the plans of {args.model} on {at}"))
        outcome = cluster_search(request)
        text = render_cluster(outcome)
    shown = outcome.chosen or outcome.fastest
    if outcome.chosen is not None and args.output is not None:
        write_json_atomic(args.output, outcome.document(outcome.chosen).to_dict())
    if args.output is not None and is_stdout(args.output):
        if outcome.chosen is None:  # no plan file to write: the table says why, on stderr
            sys.stderr.write(text)
        return 0 if outcome.chosen is not None else 1
    if args.json:
        # With no plan anywhere there is no plan file to print: the table alone says so.
        doc = outcome.document(shown).to_dict() if shown else {"cluster_search": outcome.summary(False)}
        sys.stdout.write(dumps(doc))
    else:
        sys.stdout.write(text)
        if outcome.chosen is not None and args.output:
            sys.stdout.write(f"\nplan file written: {args.output}\n")
    return 0 if outcome.chosen is not None else 1
