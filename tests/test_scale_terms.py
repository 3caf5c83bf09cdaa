"""The step's wait for its slowest GPU (cost_model/scale_terms.py), from worked examples: the expected
maximum of N normals against its closed forms and published tables, the jitter against the H100
records it is measured on, and the term at 1,024 vs 8,192 GPUs."""
import glob
import json
import math
import statistics
from pathlib import Path

import pytest

from autoplan.specs import ClusterSpec, ModelSpec, ParallelPlan, TrainingSpec
from cost_model.constants import load_constants
from cost_model.estimator import Estimator
from cost_model.profiles import builtin_profile
from cost_model.scale_terms import STEP_JITTER_REL, expected_max_normal, sync_wait_s

H100_RUNS = Path(__file__).parent.parent / "cost_model" / "data" / "h100_runs"


def test_expected_max_of_normals_matches_closed_forms_and_tables():
    assert expected_max_normal(1) == 0.0
    # Closed forms: E[max of 2] = 1/sqrt(pi), E[max of 3] = 3 / (2 sqrt(pi)).
    assert expected_max_normal(2) == pytest.approx(1 / math.sqrt(math.pi), abs=1e-5)
    assert expected_max_normal(3) == pytest.approx(3 / (2 * math.sqrt(math.pi)), abs=1e-5)
    # Tables of expected normal order statistics (Harter 1961, Biometrika 48): the largest of 10, 100
    # and 1,000 lies 1.53875, 2.50759 and 3.24144 standard deviations above the mean.
    assert expected_max_normal(10) == pytest.approx(1.53875, abs=1e-4)
    assert expected_max_normal(100) == pytest.approx(2.50759, abs=1e-4)
    assert expected_max_normal(1000) == pytest.approx(3.24144, abs=1e-4)
    # It grows as sqrt(2 ln N), staying under it.
    assert expected_max_normal(8192) < math.sqrt(2 * math.log(8192))


def test_the_jitter_is_the_median_scatter_of_the_h100_records():
    scatter = []
    for path in [H100_RUNS / "runs.jsonl", *sorted(glob.glob(str(H100_RUNS / "2026-11-2*" / "*.jsonl")))]:
        for line in Path(path).read_text(encoding="utf-8").splitlines():
            record = json.loads(line)
            steps = record.get("step_times_s") or []
            if record.get("status") == "ok" and len(steps) >= 3:
                scatter.append(statistics.stdev(steps) / statistics.fmean(steps))
    assert len(scatter) == 13
    assert STEP_JITTER_REL == pytest.approx(statistics.median(scatter), abs=5e-5)


def test_the_wait_at_1024_and_8192_gpus_from_its_inputs():
    # A 1.0 s step with 0.27 % scatter per GPU: the slowest of 1,024 GPUs lies 3.248 sigma above the
    # mean (3.24144 at 1,000), 8.77 ms; of 8,192 GPUs 3.802 sigma, 10.27 ms: 1.5 ms more per step.
    assert sync_wait_s(1.0, 1024, 0.0027) == pytest.approx(0.0027 * 3.2482, rel=1e-4)
    assert sync_wait_s(1.0, 8192, 0.0027) == pytest.approx(0.0027 * 3.8023, rel=1e-4)
    assert sync_wait_s(1.0, 1) == 0.0


@pytest.mark.parametrize("num_gpus", [1024, 8192])
def test_an_estimate_waits_for_the_slowest_of_all_its_gpus(num_gpus):
    # Llama-3-8B, tp 2 x dp (num_gpus / 2), ZeRO-1 on Megatron-Core: the wait is the jitter times
    # the other terms' sum times E[max] over every GPU (not over the nodes: 128 and 1,024 of them).
    model = ModelSpec(name="llama-3-8b", num_layers=32, hidden_size=4096, num_heads=32, num_kv_heads=8,
                      ffn_hidden_size=14336, vocab_size=128256)
    dp = num_gpus // 2
    training = TrainingSpec(global_batch_size=dp * 4, seq_len=4096, dtype="bf16")
    cluster = ClusterSpec(name="h100-80gb", num_gpus=num_gpus, gpus_per_node=8)
    est = Estimator(model, training, cluster, builtin_profile("h100-80gb"), framework=load_constants().framework("megatron-core"))
    plan = ParallelPlan(dp=dp, tp=2, pp=1, sequence_parallel=True, zero_stage=1, micro_batch_size=1,
                        num_microbatches=4, recompute="selective")
    time = est.estimate(plan).time_breakdown_s
    busy_s = sum(v for k, v in time.items() if k != "sync_wait")
    expected = STEP_JITTER_REL * busy_s * {1024: 3.2482, 8192: 3.8023}[num_gpus]
    assert time["sync_wait"] == pytest.approx(expected, rel=1e-4)
