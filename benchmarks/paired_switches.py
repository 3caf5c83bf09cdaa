"""Switch effects measured on paired rows, not fitted over every row.

A switch is a run option whose effect the model carries as one value: async TP's hidden share of the
TP traffic (`async_tp_overlap`) and row-wise fp8's GEMM efficiency (`fp8_rowwise_efficiency`). Sources
publish them as pairs: the same run twice, once with the switch and once without (torchtitan's async-TP
table, its 405B docs table, torchao's float8 table). Fitted together with everything else, the switch's
value also absorbs whatever the model misses on the switched rows alone: left out of a refit, torchtitan
left one async row (torchtitan-docs' 405B Float8 + Async TP, 20% too slow for reasons that its
vanilla twin shares) to pin the async overlap, which went to its bound and made the held-out async rows
37-66% too fast. Measured on pairs, errors the two rows of a pair share cancel: the value is the one
at which the predicted ratio of each pair's two rows matches the published ratio (the sum of the log
ratio gaps over the pairs is zero), other values held at the fit's.

Two rows pair when they come from one source document (the first two parts of their ids, e.g.
TORCHTITAN-2506, TTDOCS-405B, TORCHAO-8B) and agree in everything the model reads except the switch.
"""
from __future__ import annotations

import math
from typing import Callable

from cost_model.validation import predict_runs

SWITCHES = {
    # name: (the switch is on, rows it can apply to, (low, high))
    "async_tp_overlap": (lambda run: run.async_tp, lambda run: run.plan.tp > 1, (0.0, 1.0)),
    "fp8_rowwise_efficiency": (lambda run: run.fp8_rowwise, lambda run: run.training.dtype == "fp8", (0.3, 1.2)),
}


def _document(run) -> str:
    return "-".join(run.id.split("-")[:2])


def _pair_key(run, switch: str) -> tuple:
    others = tuple(on(run) for name, (on, _, _) in SWITCHES.items() if name != switch)
    return (_document(run), repr(run.model), run.gpu, repr(run.cluster), repr(run.plan), repr(run.training), run.framework, run.compiled,
            run.flash_attention, run.nic_bytes_per_s, others)


def switch_pairs(runs: list, switch: str) -> list:
    """(off, on) pairs of rows that differ only in `switch`."""
    on, applies, _ = SWITCHES[switch]
    rows = [r for r in runs if applies(r)]
    offs = {}
    for r in rows:
        if not on(r):
            offs.setdefault(_pair_key(r, switch), r)
    return [(offs[_pair_key(r, switch)], r) for r in rows if on(r) and _pair_key(r, switch) in offs]


def paired_estimate(runs: list, switch: str, values: dict, constants_from: Callable, iterations: int = 30):
    """The switch's value at which the pairs' predicted on/off ratios match the published ones
    (bisection; the ratio rises with the value), or None when `runs` hold no pair."""
    pairs = switch_pairs(runs, switch)
    if not pairs:
        return None
    rows = [r for pair in pairs for r in pair]
    measured = sum(math.log(on.measured_tokens_per_s_per_gpu / off.measured_tokens_per_s_per_gpu) for off, on in pairs)

    def gap(value: float) -> float:
        predicted = {r.run.id: r.predicted_tokens_per_s_per_gpu
                     for r in predict_runs(rows, constants_from(dict(values, **{switch: value})))}
        return sum(math.log(predicted[on.id] / predicted[off.id]) for off, on in pairs) - measured

    lo, hi = SWITCHES[switch][2]
    if gap(lo) >= 0:
        return lo
    if gap(hi) <= 0:
        return hi
    for _ in range(iterations):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if gap(mid) < 0 else (lo, mid)
    return 0.5 * (lo + hi)
