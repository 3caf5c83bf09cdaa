"""Every pair of published rows that ran one plan in one session with a different number of micro-batches,
with the least time the extra micro-batches can add and what the source measured (cost_model/row_checks.py).

    PYTHONPATH=$PWD .venv/bin/python benchmarks/row_pairs.py [--runs published_runs.csv]

Per pair: the two rows, their micro-batch counts, the measured step times and their difference, the
least difference the extra tokens' model FLOPs allow at the GPU's dense peak, the timing-noise allowance
(REPEAT_NOISE of the longer step), and whether the pair contradicts itself and which row is excluded
(EXCLUDED_ROWS). Exit code 1 when the exclusions and the check disagree (row_checks.unexplained), so a
data maintainer adding rows sees a new contradiction before any fit does.
"""
from __future__ import annotations

import argparse

from cost_model.published_rows import PUBLISHED_RUNS_PATH, load_published_runs
from cost_model.row_checks import EXCLUDED_ROWS, REPEAT_NOISE, same_plan_pairs, step_time_s, unexplained


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", default=str(PUBLISHED_RUNS_PATH), help="a published-runs CSV")
    args = parser.parse_args(argv)
    runs = load_published_runs(args.runs)
    by_id = {r.id: r for r in runs}
    pairs = same_plan_pairs(runs)
    print(f"{len(pairs)} pairs of one plan in one session with different micro-batch counts "
          f"(noise allowance {REPEAT_NOISE:.0%} of the longer step)")
    print(f"{'fewer':34s} {'more':34s} {'m':>9s} {'steps s':>17s} {'diff s':>7s} {'least s':>8s} verdict")
    for p in pairs:
        fewer, more = by_id[p.fewer], by_id[p.more]
        verdict = "ok"
        if p.contradicts:
            out = [row for row in (p.fewer, p.more) if row in EXCLUDED_ROWS]
            verdict = f"CONTRADICTS; excluded: {', '.join(out) or 'none'}"
        print(f"{p.fewer:34s} {p.more:34s} {fewer.plan.num_microbatches:>4d}->{more.plan.num_microbatches:<4d} "
              f"{step_time_s(fewer):8.2f} {step_time_s(more):8.2f} {p.step_difference_s:7.2f} "
              f"{p.min_difference_s:8.2f} {verdict}")
    problems = unexplained(runs)
    for line in problems:
        print("PROBLEM:", line)
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
