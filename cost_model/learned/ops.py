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
error of the throughput itself on shapes the regressor did not see (5-fold CV grouped by shape,
so repeated samples of one shape never sit on both sides).
"""
from __future__ import annotations

import csv
import itertools
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
from sklearn.ensemble import GradientBoostingRegressor
from sklearn.model_selection import GroupKFold, cross_val_predict
from sklearn.neighbors import KNeighborsRegressor

from autoplan.specs import NIC_SHARE_OPS, AttentionSample, AutoplanError, CollectiveSample, HardwareProfile, MatmulSample
from autoplan.specs.validation import bare_file_name
from cost_model.tables import nic_share_bytes_per_s

MIN_SHAPES = 4
"""Fewer distinct measured shapes than this in one group: keep them as measured (a curve through
three points is no better than the cost model's own interpolation)."""


@dataclass
class OpFit:
    """One fitted regressor: the table and group it covers and its cross-validated error."""
    table: str
    group: tuple
    num_samples: int
    num_shapes: int
    cv_mape: float
    """Mean absolute percentage error of the throughput on held-out shapes (5-fold grouped CV)."""
    baseline_cv_mape: float
    """The same error for inverse-distance interpolation between measured shapes (what the cost
    model's table lookup does); the learned table replaces the measured one only when it is lower."""
    model: object
    feature_ranges: list
    """(min, max) of each input (log2 of sizes) seen in training: the grid stays inside them."""

    def summary(self) -> dict:
        return {"table": self.table, "group": list(self.group), "num_samples": self.num_samples,
                "num_shapes": self.num_shapes, "cv_mape": self.cv_mape,
                "interpolation_cv_mape": self.baseline_cv_mape, "used": self.used}

    @property
    def used(self) -> bool:
        return self.cv_mape < self.baseline_cv_mape


def _regressor(seed: int = 0) -> GradientBoostingRegressor:
    # Shallow boosted trees: monotone-ish, saturating efficiency curves with interactions between
    # dimensions (a thin k hurts a large m*n), without assuming a functional form.
    return GradientBoostingRegressor(n_estimators=150, max_depth=3, learning_rate=0.08,
                                     subsample=0.9, random_state=seed)


def _num_shapes(X: np.ndarray) -> int:
    return len(np.unique(X, axis=0))


def _fit(table: str, group: tuple, X: np.ndarray, y_log: np.ndarray, seed: int) -> OpFit:
    # Repeated samples of one shape are grouped, so the CV error is that of an unmeasured shape.
    _, shape_id = np.unique(X, axis=0, return_inverse=True)
    cv = GroupKFold(n_splits=min(5, _num_shapes(X)))
    groups = shape_id.ravel()
    pred = cross_val_predict(_regressor(seed), X, y_log, cv=cv, groups=groups)
    largest_fold = max(len(test) for _, test in cv.split(X, y_log, groups))
    idw = KNeighborsRegressor(n_neighbors=min(4, len(y_log) - largest_fold), weights="distance")
    baseline = cross_val_predict(idw, X, y_log, cv=cv, groups=groups)
    model = _regressor(seed).fit(X, y_log)
    ranges = [(float(c.min()), float(c.max())) for c in X.T]
    return OpFit(table, group, len(y_log), _num_shapes(X), _mape(pred, y_log), _mape(baseline, y_log), model, ranges)


def _mape(pred_log: np.ndarray, y_log: np.ndarray) -> float:
    return float(np.mean(np.abs(np.exp(pred_log - y_log) - 1.0)))


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
    """Fit one regressor per (table, group) with at least MIN_SHAPES distinct measured shapes."""
    fits = []
    for (dtype,), rows in _groups(profile.matmul, lambda s: (s.dtype,)).items():
        X = np.log2([[s.m, s.n, s.k] for s in rows])
        if _num_shapes(X) >= MIN_SHAPES:
            eff = np.array([s.flops_per_s for s in rows]) / profile.peak(dtype)
            fits.append(_fit("matmul", (dtype,), X, np.log(eff), seed))
    for (dtype, pass_), rows in _groups(profile.attention, lambda s: (s.dtype, s.pass_)).items():
        X = np.log2([[s.batch, s.seq_len, s.num_heads, s.head_dim] for s in rows])
        if _num_shapes(X) >= MIN_SHAPES:
            eff = np.array([s.flops_per_s for s in rows]) / profile.peak(dtype)
            fits.append(_fit("attention", (dtype, pass_), X, np.log(eff), seed))
    for (op, scope), rows in _groups(profile.collectives, lambda s: (s.op, s.scope)).items():
        X = np.log2([[s.message_bytes, s.group_size] for s in rows])
        if _num_shapes(X) >= MIN_SHAPES:
            # Across nodes an all-to-all's or a send's rows of different ranks_per_node agree only as the NIC
            # share their off-node bytes crossed: learn that (and write it back as one rank per node).
            nic = _nic_share_rows(op, scope)
            y = [nic_share_bytes_per_s(s, profile.gpus_per_node) if nic else s.bus_bandwidth_bytes_per_s for s in rows]
            fits.append(_fit("collectives", (op, scope), X, np.log(y), seed))
    return fits


def _predict(fit: OpFit, points: list[tuple]) -> np.ndarray:
    return np.exp(fit.model.predict(np.log2(np.array(points, dtype=float))))


def learned_rows(fit: OpFit, peak) -> list:
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
    rpn = 1 if _nic_share_rows(op, scope) else 0  # 1: the value is the NIC share itself (see fit_op_models)
    return [CollectiveSample(op, scope, g, size, float(v), 0.0, rpn) for (size, g), v in zip(points, values)]


def _nic_share_rows(op: str, scope: str) -> bool:
    return scope == "inter_node" and op in NIC_SHARE_OPS


def learned_profile(profile: HardwareProfile, fits: list[OpFit] | None = None, seed: int = 0) -> HardwareProfile:
    """The measured profile with each learnable table replaced by its regressor's grid predictions.

    A table is replaced only when its regressor predicts held-out shapes better than interpolating
    the measured ones; groups too small to learn, and regressors that lose, keep their measured
    samples. `sources` says which, with sample counts and both cross-validated errors;
    `environment["learned_from"]` keeps the summaries.
    """
    fits = fit_op_models(profile, seed) if fits is None else fits
    tables = {"matmul": list(profile.matmul), "attention": list(profile.attention),
              "collectives": list(profile.collectives)}
    group_of = {"matmul": lambda s: (s.dtype,), "attention": lambda s: (s.dtype, s.pass_),
                "collectives": lambda s: (s.op, s.scope)}
    sources = dict(profile.sources)
    for fit in fits:
        errors = (f"CV MAPE on held-out shapes {fit.cv_mape:.1%} learned vs {fit.baseline_cv_mape:.1%} "
                  f"interpolated, from {fit.num_samples} samples ({fit.num_shapes} shapes) of profile {profile.name!r}")
        key = f"{fit.table}[{'/'.join(fit.group)}]"
        if not fit.used:
            sources[key] = f"measured (the learned model lost to interpolation: {errors})"
            continue
        kept = [s for s in tables[fit.table] if group_of[fit.table](s) != fit.group]
        tables[fit.table] = kept + learned_rows(fit, profile.peak)
        sources[key] = f"learned: gradient-boosted trees predicted on a grid inside the measured range; {errors}"
    return replace(
        profile, name=f"{profile.name}+learned", matmul=tuple(tables["matmul"]),
        attention=tuple(tables["attention"]), collectives=tuple(tables["collectives"]),
        sources=sources,
        environment={**profile.environment, "learned_from": [f.summary() for f in fits]})


def profile_with_raw_samples(profile: HardwareProfile, profile_path) -> HardwareProfile:
    """The profile with its tables rebuilt from every raw sample (repeats and ranks, not only the
    medians) when the samples CSV its `raw_samples` names exists next to it (profiler layout: a
    `kind` column of matmul / attention / collective rows); else the profile unchanged."""
    if not profile.raw_samples:
        return profile
    if not bare_file_name(profile.raw_samples):  # from_dict refuses these; a profile built in code too
        raise AutoplanError(f"profile {profile.name!r}: raw_samples {profile.raw_samples!r} must be a file name "
                            f"beside the profile (no folder, no '..', not absolute)")
    path = Path(profile_path).parent / profile.raw_samples
    if not path.is_file():
        return profile
    with open(path, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    return replace(profile, **_raw_tables(rows)) if rows and "kind" in rows[0] else profile


def _i(value: str) -> int:
    return int(float(value))  # pandas writes integer columns with gaps as floats ("1024.0")


_RAW_MAKERS = {
    "matmul": ("matmul", lambda r: MatmulSample(_i(r["m"]), _i(r["n"]), _i(r["k"]), r["dtype"], float(r["flops_per_s"]))),
    "attention": ("attention", lambda r: AttentionSample(_i(r["batch"]), _i(r["seq_len"]), _i(r["num_heads"]),
                                                         _i(r["head_dim"]), r["dtype"], r["pass"], float(r["flops_per_s"]))),
    "collective": ("collectives", lambda r: CollectiveSample(r["op"], r["scope"], _i(r["group_size"]), _i(r["message_bytes"]),
                                                             float(r["bus_bandwidth_bytes_per_s"]), float(r["time_s"] or 0.0),
                                                             _i(r.get("ranks_per_node") or 0))),
}


def _raw_tables(rows: list[dict]) -> dict:
    tables: dict = {}
    for r in rows:
        maker = _RAW_MAKERS.get(r.get("kind", ""))
        if maker is None:
            continue
        table, make = maker
        try:
            sample = make(r)
        except (KeyError, ValueError, TypeError):
            continue  # a malformed row: the profile's own median table stays authoritative for it
        if sample.flops_per_s > 0 if table != "collectives" else sample.bus_bandwidth_bytes_per_s > 0:
            tables.setdefault(table, []).append(sample)
    return {k: tuple(v) for k, v in tables.items()}
