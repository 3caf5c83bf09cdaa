"""Build a calibration from measurements, published runs and/or a measured profile.

The library behind `autoplan calibrate`: it gathers the calibration rows (dataset.py), fits the
plan-level correction on all of them, scores it honestly with grouped cross-validation
(evaluate.py), fits the op-level regressors of a measured profile (ops.py), and returns one
CalibrationFile plus the lines worth telling the user. Nothing is written here.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from autoplan.specs import AutoplanError, HardwareProfile, read_measurements
from cost_model.learned.correction import make_correction
from cost_model.learned.dataset import CalibrationData, measurement_data, published_data
from cost_model.learned.evaluate import evaluate_calibration
from cost_model.learned.memory_correction import MemoryCorrection, evaluate_memory
from cost_model.learned.ops import fit_op_models, learned_profile, profile_with_raw_samples
from cost_model.learned.store import CalibrationFile

MIN_TRAINING_ROWS = 5
"""Fewer usable rows than this cannot constrain a correction of ~20 features, even with ridge."""
MIN_CV_GROUPS = 3
"""Grouped CV needs groups to hold out; with fewer, the file says the correction is unevaluated."""


def load_measured_profile(path) -> HardwareProfile:
    profile = HardwareProfile.load(path)
    return profile_with_raw_samples(profile, path)


def gather(measurement_paths, published: bool, learned: HardwareProfile | None = None,
           framework: str | None = None, keep_mismatched: bool = True, base_dir=None) -> tuple[CalibrationData, int]:
    """All calibration rows; returns (data, number of malformed JSONL lines skipped).

    `data.skipped` lists the malformed lines first, then the unusable rows, each with its reason.
    `base_dir`: where a plan's profile file is looked for when its path does not resolve (default: the
    measurements file's folder; `autoplan tune` passes the plan file's, its records being a temporary file)."""
    data, problems = CalibrationData(), []
    for path in measurement_paths:
        records, found = read_measurements(path)
        problems += found
        data.extend(measurement_data(records, Path(path).name, Path(base_dir or Path(path).parent), learned,
                                     framework, keep_mismatched))
    data.skipped[:0] = problems
    malformed = len(problems)
    if published:
        data.extend(published_data())
    return data, malformed


def build_calibration(measurement_paths=(), published: bool = False, profile_path=None,
                      kind: str = "trees", framework: str | None = None,
                      keep_mismatched: bool = False, base_dir=None) -> tuple[CalibrationFile, list[str]]:
    """Fit everything the inputs allow; raise AutoplanError when they allow nothing. Runs measured
    on other hardware or software than their plan was predicted for are left out unless
    `keep_mismatched` (the first line of the result says how many and why)."""
    measurement_paths = [str(p) for p in measurement_paths]
    if not measurement_paths and not published and profile_path is None:
        raise AutoplanError("nothing to calibrate from: give measurement files (runs.jsonl), "
                            "--published, and/or --profile cluster.json")
    calibration = CalibrationFile()
    lines = _fit_profile(calibration, profile_path) if profile_path is not None else []
    if not measurement_paths and not published:
        return calibration, lines

    data, malformed = gather(measurement_paths, published, calibration.profile, framework, keep_mismatched, base_dir)
    if data.mismatched:
        action = "kept (--include-mismatched)" if keep_mismatched else "left out (--include-mismatched keeps them)"
        lines.append(f"warning: {len(data.mismatched)} run(s) {action}: their measurement and prediction describe "
                     f"different hardware or frameworks; the first: {data.mismatched[0]}")
    if malformed:
        lines.append(f"skipped {malformed} malformed measurement line(s)")
    unusable = len(data.skipped) - malformed
    first_reason = f"; the first: {data.skipped[malformed]}" if unusable else ""
    first_malformed = f"; the first malformed: {data.skipped[0]}" if malformed else ""
    if unusable:
        lines.append(f"skipped {unusable} unusable row(s) (failed runs, or plans the cost model rejects){first_reason}")
    left_out = "" if keep_mismatched else f", {len(data.mismatched)} run(s) on mismatched hardware left out"
    if len(data) < MIN_TRAINING_ROWS:
        raise AutoplanError(
            f"only {len(data)} usable training row(s) (at least {MIN_TRAINING_ROWS} needed; {malformed} malformed "
            f"line(s){first_malformed}, {unusable} unusable row(s) skipped{first_reason}{left_out}) from "
            f"{', '.join(measurement_paths) or 'no measurement files'}"
            f"{' and the published runs' if published else ''}; record more runs with `autoplan run` or add --published")
    records = data.records
    target = np.log(np.asarray(data.measured_s) / np.array([r["analytical_step_time_s"] for r in records]))
    estimator = make_correction(kind=kind)
    calibration.correction = estimator.fit(records, target)
    num_groups = len(set(data.groups))
    evaluation = None
    if num_groups >= MIN_CV_GROUPS:
        evaluation = evaluate_calibration(records, data.measured_s, data.groups, estimator,
                                          sweeps=[r.get("sweep") or r["group"] for r in records])
        evaluation.pop("predictions")
        a, c = evaluation["analytical"], evaluation["calibrated"]
        lines.append(f"grouped CV over {num_groups} groups (leave-one-source-and-model-out), throughput MAPE: "
                     f"analytical {a['mape']:.1%} -> calibrated {c['mape']:.1%} (median {a['median']:.1%} -> "
                     f"{c['median']:.1%}, max {a['max']:.1%} -> {c['max']:.1%})")
    else:
        lines.append(f"only {num_groups} group(s): the correction is fitted but cannot be cross-validated "
                     f"across groups (need {MIN_CV_GROUPS})")
        evaluation = evaluate_calibration(records, data.measured_s, list(range(len(records))), estimator)
        evaluation.pop("predictions")
        evaluation.pop("per_group")
        evaluation["cv"]["scheme"] = "leave-one-run-out"
        a, c = evaluation["analytical"], evaluation["calibrated"]
        lines.append(f"leave-one-run-out over {len(records)} runs (runs of one group share their errors, so "
                     f"this flatters the correction), throughput MAPE: analytical {a['mape']:.1%} -> "
                     f"calibrated {c['mape']:.1%} (max {a['max']:.1%} -> {c['max']:.1%})")
    memory_rows = data.memory_rows
    memory_evaluation = _fit_memory_correction(calibration, memory_rows, lines)
    calibration.training = {
        "num_rows": len(data),
        "num_measured": data.origins.count("measured"), "num_published": data.origins.count("published"),
        "num_groups": num_groups, "num_skipped": len(data.skipped), "num_malformed_lines": malformed,
        "skipped": data.skipped[:50], "inputs": measurement_paths + (["published"] if published else []),
        "estimator": {k: v for k, v in estimator[-1].get_params().items()}, "evaluation": evaluation,
        "num_memory_rows": len(memory_rows), "num_oom": sum(r.oom for r in memory_rows),
        "memory_evaluation": memory_evaluation,
    }
    lines.insert(0, f"trained the correction on {len(data)} rows ({data.origins.count('measured')} measured, "
                    f"{data.origins.count('published')} published) in {num_groups} groups")
    return calibration, lines


def _fit_profile(calibration: CalibrationFile, profile_path) -> list:
    """Learn the measured profile's op models into `calibration` (profile, op_models); the lines
    saying how each did against the interpolated table."""
    measured = load_measured_profile(profile_path)
    fits = fit_op_models(measured)
    calibration.profile = learned_profile(measured, fits)
    calibration.op_models = [f.summary() for f in fits]
    lines = [f"op model {f.table}[{'/'.join(f.group)}]: {f.num_samples} samples of {f.num_shapes} shapes, "
             f"CV MAPE on held-out shapes {f.cv_mape:.1%} learned vs {f.baseline_cv_mape:.1%} interpolated -> "
             f"{'learned table used' if f.used else 'measured table kept'}" for f in fits]
    if not fits:
        lines.append(f"profile {str(profile_path)!r} has too few samples per table to learn from; "
                     f"its measured tables are kept as they are")
    return lines


def _fit_memory_correction(calibration: CalibrationFile, memory_rows: list, lines: list) -> dict | None:
    """Fit calibration.memory_correction where some run measured its GPU peak, appending what it
    found to `lines`; its evaluation, or None."""
    if not any(not r.oom for r in memory_rows):
        lines.append("no run with a measured GPU peak: memory stays the analytical model's")
        return None
    calibration.memory_correction = MemoryCorrection().fit(memory_rows)
    mc = calibration.memory_correction
    lines.append(f"memory correction: factor {mc.factor_:.3f} on the allocated peak from {mc.n_trained_} measured "
                 f"peak(s) and {mc.n_oom_} out-of-memory run(s) (fitted {mc.fitted_factor_:.3f}, "
                 f"out-of-memory runs need >= {mc.oom_floor_:.3f})")
    if len(memory_rows) < 2:
        return None
    evaluation = evaluate_memory(memory_rows, len({r.group for r in memory_rows}) >= MIN_CV_GROUPS)
    lines.append(_memory_line(evaluation))
    return evaluation


def _memory_line(evaluation: dict) -> str:
    a, c = evaluation["analytical"], evaluation["calibrated"]
    errors = (f"allocated-peak MAPE analytical {a['mape']:.1%} -> calibrated {c['mape']:.1%} (max {a['max']:.1%} -> "
              f"{c['max']:.1%}) over {a['num_rows']} run(s)" if a["num_rows"] else "no measured peak")
    return (f"memory, {evaluation['scheme']}: {errors}; out-of-memory runs predicted to fit: "
            f"{a['oom_predicted_to_fit']} -> {c['oom_predicted_to_fit']} of {a['num_oom']}")


def calibrated_validation(dtypes=("bf16", "fp16"), kind: str = "trees") -> dict:
    """The "calibrated" block of `autoplan validate --json`: the learned correction on the shipped
    published runs under leave-one-group-out CV (group = source and model), with the analytical
    model's figures on the same rows beside it. Errors are fractions of the measured tokens/s."""
    data = published_data(dtypes)
    sweeps = [r["sweep"] for r in data.records]
    evaluation = evaluate_calibration(data.records, data.measured_s, data.groups, make_correction(kind=kind),
                                      sweeps=sweeps)
    return {**evaluation["calibrated"], "rows": f"published {'/'.join(dtypes)} rows",
            "analytical_same_rows": evaluation["analytical"], "cv": evaluation["cv"],
            "estimator": f"LogRatioRegressor(kind={kind!r})", "num_skipped": len(data.skipped)}
