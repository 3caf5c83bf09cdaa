"""Predicted vs published throughput: per-row errors and the summary figures of `autoplan validate`.

Errors are fractions: APE = |predicted - measured| / measured on tokens/s/GPU. Rank quality is the
Spearman correlation within each sweep (rows of one source, model, GPU and precision that vary
the plan), reported as the minimum over sweeps with at least three rows and distinct measurements.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass

from autoplan.specs import InfeasiblePlan
from autoplan.specs.flops import model_flops_per_token
from cost_model.constants import Constants, load_constants
from cost_model.estimator import Estimator
from cost_model.profiles import builtin_profile
from cost_model.published import PublishedRun

CONSTANT_MFU = 0.415
"""The baseline: one MFU for every run (the brief's reference point, 22.5% MAPE)."""
MIN_SWEEP_ROWS = 3


@dataclass(frozen=True)
class RowResult:
    run: PublishedRun
    predicted_tokens_per_s_per_gpu: float | None
    skipped: str = ""
    """Why the row was not predicted (the plan breaks a rule of ours), else empty."""
    fits: bool = True
    predicted_peak_memory_bytes: float | None = None

    @property
    def ape(self) -> float:
        measured = self.run.measured_tokens_per_s_per_gpu
        return abs(self.predicted_tokens_per_s_per_gpu - measured) / measured


def predict_runs(runs: list, constants: Constants | None = None, framework: str | None = None) -> list:
    """Predict every run with the framework it ran on (or `framework` for all, to see how that
    framework's facts score them); a plan that breaks a rule (the plan's or the framework's)
    becomes a skipped row with its reason."""
    results = []
    for run in runs:
        est = Estimator(run.model, run.training, run.cluster, run.profile(),
                        framework=run.framework_facts(constants, framework), constants=constants)
        try:
            e = est.estimate(run.plan)
        except InfeasiblePlan as exc:
            results.append(RowResult(run, None, skipped=f"{exc.reason}: {exc}"))
            continue
        results.append(RowResult(run, e.tokens_per_s_per_gpu, fits=e.fits,
                                 predicted_peak_memory_bytes=e.peak_memory_bytes))
    return results


def held_out_results(runs: list, constants: Constants | None = None, framework: str | None = None) -> list:
    """Leave-one-source-out: each source's rows predicted with the constants refitted without it
    (shipped in constants.json "loso" by benchmarks/fit_constants.py). Sources without a refit
    (a user's own CSV) are left out; an empty list when the file has no refits."""
    constants = constants or load_constants()
    results = []
    for source in sorted({r.source for r in runs}):
        if source in constants.loso:
            results += predict_runs([r for r in runs if r.source == source], constants.held_out(source),
                                    framework=framework)
    return results


def constant_mfu_prediction(run: PublishedRun) -> float:
    peak = builtin_profile(run.gpu).peak(run.training.dtype)
    return CONSTANT_MFU * peak / model_flops_per_token(run.model, run.training.seq_len)


def _ranks(values: list) -> list:
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2.0
        i = j + 1
    return ranks


def spearman(xs: list, ys: list) -> float:
    """Spearman rank correlation (average ranks for ties); nan when either side is constant."""
    rx, ry = _ranks(xs), _ranks(ys)
    mx, my = statistics.fmean(rx), statistics.fmean(ry)
    sxy = sum((a - mx) * (b - my) for a, b in zip(rx, ry))
    sxx = sum((a - mx) ** 2 for a in rx)
    syy = sum((b - my) ** 2 for b in ry)
    if sxx == 0 or syy == 0:
        return float("nan")
    return sxy / (sxx * syy) ** 0.5


def _summary(results: list, predicted=None) -> dict:
    predicted = predicted or (lambda r: r.predicted_tokens_per_s_per_gpu)
    apes = [abs(predicted(r) - r.run.measured_tokens_per_s_per_gpu) / r.run.measured_tokens_per_s_per_gpu
            for r in results]
    if not apes:
        return {"num_rows": 0}
    sweeps = {}
    for r in results:
        sweeps.setdefault(r.run.sweep, []).append(r)
    rhos = {}
    for name, rows in sweeps.items():
        if len(rows) < MIN_SWEEP_ROWS:
            continue
        rho = spearman([predicted(r) for r in rows], [r.run.measured_tokens_per_s_per_gpu for r in rows])
        if rho == rho:  # not nan
            rhos[name] = rho
    return {
        "num_rows": len(apes),
        "mape": statistics.fmean(apes),
        "median": statistics.median(apes),
        "max": max(apes),
        "spearman_min": min(rhos.values()) if rhos else None,
        "spearman_mean": statistics.fmean(rhos.values()) if rhos else None,
        "spearman_per_sweep": rhos,
    }


def memory_summary(results: list) -> dict:
    """Predicted peak memory against what the sources report, per source (ratio = pred/reported)."""
    per_source = {}
    for r in results:
        if r.skipped == "" and r.run.reported_peak_memory_bytes:
            per_source.setdefault(r.run.source, []).append(
                r.predicted_peak_memory_bytes / r.run.reported_peak_memory_bytes)
    return {name: {"num_rows": len(ratios), "mape": statistics.fmean(abs(x - 1) for x in ratios),
                   "median_ratio": statistics.median(ratios), "min_ratio": min(ratios),
                   "max_ratio": max(ratios)} for name, ratios in sorted(per_source.items())}


def summarize(results: list) -> dict:
    """The `--json` document of `autoplan validate` (errors as fractions)."""
    done = [r for r in results if r.skipped == ""]
    half = [r for r in done if r.run.training.dtype in ("bf16", "fp16")]
    per_source = {}
    for r in done:
        per_source.setdefault(r.run.source, []).append(r)
    analytical = _summary(done)
    analytical["bf16_fp16"] = _summary(half)
    analytical["fp8"] = _summary([r for r in done if r.run.training.dtype == "fp8"])
    analytical["per_source"] = {name: _summary(rows) for name, rows in sorted(per_source.items())}
    analytical["num_not_fitting_memory"] = sum(1 for r in done if not r.fits)
    analytical["peak_memory"] = memory_summary(done)
    baseline = _summary(done, predicted=lambda r: constant_mfu_prediction(r.run))
    baseline["bf16_fp16"] = _summary(half, predicted=lambda r: constant_mfu_prediction(r.run))
    return {
        "analytical": analytical,
        "constant_mfu_baseline": {"mfu": CONSTANT_MFU, **baseline},
        "skipped": [{"id": r.run.id, "reason": r.skipped} for r in results if r.skipped],
    }
