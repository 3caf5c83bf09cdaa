"""The allocator's history of today's executor at its peak (cost_model/data/h100_runs/2026-11-28, one
H200) against the `autoplan` framework's memory breakdown, term by term.

Expected values are the recorded blocks, grouped by the code that allocated them; only the grouping
rule is written here.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from autoplan.specs import PlanDocument
from cost_model import Estimator
from cost_model.constants import load_constants
from cost_model.measured_runs import H100_RUNS_DIR
from cost_model.profiles import builtin_profile

RECORDS = H100_RUNS_DIR / "2026-11-28"
GIB = 2 ** 30
# Where each of the model's terms was allocated (first match wins), by the frames the history names.
HELD_BY = (("optimizer", ("adam.py",)), ("grads", ("to_accumulated_grad_if_needed",)),
           ("params", ("train.py:162:_parallelize",)), ("weight_copies", ("alloc_storage",)),
           ("loss", ("executor/loss.py",)), ("blocks", ("executor/blocks.py",)))


def _held(plan: str) -> tuple:
    device = json.loads((RECORDS / f"alloc-history-{plan}.json").read_text())["devices"][0]
    held = {}
    for group in device["groups"]:
        name = next((n for n, keys in HELD_BY if any(k in group["where"] for k in keys)), "rest")
        held[name] = held.get(name, 0) + group["bytes"]
    return held, device["peak_bytes"]


# plan -> (record file, plan id): Llama-3.2-1B (SwiGLU) with and without full recompute, Qwen2.5-1.5B
# (SwiGLU, q/k/v biases), GPT-2 medium (GeLU, LayerNorm, learned positions, tied embeddings)
PLANS = {"l1-s2k-m4": ("runs-h200-2026-11-28.jsonl", "7b9cf18544b8"),
         "l1-s2k-m4-full": ("runs-h200-2026-11-28.jsonl", "9331747d8c25"),
         "q15-s2k-m4": ("runs-h200-2026-11-28b.jsonl", "d7e5affb730c"),
         "g-s1k-m16": ("runs-h200-2026-11-28b.jsonl", "7a79c7649640")}


def _breakdown(plan: str) -> dict:
    runs, plan_id = PLANS[plan]
    (record,) = [r for r in map(json.loads, (RECORDS / runs).read_text().splitlines()) if r["plan_id"] == plan_id]
    doc = PlanDocument.from_dict(record["plan"])
    assert record["options"]["without"] == [] and record["options"]["compile"] is None   # every speed-up on
    est = Estimator(doc.model, doc.training, doc.cluster, builtin_profile("h200"),
                    framework=load_constants().framework("autoplan"))
    e = est.estimate(doc.parallel)
    return {**e.memory_breakdown_bytes, "allocated": e.details["memory_allocated_peak_bytes"],
            "measured": record["peak_memory_bytes"]}


@pytest.mark.parametrize("plan", list(PLANS))
def test_each_term_is_what_the_allocator_held_at_the_peak(plan):
    held, peak = _held(plan)
    b = _breakdown(plan)
    # the groups are the whole peak, and the peak is max_memory_allocated (each to within 1 MiB)
    assert sum(held.values()) == pytest.approx(peak, abs=2**20) and peak == pytest.approx(b["measured"], abs=2**20)
    for term in ("params", "grads", "optimizer", "weight_copies"):
        assert b[term] == pytest.approx(held[term], rel=1e-3), term
    # what the blocks keep: the inputs alone (full recompute), or the compiled blocks' saved tensors
    # (SwiGLU: 3 ffn-wide tensors; GeLU: 2, as in eager)
    assert b["activations"] == pytest.approx(held["blocks"], rel=0.06 if plan.endswith("full") else 0.005)
    if plan != "g-s1k-m16":
        # the loss backward: accumulator, each chunk's product and its fp32 copy, a chunk's logits
        # (GPT-2's peak falls between chunks, before a chunk's product exists: 12% more than counted)
        assert b["activation_working"] == pytest.approx(held["loss"], rel=0.02)
    assert b["optimizer_working"] == 0.0                  # fused AdamW: the peak is in the loss backward
    assert b["allocated"] == pytest.approx(peak, rel=0.01)


def test_the_replay_finds_the_peak_and_counts_blocks_from_before_the_window():
    """benchmarks/alloc_history's replay on a worked trace: 1000 B live from before the history (still
    active at its end) and 100 B freed in it without an alloc there make a 1100 B start; then +500 and
    +30, the 500 freed, +10. Peak 1630 with the 500 and the 30 live, each under its allocating frame."""
    import importlib.util

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "alloc_history" / "sitecustomize.py"
    spec = importlib.util.spec_from_file_location("alloc_history_replay", path)
    replay = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(replay)
    at = lambda line: [{"filename": "/x/torch/ops.py", "line": 9, "name": "op"},   # noqa: E731
                       {"filename": "/x/executor/blocks.py", "line": line, "name": "forward"}]
    trace = [{"action": "free_completed", "addr": 1, "size": 100},
             {"action": "alloc", "addr": 2, "size": 500, "frames": at(10)},
             {"action": "alloc", "addr": 3, "size": 30, "frames": at(20)},
             {"action": "free_completed", "addr": 2, "size": 500},
             {"action": "alloc", "addr": 4, "size": 10, "frames": at(30)}]
    segments = [{"device": 0, "blocks": [{"address": 9, "size": 1000, "state": "active_allocated"},
                                         {"address": 3, "size": 30, "state": "active_allocated"}]}]
    peak, start, blocks = replay.live_at_peak(trace, segments)
    assert (peak, start) == (1100 - 100 + 500 + 30, 1100)
    assert sorted(size for size, _ in blocks.values()) == [30, 500]
    (device,) = replay.summarise({"device_traces": [trace], "segments": segments}, 0)["devices"]
    assert [(g["where"], g["bytes"]) for g in device["groups"]] == [
        ("ops.py:9:op <- executor/blocks.py:10:forward", 500), ("ops.py:9:op <- executor/blocks.py:20:forward", 30)]
