"""Megatron-LM in fp16 keeps and reduces fp16 gradients: only --bf16 turns accumulate_allreduce_grads_in_fp32
on (megatron/training/arguments.py), and the gradient buffers otherwise take the parameters' dtype
(distributed_data_parallel.py, core_v0.6.0 line 105). Worked from parameter counts, and against the one
published pair that isolates it: FlagPerf's Qwen-MoE case run in bf16 and in fp16 with the same plan."""
from types import SimpleNamespace

import pytest

from autoplan.specs import ClusterSpec, ModelSpec, ParallelPlan, TrainingSpec
from cost_model import Estimator, load_constants
from cost_model.dp_time import dp_time
from cost_model.profiles import builtin_profile
from cost_model.published_rows import load_published_runs
from cost_model.tables import ProfileTables
from cost_model.validation import predict_runs

# GPT style, 8 layers of h = 1024: per layer QKV 3h^2 + 3h, projection h^2 + h, MLP 8h^2 + 5h, two
# LayerNorms 4h: 12h^2 + 13h parameters; the final LayerNorm 2h; embedding and untied head 2 x 50304 x h.
GPT = ModelSpec(name="gpt", num_layers=8, hidden_size=1024, num_heads=16, num_kv_heads=16, ffn_hidden_size=4096,
                vocab_size=50304, mlp="gelu", norm="layernorm", linear_bias=True)
LOCAL_PARAMS = 8 * (12 * 1024 ** 2 + 13 * 1024) + 2 * 1024 + 2 * 50304 * 1024
MEGATRON = load_constants().framework("megatron-core")


def _memory(dtype: str, plan: ParallelPlan) -> dict:
    training = TrainingSpec(global_batch_size=64, seq_len=2048, dtype=dtype)
    cluster = ClusterSpec(name="a100-80gb", num_gpus=plan.dp, gpus_per_node=8, profile="builtin:a100-80gb")
    est = Estimator(GPT, training, cluster, builtin_profile("a100-80gb"), framework=MEGATRON)
    return est.estimate(plan).memory_breakdown_bytes


def test_fp16_main_grads_take_two_bytes_and_the_rest_of_the_states_do_not_move():
    plan = ParallelPlan(dp=4, micro_batch_size=2, num_microbatches=8, zero_stage=1)
    bf16, fp16 = _memory("bf16", plan), _memory("fp16", plan)
    assert bf16["grads"] == pytest.approx(4 * LOCAL_PARAMS, rel=1e-9)
    assert fp16["grads"] == pytest.approx(2 * LOCAL_PARAMS, rel=1e-9)
    # 16-bit weights and the fp32 master + Adam moments (12 B, sharded over dp = 4 by ZeRO-1) alike.
    assert fp16["params"] == pytest.approx(bf16["params"]) == pytest.approx(2 * LOCAL_PARAMS, rel=1e-9)
    assert fp16["optimizer"] == pytest.approx(bf16["optimizer"]) == pytest.approx(12 * LOCAL_PARAMS / 4, rel=1e-9)


def test_fp16_reduces_its_gradients_in_fp16():
    # ZeRO-1 over 8 nodes: a reduce-scatter of the main gradients and an all-gather of the 2 B weights.
    # In bf16 that is 4 + 2 B per parameter on the wire; in fp16 2 + 2.
    params = 2.0 ** 31
    plan = ParallelPlan(tp=8, dp=8, zero_stage=1)
    lt = SimpleNamespace(gemm_bwd_s=100.0, attn_bwd_s=0.0, gemm_fwd_s=50.0, attn_fwd_s=0.0)
    wire = {}
    for dtype in ("bf16", "fp16"):
        est = SimpleNamespace(tables=ProfileTables(builtin_profile("a100-80gb")), framework=MEGATRON.for_dtype(dtype),
                              gpus_per_node=8, model=GPT, training=SimpleNamespace(dtype=dtype))
        wire[dtype] = dp_time(est, plan, 8, params, 0.0, lt, 150.0, 4)[2]
    assert wire["bf16"] == pytest.approx((4 + 2) * params, rel=1e-9)
    assert wire["fp16"] == pytest.approx((2 + 2) * params, rel=1e-9)


def test_flagperfs_bf16_and_fp16_runs_differ_by_the_gradients_as_reported():
    # FlagPerf qwen1.5_MoE on 8 A800s (TP1 PP2 DP4, ZeRO-1): "mem 66/80" in bf16, "59/80" in fp16 (GiB,
    # README @6faf9c1f). The plan, batch and model are the same; only the main-grad dtype differs.
    runs = [r for r in load_published_runs() if r.id in ("FLAGPERF-qwenmoe-01", "FLAGPERF-qwenmoe-02")]
    bf16, fp16 = sorted(predict_runs(runs), key=lambda r: r.run.id)
    assert (bf16.run.training.dtype, fp16.run.training.dtype) == ("bf16", "fp16")
    reported = bf16.run.reported_peak_memory_bytes - fp16.run.reported_peak_memory_bytes
    assert reported == pytest.approx(7 * 2 ** 30)
    predicted = bf16.predicted_peak_memory_bytes - fp16.predicted_peak_memory_bytes
    assert predicted == pytest.approx(reported, abs=0.5 * 2 ** 30)
