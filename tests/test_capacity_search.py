"""The search explores the MoE capacity factor with the other knobs when asked (`--moe-capacity-factor
0,1,1.25`; Megatron-Core --moe-expert-capacity-factor, 0 = dropless), and shows the best plan of every
other factor beside the winner. Dropless only by default: dropping tokens changes what the model
trains on, so the planner never chooses it unasked."""
import json

import pytest

from autoplan.planning.planner import PlanRequest, plan_search
from autoplan.planning.space import Pins
from tests.cli_run import run_cli

FACTORS = (0.0, 1.0, 1.25)
# Mixtral on 16 GPUs, a few knobs pinned so that the exhaustive oracle stays quick.
PROBLEM = dict(model="mixtral-8x7b", num_gpus=16, global_batch_size=64, seq_len=2048, framework="megatron-core")
PINNED = dict(pp=1, cp=1, micro_batch_size=1, recompute="full")


def _search(factors, exhaustive=False):
    return plan_search(PlanRequest(**PROBLEM, pins=Pins(**PINNED, moe_capacity_factor=factors), exhaustive=exhaustive))


def test_the_joint_search_finds_the_best_plan_over_every_factor():
    per_factor = {f: _search(f, exhaustive=True).best for f in FACTORS}   # the oracle: one search per factor
    joint = _search(FACTORS)
    fastest = min(per_factor.values(), key=lambda s: s.step_time_s)
    assert joint.best.plan == fastest.plan and joint.best.step_time_s == pytest.approx(fastest.step_time_s)
    # The capped factors cut the busiest expert's share (the dropless default load is 1.25x the mean):
    # capacity 1 is the fastest, and 1.25 caps nothing.
    assert joint.best.plan.moe_capacity_factor == 1.0
    assert per_factor[1.25].step_time_s == pytest.approx(per_factor[0.0].step_time_s)
    # Beside the winner: the best plan of each other factor, as the exact search pinned to it finds it.
    others = {s.plan.moe_capacity_factor: s for s in joint.result.capacity_bests}
    assert set(others) == {0.0, 1.25}
    for factor, s in others.items():
        assert s.step_time_s == pytest.approx(per_factor[factor].step_time_s)
    runners_up = [a["parallel"].get("moe_capacity_factor", 0.0) for a in joint.document.alternatives]
    assert {0.0, 1.25} <= set(runners_up)


def test_dropless_only_unless_asked():
    plain = plan_search(PlanRequest(**PROBLEM, pins=Pins(**PINNED)))
    assert plain.best.plan.moe_capacity_factor == 0.0 and not plain.result.capacity_bests
    assert plain.result.summary()["num_plans_scored"] > 0


def test_capacity_factor_flag(capsys):
    problem = ["--model", "mixtral-8x7b", "--gpus", 16, "--global-batch", 64, "--seq-len", 2048,
               "--framework", "megatron-core", "--pp", 1, "--cp", 1, "--micro-batch", 1, "--recompute", "full"]
    code, out, err = run_cli(capsys, "search", *problem, "--moe-capacity-factor", "dropless,1", "--json")
    assert code == 0, err
    assert json.loads(out)["parallel"]["moe_capacity_factor"] == 1.0
    code, out, err = run_cli(capsys, "search", *problem, "--moe-capacity-factor", "1.25", "--json")
    assert code == 0 and json.loads(out)["parallel"]["moe_capacity_factor"] == 1.25  # one value pins it
    for bad, says in (("1,1", "names 1 twice"), ("-1", "capacity factors > 0, or 0 (dropless)"),
                      ("nan", "capacity factors > 0"), ("1e9", "at most 64")):
        code, out, err = run_cli(capsys, "search", *problem, "--moe-capacity-factor", bad)
        assert code == 2 and says in err and len(err.strip().splitlines()) == 1, (bad, err)
    # A dense model has no experts to cap: one line, exit 2.
    code, out, err = run_cli(capsys, "search", "--model", "llama-2-7b", "--gpus", 8, "--moe-capacity-factor", "1.25")
    assert code == 2 and "mixture-of-experts model only" in err and len(err.strip().splitlines()) == 1, err
