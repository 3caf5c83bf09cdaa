"""How fast `autoplan search` answers, start-up included, and how far its plan is from the optimum.

For each (model, GPUs) case: the wall time of the real command (`autoplan search ... --json` in a
subprocess, so interpreter start-up and imports count) for a few seeds, and the gap between the
step time of the plan it chose and the exhaustive optimum (every valid plan scored, in-process).

    .venv/bin/python benchmarks/search_speed.py                 # all cases
    .venv/bin/python benchmarks/search_speed.py --quick         # the two headline cases, one seed
    .venv/bin/python benchmarks/search_speed.py --quick --instructions   # + each command's instruction count

Targets (issue 26): every case <= 1 s wall on 2 cores, start-up included, gap 0.00% (the default
search is exact). On a shared machine the CPU seconds are the figure to read (the wall time waits
for the other processes). This environment may set PYTHONDONTWRITEBYTECODE=1, which makes every
start compile the sources whose bytecode is missing (~0.2 s for all of them); `make bench` (and
`make plan`, `make test`) writes it first, as pip does for a regular install.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

CASES = [("qwen-72b", 128), ("llama-3-405b", 16384), ("llama-2-7b", 8), ("llama-3-70b", 256),
         ("mixtral-8x7b", 64), ("gpt3-175b", 1024), ("qwen2.5-7b", 32),
         # BLOOM on its own stack: autoplan's executor runs its tied embedding only at tp=1 pp=1, where it needs
         # 472 GPUs (tests/test_no_plan.py)
         ("bloom-176b", 384, "megatron-deepspeed"),
         # Megatron-Core's MoE knobs: expert TP searched with tp and ep (issue 25)
         ("mixtral-8x7b", 64, "megatron-core")]
"""(model, GPUs[, framework]): the framework is the default one unless named."""
QUICK = CASES[:2]


def autoplan_command() -> list:
    exe = Path(sys.executable).with_name("autoplan")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "autoplan"]


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _framework_args(framework: str | None) -> list:
    return ["--framework", framework] if framework else []


def timed_search(model: str, gpus: int, seed: int, framework: str | None = None) -> tuple[float, float, dict]:
    """(wall s, CPU s, plan file) of one real `autoplan search` process. On a shared machine the
    CPU seconds are what an idle one would take as wall time (the search is single-threaded)."""
    cpu_before = _children_cpu_s()
    started = time.perf_counter()
    proc = subprocess.run([*autoplan_command(), "search", "--model", model, "--gpus", str(gpus), "--seed", str(seed),
                           *_framework_args(framework), "--json"], capture_output=True, text=True, env=os.environ.copy())
    wall_s = time.perf_counter() - started
    if proc.returncode != 0:
        raise SystemExit(f"autoplan search --model {model} --gpus {gpus} failed: {proc.stderr.strip()}")
    return wall_s, _children_cpu_s() - cpu_before, json.loads(proc.stdout)


def exhaustive_optimum(model: str, gpus: int, framework: str | None = None) -> tuple[float, int, float]:
    from autoplan.planning.planner import PlanRequest, plan_search

    started = time.perf_counter()
    outcome = plan_search(PlanRequest(model=model, num_gpus=gpus, exhaustive=True,
                                      **({"framework": framework} if framework else {})))
    return outcome.best.step_time_s, outcome.result.num_evaluated, time.perf_counter() - started


def instructions(model: str, gpus: int, framework: str | None = None) -> float | None:
    """Billions of instructions the whole `autoplan search` command executes (valgrind's callgrind,
    about 50x slower than a plain run): unlike wall or CPU seconds, the count does not drift with a
    shared machine's load or clock, so before/after comparisons of the search's work hold. None
    without valgrind."""
    if shutil.which("valgrind") is None:
        return None
    proc = subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", *autoplan_command(),
                           "search", "--model", model, "--gpus", str(gpus), *_framework_args(framework), "--json"],
                          capture_output=True, text=True, env=os.environ.copy())
    found = re.search(r"Collected\s*:\s*(\d+)", proc.stderr)
    if proc.returncode != 0 or found is None:
        raise SystemExit(f"valgrind on autoplan search --model {model} --gpus {gpus} failed: {proc.stderr[-500:]}")
    return int(found.group(1)) / 1e9


def startup_s() -> float:
    """Interpreter start-up plus the CLI's imports, without a search (`autoplan models`)."""
    started = time.perf_counter()
    subprocess.run([*autoplan_command(), "models"], capture_output=True, check=True)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="the two headline cases, one seed")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--instructions", action="store_true",
                        help="also count each case's instructions once under valgrind (drift-free; ~1 min a case)")
    args = parser.parse_args()
    cases, seeds = (QUICK, 1) if args.quick else (CASES, args.seeds)
    print(f"cpu cores: {os.cpu_count()}, load average: {os.getloadavg()[0]:.1f}; "
          f"`autoplan models` (start-up + imports): {startup_s():.2f} s")
    print(f"{'model':14s} {'gpus':>6s} {'wall s (per seed)':>18s} {'cpu s (per seed)':>18s} {'trials':>7s} "
          f"{'gap vs exhaustive':>20s} "
          f"{'exhaustive: plans, s':>22s}  best plan")
    worst_gap = 0.0
    for model, gpus, *named in cases:
        framework = named[0] if named else None
        runs = [timed_search(model, gpus, seed, framework) for seed in range(seeds)]
        optimum_s, num_plans, exhaustive_s = exhaustive_optimum(model, gpus, framework)
        gaps = [doc["prediction"]["step_time_s"] / optimum_s - 1.0 for _, _, doc in runs]
        worst_gap = max(worst_gap, *gaps)
        walls = " ".join(f"{w:.2f}" for w, _, _ in runs)
        cpus = " ".join(f"{c:.2f}" for _, c, _ in runs)
        doc = runs[0][2]
        p = doc["parallel"]
        best = (f"{framework + ': ' if framework else ''}dp={p['dp']} tp={p['tp']} pp={p['pp']} cp={p['cp']} "
                f"vpp={p['vpp']} ep={p['ep']}{' etp=' + str(p['etp']) if p.get('etp') else ''} "
                f"zero={p['zero_stage']} mb={p['micro_batch_size']} {p['recompute']}; "
                f"MFU {100 * doc['prediction']['mfu']:.1f}%")
        trials = doc["search"]["num_trials"] + doc["search"].get("num_polish_moves", 0)
        print(f"{model:14s} {gpus:6d} {walls:>18s} {cpus:>18s} {trials:7d} "
              f"{' '.join(f'{100 * g:.2f}%' for g in gaps):>20s} "
              f"{num_plans:>12d}, {exhaustive_s:6.1f}  {best}", flush=True)
        if args.instructions:
            count = instructions(model, gpus, framework)
            print(f"{'':14s} {'':6s} instructions: " + (f"{count:.2f} G" if count is not None else
                                                         "valgrind not installed"), flush=True)
    print(f"worst gap: {100 * worst_gap:.2f}%")


if __name__ == "__main__":
    main()
