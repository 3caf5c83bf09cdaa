"""ZeRO-3's prefetched gathers hide under everything the GPU runs, from a worked example.

FSDP issues the next layer's all-gather on its own stream at the layer's pre-forward and pre-backward
hooks (torch FSDP2 `_fsdp_param_group.py`), so the gathers and reduce-scatters overlap whatever kernels
the layer runs: its GEMMs and attention, its memory-bound kernels (norms, activations, residual adds)
and, under recompute, the re-run forward. The window is the step's busy time: compute + memory-bound +
recompute from the plan's own breakdown, which is what the data-parallel traffic, when it is longer,
exceeds. Planting the fault this guards against (a window of the GEMMs and attention alone, the model
before 2026-11-29) leaves memory_bound + recompute more of the traffic exposed and fails the test."""
import pytest

from autoplan.inputs.catalog import catalog_model
from autoplan.specs import ClusterSpec, ParallelPlan, TrainingSpec, get_framework
from cost_model.estimator import Estimator
from cost_model.profiles import builtin_profile


def _estimate(plan: ParallelPlan):
    # Llama-3-8B on 16 nodes of 8 A100s, torchtitan's FSDP2 at ZeRO-3, one micro-batch of 512 tokens
    # a rank with every layer recomputed: the gathers of 8B parameters over 128 ranks outlast the
    # step's compute. Overlap 1 and no contention, so what shows is the traffic the window cannot hold.
    framework = get_framework("torchtitan").with_overrides(dp_comm_overlap=1.0, overlap_contention=0.0,
                                                           dp_bandwidth_scale=1.0)
    est = Estimator(catalog_model("llama-3-8b"), TrainingSpec(global_batch_size=128, seq_len=512, dtype="bf16"),
                    ClusterSpec("a100-80gb", 128, gpus_per_node=8), builtin_profile("a100-80gb"),
                    framework=framework)
    return est.estimate(plan)


def test_zero3_traffic_hides_under_the_whole_busy_time_of_the_step():
    e = _estimate(ParallelPlan(dp=128, zero_stage=3, micro_batch_size=1, num_microbatches=1, recompute="full",
                                   recompute_num_layers=32))
    t = e.time_breakdown_s
    busy_s = t["compute"] + t["memory_bound"] + t["recompute"]
    total_s = e.details["dp_comm_total_s"]
    # The example is one where the window matters: the traffic outlasts the GEMMs and the busy time
    # alike, and the memory-bound kernels and the recompute are a real share of the window.
    assert total_s > busy_s
    assert t["memory_bound"] + t["recompute"] > 0.2 * busy_s
    assert t["dp_comm"] == pytest.approx(total_s - busy_s, rel=1e-9)


def test_without_recompute_the_window_is_the_compute_and_memory_bound_time():
    e = _estimate(ParallelPlan(dp=128, zero_stage=3, micro_batch_size=1, num_microbatches=1))
    t = e.time_breakdown_s
    assert t["recompute"] == 0.0
    assert e.details["dp_comm_total_s"] > t["compute"] + t["memory_bound"]
    assert t["dp_comm"] == pytest.approx(e.details["dp_comm_total_s"] - t["compute"] - t["memory_bound"], rel=1e-9)
