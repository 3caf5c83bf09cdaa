"""Calibration data: plan records with their measured step time and their sweep.

Two sources feed the learned correction, both turned into the same rows here:
- Measurement records (executor JSONL): the plan document they ran, the analytical estimate of
  that plan on the profile it names (or the learned profile for the same device), and the median
  measured step time. Only status "ok" runs with step times count.
- The shipped published runs (cost_model/data/published_runs.csv via the analytical model's loader):
  each row's architecture, cluster and plan, estimated on the built-in profile of its GPU.

A row's *group* is its sweep, "<source> | <model>", the unit of grouped cross-validation.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from autoplan.specs import AutoplanError, HardwareProfile, InfeasiblePlan, PlanDocument
from autoplan.specs.compat import measurement_mismatch, record_framework
from autoplan.specs.host_process import time_not_comparable
from cost_model.learned.features import plan_record
from cost_model.learned.memory_correction import MemoryRow

NOT_COMPARED = "step time not compared"
"""How a skipped row whose step time is not comparable (CPU contention: autoplan.specs.host_process)
is named, so a reader can tell it from a failed run or a malformed line."""


@dataclass
class CalibrationData:
    records: list = field(default_factory=list)
    measured_s: list = field(default_factory=list)
    groups: list = field(default_factory=list)
    origins: list = field(default_factory=list)
    """"published" or "measured", per row."""
    skipped: list = field(default_factory=list)
    """One line per input row that could not be used, saying why."""
    memory_rows: list = field(default_factory=list)
    """MemoryRow per run with a measured GPU peak or that ran out of memory (memory_correction.py)."""
    mismatched: list = field(default_factory=list)
    """One line per measured row whose run and prediction describe different hardware or frameworks
    (`autoplan.specs.compat.measurement_mismatch`), whether it was kept or left out."""

    mismatch_flags: list = field(default_factory=list)
    """Per row: True when it was kept although its run and prediction describe different hardware."""

    def add(self, record: dict, measured_s: float, group: str, origin: str, mismatch: bool = False) -> None:
        self.mismatch_flags.append(bool(mismatch))
        self.records.append({**record, "group": group, "origin": origin, "measured_step_time_s": measured_s})
        self.measured_s.append(float(measured_s))
        self.groups.append(group)
        self.origins.append(origin)

    def extend(self, other: "CalibrationData") -> "CalibrationData":
        self.records += other.records
        self.measured_s += other.measured_s
        self.groups += other.groups
        self.origins += other.origins
        self.mismatch_flags += other.mismatch_flags
        self.skipped += other.skipped
        self.memory_rows += other.memory_rows
        self.mismatched += other.mismatched
        return self

    def __len__(self) -> int:
        return len(self.records)


def _estimate_record(model, training, cluster, plan, profile, framework=None):
    from cost_model import Estimator

    estimator = Estimator(model, training, cluster, profile, framework=framework)
    estimate = estimator.estimate(plan)
    return plan_record(model, training, cluster, plan, profile, estimate, estimator.framework)


def _profile_for(cluster, learned: HardwareProfile | None, base_dir: Path) -> HardwareProfile:
    """The profile a measured plan is re-estimated with: the learned one for the same device, else
    the one the plan names (a built-in name, or a profile file; when that path does not exist, the
    file of the same name next to the measurements, as `autoplan estimate` finds a moved plan's)."""
    from cost_model import builtin_profile

    ref = cluster.profile or f"builtin:{cluster.name}"
    if ref.startswith("builtin:"):
        profile = builtin_profile(ref.split(":", 1)[1])
    else:
        path = Path(ref)
        if not path.exists() and (base_dir / path.name).exists():
            path = base_dir / path.name
        profile = HardwareProfile.load(path)
    if learned is not None and learned.device_name == profile.device_name:
        return learned
    return profile


def measurement_data(measurements, source: str, base_dir=".", learned: HardwareProfile | None = None,
                     framework: str | None = None, keep_mismatched: bool = True) -> CalibrationData:
    """Rows from Measurement records (one file's worth, named `source` in the groups), each estimated
    for the framework its plan was made for (or `framework` for all). A run whose hardware or
    framework is not the one its plan was predicted for is listed in `mismatched` and, unless
    `keep_mismatched`, left out (it would teach a correction the gap between two machines)."""
    from cost_model.constants import load_constants

    data = CalibrationData()
    for m in measurements:
        where = f"{source}: plan {m.plan_id}"
        timed = m.status == "ok" and m.step_times_s and m.median_step_time_s > 0
        if not timed and m.status != "oom":
            data.skipped.append(f"{where}: status {m.status!r} with {len(m.step_times_s)} step times (not a timing)")
            continue
        try:
            doc = PlanDocument.from_dict(m.plan, f"{where} plan")
            profile = _profile_for(doc.cluster, learned, Path(base_dir))
            facts = load_constants().framework(framework or record_framework(m, doc.framework))
            record = _estimate_record(doc.model, doc.training, doc.cluster, doc.parallel, profile, facts)
        except (AutoplanError, InfeasiblePlan) as exc:
            data.skipped.append(f"{where}: {exc}")
            continue
        mismatch = measurement_mismatch(m, profile, doc.framework)
        if mismatch:
            data.mismatched.append(f"{source}: {mismatch}")
            if not keep_mismatched:
                continue
        device = m.environment.get("device_name") or m.environment.get("device") or doc.cluster.name
        group = f"measured {m.backend} on {device} | {doc.model.name}"
        row = _memory_row(m, record, group)
        if row is not None:
            data.memory_rows.append(row)
        not_comparable = time_not_comparable(m.extra.get("cpu_wait_share"), profile.environment) if timed else ""
        if not_comparable:  # its memory still counts; its wall time measures other processes too
            data.skipped.append(f"{where}: {NOT_COMPARED}: {not_comparable}")
        elif timed:
            data.add(record, m.median_step_time_s, group, "measured", mismatch=bool(mismatch))
    return data


def _memory_row(m, record: dict, group: str) -> MemoryRow | None:
    """The run's memory evidence: a GPU peak (max_memory_allocated; a CPU RSS is not comparable),
    or an out-of-memory status (it needed at least the capacity)."""
    oom = m.status == "oom"
    gpu_peak = (m.environment.get("device") == "cuda"
                and m.extra.get("peak_memory_kind", "cuda_max_memory_allocated") == "cuda_max_memory_allocated")
    measured = m.peak_memory_bytes if gpu_peak else 0
    if not oom and not measured > 0:
        return None
    allocated = record["analytical_allocated_peak_bytes"]
    return MemoryRow(allocated, record["analytical_peak_memory_bytes"] - allocated, record["memory_capacity_bytes"],
                     0.0 if oom else float(measured), oom, group)


def published_data(dtypes=("bf16", "fp16")) -> CalibrationData:
    """Rows from the shipped published runs with the given precisions, each estimated exactly as
    `autoplan validate` does: the run's own profile (its GPU, and its cluster's network where the
    source says, e.g. Jean Zay's for BigScience) and the software stack of its framework.
    The measured step time is the published tokens/s/GPU turned back into seconds per step."""
    from cost_model.published_rows import load_published_runs
    from cost_model.splits import fit_rows

    data = CalibrationData()
    for run in fit_rows(load_published_runs()):  # the MoE rows are validation-only
        if run.training.dtype not in dtypes:
            continue
        try:
            record = _estimate_record(run.model, run.training, run.cluster, run.plan,
                                      run.profile(), run.framework_facts())
        except (AutoplanError, InfeasiblePlan) as exc:
            data.skipped.append(f"published {run.id}: {exc}")
            continue
        measured_s = run.training.tokens_per_step / (run.measured_tokens_per_s_per_gpu * run.cluster.num_gpus)
        data.add({**record, "id": run.id, "source": run.source, "sweep": run.sweep}, measured_s,
                 f"{run.source} | {run.model.name}", "published")
    return data
