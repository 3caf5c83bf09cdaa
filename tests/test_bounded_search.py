"""The default search (branch and bound, autoplan.bounded) against the oracle that scores every
plan: the same best plan and runners-up, and the lower bounds below every plan's step time."""
import pytest

from autoplan.planner import PlanRequest, make_estimator, plan_search, training_shape
from autoplan.catalog import resolve_model
from autoplan.clusters import resolve_cluster
from autoplan.search import PlanScorer, exhaustive_search
from autoplan.space import SearchSpace
from cost_model.bounds import no_recompute_time_s, step_time_lower_bound

CASES = [  # dense, MoE, uneven stages (126 layers), interleaving
    dict(model="llama-2-7b", num_gpus=8, global_batch_size=32, seq_len=2048),
    dict(model="mixtral-8x7b", num_gpus=16, global_batch_size=32, seq_len=2048),
    dict(model="llama-3-405b", num_gpus=128, global_batch_size=64, seq_len=2048),
    dict(model="qwen-72b", num_gpus=32, global_batch_size=64, seq_len=4096),
]


def _space(case):
    model = resolve_model(case["model"])
    cluster, profile = resolve_cluster(case["num_gpus"])
    training, _ = training_shape(model, cluster, case["seq_len"], case["global_batch_size"], "bf16")
    return SearchSpace(model, training, cluster), PlanScorer(make_estimator(model, training, cluster, profile))


@pytest.mark.parametrize("case", CASES, ids=lambda c: c["model"])
def test_bounds_are_below_every_plans_step_time(case):
    space, scorer = _space(case)
    result = exhaustive_search(space, scorer)
    est = scorer.estimator
    for s in result.ranked + result.unfit:
        assert step_time_lower_bound(est, s.plan) <= s.step_time_s
        assert no_recompute_time_s(est, s.plan) <= s.step_time_s


@pytest.mark.parametrize("case", CASES, ids=lambda c: c["model"])
def test_default_search_is_the_exhaustive_optimum(case):
    oracle = plan_search(PlanRequest(exhaustive=True, **case))
    found = plan_search(PlanRequest(**case))
    assert found.result.sampler == "exhaustive"
    assert found.best.plan == oracle.best.plan and found.best.step_time_s == oracle.best.step_time_s
    # the runners-up of other layouts are the oracle's too
    assert [a["parallel"] for a in found.document.alternatives[:4]] == \
        [a["parallel"] for a in oracle.document.alternatives[:4]]
    assert found.result.num_evaluated + found.result.num_pruned >= found.result.num_evaluated
    assert found.document.search["num_plans_pruned"] == found.result.num_pruned


def test_calibrated_or_stored_searches_keep_optuna(tmp_path):
    case = CASES[0]
    stored = plan_search(PlanRequest(num_trials=10, storage=f"sqlite:///{tmp_path / 's.db'}", **case))
    assert stored.result.sampler == "tpe"
