"""DeepSpeed's step as its code runs it, from worked examples: when its data-parallel collectives can
hide under compute (overlap_comm defaults to ZeRO-3 only; the pipeline engine reduces after the whole
schedule) and what accumulating each micro-batch's gradients outside the GEMM costs (BF16_Optimizer's
fp32 or bf16 accumulators, autograd's in-place add), inside the pipeline's fill and drain too."""
from types import SimpleNamespace

import pytest

from autoplan.specs import ClusterSpec, ModelSpec, ParallelPlan, TrainingSpec, get_framework
from cost_model import Estimator, load_constants
from cost_model.profiles import builtin_profile
from cost_model.dp_time import dp_time
from cost_model.tables import ProfileTables
from tests.cli_run import run_cli

# GPT style, 8 layers of h = 1024: per layer QKV 3h^2 + 3h, projection h^2 + h, MLP 8h^2 + 5h, two
# LayerNorms 4h: 12h^2 + 13h parameters.
GPT = ModelSpec(name="gpt", num_layers=8, hidden_size=1024, num_heads=16, num_kv_heads=16, ffn_hidden_size=4096,
                vocab_size=50304, mlp="gelu", norm="layernorm", linear_bias=True)
LAYER_PARAMS = 12 * 1024 ** 2 + 13 * 1024


def _dp_exposed_and_total(framework, zero_stage):
    # 8 ranks over 8 nodes, 8 layers of 2^28 parameters, a backward of 100 s: far longer than any
    # collective here, so whatever may overlap does. DeepSpeed's 5e8-element buckets make 5
    # collectives of the 2^31 gradients: if they overlapped, only the last would show.
    tables = ProfileTables(builtin_profile("a100-80gb"))
    plan = ParallelPlan(tp=8, dp=8, zero_stage=zero_stage)
    lt = SimpleNamespace(gemm_bwd_s=100.0, attn_bwd_s=0.0, gemm_fwd_s=50.0, attn_fwd_s=0.0)
    est = SimpleNamespace(tables=tables, framework=framework, gpus_per_node=8, model=GPT,
                          training=SimpleNamespace(dtype="bf16"))
    exposed, total, _ = dp_time(est, plan, 8, 2.0 ** 31, 0.0, lt, 150.0, 4)
    return exposed, total


@pytest.mark.parametrize("name,zero_stage", [("deepspeed", 0), ("deepspeed", 1), ("deepspeed", 2),
                                             ("megatron-deepspeed", 0), ("megatron-deepspeed", 1)])
def test_deepspeed_reduces_after_the_backward_below_zero3(name, zero_stage):
    # overlap_comm is off below ZeRO-3 (zero/config.py) and the pipeline engine reduces after its
    # schedule: every second of the collectives lands on the step.
    exposed, total = _dp_exposed_and_total(get_framework(name), zero_stage)
    assert total > 0.0 and exposed == pytest.approx(total)


def test_deepspeed_zero3_and_megatron_hide_under_the_backward():
    # ZeRO-3 (overlap_comm on) and Megatron-Core at ZeRO-1 hide all but the last collective: a
    # layer's of 8 at ZeRO-3, a bucket's at Megatron-Core: 2^31 parameters in buckets of max(40M, 1M x dp),
    # ceil(2147.5M / 40M) = 54 of them.
    for name, zero_stage, calls in (("deepspeed", 3, 8), ("megatron-core", 1, 54)):
        exposed, total = _dp_exposed_and_total(get_framework(name), zero_stage)
        assert exposed == pytest.approx(total / calls), name


def _estimate(framework, plan, dtype="bf16", global_batch=64):
    training = TrainingSpec(global_batch_size=global_batch, seq_len=2048, dtype=dtype)
    cluster = ClusterSpec(name="a100-80gb", num_gpus=plan.tp * plan.pp * plan.dp, gpus_per_node=8,
                          profile="builtin:a100-80gb")
    profile = builtin_profile("a100-80gb")
    return Estimator(GPT, training, cluster, profile, framework=framework), ProfileTables(profile)


def _check_accumulation_bytes(framework, zero_stage, dtype, bytes_first, bytes_later):
    """The step pays (bytes_first + (m - 1) x bytes_later) per local parameter, in every micro-batch's
    backward and so in the pipeline's fill and drain too."""
    fused = framework.with_overrides(grad_accumulation_bytes={}, pipeline_zero0_grad_accumulation_bytes={})
    # pp = 2 over 8 layers, dp = 4, micro-batch 2 of a 64-sequence batch: m = 8 micro-batches. The
    # last stage holds 4 layers, the final LayerNorm (2h) and the head (50304 x h; the embedding, untied,
    # is the first stage's).
    plan = ParallelPlan(pp=2, dp=4, micro_batch_size=2, num_microbatches=8, zero_stage=zero_stage)
    est, tables = _estimate(framework, plan, dtype)
    m = 8
    local_params = 4 * LAYER_PARAMS + 2 * 1024 + 50304 * 1024
    accum_bytes = (bytes_first + (m - 1) * bytes_later) * local_params
    # Per layer (a chunk of the stage's bytes), at the profile's HBM bandwidth for ops of that size.
    bandwidth = tables.memory_bytes_per_s(int(accum_bytes / m / 4))
    with_it, without = est.estimate(plan), Estimator(est.model, est.training, est.cluster, est.profile,
                                                     framework=fused).estimate(plan)
    added = with_it.time_breakdown_s["weight_casts"] - without.time_breakdown_s["weight_casts"]
    assert added == pytest.approx(accum_bytes / bandwidth, rel=1e-3)
    # Each micro-batch pays it inside its backward, so the fill and drain pay it too: the bubble is
    # (sum - max) of the ranks' micro-batch times, p - 1 = 1 micro-batch at equal stages, less here
    # where the first stage lacks the head (details["bubble_fraction"] = that over m).
    bubble = with_it.time_breakdown_s["pp_bubble"] - without.time_breakdown_s["pp_bubble"]
    fraction = with_it.details["bubble_fraction"]
    assert 0.5 / m < fraction < 1 / m
    assert bubble == pytest.approx(fraction * added, rel=1e-6)
    assert sum(with_it.time_breakdown_s.values()) == pytest.approx(with_it.step_time_s)


@pytest.mark.parametrize("dtype,bytes_first,bytes_later", [("bf16", 18, 18), ("fp16", 0, 6)])
def test_gradient_accumulation_outside_the_gemm_costs_its_bytes_every_micro_batch(dtype, bytes_first, bytes_later):
    # megatron-deepspeed in bf16: BF16_Optimizer's fp32 accumulator, hp_grad.add_(lp.grad.to(float32)):
    # read bf16 2, write + read the fp32 cast 4 + 4, read + write the accumulator 4 + 4 = 18 B.
    deepspeed = load_constants().framework("megatron-deepspeed")
    assert deepspeed.grad_accumulation_bytes[dtype] == (bytes_first, bytes_later)
    _check_accumulation_bytes(deepspeed, 1, dtype, bytes_first, bytes_later)


@pytest.mark.parametrize("zero_stage,bytes_first,bytes_later", [(1, 0, 6), (0, 6, 14)])
def test_exported_deepspeed_accumulates_in_bf16(zero_stage, bytes_first, bytes_later):
    # DeepSpeed 0.19.8 as exported (no data_types.grad_accum_dtype: bf16 accumulation).
    # ZeRO-1: the ZeRO optimizer leaves param.grad to autograd, None after the step: the first
    # micro-batch's GEMM writes it (0 B), each later one adds in place, read 2 + 2, write 2 = 6 B.
    # The pipeline engine at ZeRO-0 (BF16_Optimizer, bf16 accumulator): the first micro-batch adds
    # param.grad into the accumulator, read 2 + 2, write 2 = 6 B; each later one first zeroes
    # param.grad (write 2), autograd adds into it in place (6) and the accumulator add (6): 14 B.
    _check_accumulation_bytes(load_constants().framework("deepspeed"), zero_stage, "bf16", bytes_first, bytes_later)


def test_no_accumulation_cost_where_gradients_are_reduced_as_they_come():
    # ZeRO-2/3 reduce each bucket into the rank's partition during the backward; Megatron fuses the
    # add into the weight-gradient GEMM (gradient_accumulation_fusion).
    deepspeed = load_constants().framework("deepspeed")
    for framework, zero_stage in ((deepspeed, 2), (deepspeed, 3), (load_constants().framework("megatron-core"), 1)):
        plan = ParallelPlan(dp=8, micro_batch_size=2, num_microbatches=4, zero_stage=zero_stage)
        est, _ = _estimate(framework, plan)
        fused = Estimator(est.model, est.training, est.cluster, est.profile,
                          framework=framework.with_overrides(grad_accumulation_bytes={}))
        assert est.estimate(plan).time_breakdown_s["weight_casts"] == \
            fused.estimate(plan).time_breakdown_s["weight_casts"]


def test_the_frameworks_command_says_where_each_accumulates_and_when_it_overlaps(capsys):
    code, out, _ = run_cli(capsys, "frameworks", "deepspeed")
    assert code == 0
    assert "DP window 80% at ZeRO 3 only" in out
    assert ("gradient accumulation outside the GEMM at ZeRO 0-1: bf16 6 B (0 B the first), fp16 6 B (0 B the first) "
            "per parameter and micro-batch; under its pipeline at ZeRO-0: bf16 14 B (6 B the first)") in " ".join(out.split())
    code, out, _ = run_cli(capsys, "frameworks", "megatron-deepspeed")
    assert code == 0 and "DP window none (reduced after the backward)" in out
    code, out, _ = run_cli(capsys, "frameworks", "megatron-core")
    assert code == 0 and "gradient accumulation in the GEMM" in out and "DP window 80%," in out
    code, out, _ = run_cli(capsys, "frameworks", "autoplan")  # autocast: fp32 accumulation, in its casts
    assert code == 0 and "gradient accumulation with the weight casts" in out


def test_deepspeed_bf16_keeps_full_size_fp32_gradients_below_zero2():
    # BF16_Optimizer (ZeRO 0-1 in bf16): fp32_groups_gradients_flat is zeros_like the whole bf16 group,
    # 4 B per local parameter on every rank; fp16's ZeRO-1 keeps only its partition's, 4 B / dp.
    # dp = 4, pp = 1: 8 layers + the final LayerNorm (2h) + the embedding and the untied head (2 x 50304 x h).
    local_params = 8 * LAYER_PARAMS + 2 * 1024 + 2 * 50304 * 1024
    plan = ParallelPlan(dp=4, micro_batch_size=2, num_microbatches=8, zero_stage=1)
    deepspeed = load_constants().framework("megatron-deepspeed")
    bf16 = _estimate(deepspeed, plan, "bf16")[0].estimate(plan).memory_breakdown_bytes
    fp16 = _estimate(deepspeed, plan, "fp16")[0].estimate(plan).memory_breakdown_bytes
    assert bf16["grad_accumulator"] == pytest.approx(4 * local_params, rel=1e-9) and "grad_partition" not in bf16
    assert fp16["grad_partition"] == pytest.approx(4 * local_params / 4, rel=1e-9) and "grad_accumulator" not in fp16
    assert bf16["optimizer"] == pytest.approx(fp16["optimizer"]) == pytest.approx(12 * local_params / 4, rel=1e-9)
    # DeepSpeed as autoplan exports it (no data_types: bf16 accumulation) runs its ZeRO optimizer from
    # ZeRO-1, which keeps the rank's bf16 gradient partition and no fp32 accumulator: 2 B / dp.
    zero2 = ParallelPlan(dp=4, micro_batch_size=2, num_microbatches=8, zero_stage=2)
    bf16_zero2 = _estimate(load_constants().framework("deepspeed"), zero2, "bf16")[0].estimate(zero2)
    assert "grad_accumulator" not in bf16_zero2.memory_breakdown_bytes
    assert bf16_zero2.memory_breakdown_bytes["grads"] == pytest.approx(2 * local_params / 4, rel=1e-9)
