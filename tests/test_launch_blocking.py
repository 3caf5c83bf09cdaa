"""Synchronous kernel launches (CUDA_LAUNCH_BLOCKING=1) put the host's issue time on every micro-batch, from
a worked example: BigScience's tr11 topology runs, which launched that way on 48 Jean Zay nodes.

BLOOM-PREQ-05 (181B: 72 layers, hidden 14,336; TP 8, PP 6, DP 8, micro-batch 1, global batch 2,048):
each pipeline stage holds 72 / 6 = 12 layers and runs 2,048 / (8 x 1) = 256 micro-batches a step. With
the host issuing 113.75 kernels per layer and micro-batch at 7.8 us each (eager PyTorch's count and cost
on a GPT layer, autoplan/specs/frameworks/_eager.py), a micro-batch waits 12 x 113.75 x 7.8 us = 10.7 ms
for its host, all of it, since no kernel is queued while the host issues the next: 256 x 10.7 ms = 2.73 s
a step. With launches asynchronous the host's 10.7 ms hide under the GPU's ~400 ms per micro-batch:
nothing shows.
Planting the fault (the larger of host and GPU time, as for asynchronous launches) fails the first test."""
import pytest

from autoplan.specs.frameworks._eager import EAGER_GPT_HOST_S_PER_KERNEL, EAGER_GPT_KERNELS_PER_LAYER
from cost_model.estimator import Estimator
from cost_model.published_rows import load_published_runs
from cost_model.validation import predict_runs


def _bloom(row_id: str):
    return next(r for r in load_published_runs() if r.id == row_id)


def test_every_micro_batch_waits_for_its_host_under_synchronous_launches():
    run = _bloom("BLOOM-PREQ-05")
    assert (run.plan.pp, run.plan.num_microbatches, run.plan.micro_batch_size) == (6, 256, 1)
    assert EAGER_GPT_KERNELS_PER_LAYER == 113.75 and EAGER_GPT_HOST_S_PER_KERNEL == pytest.approx(7.81e-6, rel=1e-3)
    (result,) = predict_runs([run])
    host_s = dict(result.time_breakdown_s)["host_issue"]
    assert host_s == pytest.approx(256 * 12 * EAGER_GPT_KERNELS_PER_LAYER * EAGER_GPT_HOST_S_PER_KERNEL, rel=1e-9)
    assert host_s == pytest.approx(2.73, abs=0.01)


def test_asynchronous_launches_hide_the_same_host_time_under_the_gpu():
    run = _bloom("BLOOM-PREQ-05")
    facts = run.framework_facts(None).with_overrides(launch_blocking=False)
    est = Estimator(run.model, run.training, run.cluster, run.profile(), framework=facts, allow_tp_across_nodes=True)
    assert est.estimate(run.plan_to_price(est)).time_breakdown_s["host_issue"] == 0.0


def test_the_rows_that_launched_synchronously_are_bigsciences_tr11_runs():
    runs = load_published_runs()
    blocking = {r.id for r in runs if dict(r.framework_then).get("launch_blocking")}
    assert blocking == {r.id for r in runs if r.id.startswith("BLOOM-")}
    assert len(blocking) == 34
