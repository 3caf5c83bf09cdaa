"""NVIDIA's H100 recipes for the two large MoE models (Megatron-Bridge perf_recipes @067f987df, configs
only: benchmarks/moe_plan_note.py `bridge_h100_recipes` reads them into plans) are predicted to fit with
the default headroom kept free: DeepSeek-V3 on 1,024 H100 (TP2 PP8 VP4 EP64, recompute mla_up_proj and
mlp, flex dispatcher) and Qwen3-235B-A22B on 256 (TP2 PP8 VP4 EP32, no recompute, alltoall with the
EP all-to-all overlap).

Worked bound, by hand: an H100 80GB leaves 79.1 GiB to the allocator (cost_model/profiles.py capacity),
7 % of it kept free (autoplan/specs/headroom.py DEFAULT_HEADROOM_FRACTION), so a plan fits at <= 73.6 GiB.
"""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from autoplan.inputs.hf_config import load_hf_config
from autoplan.planning.planner import make_estimator
from autoplan.specs import ClusterSpec, TrainingSpec
from autoplan.specs.headroom import DEFAULT_HEADROOM_FRACTION
from cost_model import builtin_profile

ROOT = Path(__file__).resolve().parents[1]
GIB = 2 ** 30


def _recipes() -> dict:
    spec = importlib.util.spec_from_file_location("moe_plan_note", ROOT / "benchmarks" / "moe_plan_note.py")
    note = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(note)
    return note.bridge_h100_recipes()


@pytest.mark.parametrize("name", ["deepseek-v3", "qwen3-235b-a22b"])
def test_nvidias_h100_moe_recipes_are_predicted_to_fit(name):
    gpus, gbs, plan, framework = _recipes()[name]
    model = load_hf_config(ROOT / "tests" / "fixtures" / "hf_configs" / f"{name}.json")
    est = make_estimator(model, TrainingSpec(global_batch_size=gbs, seq_len=4096),
                         ClusterSpec(name="h100-80gb", num_gpus=gpus), builtin_profile("h100-80gb"), framework=framework)
    e = est.estimate(plan)
    usable = e.memory_capacity_bytes * (1 - DEFAULT_HEADROOM_FRACTION)
    assert e.memory_capacity_bytes / GIB == pytest.approx(79.1, abs=0.1) and usable / GIB == pytest.approx(73.6, abs=0.1)
    assert e.peak_memory_bytes <= usable
    # the recipes' own shape: every GPU holds its share of the experts and at most one micro-batch
    assert plan.dp * plan.tp * plan.pp == gpus and plan.micro_batch_size == 1 and plan.etp == 1
