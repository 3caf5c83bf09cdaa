"""Re-predict the shipped H100 runs (cost_model/data/h100_runs): memory as the executor kept it."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from autoplan.specs import Measurement, PlanDocument
from autoplan.specs.compat import record_framework
from cost_model import Estimator
from cost_model.constants import load_constants
from cost_model.profiles import builtin_profile

RUNS = Path(__file__).resolve().parent.parent / "cost_model" / "data" / "h100_runs" / "runs.jsonl"


def _records() -> list:
    return [json.loads(line) for line in RUNS.read_text().splitlines() if line.strip()]


def _estimate(record: dict):
    doc = PlanDocument.from_dict(record["plan"])
    assert doc.framework == "autoplan"   # v1 plan files: the executor's framework
    # ... as it was before its speed-ups: these records carry no `without` option
    framework = record_framework(Measurement.from_dict(record), doc.framework)
    assert framework == "autoplan-91ee867"
    return Estimator(doc.model, doc.training, doc.cluster, builtin_profile("h100-80gb"),
                     framework=load_constants().framework(framework)).estimate(doc.parallel)


def test_shipped_runs_are_the_h100_records():
    records = _records()
    assert len(records) == 14
    assert sum(r["status"] == "ok" for r in records) == 10 and sum(r["status"] == "oom" for r in records) == 4
    plans = {p.stem for p in (RUNS.parent / "plans").glob("*.json")}
    assert len(plans) == 12


@pytest.mark.parametrize("record", [r for r in _records() if r["status"] == "ok"],
                         ids=lambda r: f"{r['plan_id']}-{len(r['notes'])}")
def test_trained_runs_peak_within_5_percent(record):
    e = _estimate(record)
    measured = record["peak_memory_bytes"]
    assert e.details["memory_allocated_peak_bytes"] == pytest.approx(measured, rel=0.05)
    if not record["notes"]:     # the default allocator trained it: it must be predicted to fit
        assert e.fits, e.memory_breakdown_bytes


@pytest.mark.parametrize("record", [r for r in _records() if r["status"] == "oom"],
                         ids=lambda r: f"{r['plan_id']}-{len(r['notes'])}")
def test_out_of_memory_runs_are_predicted_not_to_fit(record):
    e = _estimate(record)
    assert not e.fits, (e.peak_memory_bytes, e.memory_capacity_bytes)


def test_expandable_segments_run_is_the_allocator_headroom():
    # l1-s2k-m8 trained only with expandable segments: its allocated peak fits the GPU with the
    # runtime memory, and only the default allocator's headroom (one fp32 logits block) does not.
    record = next(r for r in _records() if r["status"] == "ok" and r["notes"])
    e = _estimate(record)
    mem = e.memory_breakdown_bytes
    assert not e.fits
    assert e.peak_memory_bytes - mem["allocator_overhead"] <= e.memory_capacity_bytes
