"""MT-NLG's micro-batch, which its paper does not state, solved from its own three step times.

Smith et al. 2022 (arXiv:2201.11990, sec. 2.4) timed one 530B model, one 280-GPU pipeline replica (TP 8
inside a node, PP 35 across nodes), at 8, 10 and 12 replicas, batch 1920: 60.1, 50.2 and 44.4 s a step
(cost_model/data/published_runs.csv MTNLG-530B-01..03). DeepSpeed's 1F1B step is (m + p - 1) t_b + d:
m = B / (dp b) micro-batches of b samples, each t_b on the slowest stage, the fill and drain p - 1 more,
and d what does not scale with the micro-batches (the data-parallel all-reduce, the optimizer). With
t_b = b tau + o (o: whatever a micro-batch costs besides its samples) the step is

    step(dp) = (B tau + B o / b) / dp + (p - 1) t_b + d

a line in 1 / dp whose slope A is B t_b / b and whose intercept C is (p - 1) t_b + d, so

    b = (C - d) B / ((p - 1) A)

with no cost-model constant in it. The three published times give A and C by least squares; b must
divide every replica's B / dp; the admissible b nearest the solve at d = 0 is the micro-batch. The
script prints the d below which that stays the answer (where the solve crosses halfway to the next
value): the model prices MT-NLG's d, its all-reduce and optimizer, at 0.2-1.2 s.

    .venv/bin/python benchmarks/mtnlg_micro_batch.py     # exit 1 if the solve disagrees with source_facts

cost_model/source_facts.py MTNLG_MICRO_BATCH holds the result as a fact the rows chose: `autoplan
validate` withholds it wherever MT-NLG's rows are held out, and they then take the default rule's 1.
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cost_model.published_rows import load_published_runs  # noqa: E402
from cost_model.row_checks import step_time_s  # noqa: E402
from cost_model.source_facts import MTNLG_MICRO_BATCH  # noqa: E402


def series(runs: list) -> list:
    """MT-NLG's rows, fewest replicas first."""
    return sorted((r for r in runs if r.source == MTNLG_MICRO_BATCH.source), key=lambda r: r.plan.dp)


def line_fit(points: list) -> tuple:
    """Least-squares slope and intercept of step time against 1 / replicas."""
    xs = [1.0 / dp for dp, _ in points]
    ys = [s for _, s in points]
    x_mean, y_mean = sum(xs) / len(xs), sum(ys) / len(ys)
    slope = sum((x - x_mean) * (y - y_mean) for x, y in zip(xs, ys)) / sum((x - x_mean) ** 2 for x in xs)
    return slope, y_mean - slope * x_mean


def solve_micro_batch(points: list, pp: int, global_batch: int) -> dict:
    """The micro-batch the series implies: the continuous solve at d = 0, the admissible values (those
    dividing every replica's share of the batch), the nearest of them, and d at each admissible value."""
    slope_s, intercept_s = line_fit(points)
    solved = intercept_s * global_batch / ((pp - 1) * slope_s)
    # Up to twice the solve: a larger one would leave d far below zero.
    admissible = [b for b in range(1, int(2 * solved) + 2)
                  if all(global_batch % (dp * b) == 0 for dp, _ in points)]
    nearest = min(admissible, key=lambda b: abs(b - solved))
    fill_s = {b: (pp - 1) * b * slope_s / global_batch for b in admissible}
    smaller = [b for b in admissible if b < nearest]
    # The d at which the solve falls halfway to the next smaller admissible value.
    holds_below_s = intercept_s - fill_s[nearest] * (nearest + smaller[-1]) / (2 * nearest) if smaller else None
    return {"slope_s": slope_s, "intercept_s": intercept_s, "solved": solved, "admissible": admissible,
            "micro_batch": nearest, "fill_s": fill_s, "holds_below_s": holds_below_s}


def main() -> int:
    rows = series(load_published_runs())
    points = [(r.plan.dp, step_time_s(r)) for r in rows]
    pp, batch = rows[0].plan.pp, rows[0].training.global_batch_size
    s = solve_micro_batch(points, pp, batch)
    print(f"MT-NLG 530B, PP {pp}, batch {batch}: " + ", ".join(f"{dp} replicas {t:.2f} s" for dp, t in points))
    print(f"step = {s['slope_s']:.1f} s / replicas + {s['intercept_s']:.2f} s (least squares over 1 / replicas)")
    print(f"fill and drain = intercept - d; at d = 0 the micro-batch is {s['solved']:.2f} samples")
    for b, fill in s["fill_s"].items():
        print(f"  micro-batch {b}: fill and drain {fill:.2f} s, leaving d = {s['intercept_s'] - fill:+.2f} s a step")
    print(f"nearest admissible micro-batch: {s['micro_batch']}, the answer for any d below "
          f"{s['holds_below_s']:.2f} s (cost_model/source_facts.py says {MTNLG_MICRO_BATCH.value:g})")
    return 0 if s["micro_batch"] == MTNLG_MICRO_BATCH.value else 1


if __name__ == "__main__":
    sys.exit(main())
