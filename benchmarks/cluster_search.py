"""How fast `autoplan cluster` answers, and how far its shorter per-count search is from the full one.

For each case: the wall and CPU time of the real command (`autoplan cluster ... --json` in a
subprocess, start-up included), then, for every GPU type and count it searched, the step time of
the plan the default `autoplan search` finds there (200 TPE trials + polish from 12 layouts, the
same seed) against the one the cluster search kept: the gap says what the shorter search costs.

    .venv/bin/python benchmarks/cluster_search.py            # all cases
    .venv/bin/python benchmarks/cluster_search.py --quick    # the 70B case on H100s only

Target (issue 14): ~30 s or less for a 70B model over every built-in type; gaps of a few per cent
at most (a gap makes a count look slower than it is, never faster).
"""
from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

CASES = [
    ["--model", "llama-3-70b", "--train-tokens", "2T", "--deadline-days", "30"],
    ["--model", "llama-2-7b", "--train-tokens", "1T", "--deadline-days", "10", "--gpu-hour-price", "2.5"],
]
QUICK = [CASES[0] + ["--gpu", "h100-80gb"]]


def autoplan_command() -> list:
    exe = Path(sys.executable).with_name("autoplan")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "autoplan"]


def timed_cluster(argv: list) -> tuple[float, float, int, dict]:
    """(wall s, CPU s, exit code, plan file) of one real `autoplan cluster` process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    proc = subprocess.run([*autoplan_command(), "cluster", *argv, "--json"], capture_output=True, text=True)
    wall_s = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu_s = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if proc.returncode not in (0, 1):
        sys.exit(f"autoplan cluster {' '.join(argv)} failed: {proc.stderr.strip()}")
    return wall_s, cpu_s, proc.returncode, json.loads(proc.stdout)


def full_search_step_s(doc: dict, point: dict) -> float:
    from autoplan.planning.planner import PlanRequest, plan_search

    t = doc["training"]
    outcome = plan_search(PlanRequest(model=doc["model"]["name"], num_gpus=point["num_gpus"], gpu=point["gpu"],
                                      global_batch_size=t["global_batch_size"], seq_len=t["seq_len"],
                                      seed=doc["cluster_search"]["seed"], framework=doc["framework"]))
    return outcome.best.step_time_s


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="the 70B case on H100s only")
    args = parser.parse_args()
    for argv in QUICK if args.quick else CASES:
        wall_s, cpu_s, code, doc = timed_cluster(argv)
        points = [p for p in doc["cluster_search"]["points"] if p["status"] == "ok"]
        chosen = f"{doc['cluster']['num_gpus']} x {doc['cluster']['name']}" if code == 0 else "none meets it"
        print(f"autoplan cluster {' '.join(argv)}")
        print(f"  {wall_s:.1f} s wall, {cpu_s:.1f} s CPU (start-up included), exit {code}, chosen {chosen}, "
              f"{len(points)} counts searched")
        gaps = []
        for p in points:
            full_s = full_search_step_s(doc, p)
            gap = p["step_time_s"] / full_s - 1
            gaps.append(gap)
            print(f"  {p['gpu']:>15} x {p['num_gpus']:>5,}: cluster {p['step_time_s']:9.3f} s, "
                  f"full search {full_s:9.3f} s, gap {100 * gap:+.2f}%")
        if gaps:
            print(f"  gap: max {100 * max(gaps):+.2f}%, {sum(g <= 1e-9 for g in gaps)} of {len(gaps)} counts equal "
                  f"to the full search")
    return 0


if __name__ == "__main__":
    sys.exit(main())
