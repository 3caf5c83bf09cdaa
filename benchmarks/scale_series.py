"""Does per-GPU throughput fall with scale as fast in the model as in the published same-workload series?

    PYTHONPATH=$PWD .venv/bin/python benchmarks/scale_series.py [--min-ratio 4]

A series is one source's runs of one model on one GPU type at one precision and sequence length, at
three or more GPU counts spanning at least --min-ratio x (MLPerf GPT-3 175B from 256 to 11,616 H100s,
llm-foundry's MPT tables, Narayanan et al.'s 175B/530B weak scaling, KempnerForge, InternEvo...).
Every row is predicted out of sample (held out by source: the constants refitted without its source and
the facts its source's rows chose withheld, as `autoplan validate` does), once with the step's wait for
its slowest GPU (cost_model/scale_terms.py) off and once on. Printed per row: GPUs, measured tokens/s/GPU
and both predictions with their signed errors (+ = predicted too fast); per series the drop of measured
and predicted tokens/s/GPU from the smallest to the largest count, and the slope of the signed error
over log2(GPUs) (a model that loses per-GPU throughput with scale as the runs do has slope ~0; > 0: the
model is ever more too fast at scale).
"""
from __future__ import annotations

import argparse
import math
import statistics

import cost_model.scale_terms as scale_terms
from cost_model.published_rows import load_published_runs
from cost_model.validation import held_out_results


def _predictions(runs: list, term_on: bool) -> dict:
    """Run id -> predicted tokens/s/GPU held out by source, with the sync-wait term on or off."""
    saved = scale_terms.STEP_JITTER_REL
    scale_terms.STEP_JITTER_REL = saved if term_on else 0.0
    try:
        return {r.run.id: r.predicted_tokens_per_s_per_gpu for r in held_out_results(runs, split="source")
                if not r.skipped}
    finally:
        scale_terms.STEP_JITTER_REL = saved


def series(runs: list, min_ratio: float) -> dict:
    """(source, model, gpu, dtype, seq_len) -> runs sorted by GPU count, for series of 3+ counts
    spanning min_ratio x or more."""
    groups = {}
    for run in runs:
        key = (run.source, run.model.name, run.gpu, run.training.dtype, run.training.seq_len)
        groups.setdefault(key, []).append(run)
    out = {}
    for key, rows in groups.items():
        counts = sorted({r.cluster.num_gpus for r in rows})
        if len(counts) >= 3 and counts[-1] >= min_ratio * counts[0]:
            out[key] = sorted(rows, key=lambda r: (r.cluster.num_gpus, r.id))
    return out


def _slope(points: list) -> float:
    """Least-squares slope of y over x for (x, y) points."""
    mx = statistics.fmean(x for x, _ in points)
    my = statistics.fmean(y for _, y in points)
    sxx = sum((x - mx) ** 2 for x, _ in points)
    return sum((x - mx) * (y - my) for x, y in points) / sxx if sxx else 0.0


def _print_series(key: tuple, rows: list, off: dict, on: dict) -> tuple:
    """Print one series; return (slope off, slope on) of the signed error over log2(GPUs) (None, and
    nothing printed, when fewer than two GPU counts were predicted: validation-only rows, refused plans)."""
    done = [r for r in rows if r.id in off]
    if len({r.cluster.num_gpus for r in done}) < 2:
        return None
    source, model, gpu, dtype, seq = key
    print(f"\n{source} | {model} | {gpu} {dtype} seq {seq}")
    print(f"  {'run':34s} {'GPUs':>6s} {'measured':>9s} {'pred off':>9s} {'err':>7s} {'pred on':>9s} {'err':>7s}")
    pts_off, pts_on = [], []
    for r in done:
        meas = r.measured_tokens_per_s_per_gpu
        e_off, e_on = off[r.id] / meas - 1, on[r.id] / meas - 1
        pts_off.append((math.log2(r.cluster.num_gpus), e_off))
        pts_on.append((math.log2(r.cluster.num_gpus), e_on))
        print(f"  {r.id:34s} {r.cluster.num_gpus:6d} {meas:9.1f} {off[r.id]:9.1f} {e_off:+7.1%} {on[r.id]:9.1f} {e_on:+7.1%}")
    lo = [r for r in done if r.cluster.num_gpus == done[0].cluster.num_gpus]
    hi = [r for r in done if r.cluster.num_gpus == done[-1].cluster.num_gpus]

    def drop(values: dict) -> float:
        return (statistics.fmean(values[r.id] for r in hi) / statistics.fmean(values[r.id] for r in lo)) - 1

    measured = {r.id: r.measured_tokens_per_s_per_gpu for r in done}
    s_off, s_on = _slope(pts_off), _slope(pts_on)
    print(f"  {done[0].cluster.num_gpus} -> {done[-1].cluster.num_gpus} GPUs: tokens/s/GPU measured {drop(measured):+.1%}, "
          f"predicted off {drop(off):+.1%}, on {drop(on):+.1%}; error slope per doubling off {s_off:+.2%}, on {s_on:+.2%}")
    return s_off, s_on


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--min-ratio", type=float, default=4.0, help="largest / smallest GPU count of a series")
    args = parser.parse_args(argv)
    runs = load_published_runs()
    off, on = _predictions(runs, term_on=False), _predictions(runs, term_on=True)
    print(f"sync-wait term: step jitter {scale_terms.STEP_JITTER_REL:.2%} x E[max of N normals] "
          f"(N = 8: {scale_terms.expected_max_normal(8):.2f}, 1,024: {scale_terms.expected_max_normal(1024):.2f}, "
          f"8,192: {scale_terms.expected_max_normal(8192):.2f})")
    slopes = [s for key, rows in sorted(series(runs, args.min_ratio).items())
              if (s := _print_series(key, rows, off, on)) is not None]
    if slopes:
        print(f"\nmedian error slope per doubling of GPUs over {len(slopes)} series: "
              f"off {statistics.median(s for s, _ in slopes):+.2%}, on {statistics.median(s for _, s in slopes):+.2%}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
