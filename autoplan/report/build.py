"""`autoplan report`: gather predicted vs measured data and a plan's figures into PNGs + index.html.

Two halves, each optional but not both absent:
- Accuracy: the measured set (measurement JSONL files and/or the shipped published runs) against the
  analytical prediction, the calibrated prediction under grouped cross-validation (each sweep
  predicted by a correction that never saw it), and a given calibration file's prediction.
- Plan: the focus plan (a plan.json, else the first measured run's plan) with its time and memory
  breakdowns and those of its alternatives, the throughput-memory Pareto front of its search space,
  and the scaling of the best plan of its model over GPU counts.
"""
from __future__ import annotations

import shutil
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

from autoplan.inputs.clusters import cluster_for_plan_file
from autoplan.planning.prediction import prediction_block
from autoplan.rendering.render import interval_phrase, plan_line
from autoplan.report import plots, tables
from autoplan.report.html import Section, write_index
from autoplan.specs import (
    AutoplanError, InfeasiblePlan, ParallelPlan, PlanDocument, check_output_folder, publish_folder, staging_folder,
)
from autoplan.specs.compat import MISMATCH_ADVICE

EXHAUSTIVE_SPACE_SIZE = 200_000
"""Knob combinations up to which the report scores every plan (~10k valid plans take ~3 s)."""
NSGA2_TRIALS = 600
MAX_ALTERNATIVES = 4


# -- accuracy -------------------------------------------------------------------------------------
def _metrics_rows(metrics: dict) -> list:
    rows = [["prediction", "rows", "MAPE", "median APE", "max APE", "Spearman within sweeps"]]
    for name, m in metrics.items():
        rho = m.get("spearman_within_sweeps")
        rows.append([name, m["num_rows"], f"{m['mape']:.1%}", f"{m['median']:.1%}", f"{m['max']:.1%}",
                     "n/a" if rho is None else f"{rho:.2f}"])
    return rows


def accuracy_sections(data, out_dir: Path, calibration=None, measurement_paths=()) -> list[Section]:
    from cost_model.learned.calibration import correction_factor
    from cost_model.learned.calibrate import MIN_CV_GROUPS, MIN_TRAINING_ROWS
    from cost_model.learned.evaluate import error_metrics, evaluate_calibration, throughput_ape

    measured = np.asarray(data.measured_s, float)
    groups = np.asarray(data.groups)
    predicted = {"analytical": np.array([r["analytical_step_time_s"] for r in data.records])}
    notes = [f"{len(data)} measured rows in {len(set(data.groups))} sweeps "
             f"({data.origins.count('measured')} measured here, {data.origins.count('published')} published)."]
    if len(set(data.groups)) >= MIN_CV_GROUPS and len(data) >= MIN_TRAINING_ROWS:
        evaluation = evaluate_calibration(data.records, measured, groups)
        predicted["calibrated (grouped CV)"] = np.asarray(evaluation["predictions"]["calibrated_s"])
        notes.append("'calibrated (grouped CV)': each sweep is predicted by a correction trained on the other "
                     f"sweeps only (leave-one-sweep-out); {evaluation['cv']['corrected_fraction']:.0%} of rows "
                     "were inside the correction's training range, the rest keep the analytical value.")
    if calibration is not None and calibration.correction is not None:
        factors = np.array([correction_factor(calibration, r) for r in data.records])
        predicted["calibration file"] = predicted["analytical"] * factors
        notes.append("'calibration file': the given calibration applied as is (rows it was trained on are "
                     "in-sample for it).")
    metrics = {name: error_metrics(p, measured, groups) for name, p in predicted.items()}
    scatter = plots.predicted_vs_measured(
        out_dir / "predicted_vs_measured.png", measured,
        {f"{name} (MAPE {metrics[name]['mape']:.1%})": p for name, p in predicted.items()},
        mismatched=data.mismatch_flags)
    names = sorted(set(data.groups))
    errors = {name: [float(throughput_ape(p[groups == g], measured[groups == g]).mean()) for g in names]
              for name, p in predicted.items()}
    bars = plots.error_by_group(out_dir / "error_by_group.png", names, errors)
    per_group = [["sweep (source | model)", "rows", *[f"{n} MAPE" for n in predicted]]]
    per_group += [[g, int((groups == g).sum()), *[f"{errors[n][i]:.1%}" for n in predicted]] for i, g in enumerate(names)]
    if data.mismatched:
        notes.append(f"Warning: {len(data.mismatched)} measured run(s) ran on other hardware or another framework "
                     f"than their prediction describes, so their error measures that gap, not the cost model "
                     f"(the first: {data.mismatched[0]}). {MISMATCH_ADVICE.capitalize()}.")
    return per_run_sections(measurement_paths) + [
        Section("Measured vs predicted step time, all rows", notes + [
            "The scatter shows measured (x) against predicted (y) step time; the table scores the predicted "
            "throughput (tokens/s) against the measured one."], [Path(scatter).name], _metrics_rows(metrics)),
        Section("Measured vs predicted: throughput error per source and model", [], [Path(bars).name], per_group)]


def per_run_sections(measurement_paths) -> list[Section]:
    """The table of each successful run next to the prediction its plan carried (none without runs)."""
    rows, _ = tables.measured_vs_predicted(measurement_paths) if measurement_paths else ([], None)
    if len(rows) <= 1:
        return []
    return [Section(
        "Measured vs predicted, per run",
        ["Each successful run next to the prediction its plan carried: step time (median of the timed "
         "steps, warm-up excluded) and peak memory per device, with the signed error "
         "(predicted - measured) / measured. The last column says whether the run's device and backend "
         "are the ones the prediction was made for. The tables below re-score each run with today's cost "
         "model and score throughput, not step time (a step time predicted 30% short is a throughput "
         "43% high); a run whose step time is not compared here is left out of them."], [], rows)]


# -- plan -----------------------------------------------------------------------------------------
def _estimator(doc: PlanDocument, profile, calibration, num_gpus: int | None = None):
    """The plan's problem costed for the framework it was made for (its facts and fitted values)."""
    from cost_model import load_constants
    from cost_model.learned.calibration import CalibratedEstimator

    cluster = doc.cluster if num_gpus is None else replace(doc.cluster, num_gpus=num_gpus)
    return cluster, CalibratedEstimator(doc.model, doc.training, cluster, profile, calibration,
                                        framework=load_constants().framework(doc.framework),
                                        memory_headroom_bytes=int(doc.prediction.get("memory_headroom_bytes", 0)))


def search_plans(doc: PlanDocument, profile, calibration=None, num_gpus: int | None = None):
    """The search library's result for the doc's problem (at its GPU count or another one):
    exhaustive when the space is small enough, else NSGA-II (seeded) for a time/memory front."""
    from autoplan.planning.search import PlanScorer, search
    from autoplan.planning.space import SearchSpace

    cluster, estimator = _estimator(doc, profile, calibration, num_gpus)
    space = SearchSpace(doc.model, doc.training, cluster, framework=estimator.framework)
    scorer = PlanScorer(estimator)
    if space.size <= EXHAUSTIVE_SPACE_SIZE:
        return search(space, scorer, exhaustive=True)
    return search(space, scorer, sampler="nsga2", num_trials=NSGA2_TRIALS, seed=0)


def _estimate_or_none(estimator, plan):
    try:
        return estimator.estimate(plan)
    except InfeasiblePlan:
        return None


def _point(e) -> dict:
    return {"tokens_per_s": e.tokens_per_s, "peak_memory_bytes": e.peak_memory_bytes, "mfu": e.mfu, "fits": e.fits}


def _points(result) -> list[dict]:
    return [_point(s.estimate) for s in result.ranked + result.unfit]


def _model_name(doc: PlanDocument) -> str:
    """A catalog name as it is; a Hugging Face config path as its folder's name (titles stay short)."""
    path = Path(doc.model.name)
    return path.parent.name if path.name == "config.json" and path.parent.name else doc.model.name


def _interval_cell(doc: PlanDocument, estimate, calibration) -> str:
    """The interval a plan file gives this prediction (autoplan.planning.prediction), e.g. "80 %, new
    source: 931-1,049"; none for a calibrated one (the residuals are the analytical model's)."""
    block = prediction_block(estimate, doc.model, doc.training, doc.cluster, doc.framework,
                             calibrated=calibration is not None)
    return interval_phrase(block) or ("none (calibrated)" if calibration is not None else "none")


def plan_sections(doc: PlanDocument, out_dir: Path, profile, calibration=None,
                  scaling_factors=(0.25, 0.5, 1, 2, 4), stage=lambda text: None) -> list[Section]:
    stage(f"scoring the plan space of {_model_name(doc)} on {doc.cluster.num_gpus} GPUs")
    _, estimator = _estimator(doc, profile, calibration)
    chosen = estimator.estimate(doc.parallel)
    result = search_plans(doc, profile, calibration)
    # Alternatives: the plan file's own, else the search's next best; all re-scored by today's model.
    alternatives = [ParallelPlan.from_dict(a["parallel"]) for a in doc.alternatives if a.get("parallel")]
    if not alternatives:
        alternatives = [s.plan for s in result.ranked if s.plan != doc.parallel]
    entries = [("chosen", doc.parallel, chosen)]
    entries += [(f"alt {i + 1}", p, e) for i, (p, e) in enumerate(
        (p, _estimate_or_none(estimator, p)) for p in alternatives[:MAX_ALTERNATIVES]) if e is not None]
    names = [f"{tag}: {plan_line(plan.to_dict())}" for tag, plan, _ in entries]
    bars = plots.breakdown_bars(out_dir / "breakdown.png", names, [e.time_breakdown_s for _, _, e in entries],
                                [e.memory_breakdown_bytes for _, _, e in entries], chosen.memory_capacity_bytes,
                                title=f"Predicted: {_model_name(doc)} on {doc.cluster.num_gpus} x {doc.cluster.name}")
    table = [["plan", "predicted step time", "predicted tokens/s/GPU", "its interval", "predicted MFU",
              "predicted peak memory", "fits", "cost model"]]
    table += [[n, tables.seconds(e.step_time_s), tables.count(e.tokens_per_s_per_gpu), _interval_cell(doc, e, calibration),
               f"{e.mfu:.1%}", tables.memory(e.peak_memory_bytes), tables.yes_no(e.fits), e.cost_model]
              for n, (_, _, e) in zip(names, entries)]
    points = _points(result)
    pareto = plots.pareto_plot(out_dir / "pareto.png", points, chosen.memory_capacity_bytes, _point(chosen),
                               title=f"Predicted, {result.sampler} search: {len(points):,} plans of {_model_name(doc)} on "
                                     f"{doc.cluster.num_gpus} x {doc.cluster.name}")
    counts, tps, mfu, scaled = [], [], [], [["GPUs", "best plan", "predicted tokens/s", "MFU", "HFU",
                                              "recompute share of the step"]]
    for factor in scaling_factors:
        n = doc.cluster.num_gpus * factor
        if n < 1 or n != int(n):
            continue
        n = int(n)
        stage(f"scaling: the best plan on {n} GPUs")
        best = search_plans(doc, profile, calibration, n).best
        if best is not None:
            e = best.estimate
            counts.append(n), tps.append(e.tokens_per_s), mfu.append(e.mfu)
            scaled.append([n, plan_line(best.plan.to_dict()), tables.count(e.tokens_per_s), f"{e.mfu:.1%}",
                           f"{e.hfu:.1%}", f"{e.time_breakdown_s.get('recompute', 0.0) / e.step_time_s:.0%}"])
    sections = [
        Section("Predicted: chosen plan and alternatives", ["The plan and its alternatives (the plan file's, else the search's "
                                                 "next best), scored by the cost model used for this report. Time "
                                                 "terms are exposed (non-overlapped) seconds per step; memory is per "
                                                 "GPU on the worst pipeline stage (GiB = 2^30 bytes)."],
                [Path(bars).name], table),
        Section("Predicted throughput vs memory", [f"The plans the search scored ({result.sampler}: every structurally valid "
                                         f"plan when the space is small, else NSGA-II's trials); the front keeps the "
                                         f"fitting plans no other fitting plan beats in both tokens/s and memory."],
                [Path(pareto).name]),
    ]
    if len(counts) >= 2:
        curve = plots.scaling_curve(out_dir / "scaling.png", counts, tps, mfu,
                                    title=f"Predicted best plan of {_model_name(doc)} (global batch {doc.training.global_batch_size})")
        sections.append(Section("Predicted scaling", [
            "The fastest plan that fits at each GPU count, same global batch (strong scaling); dotted: linear "
            "scaling from the smallest count. MFU may rise with the count at a fixed batch, and that is the "
            "prediction, not the plot: sharding over more GPUs frees memory, so the best plan recomputes fewer "
            "layers, and recomputation takes step time without counting as model FLOPs (HFU counts it)."],
            [Path(curve).name], scaled))
    return sections


# -- the whole report -----------------------------------------------------------------------------
def build_report(out_dir, measurement_paths=(), published: bool = False, plan_path=None,
                 calibration_path=None, stage=lambda text: None) -> list[str]:
    """Write the PNGs and index.html into out_dir (created if missing); return the files written.

    out_dir is checked by the one writer's rules (autoplan.specs.output) before anything is read;
    everything is drawn into a private folder on its file system and published only when the whole
    report is done, so a failure leaves out_dir as it was (or absent)."""
    from cost_model.learned.calibration import load_calibration
    from autoplan.planning.planfiles import load_plan  # the one plan reader: the rules every command applies
    from cost_model.learned.calibrate import gather
    from cost_model.learned.dataset import NOT_COMPARED

    if not measurement_paths and not published and plan_path is None:
        raise AutoplanError("nothing to report: give measurement files (runs.jsonl), --published, and/or a plan.json")
    inputs = [*measurement_paths, plan_path, calibration_path]
    out = check_output_folder(out_dir, inputs)  # the one writer's refusals, before anything is read
    calibration = load_calibration(calibration_path) if calibration_path else None
    doc, doc_dir = (load_plan(plan_path), Path(plan_path).parent) if plan_path else (None, None)
    data = None
    if measurement_paths or published:
        stage("reading the measurements and re-scoring their plans")
        data, malformed = gather(measurement_paths, published, calibration.profile if calibration else None)
        if malformed:
            # Refused, not skipped: a report is shared, and one that silently lacks a run (a warning
            # scrolls away) misleads whoever reads it. `calibrate` skips such lines and counts them in
            # the calibration file it writes.
            raise AutoplanError(f"{malformed} malformed measurement line(s), the first: {data.skipped[0]}; "
                                f"fix or remove the line(s) (`autoplan calibrate` skips them and counts them)")
        if data.mismatched:
            sys.stderr.write(f"autoplan report: warning: {len(data.mismatched)} run(s) measured on other hardware or "
                             f"frameworks than predicted for (shown, marked); the first: {data.mismatched[0]}\n")
        if not len(data) and not (data.skipped and all(NOT_COMPARED in s for s in data.skipped)):
            first = f", the first: {data.skipped[0]}" if data.skipped else ""
            raise AutoplanError(f"no usable measured rows in {', '.join(map(str, measurement_paths))}; "
                                f"{len(data.skipped)} skipped (failed runs, malformed lines or step times not "
                                f"compared){first}")
        if doc is None and data.origins.count("measured"):
            doc, doc_dir = _first_measured_plan(measurement_paths)
    scratch = staging_folder(out)
    try:
        if data is not None:
            stage("accuracy figures (grouped cross-validation of the correction)")
        # Runs whose step times are all "not compared" (a loaded CPU) still get their per-run table, which
        # says why; there is nothing to score the cost model's accuracy on.
        scored = data is not None and len(data)
        sections = (accuracy_sections(data, scratch, calibration, measurement_paths) if scored
                    else per_run_sections(measurement_paths))
        if doc is not None:
            sections += plan_sections(doc, scratch, cluster_for_plan_file(doc.cluster, doc_dir), calibration, stage=stage)
        title = "autoplan report" + (f": {_model_name(doc)} on {doc.cluster.num_gpus} x {doc.cluster.name}" if doc else "")
        write_index(scratch, title, sections,
                    footer="Durations in the unit shown (µs, ms, s); tokens/s base 10; memory in MiB / GiB "
                           "(2^20 / 2^30 bytes).")
        # All or none: a new folder appears whole (one rename); in an existing one, index.html is replaced last.
        return [str(f) for f in publish_folder(scratch, out, last="index.html")]
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _first_measured_plan(paths) -> tuple[PlanDocument | None, Path | None]:
    """The plan of the first successful run, and the folder its relative profile path is from."""
    from autoplan.specs import read_measurements

    for path in paths:
        for m in read_measurements(path)[0]:
            if m.status == "ok":
                return PlanDocument.from_dict(m.plan), Path(path).parent
    return None, None
