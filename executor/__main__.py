"""`python -m executor PLAN.json [flags]`: the cluster entry point, one process per GPU under
torchrun, e.g.

    torchrun --nnodes 16 --nproc-per-node 8 --rdzv-backend c10d --rdzv-endpoint HOST:29500 \\
        -m executor plan.json --device cuda --steps 50 -o runs.jsonl

Rank 0 appends the Measurement to --out. Without torchrun (no WORLD_SIZE in the environment) it
says to use `autoplan run`, which starts the local processes itself (the executor does not import
the CLI: DESIGN.md's layering).
"""
from __future__ import annotations

import argparse
import os
import sys

from autoplan.specs import AutoplanError, PlanDocument

from executor.options import add_run_arguments, options_from_args


def main(argv: list[str] | None = None) -> int:
    if "WORLD_SIZE" not in os.environ:
        args = " ".join(sys.argv[1:] if argv is None else argv)
        sys.stderr.write("python -m executor: error: no WORLD_SIZE in the environment: this is the torchrun "
                         f"entry point; run locally with `autoplan run {args}`, or start it under torchrun\n")
        return 2
    parser = argparse.ArgumentParser(prog="python -m executor", description=__doc__.split("\n\n")[0])
    parser.add_argument("plans", nargs="+", metavar="PLAN")
    add_run_arguments(parser)
    args = parser.parse_args(argv)
    try:
        options = options_from_args(args)
        from executor.torch_backend.launch import allocator_env

        os.environ.update(allocator_env(options, os.environ))  # before anything starts CUDA
        if options.backend != "torch":
            raise AutoplanError(f"under torchrun only --backend torch runs, got {options.backend!r}; "
                                "start the xla backend with `autoplan run --backend xla`")
        from executor.torch_backend import check

        # Each rank reads and checks the plan files once (torchrun starts the ranks: no process
        # holds a checked plan to hand them), and trains those very documents.
        docs = [PlanDocument.load(path) for path in args.plans]
        for doc in docs:
            check(doc, options)
    except AutoplanError as exc:
        if os.environ.get("RANK", "0") == "0":  # every rank finds the same problem; say it once
            sys.stderr.write(f"python -m executor: error: {exc}\n")
        return 2
    from executor.torch_backend.worker import run_plans

    return run_plans(docs, options, result_path=None)


if __name__ == "__main__":
    sys.exit(main())
