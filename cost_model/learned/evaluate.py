"""Honest evaluation of the learned correction: analytical vs calibrated under grouped CV.

A *sweep* is the rows one source published for one model (e.g. llm-foundry's "H100 80GB BF16"
section for MPT-7b): they share a cluster, a code base and a measuring habit, so a model that saw
part of a sweep has seen the answer for the rest. Every calibrated prediction here is therefore made
by a correction fitted without any row of the predicted row's group (GroupKFold or leave-one-group-
out), and the analytical prediction of the same rows is scored beside it.

Errors are absolute percentage errors of the throughput (tokens/s), |predicted - measured| / measured,
as `autoplan validate` reports them; from step times that is |measured_s / predicted_s - 1|. They are
fractions: mean (MAPE), median and max; plus Spearman's rank correlation within each sweep of at
least 3 rows (does the model order the plans of one sweep correctly?), averaged over sweeps.
"""
from __future__ import annotations

import numpy as np
from scipy.stats import spearmanr
from sklearn.base import clone
from sklearn.model_selection import GroupKFold, LeaveOneGroupOut

from cost_model.learned.correction import correction_in_distribution, make_correction


def error_metrics(predicted_s, measured_s, sweeps=None) -> dict:
    """Throughput MAPE, median and max absolute percentage error (fractions) from step times, and
    the mean within-sweep Spearman correlation."""
    predicted_s, measured_s = np.asarray(predicted_s, float), np.asarray(measured_s, float)
    ape = throughput_ape(predicted_s, measured_s)
    out = {"mape": float(ape.mean()), "median": float(np.median(ape)), "max": float(ape.max()),
           "num_rows": int(ape.size)}
    if sweeps is not None:
        out["spearman_within_sweeps"] = spearman_within_sweeps(predicted_s, measured_s, sweeps)
    return out


def throughput_ape(predicted_s, measured_s) -> np.ndarray:
    """|predicted - measured| / measured of tokens/s, from step times (tokens/s = tokens / step time)."""
    return np.abs(np.asarray(measured_s, float) / np.asarray(predicted_s, float) - 1.0)


def spearman_within_sweeps(predicted_s, measured_s, sweeps, min_rows: int = 3) -> float | None:
    """Mean Spearman rho over sweeps with >= min_rows rows and non-constant values; None if none."""
    sweeps = np.asarray(sweeps)
    rhos = []
    for sweep in np.unique(sweeps):
        sel = sweeps == sweep
        p, m = np.asarray(predicted_s)[sel], np.asarray(measured_s)[sel]
        if sel.sum() < min_rows or np.ptp(p) == 0 or np.ptp(m) == 0:
            continue
        rhos.append(float(spearmanr(p, m).statistic))
    return float(np.mean(rhos)) if rhos else None


def grouped_predictions(records, measured_s, groups, estimator=None, n_splits: int | None = None):
    """Out-of-group calibrated step times for every record.

    Returns (calibrated_s, corrected_mask, fold_of_row). `n_splits=None` means leave-one-group-out;
    otherwise GroupKFold with that many folds. The estimator maps records -> log(measured/analytical)
    and is cloned per fold, so nothing fitted on one fold reaches another.
    """
    records = list(records)
    measured_s = np.asarray(measured_s, float)
    groups = np.asarray(groups)
    analytical_s = np.array([r["analytical_step_time_s"] for r in records], float)
    target = np.log(measured_s / analytical_s)
    estimator = make_correction() if estimator is None else estimator
    splitter = LeaveOneGroupOut() if n_splits is None else GroupKFold(n_splits=n_splits)
    calibrated = analytical_s.copy()
    corrected = np.zeros(len(records), bool)
    fold_of_row = np.full(len(records), -1)
    for fold, (train, test) in enumerate(splitter.split(records, target, groups)):
        assert not set(groups[train]) & set(groups[test]), "a group is on both sides of a fold"
        model = clone(estimator).fit([records[i] for i in train], target[train])
        test_records = [records[i] for i in test]
        calibrated[test] = analytical_s[test] * np.exp(model.predict(test_records))
        if hasattr(model, "steps"):
            corrected[test] = correction_in_distribution(model, test_records)
        fold_of_row[test] = fold
    return calibrated, corrected, fold_of_row


def evaluate_calibration(records, measured_s, groups, estimator=None, n_splits: int | None = None,
                         sweeps=None) -> dict:
    """Analytical and calibrated side by side under grouped CV (the `validate --json` shape).

    {"analytical": {mape, median, max, spearman_within_sweeps, num_rows}, "calibrated": {...},
     "cv": {"scheme", "num_groups", "corrected_fraction"}, "per_group": [...]}
    """
    records = list(records)
    groups = np.asarray(groups)
    sweeps = groups if sweeps is None else np.asarray(sweeps)
    measured_s = np.asarray(measured_s, float)
    analytical_s = np.array([r["analytical_step_time_s"] for r in records], float)
    calibrated_s, corrected, _ = grouped_predictions(records, measured_s, groups, estimator, n_splits)
    per_group = []
    for g in np.unique(groups):
        sel = groups == g
        per_group.append({"group": str(g), "num_rows": int(sel.sum()),
                          "analytical_mape": float(throughput_ape(analytical_s[sel], measured_s[sel]).mean()),
                          "calibrated_mape": float(throughput_ape(calibrated_s[sel], measured_s[sel]).mean()),
                          "corrected_fraction": float(corrected[sel].mean())})
    return {
        "analytical": error_metrics(analytical_s, measured_s, sweeps),
        "calibrated": error_metrics(calibrated_s, measured_s, sweeps),
        "cv": {"scheme": "leave-one-group-out" if n_splits is None else f"group-{n_splits}-fold",
               "num_groups": int(len(np.unique(groups))),
               "corrected_fraction": float(corrected.mean())},
        "per_group": per_group,
        "predictions": {"analytical_s": analytical_s.tolist(), "calibrated_s": calibrated_s.tolist()},
    }
