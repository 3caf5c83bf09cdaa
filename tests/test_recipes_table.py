"""benchmarks/recipes_table.py, the public recipes docs/recipes.md sets beside autoplan's picks: every
row parses into a plan the structural rules accept, for the model, GPUs and batch it names, and cites
where each knob was read. No step time is asserted here (the script prints predictions; the docs say
what they mean)."""
import importlib.util
import re
import sys
from pathlib import Path

import pytest

from autoplan.specs import get_framework

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def _load(name: str):
    sys.path.insert(0, str(BENCHMARKS))
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


side = _load("recipes_side_by_side")
RECIPES = side.RECIPES


def test_the_table_covers_what_the_issue_asks():
    """At least 10 recipes, dense and MoE, each key once, and the families the page compares:
    Megatron-Core/NeMo dense and MoE, torchtitan, DeepSpeed, Llama 3 405B, DeepSeek-V3, Qwen3 MoE."""
    assert len(RECIPES) >= 10
    assert len({r.key for r in RECIPES}) == len(RECIPES)
    frameworks = {get_framework(r.framework).name.split("+")[0] for r in RECIPES}
    assert {"megatron-core", "torchtitan", "deepspeed", "megatron-deepspeed"} <= frameworks
    megatron = {r.family for r in RECIPES if r.framework.startswith("megatron-core")}
    assert megatron == {"dense", "moe"}
    models = {r.model for r in RECIPES}
    assert {"llama-3-405b", "deepseek-v3", "qwen3-235b-a22b"} <= models


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda r: r.key)
def test_every_recipe_builds_a_plan_the_structural_rules_accept(recipe):
    problem = side.problem_of(recipe)
    plan = side.plan_of(recipe)
    # The degrees multiply to the GPU count and the batch splits evenly: dp and the micro-batch count are
    # derived, so a recipe row with a wrong GPU count or batch fails here, not in the search.
    assert plan.num_gpus == recipe.num_gpus
    assert plan.dp * plan.micro_batch_size * plan.num_microbatches == recipe.global_batch
    plan.check(problem.model, problem.training, problem.cluster)
    assert problem.model.is_moe == (recipe.family == "moe"), f"{recipe.key}: family {recipe.family}"
    assert problem.training.seq_len == recipe.seq_len and problem.training.dtype == recipe.dtype


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda r: r.key)
def test_no_framework_rule_refuses_a_published_recipe(recipe):
    """These layouts ran (or are their framework's own recipes): a framework rule that refused one
    would keep users from plans their framework runs. (Whether each fits is the script's finding.)"""
    problem = side.problem_of(recipe)
    get_framework(recipe.framework).check(problem.model, problem.training, side.plan_of(recipe))


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda r: r.key)
def test_every_recipe_cites_a_file_at_a_commit_or_a_paper(recipe):
    """Where the knobs were read: a repository path with a commit, or an arXiv paper's section."""
    assert re.search(r"@[0-9a-f]{7,40}\b", recipe.source) or re.search(r"arXiv:\d{4}\.\d{4,5} sec\.", recipe.source)


def test_a_recipe_that_does_not_divide_its_gpus_is_refused_with_the_numbers():
    from dataclasses import replace

    from autoplan.specs import InfeasiblePlan

    recipe = next(r for r in RECIPES if r.key == "bridge-llama3-70b")   # tp4 x pp4 x cp2 = 32
    with pytest.raises(InfeasiblePlan, match=r"tp\*pp\*cp=32 does not divide 48 GPUs"):
        side.plan_of(replace(recipe, num_gpus=48))
    with pytest.raises(InfeasiblePlan, match="global batch 500 is not a multiple of dp=1"):
        side.plan_of(replace(recipe, global_batch=500, knobs={**recipe.knobs, "micro_batch_size": 3}))


def test_term_deltas_are_recipe_minus_pick_largest_first():
    """A worked example: recipe {compute 3, tp_comm 1}, pick {compute 1, tp_comm 2, pp_bubble 0.5}."""
    deltas = side.term_deltas({"compute": 3.0, "tp_comm": 1.0}, {"compute": 1.0, "tp_comm": 2.0, "pp_bubble": 0.5})
    assert deltas == [("compute", 2.0), ("tp_comm", -1.0), ("pp_bubble", -0.5)]
    assert side.term_deltas({"a": 2 * 2 ** 30}, {"a": 2 ** 30}, 2 ** 30) == [("a", 1.0)]


def test_outside_space_names_the_recompute_modules_the_search_never_tries():
    recipe = next(r for r in RECIPES if r.key == "deepseek-v3-report")
    problem, plan = side.problem_of(recipe), side.plan_of(recipe)
    assert side.outside_space(recipe, problem, plan) == ["recompute_modules=layernorm mla_up_proj"]
    plain = next(r for r in RECIPES if r.key == "torchtitan-llama3-8b")
    assert side.outside_space(plain, side.problem_of(plain), side.plan_of(plain)) == []


def test_the_summary_counts_the_recipes_that_fit_and_names_the_rest():
    """Worked rows: recipes that fit and lose, win, tie (the pick is then as fast), and one that does not fit."""
    from types import SimpleNamespace as NS

    def row(key, recipe_s, fits, pick_s):
        return NS(recipe=NS(key=key), refusal="", pick=NS(estimate=NS(step_time_s=pick_s)),
                  scored=NS(estimate=NS(step_time_s=recipe_s, fits=fits)))

    rows = [row("a", 2.0, True, 1.0), row("b", 1.0, True, 1.5), row("c", 0.5, False, 1.0), row("d", 1.0, True, 1.0)]
    assert side.summary(rows) == ("pick at least as fast as 2 of the 3 recipes that fit (slower than: b); "
                                  "predicted not to fit: c; refused by a rule: none")
