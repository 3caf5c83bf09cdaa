"""The refusal when no plan runs names the rule that binds and offers only a GPU count the framework can use.

Worked cases, each a rule of autoplan's executor (autoplan/specs/framework_rules.py) that binds before memory:
- BLOOM-176B ties its embedding and head weights, which the executor runs only at tp = 1 and pp = 1. On 384
  H100s (BLOOM's own GPU count, A100s then) the plans that would fit need pipeline stages.
- GPT-3 175B learns its position embeddings, which the executor does not split over the sequence (cp = 1).
  On 56 H100s the plans that would fit split it (cp = 2).
The line must name the rule, name frameworks that do run a fitting plan there, and offer a count where a
search for the executor then finds a plan (at the training shape that search uses: its default global batch
grows with the GPUs) while one node fewer does not.
"""
from __future__ import annotations

import re

import pytest

from autoplan.planning.planner import PlanRequest, plan_search
from autoplan.specs import InfeasiblePlan

CASES = {
    "bloom-176b": (384, "only with tp=1 and pp=1", "megatron-deepspeed"),
    "gpt3-175b": (56, "does not split learned position embeddings", "megatron-core"),
}


def _refusal(model: str, num_gpus: int) -> str:
    with pytest.raises(InfeasiblePlan) as exc:
        plan_search(PlanRequest(model=model, num_gpus=num_gpus))
    return str(exc.value)


@pytest.mark.parametrize("model", list(CASES))
def test_the_refusal_names_the_framework_rule_and_offers_a_count_that_plans(model):
    num_gpus, rule, runs_it = CASES[model]
    line = _refusal(model, num_gpus)
    assert "break a rule of framework autoplan" in line and rule in line, line
    # the frameworks that do run a fitting plan on these GPUs are named (BLOOM's own stack among them)
    assert runs_it in line.split("run one that fits")[0], line
    offered = int(re.search(r"--gpus (\d+)\)", line).group(1))
    assert plan_search(PlanRequest(model=model, num_gpus=offered)).best is not None
    assert f"--gpus {offered})" in _refusal(model, offered - 8)
