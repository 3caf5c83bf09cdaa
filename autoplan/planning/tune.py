"""`autoplan tune`'s library: which of a plan file's plans to run, how they rank once measured, the
winning plan file, and a calibration fitted from the runs.

The loop is the DeepSpeed autotuner's (run candidate configurations for a few steps, keep the
fastest: deepspeed.autotuning, "Autotuning" in the DeepSpeed docs), but its candidates are the
planner's: the plan a search chose and its ranked alternatives, in the order of their predicted step
time, instead of a grid. Running them is the executor's job (`autoplan run`'s code path); this module
starts nothing.
"""
from __future__ import annotations

import math
import tempfile
from dataclasses import dataclass
from pathlib import Path

from autoplan.rendering.render import plan_line
from autoplan.rendering.text import text_table
from autoplan.specs import AutoplanError, Measurement, PlanDocument

GIB = 2**30
STATUS_WORDS = {"ok": "ok", "oom": "OOM", "error": "failed", None: "not run"}
"""How the table names a run's status (Measurement.status; None: the launch recorded nothing)."""


@dataclass
class Candidate:
    source: str
    """Where it came from in the plan file: "plan" (the chosen plan) or "alt N" (1-based, as
    `autoplan export --alternative N` numbers them)."""
    doc: PlanDocument
    record: Measurement | None = None

    @property
    def label(self) -> str:
        return plan_line(self.doc.parallel.to_dict())

    @property
    def predicted_s(self) -> float:
        return _predicted_s(self.doc.prediction)

    @property
    def measured_s(self) -> float:
        ok = self.record is not None and self.record.status == "ok" and self.record.step_times_s
        return self.record.median_step_time_s if ok else math.inf

    @property
    def status(self) -> str:
        return STATUS_WORDS[self.record.status if self.record is not None else None]


def _predicted_s(prediction: dict) -> float:
    return float(prediction.get("step_time_s") or math.inf)


def _does_not_fit(prediction: dict) -> str:
    """Why a plan predicted not to fit is not run ("" when it fits or says nothing)."""
    if prediction.get("fits") is not False:
        return ""
    need, have = prediction.get("peak_memory_bytes", 0), prediction.get("memory_capacity_bytes", 0)
    return f"predicted not to fit: {need / GIB:.1f} GiB per GPU > {have / GIB:.1f} GiB (--force runs it anyway)"


def plans_of(doc: PlanDocument, force: bool = False, score=None) -> list[tuple[str, PlanDocument | None, str, float]]:
    """(source, document, why not runnable, predicted step time) for the chosen plan and every
    alternative, in file order. A plan predicted not to fit is not runnable unless `force`; an
    alternative whose block cannot be read has no document. `score(doc)` gives an alternative that
    carries no prediction one (the chosen plan's was made when the file was read)."""
    from autoplan.exporters.common import with_alternative

    found = [("plan", doc, "" if force else _does_not_fit(doc.prediction), _predicted_s(doc.prediction))]
    for i in range(1, len(doc.alternatives) + 1):
        try:
            plan = with_alternative(doc, i, force=True)
        except AutoplanError as exc:
            found.append((f"alt {i}", None, str(exc), math.inf))
            continue
        if not plan.prediction and score is not None:
            plan = score(plan)
        found.append((f"alt {i}", plan, "" if force else _does_not_fit(plan.prediction),
                      _predicted_s(plan.prediction)))
    return found


def pick_candidates(doc: PlanDocument, top: int, refuse, force: bool = False,
                    score=None) -> tuple[list[Candidate], list[tuple[str, str]]]:
    """The first `top` runnable plans by predicted step time, and (source, why) for each plan passed
    over on the way. `refuse(doc)` raises AutoplanError when the executor cannot run a plan; plans
    predicted not to fit are passed over unless `force`."""
    chosen, skipped, seen = [], [], {}
    # sorted() is stable: file order breaks ties
    for source, plan, why, _ in sorted(plans_of(doc, force, score), key=lambda p: p[3]):
        if len(chosen) == top:
            break
        if not why and plan is not None and plan.plan_id in seen:
            why = f"the same plan as {seen[plan.plan_id]}"
        elif not why and plan is not None:
            try:
                refuse(plan)
            except AutoplanError as exc:
                why = str(exc)
        if why:
            skipped.append((source, why))
            continue
        seen[plan.plan_id] = source
        chosen.append(Candidate(source, plan))
    return chosen, skipped


def none_runnable(plan_path, skipped: list[tuple[str, str]]) -> str:
    """The one line of a refusal when every plan of the file was passed over: how many, why by kind,
    and the first reason in full (a lone plan's reason is the line)."""
    if len(skipped) == 1:
        return f"the plan in {str(plan_path)!r} cannot run here: {skipped[0][1]}"
    def kind(why: str) -> int:  # 0 refused (no flag helps), 1 predicted not to fit (--force does), 2 repeated
        return 1 if why.startswith("predicted not to fit") else 2 if why.startswith("the same plan as") else 0

    counts = [sum(kind(why) == k for _, why in skipped) for k in range(3)]
    words = ("refused", "predicted not to fit, --force runs them", "repeated")
    kinds = ", ".join(f"{n} {word}" for n, word in zip(counts, words) if n)
    source, why = min(skipped, key=lambda s: kind(s[1]))  # the first refusal: the reason most worth reading
    return (f"none of the {len(skipped)} plans in {str(plan_path)!r} can run here ({kinds}); "
            f"the first {words[kind(why)].split(',')[0]}, {source}: {why}")


def ranked(candidates: list[Candidate], records: list[Measurement]) -> list[Candidate]:
    """The candidates with their records, fastest measured first; failed and unrun ones after, in
    their predicted order."""
    by_id = {r.plan_id: r for r in records}
    for c in candidates:
        c.record = by_id.get(c.doc.plan_id)
    return sorted(candidates, key=lambda c: (c.measured_s, c.predicted_s))


def _gib(num_bytes) -> str:
    return f"{num_bytes / GIB:.2f}" if num_bytes else "-"


def table_lines(rows: list[Candidate]) -> list[str]:
    """rank, plan, predicted and measured step time, the prediction's error, peak memory, status."""
    cells = []
    for rank, c in enumerate(rows, 1):
        ok = math.isfinite(c.measured_s)
        error = f"{c.predicted_s / c.measured_s - 1:+.0%}" if ok and math.isfinite(c.predicted_s) else "-"
        measured_memory = c.record.peak_memory_bytes if c.record is not None else 0
        cells.append([str(rank) if ok else "-", c.label, f"{c.predicted_s:.3f}" if math.isfinite(c.predicted_s) else "-",
                      f"{c.measured_s:.3f}" if ok else "-", error,
                      _gib(c.doc.prediction.get("peak_memory_bytes", 0)), _gib(measured_memory), c.status])
    return text_table(["#", "plan", "pred s", "meas s", "error", "GiB pred", "GiB meas", "status"], cells, "rlrrrrrl")


def memory_note(rows: list[Candidate]) -> str:
    """What the measured peak is, since a CPU's RSS and a GPU's allocated bytes are not the same thing."""
    kinds = {c.record.extra.get("peak_memory_kind", "cuda_max_memory_allocated") for c in rows
             if c.record is not None and c.record.status == "ok"}
    words = {"cpu_rss_high_water": "the process's RSS high-water mark (CPU; the prediction counts GPU memory)",
             "cuda_max_memory_allocated": "torch.cuda.max_memory_allocated (the prediction adds the CUDA context)",
             "xla_compiled_bytes_per_device": "the XLA compiled step's bytes per device"}
    return "GiB meas: " + "; ".join(words.get(k, k) for k in sorted(kinds)) if kinds else ""


def tuning_block(rows: list[Candidate], skipped: list, options, records_path: str) -> dict:
    """The `tuning` field of the winning plan file (validated by autoplan.specs.schemas.validate_tuning)."""
    candidates = []
    for c in rows:
        entry = {"source": c.source, "plan_id": c.doc.plan_id, "plan": c.label,
                 "status": c.record.status if c.record is not None else "error"}
        if math.isfinite(c.predicted_s):
            entry["predicted_step_time_s"] = c.predicted_s
        if math.isfinite(c.measured_s):
            entry["measured_step_time_s"] = c.measured_s
        entry["predicted_peak_memory_bytes"] = c.doc.prediction.get("peak_memory_bytes", 0)
        if c.record is not None:
            entry["measured_peak_memory_bytes"] = c.record.peak_memory_bytes
            entry["peak_memory_kind"] = c.record.extra.get("peak_memory_kind", "")
            if c.record.error:
                entry["error"] = c.record.error[:300]
        else:
            entry["error"] = "its processes ended without recording a result"
        candidates.append(entry)
    return {"chosen_by": "measurement", "backend": options.backend, "device": options.device,
            "steps": options.steps, "warmup_steps": options.warmup_steps, "records": records_path,
            "statistic": "median of the timed steps", "candidates": candidates,
            "skipped": [{"source": s, "why": why} for s, why in skipped]}


def winner_document(original: PlanDocument, rows: list[Candidate], skipped: list, options,
                    records_path: str) -> PlanDocument:
    """The fastest measured plan as a plan file: its own prediction, the other candidates as ranked
    alternatives (by measurement, then the plans not run), and the `tuning` record of the choice."""
    best = rows[0]
    alternatives = []
    for c in rows[1:]:
        if math.isfinite(c.measured_s):
            why = (f"measured {c.measured_s / best.measured_s - 1:+.1%} step time ({c.measured_s:.4f} s against "
                   f"{best.measured_s:.4f} s)")
        else:
            why = f"measured: {c.status}" + (f" ({c.record.error[:200]})" if c.record is not None and c.record.error else "")
        alternatives.append({"parallel": c.doc.parallel.to_dict(), "prediction": dict(c.doc.prediction), "why_not": why})
    tried = {c.doc.plan_id for c in rows}
    for source, plan, _, _ in plans_of(original):
        if plan is not None and plan.plan_id not in tried:
            reason = dict(skipped).get(source, "not among the plans run (--top)")
            alternatives.append({"parallel": plan.parallel.to_dict(), "prediction": dict(plan.prediction),
                                 "why_not": f"not measured: {reason}"})
            tried.add(plan.plan_id)
    extra = {**original.extra, "tuning": tuning_block(rows, skipped, options, records_path)}
    return PlanDocument(model=original.model, training=original.training, cluster=original.cluster,
                        parallel=best.doc.parallel, prediction=dict(best.doc.prediction), alternatives=alternatives,
                        search=original.search, provenance=original.provenance, extra=extra,
                        framework=original.framework)


def min_calibration_runs() -> int:
    """Fewest timed runs a calibration is fitted from: `autoplan calibrate`'s MIN_TRAINING_ROWS (fewer
    rows cannot constrain a correction of ~20 plan features)."""
    from cost_model.learned.calibrate import MIN_TRAINING_ROWS

    return MIN_TRAINING_ROWS


def fit_calibration(records: list[Measurement], base_dir: Path, source: str):
    """`autoplan calibrate`'s fit (build_calibration) on these runs only: (CalibrationFile, lines).
    The records go through a temporary JSONL, the file format calibrate reads; a plan's relative
    profile path is looked for beside the plan file (`base_dir`)."""
    from cost_model.learned.calibrate import build_calibration

    with tempfile.TemporaryDirectory(prefix="autoplan-tune-") as tmp:
        path = Path(tmp) / "tune-runs.jsonl"
        path.write_text("".join(r.to_json_line() for r in records), encoding="utf-8")
        calibration, lines = build_calibration([path], base_dir=base_dir)
    calibration.training["inputs"] = [source]
    return calibration, lines
