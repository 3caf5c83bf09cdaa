"""Host issue time (cost_model/host_time.py): a micro-batch takes max(GPU time, host issue time).

Worked examples from the counted and measured facts, not from the code's output: a 2-layer model whose
kernels are far shorter than their launch waits for the host, 2 x 193.75 kernels x 9.37 us = 3.63 ms
per micro-batch; an 8B model's micro-batch hides it entirely."""
import json
from dataclasses import replace

import pytest

from autoplan.specs import ClusterSpec, ModelSpec, ParallelPlan, TrainingSpec
from autoplan.specs.frameworks import EAGER_HOST_S_PER_KERNEL, EAGER_KERNELS_PER_LAYER, get_framework
from cost_model import Estimator, builtin_profile, load_constants
from cost_model.host_time import exposed_host_s, host_issue_s
from cost_model.measured_runs import H100_RUNS_DIR

PROFILE = H100_RUNS_DIR / "2026-11-29-cpu-host-time" / "profile-after2-noloss-llama-3.2-1b.json"
TINY_LAYERS, TINY_MICROBATCHES = 2, 4  # the README of that folder: 2 layers, 4 micro-batches of 2
# Every term that runs on the GPU's stream within a micro-batch at dp = tp = pp = 1.
GPU_TERMS = ("compute", "memory_bound", "recompute", "tp_comm", "cp_comm", "ep_comm")


def test_the_eager_facts_are_the_profiles_counts():
    """Kernels per layer and host seconds per kernel come from the shipped CPU profile of eager PyTorch."""
    case = json.loads(PROFILE.read_text())["torch-eager"]
    counts = case["kernel_counts"]
    layer_kernels = counts["gemm"] + counts["attention"] + counts["elementwise_copies"]
    assert EAGER_KERNELS_PER_LAYER == pytest.approx(layer_kernels / (TINY_LAYERS * TINY_MICROBATCHES))
    assert EAGER_KERNELS_PER_LAYER == pytest.approx(193.75)
    all_kernels = layer_kernels + counts["optimizer"]
    assert EAGER_HOST_S_PER_KERNEL == pytest.approx(case["process_cpu_s_per_step"] / all_kernels, rel=1e-6)
    # 21 GEMMs per layer and micro-batch (7 projections forward, 14 backward) and the head's 3 per
    # micro-batch: the count is of layers and micro-batches as the folder's README says.
    assert counts["gemm"] == 21 * TINY_LAYERS * TINY_MICROBATCHES + 3 * TINY_MICROBATCHES


def test_exposed_host_time_is_what_the_gpu_does_not_hide():
    # 12 layers x 100 kernels x 5 us = 6 ms of host issue per micro-batch.
    assert host_issue_s(12, 100, 5e-6) == pytest.approx(6e-3)
    assert exposed_host_s(1e-3, 12, 100, 5e-6) == pytest.approx(5e-3)
    assert exposed_host_s(10e-3, 12, 100, 5e-6) == 0.0
    assert exposed_host_s(1e-3, 12, 0.0, 0.0) == 0.0


def _estimate(model, seq_len, micro_batch, num_microbatches, framework="autoplan", profile=None):
    training = TrainingSpec(global_batch_size=micro_batch * num_microbatches, seq_len=seq_len)
    est = Estimator(model, training, ClusterSpec(name="h100-80gb", num_gpus=1), profile or builtin_profile("h100-80gb"),
                    framework=load_constants().framework(framework))
    plan = ParallelPlan(dp=1, tp=1, pp=1, micro_batch_size=micro_batch, num_microbatches=num_microbatches)
    return est.estimate(plan).time_breakdown_s


TINY = ModelSpec(name="tiny", num_layers=2, hidden_size=128, num_heads=4, num_kv_heads=4,
                 ffn_hidden_size=512, vocab_size=1024, max_seq_len=256)
LLAMA_8B = ModelSpec(name="llama-3-8b", num_layers=32, hidden_size=4096, num_heads=32, num_kv_heads=8,
                     ffn_hidden_size=14336, vocab_size=128256)


def test_a_starved_gpu_waits_for_the_host():
    """Worked example: a 2-layer model at 1 x 256 tokens runs its kernels in microseconds, so each micro-
    batch lasts as long as issuing them: 2 x 193.75 x 9.3685 us = 3.630 ms, 4 micro-batches 14.52 ms."""
    terms = _estimate(TINY, seq_len=256, micro_batch=1, num_microbatches=4)
    per_microbatch_s = 2 * 193.75 * (0.018371569 / 1961)
    assert per_microbatch_s == pytest.approx(3.630e-3, rel=1e-3)
    assert terms["host_issue"] > 0
    assert sum(terms[t] for t in GPU_TERMS) + terms["host_issue"] == pytest.approx(4 * per_microbatch_s)


def test_a_busy_gpu_hides_the_host():
    """Llama-3-8B at 2 x 4,096 tokens: ~100 ms of GPU work per micro-batch against 32 x 1.8 ms of issue."""
    terms = _estimate(LLAMA_8B, seq_len=4096, micro_batch=2, num_microbatches=2)
    assert sum(terms[t] for t in GPU_TERMS) > 2 * 32 * 193.75 * 9.37e-6
    assert terms["host_issue"] == 0.0


def test_a_framework_without_counts_has_no_host_term():
    assert get_framework("megatron-core").kernels_per_layer == 0.0
    assert _estimate(TINY, seq_len=256, micro_batch=1, num_microbatches=4, framework="megatron-core")["host_issue"] == 0.0


def test_a_cpu_runs_what_it_issues():
    """On a CPU profile the host runs its own kernels: no device waits, no host term."""
    cpu = replace(builtin_profile("h100-80gb"), device_kind="cpu")
    assert _estimate(TINY, seq_len=256, micro_batch=1, num_microbatches=4, profile=cpu)["host_issue"] == 0.0


def test_the_host_figure_holds_on_a_second_model():
    """The same CPU profile's GPT-2 (eager, its own kernel mix) issues a kernel in 7.8 us against the
    Llama's 9.4: one figure for eager PyTorch, within 20 %."""
    case = json.loads(PROFILE.with_name("profile-after2-noloss-gpt2-medium.json").read_text())["torch-eager"]
    per_kernel_s = case["process_cpu_s_per_step"] / sum(case["kernel_counts"].values())
    assert per_kernel_s == pytest.approx(7.8e-6, rel=0.01)
    assert per_kernel_s == pytest.approx(EAGER_HOST_S_PER_KERNEL, rel=0.2)
