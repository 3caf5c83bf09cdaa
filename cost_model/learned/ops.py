"""Op-level learned models: regressors fitted on a measured profile, baked into a "learned" profile.

The profiler measures matmuls, attention and collectives at a few dozen shapes and sizes. The
analytical cost model reads those tables by interpolation, which is only as good as the nearest
measured points. Here one scikit-learn regressor per table (and per dtype / pass / collective op and
scope) learns the measured efficiency as a smooth function of the shape, and its predictions on a
dense grid of transformer shapes replace the table. The analytical model then uses the learned
efficiencies with no change to its code: it reads a HardwareProfile as always, whose `sources` say
which tables were learned, from how many samples, with what cross-validated error.

Targets are logs (log efficiency for matmul/attention, log bus bandwidth for collectives) so that
the regressors' errors are relative; the cross-validated error is the mean absolute percentage
error of the throughput itself (5-fold, shuffled, seeded).
"""
from __future__ import annotations

import csv
import itertools
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
from sklearn.ensemble import GradientBoostingRegressor
from sklearn.model_selection import KFold, cross_val_predict

from autoplan.specs import AttentionSample, CollectiveSample, HardwareProfile, MatmulSample

MIN_SAMPLES = 6
"""Fewer measured points than this in one group: keep them as measured (nothing to learn from)."""


@dataclass
class OpFit:
    """One fitted regressor: the table and group it covers and its cross-validated error."""
    table: str
    group: tuple
    num_samples: int
    cv_mape: float
    """Mean absolute percentage error of the throughput under 5-fold CV (a fraction)."""
    model: object
    feature_ranges: list
    """(min, max) of each input (log2 of sizes) seen in training: the grid stays inside them."""

    def summary(self) -> dict:
        return {"table": self.table, "group": list(self.group), "num_samples": self.num_samples,
                "cv_mape": self.cv_mape}


def _regressor(seed: int = 0) -> GradientBoostingRegressor:
    # Shallow boosted trees: monotone-ish, saturating efficiency curves with interactions between
    # dimensions (a thin k hurts a large m*n), without assuming a functional form.
    return GradientBoostingRegressor(n_estimators=150, max_depth=3, learning_rate=0.08,
                                     subsample=0.9, random_state=seed)


def _fit(table: str, group: tuple, X: np.ndarray, y_log: np.ndarray, seed: int) -> OpFit:
    n = len(y_log)
    cv = KFold(n_splits=min(5, n), shuffle=True, random_state=seed)
    pred = cross_val_predict(_regressor(seed), X, y_log, cv=cv)
    cv_mape = float(np.mean(np.abs(np.exp(pred - y_log) - 1.0)))
    model = _regressor(seed).fit(X, y_log)
    ranges = [(float(c.min()), float(c.max())) for c in X.T]
    return OpFit(table, group, n, cv_mape, model, ranges)


def _grid_axis(lo_log2: float, hi_log2: float) -> list[int]:
    """Sizes 2^i and 3*2^(i-1) (transformer widths are often 1.5x a power of two) inside [lo, hi]."""
    lo, hi = 2 ** lo_log2, 2 ** hi_log2
    values = {int(round(lo)), int(round(hi))}
    for i in range(int(np.floor(lo_log2)), int(np.ceil(hi_log2)) + 1):
        values.update(v for v in (2 ** i, 3 * 2 ** (i - 1)) if lo <= v <= hi)
    return sorted(values)


def _grid(fit: OpFit) -> list[tuple]:
    return list(itertools.product(*(_grid_axis(lo, hi) for lo, hi in fit.feature_ranges)))


def _groups(samples, key):
    out = {}
    for s in samples:
        out.setdefault(key(s), []).append(s)
    return out


def fit_op_models(profile: HardwareProfile, seed: int = 0) -> list[OpFit]:
    """Fit one regressor per (table, group) with at least MIN_SAMPLES measured points."""
    fits = []
    for (dtype,), rows in _groups(profile.matmul, lambda s: (s.dtype,)).items():
        if len(rows) >= MIN_SAMPLES:
            X = np.log2([[s.m, s.n, s.k] for s in rows])
            eff = np.array([s.flops_per_s for s in rows]) / profile.peak(dtype)
            fits.append(_fit("matmul", (dtype,), X, np.log(eff), seed))
    for (dtype, pass_), rows in _groups(profile.attention, lambda s: (s.dtype, s.pass_)).items():
        if len(rows) >= MIN_SAMPLES:
            X = np.log2([[s.batch, s.seq_len, s.num_heads, s.head_dim] for s in rows])
            eff = np.array([s.flops_per_s for s in rows]) / profile.peak(dtype)
            fits.append(_fit("attention", (dtype, pass_), X, np.log(eff), seed))
    for (op, scope), rows in _groups(profile.collectives, lambda s: (s.op, s.scope)).items():
        if len(rows) >= MIN_SAMPLES:
            X = np.log2([[s.message_bytes, s.group_size] for s in rows])
            fits.append(_fit("collectives", (op, scope), X,
                             np.log([s.bus_bandwidth_bytes_per_s for s in rows]), seed))
    return fits


def _predict(fit: OpFit, points: list[tuple]) -> np.ndarray:
    return np.exp(fit.model.predict(np.log2(np.array(points, dtype=float))))


def _learned_rows(fit: OpFit, peak) -> list:
    points = _grid(fit)
    values = _predict(fit, points)
    if fit.table == "matmul":
        (dtype,) = fit.group
        # An efficiency above 1 is a regressor artefact: the datasheet peak is a hard ceiling.
        return [MatmulSample(m, n, k, dtype, float(min(v, 1.0) * peak(dtype)))
                for (m, n, k), v in zip(points, values)]
    if fit.table == "attention":
        dtype, pass_ = fit.group
        return [AttentionSample(b, s, h, d, dtype, pass_, float(min(v, 1.0) * peak(dtype)))
                for (b, s, h, d), v in zip(points, values)]
    op, scope = fit.group
    return [CollectiveSample(op, scope, g, size, float(v), 0.0) for (size, g), v in zip(points, values)]


def learned_profile(profile: HardwareProfile, fits: list[OpFit] | None = None, seed: int = 0) -> HardwareProfile:
    """The measured profile with each learnable table replaced by its regressor's grid predictions.

    Groups too small to learn keep their measured samples. `sources` names every learned table with
    its sample count and cross-validated error; `environment["learned_from"]` keeps the summaries.
    """
    fits = fit_op_models(profile, seed) if fits is None else fits
    tables = {"matmul": list(profile.matmul), "attention": list(profile.attention),
              "collectives": list(profile.collectives)}
    group_of = {"matmul": lambda s: (s.dtype,), "attention": lambda s: (s.dtype, s.pass_),
                "collectives": lambda s: (s.op, s.scope)}
    sources = dict(profile.sources)
    for fit in fits:
        kept = [s for s in tables[fit.table] if group_of[fit.table](s) != fit.group]
        tables[fit.table] = kept + _learned_rows(fit, profile.peak)
        sources[f"{fit.table}[{'/'.join(fit.group)}]"] = (
            f"learned: gradient-boosted trees on {fit.num_samples} measured samples of profile "
            f"{profile.name!r}, predicted on a grid inside the measured range; 5-fold CV MAPE "
            f"{fit.cv_mape:.1%}")
    return replace(
        profile, name=f"{profile.name}+learned", matmul=tuple(tables["matmul"]),
        attention=tuple(tables["attention"]), collectives=tuple(tables["collectives"]),
        sources=sources,
        environment={**profile.environment, "learned_from": [f.summary() for f in fits]})


def profile_with_raw_samples(profile: HardwareProfile, profile_path) -> HardwareProfile:
    """The profile with its tables rebuilt from every raw sample (not only the medians), if the raw
    samples CSV named by `raw_samples` exists and has the sample tables' columns."""
    if not profile.raw_samples:
        return profile
    path = Path(profile_path).parent / profile.raw_samples
    if not path.is_file():
        return profile
    with open(path, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    return replace(profile, **_raw_tables(rows)) if rows and "table" in rows[0] else profile


def _raw_tables(rows: list[dict]) -> dict:
    makers = {
        "matmul": lambda r: MatmulSample(int(r["m"]), int(r["n"]), int(r["k"]), r["dtype"], float(r["flops_per_s"])),
        "attention": lambda r: AttentionSample(int(r["batch"]), int(r["seq_len"]), int(r["num_heads"]),
                                               int(r["head_dim"]), r["dtype"], r["pass"], float(r["flops_per_s"])),
        "collectives": lambda r: CollectiveSample(r["op"], r["scope"], int(r["group_size"]), int(r["message_bytes"]),
                                                  float(r["bus_bandwidth_bytes_per_s"])),
    }
    out = {}
    for table, make in makers.items():
        samples = []
        for r in rows:
            if r.get("table") == table:
                try:
                    samples.append(make(r))
                except (KeyError, ValueError, TypeError):
                    continue  # a row of another layout: the profile's own table stays authoritative
        if samples:
            out[table] = tuple(samples)
    return out
