"""Fit the cost model's efficiency constants on the published runs and write constants.json.

    .venv/bin/python benchmarks/fit_constants.py            # fit + the out-of-sample refits, write constants.json
    .venv/bin/python benchmarks/fit_constants.py --dry-run  # fit and print only
    .venv/bin/python benchmarks/fit_constants.py --holdout torchtitan  # fit without a source, score it
    .venv/bin/python benchmarks/fit_constants.py --provenance  # which sources' rows each constant moves

The constants are a small named set of Framework fields (autoplan.specs.framework), each a
physical quantity the analytical model cannot derive: how close a framework's GEMMs and flash
attention get to the profile's tables (the hardware is the profile's alone: nothing is keyed to a
GPU type), fp8 GEMM efficiency, how many extra bytes eager elementwise code moves (and how many
torch.compile removes), how much of the TP traffic async TP hides, how much of the DP/FSDP traffic
each framework overlaps and at what bandwidth, and the host time per layer. There is no per-row
term: the model must carry to runs it has never seen. Besides the full fit, one refit per held-out
group of every out-of-sample split (cost_model/splits.py: each source, each GPU generation, each
scale band, fp8) is written to constants.json "held_out": `autoplan validate` scores each group with
the constants that never saw it (the refits take minutes, too slow for validate to redo). Rows with
moe_num_experts are left out of every fit (cost_model.splits.fit_rows): they are validation-only. Refits
start from the full fit's values: the search is shorter, and what it can still move is what the
held-out rows pinned. They must run to convergence (the default --refit-evals): the full fit saw the
held-out rows, so a refit stopped early stays near it and flatters the out-of-sample figures
(measured 2026-11-26 on the same code: leave-one-source-out bf16 8.9% with 250 evaluations per
refit, 11.8% with 700).

Objective: mean |log(predicted / measured)| over every predicted row (symmetric in over- and
under-prediction); Powell's method within physical bounds (scipy).
"""
from __future__ import annotations

import argparse
import datetime
import math
import statistics
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from scipy.optimize import minimize

from autoplan.specs import write_json_atomic
from cost_model.constants import CONSTANTS_PATH, Constants
from cost_model.published_rows import load_published_runs
from cost_model.splits import SPLITS, fit_rows, refit_key, split_groups, withhold
from cost_model.validation import predict_runs, summarize

sys.path.insert(0, str(Path(__file__).resolve().parent))   # its sibling, also when a test loads this file by path
from paired_switches import SWITCHES, paired_estimate  # noqa: E402

# The frameworks whose facts the published rows carry (cost_model/published_rows.py), plus
# Megatron-Core, which runs Megatron's kernels (Transformer Engine GEMMs, flash attention).
PUBLISHED = ("megatron-2021", "megatron-deepspeed", "deepspeed", "llm-foundry", "torchtitan", "megatron-core")
FSDP_FRAMEWORKS = ("llm-foundry", "torchtitan")
DEEPSPEED_FRAMEWORKS = ("deepspeed", "megatron-deepspeed")

# name, Framework field, the frameworks it is written to, initial value (the previous fit's, for a
# short search), (low, high), log-scaled.
# Every fitted value belongs to a framework; none to a GPU type (the profile holds the hardware).
PARAMETERS = (
    ("gemm_efficiency", "gemm_efficiency", PUBLISHED, 0.945, (0.4, 1.2), True),
    ("fp8_gemm_efficiency", "fp8_gemm_efficiency", PUBLISHED, 1.02, (0.3, 1.2), True),
    ("fp8_rowwise_efficiency", "fp8_rowwise_efficiency", ("torchtitan",), 0.53, (0.3, 1.2), True),
    ("attention_efficiency", "attention_efficiency", PUBLISHED, 0.50, (0.3, 1.5), True),
    ("triton_attention_efficiency", "triton_attention_efficiency", PUBLISHED, 1.0, (0.2, 1.5), True),
    ("elementwise_bytes_factor", "elementwise_bytes_factor", PUBLISHED, 1.28, (1.0, 6.0), True),  # at least the minimal bytes
    ("async_tp_overlap", "async_tp_overlap", PUBLISHED, 0.33, (0.0, 1.0), False),
    ("fsdp_dp_overlap", "dp_comm_overlap", FSDP_FRAMEWORKS, 0.36, (0.0, 1.0), False),
    ("deepspeed_dp_bandwidth_scale", "dp_bandwidth_scale", DEEPSPEED_FRAMEWORKS, 0.16, (0.02, 1.0), True),
    ("overlap_contention", "overlap_contention", PUBLISHED, 0.69, (0.0, 1.0), False),
    ("pipe_microbatch_overhead_s", "microbatch_overhead_s", ("megatron-deepspeed",), 0.019, (1e-5, 0.1), True),
)


def constants_from(values: dict, provenance: dict | None = None) -> Constants:
    """Constants whose frameworks carry `values` (a parameter absent from `values` is left to the
    frameworks' documented defaults). A general host cost per layer fitted to ~0 on these runs
    and is left out. So is a host cost per layer of the ZeRO-2/3 hooks (`sharded_layer_overhead_s`):
    the collectives those hooks issue are counted (per bucket, with NCCL's latency, and FSDP2's copies
    around them), and what was fitted on top was not a property of the frameworks: 0.8 ms on every row,
    4.7 ms once llm-foundry's 149 FSDP rows were held out, when it made those rows 11% too slow (leave
    that source out: 8.9% MAPE on them with it, 6.0% with the full fit's value, bf16 leave-one-source-
    out 9.1% -> 8.0% with it at 0 in every refit).

    What torch.compile leaves of the memory-bound bytes is derived, not fitted: Inductor fuses each
    chain of pointwise ops and reductions into kernels that read their inputs and write their outputs
    once, which is the minimal count cost_model/layer_time.py counts, so a compiled run moves the
    minimal count (compiled_elementwise_factor = 1 / elementwise_bytes_factor). Fitted freely it came
    out at 0.87-1.0 of that in the full fit and most refits, and at 0.2 where few compiled rows
    remained (leave Hopper out: 0.10 against 0.49)."""
    frameworks = {}
    for name, field_name, targets, _, _, _ in PARAMETERS:
        if name in values:
            for fw in targets:
                frameworks.setdefault(fw, {})[field_name] = values[name]
    if "elementwise_bytes_factor" in values:
        for fw in PUBLISHED:
            frameworks.setdefault(fw, {})["compiled_elementwise_factor"] = 1.0 / values["elementwise_bytes_factor"]
    return Constants(frameworks=frameworks, provenance=provenance or {})


SEARCHED = tuple(p for p in PARAMETERS if p[0] not in SWITCHES)
"""The parameters Powell searches; a switch's value is measured on its paired rows (paired_switches.py)."""


def _decode(x) -> dict:
    values = {}
    for xi, (name, _, _, _, (lo, hi), log) in zip(x, SEARCHED):
        v = math.exp(xi) if log else xi
        values[name] = min(max(v, lo), hi)
    return values


def _encode(values: dict) -> list:
    return [math.log(values[name]) if log else values[name] for name, _, _, _, _, log in SEARCHED]


def _switch_values(runs: list, values: dict, rounds: int = 6) -> dict:
    """Each switch's paired estimate on `runs` with the other values at `values` (absent: no pair).
    The switches meet on some rows (row-wise fp8 with async TP), so each is re-estimated with the
    others' latest values until none moves by 1e-6."""
    current = dict(values)
    found = {}
    for _ in range(rounds):
        moved = 0.0
        for name in SWITCHES:
            v = paired_estimate(runs, name, current, constants_from)
            if v is not None:
                moved = max(moved, abs(v - current.get(name, v)) if name in found else 1.0)
                found[name] = current[name] = v
        if moved < 1e-6:
            break
    return found


WEIGHTINGS = {"rows": 0.0, "sqrt": 0.5, "sources": 1.0}
"""Each row's weight in the objective is n^-alpha, n its source's row count: "rows" counts every row
once, "sources" every source once however many rows it published, "sqrt" between the two."""


def mean_abs_log_error(runs: list, constants: Constants, weighting: str = "rows") -> float:
    """The weighted mean |log(predicted/measured)| over the predicted rows (WEIGHTINGS)."""
    results = [r for r in predict_runs(runs, constants) if not r.skipped]
    per_source = {}
    for r in results:
        per_source[r.run.source] = per_source.get(r.run.source, 0) + 1
    alpha = WEIGHTINGS[weighting]
    weights = [per_source[r.run.source] ** -alpha for r in results]
    errors = [abs(math.log(r.predicted_tokens_per_s_per_gpu / r.run.measured_tokens_per_s_per_gpu)) for r in results]
    return sum(w * e for w, e in zip(weights, errors)) / sum(weights)


def fit(runs: list, max_evals: int = 3000, start: dict | None = None, weighting: str = "rows") -> tuple:
    bounds = [(math.log(lo), math.log(hi)) if log else (lo, hi) for _, _, _, _, (lo, hi), log in SEARCHED]
    first = {name: (start or {}).get(name, init) for name, _, _, init, _, _ in PARAMETERS}
    # The switches first (on the start values), then the search with them held, then the switches again
    # on the searched values.
    switches = _switch_values(runs, first)
    x = _encode(first)
    objective, evals = float("inf"), 0
    # Powell restarted from its own answer escapes some of the shallow local minima.
    for _ in range(2):
        res = minimize(lambda v: mean_abs_log_error(runs, constants_from({**_decode(v), **switches}), weighting), x,
                       method="Powell", bounds=bounds, options={"maxfev": max_evals // 2, "xtol": 1e-3, "ftol": 1e-5})
        evals += int(res.nfev)
        if res.fun < objective:
            x, objective = res.x, float(res.fun)
    values = _decode(x)
    values.update(_switch_values(runs, {**values, **switches}))
    base = mean_abs_log_error(runs, constants_from(values), weighting)
    objective = base
    # A parameter no training row depends on (the held-out source was its only evidence) is not
    # fitted: it is dropped and its frameworks keep their documented default, as a new one would. (A
    # switch without a pair among the rows is absent already.)
    for name, _, _, init, (lo, hi), _ in SEARCHED:
        probe = dict(values, **{name: hi if values[name] < (lo + hi) / 2 else lo})
        if abs(mean_abs_log_error(runs, constants_from(probe), weighting) - base) < 1e-12:
            del values[name]
    return values, objective, evals


def constant_evidence(runs: list, values: dict, step: float = 1.05) -> dict:
    """Each fitted constant -> {source: rows whose prediction it moves} (the constant times `step`, the
    others at `values`): the sources whose measured rows chose it, so a refit without a group leaves
    out exactly that group's say in it."""
    base = {r.run.id: r.predicted_tokens_per_s_per_gpu for r in predict_runs(runs, constants_from(values))
            if not r.skipped}
    evidence = {}
    for name in values:
        moved = {}
        for r in predict_runs(runs, constants_from(dict(values, **{name: values[name] * step}))):
            if not r.skipped and abs(r.predicted_tokens_per_s_per_gpu / base[r.run.id] - 1) > 1e-9:
                moved[r.run.source] = moved.get(r.run.source, 0) + 1
        evidence[name] = dict(sorted(moved.items()))
    return evidence


def _report(summary: dict, label: str) -> None:
    a = summary["analytical"]
    print(f"{label}:")
    for name, s in [*a["per_source"].items(), ("all", a), ("bf16/fp16", a["bf16_fp16"]), ("fp8", a["fp8"])]:
        if s.get("num_rows"):
            rho = s["spearman_min"]
            print(f"  {name:12s} n={s['num_rows']:3d}  MAPE {s['mape']:6.1%}  median {s['median']:6.1%}  "
                  f"max {s['max']:7.1%}  Spearman min {'n/a' if rho is None else f'{rho:+.2f}'}")


def _held_out(runs: list, split: str, group: str) -> tuple:
    """(training rows, held-out rows) of one group of a split, neither with the facts that the group's
    measurements chose (cost_model.splits.withhold: `autoplan validate` predicts the held-out rows so)."""
    key = SPLITS[split][0]
    runs = withhold(runs, split, group)
    return [r for r in runs if key(r) != group], [r for r in runs if key(r) == group]


def _fit_job(job: tuple) -> tuple:
    split, group, max_evals, start, weighting = job
    train, _ = _held_out(fit_rows(load_published_runs()), split, group)
    return (refit_key(split, group), *fit(train, max_evals, start, weighting))


def _held_out_entry(runs: list, split: str, group: str, values: dict, objective: float) -> dict:
    train, held_rows = _held_out(runs, split, group)
    held = summarize(predict_runs(held_rows, constants_from(values)))["analytical"]
    return {"frameworks": constants_from(values).frameworks, "provenance": {
        "fitted_by": "benchmarks/fit_constants.py (out-of-sample refit)", "split": split, "held_out": group,
        "date": datetime.date.today().isoformat(), "objective_value": objective, "parameters": values,
        "not_fitted": [p[0] for p in PARAMETERS if p[0] not in values], "training_rows": len(train),
        "held_out_mape": held.get("mape"), "held_out_rows": held.get("num_rows", 0)}}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dry-run", action="store_true", help="do not write constants.json")
    ap.add_argument("--provenance", action="store_true",
                    help="print, for each shipped constant, the sources whose rows it moves (no fit)")
    ap.add_argument("--holdout", default=None, help="fit without this source and report its error")
    ap.add_argument("--max-evals", type=int, default=3000)
    ap.add_argument("--refit-evals", type=int, default=800,
                    help="evaluations per out-of-sample refit (each starts from the full fit)")
    ap.add_argument("--jobs", type=int, default=2, help="refits run in parallel")
    ap.add_argument("--weighting", choices=tuple(WEIGHTINGS), default="rows",
                    help="rows: every row counts once; sources: every source once; sqrt: between")
    args = ap.parse_args(argv)
    if args.provenance:
        from cost_model.constants import load_constants
        for name, sources in constant_evidence(fit_rows(load_published_runs()),
                                               load_constants().provenance["parameters"]).items():
            print(f"{name}: " + ", ".join(f"{source} {n}" for source, n in sources.items()))
        return 0

    # The MoE rows are validation-only: no fit sees them (`autoplan validate` scores them as the split "moe").
    runs = fit_rows(load_published_runs())
    if args.holdout:
        train = [r for r in runs if r.source != args.holdout]
        values, objective, evals = fit(train, args.max_evals, weighting=args.weighting)
        for name in values:
            print(f"  {name:30s} {values[name]:.4g}")
        print(f"objective mean|log ratio| = {objective:.4f} after {evals} evaluations")
        held = [r for r in runs if r.source == args.holdout]
        _report(summarize(predict_runs(held, constants_from(values))), f"held-out source {args.holdout}")
        _report(summarize(predict_runs(train, constants_from(values))), "training sources")
        return 0
    # The full fit, then one refit per held-out group of every split (what `autoplan validate`
    # reports out of sample), started from it: minutes each, so they run here and ship in
    # constants.json "held_out".
    # Start from the previous fit's values (a shorter search); the defaults above where absent.
    from cost_model.constants import load_constants
    previous = load_constants().provenance.get("parameters", {})
    values, objective, evals = fit(runs, args.max_evals, previous, args.weighting)
    jobs = [(split, group, args.refit_evals, values, args.weighting)
            for split in SPLITS for group in split_groups(runs, split)]
    with ProcessPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        fits = {key: (v, o, e) for key, v, o, e in pool.map(_fit_job, jobs)}
    for name in values:
        print(f"  {name:30s} {values[name]:.4g}")
    print(f"objective mean|log ratio| = {objective:.4f} after {evals} evaluations")
    summary = summarize(predict_runs(runs, constants_from(values)))
    _report(summary, "all published runs with the fitted constants")
    held_out = {refit_key(split, group): _held_out_entry(runs, split, group, *fits[refit_key(split, group)][:2])
                for split, group, _, _, _ in jobs}
    for key, entry in held_out.items():
        mape = entry["provenance"]["held_out_mape"]
        print(f"  held out {key:32s} MAPE {'no row predicted' if mape is None else f'{mape:6.1%}'} "
              f"(not fitted without it: {', '.join(entry['provenance']['not_fitted']) or 'none'})")
    a = summary["analytical"]
    provenance = {
        "fitted_by": "benchmarks/fit_constants.py",
        "date": datetime.date.today().isoformat(),
        "rows_used": a["num_rows"],
        "rows_per_source": {k: v["num_rows"] for k, v in a["per_source"].items()},
        "rows_skipped": [s["id"] for s in summary["skipped"]],
        "objective": f"mean |log(predicted/measured)| tokens/s/GPU ({args.weighting} weighted), Powell",
        "objective_value": objective,
        "mape": a["mape"], "mape_bf16_fp16": a["bf16_fp16"]["mape"],
        "mape_per_source": {k: v["mape"] for k, v in a["per_source"].items()},
        "parameters": values,
    }
    if not args.dry_run:
        c = constants_from(values, provenance)
        write_json_atomic(CONSTANTS_PATH, Constants(c.frameworks, c.provenance, held_out).to_dict())
        print(f"wrote {CONSTANTS_PATH}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
