"""Framework.moe_host_sync: KempnerForge reads its tokens per expert on the host in every MoE layer
(kempnerforge/model/moe.py @abbbac33 line 290, `.tolist()`), so FSDP2, which issues a unit's all-gather
when the host reaches the unit's forward (torch 2.9 _fsdp_param_group.py pre_forward), can hide the next
layer's forward gather only under this layer's MoE block. Expected values are worked by hand."""
from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pytest

from autoplan.specs import ParallelPlan
from cost_model import Estimator, load_constants
from cost_model.dp_time import host_sync_exposed_s
from cost_model.published_rows import load_published_runs


def _est(model, host_sync=True):
    return SimpleNamespace(model=model, framework=SimpleNamespace(moe_host_sync=host_sync))


def _row(row_id):
    return {r.id: r for r in load_published_runs()}[row_id]


def test_each_moe_layer_exposes_what_its_next_gather_outlasts_its_moe_block():
    model = _row("KEMPNERMOE-packed-04").model            # 24 layers, all MoE
    plan = ParallelPlan(dp=8, zero_stage=3, micro_batch_size=4, num_microbatches=2)
    lt = SimpleNamespace(moe_fwd_s=6.0e-3)
    # 2 micro-batches x 24 layers x (7.5 - 6.0) ms = 72 ms; a gather shorter than the block hides.
    assert host_sync_exposed_s(_est(model), plan, lt, 24, 2, 7.5e-3) == pytest.approx(0.072)
    assert host_sync_exposed_s(_est(model), plan, lt, 24, 2, 5.0e-3) == 0.0
    assert host_sync_exposed_s(_est(model, host_sync=False), plan, lt, 24, 2, 7.5e-3) == 0.0
    # A model whose first 4 of 24 layers are dense: 20 MoE layers sync, each over its own block
    # (the mean layer's moe_fwd_s is 20/24 of it): 2 x 20 x (7.5 - 6.0) ms = 60 ms.
    mixed = dataclasses.replace(model, num_dense_layers=4)
    mean_lt = SimpleNamespace(moe_fwd_s=6.0e-3 * 20 / 24)
    assert host_sync_exposed_s(_est(mixed), plan, mean_lt, 24, 2, 7.5e-3) == pytest.approx(0.060)


def test_the_exposed_gathers_leave_the_hidden_pool_for_the_step():
    # KEMPNERMOE-packed-04 over 4 micro-batches: its FSDP traffic then fits the overlap window, so the
    # host-synced share moves from hidden (charged overlap_contention of itself) to exposed (all of it).
    run = _row("KEMPNERMOE-packed-04")
    constants = load_constants()
    training = dataclasses.replace(run.training, global_batch_size=4 * run.training.global_batch_size)
    plan = dataclasses.replace(run.plan, num_microbatches=4)
    synced, seen = {}, []

    def dp_comm_s(host_sync):
        fw = dataclasses.replace(run.framework_facts(constants), moe_host_sync=host_sync)
        est = Estimator(run.model, training, run.cluster, run.profile(), framework=fw, constants=constants)
        synced[host_sync] = est
        return est.estimate(plan).time_breakdown_s["dp_comm"]

    import cost_model.dp_time as dp_time
    original = dp_time.host_sync_exposed_s

    def spy(*args):
        seen.append(original(*args))
        return seen[-1]

    dp_time.host_sync_exposed_s = spy
    try:
        with_sync, without = dp_comm_s(True), dp_comm_s(False)
    finally:
        dp_time.host_sync_exposed_s = original
    exposed = seen[0]
    assert exposed > 0.0 and seen[-1] == 0.0
    contention = synced[True].framework.overlap_contention
    assert with_sync - without == pytest.approx((1 - contention) * exposed, rel=1e-6)


def test_kempnerforges_moe_rows_carry_the_host_sync():
    assert all(dict(r.framework_then).get("moe_host_sync") for r in load_published_runs()
               if r.id.startswith("KEMPNERMOE-packed"))
    assert not any(dict(r.framework_then).get("moe_host_sync") for r in load_published_runs()
                   if r.id.startswith("KEMPNER-"))
