"""How well the built-in GEMM table prices one grouped expert GEMM: the measured `torch._grouped_mm`
rates of the kernel records against the table's rate at each expert's own shape, which is what the
cost model charges a local expert (cost_model/flops.py layer_gemms: rows per expert x count).

    PYTHONPATH=. .venv/bin/python benchmarks/grouped_gemm_table.py

The records (cost_model/data/kernels/kernel_rates-{h100,h200}.json, `grouped` entries, variant
grouped-balanced) time four models' expert shapes (Qwen3-30B-A3B, Qwen3-235B-A22B, DeepSeek-V3,
Mixtral 8x7B; up and down projections) with 8 and 32 local experts at 128-8192 tokens per expert.
Printed per GPU: the measured rate over the table's, per tokens-per-expert (median and range), and
three mean absolute errors of the predicted rate: the table alone, the table times the ratio the
other three models' records give at the nearest shapes (inverse-distance weights over log m, n, k,
each model held out in turn: what wiring the records would give a model they do not hold), and the
grouped kernel's own model (cost_model/grouped_gemm.py: fixed time + compute of the stacked rows and
HBM streaming, its two parameters fitted on the other three models), which the cost model prices with.
"""
from __future__ import annotations

import math
import statistics

from cost_model.grouped_gemm import GROUPED_RECORDS, balanced_entries, fit_kernel, kernel_time_s, record_points
from cost_model.profiles import builtin_profile
from cost_model.tables import ProfileTables

IDW_POWER = 4  # the best of 1, 2 and 4 for the held-out interpolation (the comparison's favour)


def grouped_points(gpu: str, record: str) -> list:
    """(model, tokens per expert, n, k, measured FLOP/s, table FLOP/s) per balanced grouped entry."""
    tables = ProfileTables(builtin_profile(gpu))
    return [(e["model"], e["tokens_per_expert"], e["n"], e["k"], e["flops_per_s"],
             tables.matmul_flops_per_s(e["tokens_per_expert"], e["n"], e["k"], "bf16"))
            for e in balanced_entries(record)]


def held_out_ratio(point: tuple, points: list) -> float:
    """measured/table at `point`'s shape, interpolated from the other models' points."""
    x = tuple(math.log(v) for v in point[1:4])
    num = den = 0.0
    for other in points:
        if other[0] == point[0]:
            continue
        weight = math.dist(x, tuple(math.log(v) for v in other[1:4])) ** -IDW_POWER
        num += weight * math.log(other[4] / other[5])
        den += weight
    return math.exp(num / den)


def main() -> None:
    for gpu, record in GROUPED_RECORDS.items():
        points = grouped_points(gpu, record)
        print(f"{gpu}: {len(points)} grouped GEMMs timed ({record})")
        print("  tokens/expert  measured/table: median (min-max)")
        for m in sorted({p[1] for p in points}):
            ratios = [p[4] / p[5] for p in points if p[1] == m]
            print(f"  {m:13d}  {statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f})")
        table_alone = statistics.fmean(abs(p[5] / p[4] - 1) for p in points)
        interpolated = statistics.fmean(abs(p[5] * held_out_ratio(p, points) / p[4] - 1) for p in points)
        print(f"  rate error, mean over the entries: table alone {table_alone:.1%}; table x the other models' "
              f"measured ratio {interpolated:.1%}")
        print_kernel_model(gpu, record, points)


def print_kernel_model(gpu: str, record: str, points: list) -> None:
    """The grouped kernel's own model (cost_model/grouped_gemm.py), each model held out in turn: fitted on
    the other three, scored on it; beside the per-expert table's error on the same entries."""
    tables = ProfileTables(builtin_profile(gpu))
    timed = record_points(tables, record)
    print(f"  grouped kernel model, fitted on all entries: {fit_kernel(timed)}")
    print("  held-out model   fixed_s  overlap  rate error: kernel model / table alone")
    errors = []
    for held in sorted({p[0] for p in timed}):
        kernel = fit_kernel([p for p in timed if p[0] != held])
        mine = [abs(t / kernel_time_s(kernel, c, s) - 1) for model, t, c, s in timed if model == held]
        table = [abs(p[5] / p[4] - 1) for p in points if p[0] == held]
        errors += mine
        print(f"  {held:15s} {kernel.fixed_s * 1e6:5.0f} us  {kernel.overlap:6.2f}  "
              f"{statistics.fmean(mine):6.1%} / {statistics.fmean(table):6.1%}")
    print(f"  every entry, its model held out: {statistics.fmean(errors):.1%}")


if __name__ == "__main__":
    main()
