"""When no plan runs, the refusal names the rule that binds for what the user pinned (issue 47).

A search rejects each candidate for the first rule it breaks, so the rule that rejected the most
candidates is often a structural one (degrees, expert divisibility) that other choices of the unpinned
knobs avoid; a rule that reads only pinned knobs binds whatever the search picks
(autoplan/planning/blame.py). Each case below pins knobs as a user would and names the rule the pins
alone break, from the framework's own rule (the source in its entry)."""
from pathlib import Path

import pytest

from autoplan.planning.blame import rule_that_broke
from autoplan.planning.planner import PlanRequest, plan_search
from autoplan.planning.space import Pins
from autoplan.specs import InfeasiblePlan

QWEN3_30B = str(Path(__file__).parent / "fixtures" / "hf_configs" / "qwen3-30b-a3b.json")


@pytest.mark.parametrize("request_kwargs, says, tag", [
    # DeepSpeed: "MoE not supported with Stage 3" (deepspeed/runtime/engine.py), whatever dp or ep
    (dict(model="mixtral-8x7b", num_gpus=16, framework="deepspeed", pins=Pins(zero_stage=3, ep=8)),
     "does not run mixtures of experts with ZeRO stage 3", "framework_zero_with_moe"),
    # Qwen3's q/k norms: the executor's TP plan does not shard them, so tp=2 is refused whatever else
    (dict(model=QWEN3_30B, num_gpus=64, pins=Pins(tp=2)), "shards no q/k norms", "framework_tp_block_extras"),
    # the most frequent reasons a search reports, each pinned by the knob the rule reads
    (dict(model="llama-2-7b", num_gpus=16, framework="megatron-deepspeed", pins=Pins(pp=2, zero_stage=2)),
     "does not combine ZeRO stage 2 with pipeline parallelism", "framework_zero_with_pp"),
    (dict(model="llama-2-7b", num_gpus=16, framework="llm-foundry", pins=Pins(tp=2)), "runs tp <= 1, got tp=2",
     "framework_tp_limit"),
    (dict(model="llama-2-7b", num_gpus=24, pins=Pins(tp=3)), "num_heads=32", "tp_divides_heads"),
    (dict(model="llama-2-7b", num_gpus=16, framework="deepspeed", pins=Pins(cp=2)), "runs cp <= 1, got cp=2",
     "framework_cp_limit"),
])
def test_the_refusal_names_the_rule_the_pins_break(request_kwargs, says, tag):
    with pytest.raises(InfeasiblePlan, match="cannot work") as info:
        plan_search(PlanRequest(seq_len=4096, **request_kwargs))
    assert says in str(info.value) and info.value.reason == tag, str(info.value)


def test_a_rule_of_pinned_knobs_outranks_a_more_frequent_one():
    # As the Mixtral search above counts them: the expert divisibility rule (reads ep, etp, tp, cp, dp)
    # rejected more candidates than DeepSpeed's MoE rule (reads zero_stage alone), which broke every
    # candidate that reached it.
    rejections = {"ep_divides": (120, "ep must divide ..."), "framework_zero_with_moe": (8, "MoE ..."),
                  "degree_product": (500, "tp*pp*cp must divide ...")}
    assert rule_that_broke(rejections, {"zero_stage", "ep"}) == "framework_zero_with_moe"
    # without the pin on zero_stage the MoE rule is not the user's: the pinned ep's rule is named
    assert rule_that_broke(rejections, {"ep"}) == "ep_divides"
