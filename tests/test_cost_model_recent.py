"""The cost model on the 2024-2025 architecture facts: each term against an independent count."""
from dataclasses import replace
from pathlib import Path

import pytest

from autoplan.inputs.hf_config import load_hf_config
from autoplan.specs import ClusterSpec, ParallelPlan, TrainingSpec
from autoplan.specs.flops import model_flops_per_token
from cost_model import Estimator, activation_bytes_per_layer, builtin_profile, load_constants
from cost_model.flops import attention_core_fwd_flops, layer_gemms, logits_gemm

FIXTURES = Path(__file__).parent / "fixtures" / "hf_configs"
H100 = builtin_profile("h100-80gb")


MEGATRON = load_constants().framework("megatron-core")  # these formulas are Megatron's


def spec(name):
    return load_hf_config(FIXTURES / f"{name}.json")


def _gemm_weights(model, moe):
    """Weight elements the layer's GEMMs touch once each at tp=ep=1 (every expert: tokens >= experts)."""
    return sum(g.n * g.k * g.count for g in layer_gemms(model, 4 * model.num_experts, 1, 1, moe))


@pytest.mark.parametrize("name", ["deepseek-v3", "qwen3-235b-a22b", "gemma-3-27b", "olmo-2-13b", "gpt-j-6b"])
def test_layer_gemms_cover_exactly_the_layer_matrices(name):
    """Every weight matrix of a layer appears in one GEMM with its real shape: the GEMM weight elements
    equal the layer's parameters less its norms and biases (MLA's down/up projections included)."""
    model = spec(name)
    r_q, r_kv = model.q_lora_rank, model.kv_lora_rank
    for moe in {model.is_moe_layer(i) for i in range(model.num_layers)}:
        norms = model.num_layer_norms * model.norm_params() + (r_q + r_kv if model.is_mla else 0)
        norms += {"": 0, "head": 2 * model.head_dim, "full": model.q_size + model.kv_size}[model.qk_norm]
        biases = (model.ffn_hidden_size + model.hidden_size) if model.mlp_bias else 0
        assert _gemm_weights(model, moe) == model.layer_params(moe) - norms - biases


def test_sliding_window_attention_flops():
    gemma = spec("gemma-3-27b")
    s, w = 8192, 1024
    full = attention_core_fwd_flops(gemma, 1, s, 1, 1)
    local = attention_core_fwd_flops(gemma, 1, s, 1, 1, window=w)
    assert full == 2.0 * s * s / 2 * gemma.num_heads * 2 * gemma.head_dim
    assert local / full == pytest.approx((s * w - w * (w - 1) / 2) / (s * s / 2))
    # A window at least the sequence long is global attention.
    assert attention_core_fwd_flops(gemma, 1, 1024, 1, 1, window=w) == attention_core_fwd_flops(gemma, 1, 1024, 1, 1)
    # Model FLOPs: 52 local layers count 1024 keys per query, 10 global ones 8192.
    dense = 6.0 * (gemma.num_params - gemma.embedding_params() + gemma.vocab_size * gemma.hidden_size)
    attention = 6.0 * (52 * w + 10 * s) * gemma.num_heads * 2 * gemma.head_dim
    assert model_flops_per_token(gemma, s) == pytest.approx(dense + attention)


def test_mla_attention_uses_its_own_head_widths():
    ds = spec("deepseek-v3")
    s = 4096
    assert attention_core_fwd_flops(ds, 1, s, 1, 1, causal=False) == 2.0 * s * s * 128 * (192 + 128)


def test_per_gemm_sums_match_6n_plus_attention_for_moe_with_shared_and_dense_layers():
    ds = spec("deepseek-v3")
    s = 4096
    batch = ds.num_experts  # E sequences: each expert receives exactly tokens*k/E rows (balanced routing)
    tokens = s * batch
    forward = logits_gemm(ds, tokens, 1).flops
    for (moe, window), count in ds.layer_kinds():
        per_layer = sum(g.flops for g in layer_gemms(ds, tokens, 1, 1, moe))
        forward += count * (per_layer + attention_core_fwd_flops(ds, batch, s, 1, 1, causal=False))
    assert 3 * forward / tokens == pytest.approx(model_flops_per_token(ds, s), rel=1e-4)


def test_parallel_block_halves_tp_traffic_and_window_shrinks_cp_exchange():
    training, cluster = TrainingSpec(64, 4096), ClusterSpec("h100-80gb", 16)
    plan = ParallelPlan(dp=4, tp=4, micro_batch_size=1, num_microbatches=16, sequence_parallel=True)
    gptj = spec("gpt-j-6b")
    serial = replace(gptj, parallel_block=False, shared_block_norm=False)
    est = Estimator(gptj, training, cluster, H100, framework=MEGATRON).estimate(plan)
    ref = Estimator(serial, training, cluster, H100, framework=MEGATRON).estimate(plan)
    assert est.details["tp_bytes_per_layer_microbatch"] * 2 == ref.details["tp_bytes_per_layer_microbatch"]
    cp_plan = ParallelPlan(dp=4, cp=4, micro_batch_size=1, num_microbatches=16)
    sc2 = spec("starcoder2-15b")
    global_sc2 = replace(sc2, sliding_window=0)
    t_window = Estimator(sc2, TrainingSpec(64, 16384), cluster, H100, framework=MEGATRON).estimate(cp_plan).time_breakdown_s
    t_global = Estimator(global_sc2, TrainingSpec(64, 16384), cluster, H100, framework=MEGATRON).estimate(cp_plan).time_breakdown_s
    assert t_window["compute"] < t_global["compute"]


def test_mla_and_qk_norm_activations_are_counted():
    ds = spec("deepseek-v3")
    parts = activation_bytes_per_layer(ds, 1, 4096, 1, False)
    assert parts["mla_latents"] == 2 * 4096 * (1536 + 512 + 64)
    assert parts["qkv"] == 2 * 4096 * 128 * (192 + 192 + 128)
    dense, moe = (activation_bytes_per_layer(ds, 1, 4096, 1, False, moe=m)["mlp_activation"] for m in (False, True))
    assert dense == 2 * 4096 * 3 * 18432                   # the dense layers' 18432-wide MLP
    assert moe == 2 * 4096 * 3 * (8 * 2048 + 2048)         # 8 routed experts + the shared one (equal, by design)
    qwen_moe = spec("qwen3-235b-a22b")
    assert activation_bytes_per_layer(qwen_moe, 1, 4096, 1, False)["mlp_activation"] == 2 * 4096 * 3 * 8 * 1536
    qwen3 = spec("qwen3-8b")
    assert activation_bytes_per_layer(qwen3, 1, 4096, 1, False)["qk_norm_inputs"] == 2 * 4096 * (4096 + 1024)


def test_moe_memory_splits_experts_over_ep_and_averages_dense_layers():
    ds = spec("deepseek-v3")
    training, cluster = TrainingSpec(1024, 4096), ClusterSpec("h100-80gb", 64)
    est = Estimator(ds, training, cluster, H100, framework=MEGATRON)
    plan = ParallelPlan(dp=64, ep=64, zero_stage=1, micro_batch_size=1, num_microbatches=16)
    experts = ds.expert_params_all_layers()
    expected = experts / 64 + (ds.num_params - experts)   # experts split over ep, the rest replicated
    assert est.memory(plan)["params"] == pytest.approx(2 * expected, rel=1e-9)
