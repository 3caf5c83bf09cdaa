"""FlagPerf's Megatron MoE scripts run the distributed optimizer without --overlap-grad-reduce or
--overlap-param-gather (off by default in Megatron-LM core_v0.6.0 arguments.py lines 1278-1284): the
gradients reduce after the backward and the weights gather after the step, nothing hidden, one bucket."""
from __future__ import annotations

import dataclasses

import pytest

from autoplan.specs.frameworks import FRAMEWORKS
from cost_model import Estimator, load_constants
from cost_model.published_rows import load_published_runs

FLAGPERF = ("FLAGPERF-mixtral8x7b-01", "FLAGPERF-mixtral8L-01", "FLAGPERF-qwenmoe-01", "FLAGPERF-qwenmoe-02")


def _dp(run, framework):
    est = Estimator(run.model, run.training, run.cluster, run.profile(), framework=framework,
                    constants=load_constants(), allow_tp_across_nodes=True)
    e = est.estimate(run.plan_to_price(est))
    return e.time_breakdown_s["dp_comm"], e.details["dp_comm_total_s"]


@pytest.mark.parametrize("row_id", FLAGPERF)
def test_flagperfs_data_parallel_collectives_are_all_exposed(row_id):
    run = {r.id: r for r in load_published_runs()}[row_id]
    facts = run.framework_facts(load_constants())
    assert facts.dp_overlap_zero_stages == () and not facts.dp_param_gather_overlap
    exposed, total = _dp(run, facts)
    assert total > 0 and exposed == pytest.approx(total, rel=1e-9)
    # Megatron-Core as autoplan exports it (both overlaps on) hides most of the same traffic.
    overlapped = dataclasses.replace(facts, **{k: getattr(FRAMEWORKS["megatron-core"], k) for k in (
        "dp_overlap_zero_stages", "dp_param_gather_overlap", "dp_bucket_params")})
    assert _dp(run, overlapped)[0] < exposed
