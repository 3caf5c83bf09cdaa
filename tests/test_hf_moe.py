"""Qwen2-MoE and gpt-oss config.json readers (autoplan/inputs/hf_recent.py): hand-written configs with the
architecture fields of the released checkpoints, counted against the sizes their authors publish."""
import json

import pytest

from autoplan.inputs.hf_config import load_hf_config
from tests.test_hf_config import expect_refusal

QWEN15_MOE_A27B = {  # Qwen/Qwen1.5-MoE-A2.7B
    "model_type": "qwen2_moe", "hidden_size": 2048, "num_hidden_layers": 24, "num_attention_heads": 16,
    "num_key_value_heads": 16, "intermediate_size": 5632, "moe_intermediate_size": 1408,
    "shared_expert_intermediate_size": 5632, "num_experts": 60, "num_experts_per_tok": 4,
    "decoder_sparse_step": 1, "mlp_only_layers": [], "vocab_size": 151936, "max_position_embeddings": 8192,
    "tie_word_embeddings": False, "hidden_act": "silu", "use_sliding_window": False,
}
QWEN2_57B_A14B = {  # Qwen/Qwen2-57B-A14B
    **QWEN15_MOE_A27B, "hidden_size": 3584, "num_hidden_layers": 28, "num_attention_heads": 28,
    "num_key_value_heads": 4, "intermediate_size": 18944, "moe_intermediate_size": 2560,
    "shared_expert_intermediate_size": 20480, "num_experts": 64, "num_experts_per_tok": 8,
    "max_position_embeddings": 32768,
}
GPT_OSS_120B = {  # openai/gpt-oss-120b
    "model_type": "gpt_oss", "hidden_size": 2880, "num_hidden_layers": 36, "num_attention_heads": 64,
    "num_key_value_heads": 8, "head_dim": 64, "intermediate_size": 2880, "num_local_experts": 128,
    "num_experts_per_tok": 4, "experts_per_token": 4, "vocab_size": 201088, "sliding_window": 128,
    "max_position_embeddings": 131072, "tie_word_embeddings": False, "hidden_act": "silu",
    "attention_bias": True, "rope_theta": 150000,
    "layer_types": ["sliding_attention", "full_attention"] * 18,
}
GPT_OSS_20B = {**GPT_OSS_120B, "num_hidden_layers": 24, "num_local_experts": 32,
               "layer_types": ["sliding_attention", "full_attention"] * 12}


def write(tmp_path, data):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize("data, total, active, rel", [
    # Qwen1.5-MoE blog / model card: "14.3B parameters in total and 2.7B activated parameters".
    (QWEN15_MOE_A27B, 14.3e9, 2.7e9, 5e-3),
    # Qwen2 technical report (arXiv 2407.10671) Table 1: 57B-A14B.
    (QWEN2_57B_A14B, 57e9, 14e9, 2e-2),
])
def test_qwen2_moe_published_sizes(tmp_path, data, total, active, rel):
    model = load_hf_config(write(tmp_path, data))
    assert model.num_params == pytest.approx(total, rel=rel)
    assert model.num_active_params == pytest.approx(active, rel=rel)
    assert (model.qkv_bias, model.shared_expert_ffn_size, model.num_moe_layers) == \
        (True, data["shared_expert_intermediate_size"], data["num_hidden_layers"])


@pytest.mark.parametrize("data, total, active", [
    # gpt-oss model card (arXiv 2508.10925) Table 1: 116.83B total, 5.13B active per token (120b);
    # 20.91B and 3.61B (20b). Its active count takes the unembedding, not the embedding lookup.
    (GPT_OSS_120B, 116.83e9, 5.13e9),
    (GPT_OSS_20B, 20.91e9, 3.61e9),
])
def test_gpt_oss_published_sizes(tmp_path, data, total, active):
    model = load_hf_config(write(tmp_path, data))
    # Router biases and attention sinks (about 7k parameters per layer) are not counted.
    assert model.num_params == pytest.approx(total, rel=1e-3)
    assert model.num_active_params - model.embedding_params() == pytest.approx(active, rel=2e-3)
    assert (model.sliding_window, model.global_attention_every, model.head_dim) == (128, 2, 64)


def test_gpt_oss_mlp_worked_example(tmp_path):
    # Model card Table 1, "MLP" of gpt-oss-120b: 114.71B. Per layer 128 experts x (3 x 2880 x 2880
    # weights + 2 x 2880 + 2880 biases) = 3,186,155,520 plus the router's 2880 x 128 = 368,640.
    model = load_hf_config(write(tmp_path, GPT_OSS_120B))
    assert model.moe_mlp_params() == 3_186_155_520 + 368_640
    assert 36 * model.moe_mlp_params() == pytest.approx(114.71e9, rel=1e-4)
    # attention_bias false drops the q/k/v/o biases (4096 + 512 + 512 + 2880), never the experts' own.
    plain = load_hf_config(write(tmp_path, {**GPT_OSS_120B, "attention_bias": False}))
    assert plain.moe_mlp_params() == model.moe_mlp_params()
    assert model.attention_params_per_layer() - plain.attention_params_per_layer() == 8000


def test_defaults_are_the_config_classes(tmp_path):
    # A config saved by transformers omits its class defaults: Qwen2MoeConfig() is Qwen1.5-MoE-A2.7B's
    # shape, GptOssConfig() gpt-oss-120b's.
    bare = load_hf_config(write(tmp_path, {"model_type": "qwen2_moe"}))
    assert (bare.num_experts, bare.num_experts_per_token, bare.moe_ffn_hidden_size) == (60, 4, 1408)
    oss = load_hf_config(write(tmp_path, {"model_type": "gpt_oss"}))
    assert oss.num_params == load_hf_config(write(tmp_path, GPT_OSS_120B)).num_params


@pytest.mark.parametrize("change, words", [
    ({"use_sliding_window": True}, ["use_sliding_window"]),
    ({"mlp_only_layers": [3]}, ["mlp_only_layers"]),
    ({"num_experts": 0}, ["num_experts"]),
    ({"hidden_act": "gelu"}, ["hidden_act"]),
])
def test_qwen2_moe_refusals(tmp_path, change, words):
    expect_refusal(write(tmp_path, {**QWEN15_MOE_A27B, **change}), words)


def test_gpt_oss_refuses_a_layer_pattern_it_cannot_model(tmp_path):
    expect_refusal(write(tmp_path, {**GPT_OSS_20B, "layer_types": ["full_attention", "sliding_attention"] * 12}),
                   ["layer_types"])
