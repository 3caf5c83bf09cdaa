"""The 2024-2025 families read from their published config.json (tests/fixtures/hf_configs) and
counted against the sizes their authors publish. Each published figure names its source."""
import json
from pathlib import Path

import pytest

from autoplan.inputs.hf_config import load_hf_config
from autoplan.specs import ModelSpec
from tests.test_hf_config import expect_refusal

FIXTURES = Path(__file__).parent / "fixtures" / "hf_configs"


def spec(name: str) -> ModelSpec:
    return load_hf_config(FIXTURES / f"{name}.json")


@pytest.mark.parametrize("name, total, active, rel", [
    # Qwen/Qwen3-8B model card: "Number of Parameters: 8.2B, Non-Embedding: 6.95B".
    ("qwen3-8b", 8.19e9, None, 1e-3),
    # Qwen/Qwen3-32B model card: 32.8B.
    ("qwen3-32b", 32.8e9, None, 2e-3),
    # Qwen/Qwen3-235B-A22B model card: "235B in total and 22B activated".
    ("qwen3-235b-a22b", 235e9, 22e9, 1e-2),
    # DeepSeek-V3 technical report (arXiv 2412.19437) abstract: 671B total, 37B activated per token
    # (main model; the multi-token-prediction module is counted apart).
    ("deepseek-v3", 671e9, 37e9, 1.5e-2),
    # DeepSeek-V2 paper (arXiv 2405.04434) abstract: 236B total, 21B activated.
    ("deepseek-v2", 236e9, 21e9, 2e-2),
    # allenai/OLMo-2-1124-13B model card: 13.7B parameters.
    ("olmo-2-13b", 13.7e9, None, 2e-3),
    # microsoft/Phi-3.5-mini-instruct model card: 3.8B parameters (3,821,079,552 in its safetensors index).
    ("phi-3.5-mini", 3_821_079_552, None, 0.0),
    # Gemma 2 report (arXiv 2408.00118) Table 1, 9B: 917,504,000 embedding + 8,324,201,984 non-embedding.
    ("gemma-2-9b", 917_504_000 + 8_324_201_984, None, 0.0),
    # EleutherAI/gpt-j-6b model card: 6,053,381,344 parameters. We count 6,050,882,784 (0.04 % less):
    # every tensor of the HF checkpoint is counted; the card's figure is mesh-transformer-jax's.
    ("gpt-j-6b", 6_053_381_344, None, 5e-4),
])
def test_published_sizes(name, total, active, rel):
    model = spec(name)
    assert model.num_params == pytest.approx(total, rel=rel)
    if active is not None:
        assert model.num_active_params == pytest.approx(active, rel=rel)


def test_deepseek_v3_activated_without_embedding_matches_its_weights_readme():
    # deepseek-ai/DeepSeek-V3 README_WEIGHTS.md: "Activation parameters: 36.6B (including 0.9B for the
    # output Head)" for the main model: the embedding lookup is not counted as activated there.
    model = spec("deepseek-v3")
    assert model.num_active_params - model.embedding_params() == pytest.approx(36.6e9, rel=2e-3)


def test_gemma3_27b_non_embedding_matches_the_report():
    # Gemma 3 report (arXiv 2503.19786) Table 1, 27B: 25,600M non-embedding parameters (the
    # 417M vision encoder of the gemma3 checkpoint is not part of the text model read here).
    model = spec("gemma-3-27b")
    assert model.num_params - model.embedding_params() == pytest.approx(25_600e6, rel=1e-4)
    assert (model.sliding_window, model.global_attention_every, model.qk_norm) == (1024, 6, "head")
    assert dict(model.layer_kinds()) == {(False, 1024): 52, (False, 0): 10}  # 5 local : 1 global


def test_architecture_facts_are_read():
    qwen3 = spec("qwen3-8b")
    assert (qwen3.head_dim, qwen3.qk_norm, qwen3.qkv_bias) == (128, "head", False)
    moe = spec("qwen3-235b-a22b")
    assert (moe.num_experts, moe.num_experts_per_token, moe.expert_ffn_size, moe.ffn_hidden_size) == (128, 8, 1536, 12288)
    assert moe.q_size == 8192 != moe.hidden_size  # head_dim independent of hidden/heads
    ds = spec("deepseek-v3")
    assert (ds.is_mla, ds.q_lora_rank, ds.kv_lora_rank, ds.qk_rope_head_dim, ds.head_dim, ds.value_dim) == \
        (True, 1536, 512, 64, 192, 128)
    assert (ds.num_dense_layers, ds.num_moe_layers, ds.shared_expert_ffn_size) == (3, 58, 2048)
    gemma2 = spec("gemma-2-9b")
    assert (gemma2.attn_logit_softcap, gemma2.final_logit_softcap, gemma2.mlp, gemma2.num_layer_norms) == \
        (50.0, 30.0, "geglu", 4)
    assert dict(gemma2.layer_kinds()) == {(False, 4096): 21, (False, 0): 21}
    olmo = spec("olmo-2-13b")
    assert (olmo.qk_norm, olmo.norm_placement) == ("full", "post")
    gptj = spec("gpt-j-6b")
    assert (gptj.parallel_block, gptj.shared_block_norm, gptj.rope_dim, gptj.head_dim) == (True, True, 64, 256)
    phi = spec("phi-3.5-mini")
    assert phi.sliding_window == 0  # its 262144 window exceeds the 131072 context
    sc2 = spec("starcoder2-15b")
    assert (sc2.sliding_window, sc2.global_attention_every, sc2.linear_bias, sc2.norm) == (4096, 0, True, "layernorm")


def test_partial_rotary_of_pythia_and_phi4_mini(tmp_path):
    pythia = {"model_type": "gpt_neox", "hidden_size": 768, "intermediate_size": 3072, "num_attention_heads": 12,
              "num_hidden_layers": 12, "vocab_size": 50304}
    neox = load_hf_config(_write(tmp_path, pythia))
    assert (neox.rope_dim, neox.parallel_block, neox.shared_block_norm) == (16, True, False)
    phi4 = json.loads((FIXTURES / "phi-3.5-mini.json").read_text()) | {"partial_rotary_factor": 0.75}
    assert load_hf_config(_write(tmp_path, phi4)).rope_dim == 72


def _write(tmp_path, data):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize("name, change, words", [
    ("qwen3-8b", {"use_sliding_window": True}, ["'use_sliding_window'", "not modeled"]),
    ("qwen3-235b-a22b", {"mlp_only_layers": [3, 7]}, ["'mlp_only_layers'", "[3, 7]"]),
    ("gemma-2-9b", {"layer_types": ["full_attention", "sliding_attention"] * 21}, ["'layer_types'"]),
    ("deepseek-v3", {"qk_rope_head_dim": -1}, ["'qk_rope_head_dim'", "positive integer"]),
    ("gemma-3-27b", {"text_config": None}, ["'text_config'"]),
    ("phi-3.5-mini", {"partial_rotary_factor": 1.5}, ["'partial_rotary_factor'", "1.5"]),
])
def test_bad_recent_configs_name_the_field(tmp_path, name, change, words):
    data = json.loads((FIXTURES / f"{name}.json").read_text()) | change
    expect_refusal(_write(tmp_path, data), words)


def test_deepseek_v2_lite_null_q_lora_rank_means_full_rank_queries(tmp_path):
    lite = json.loads((FIXTURES / "deepseek-v2.json").read_text()) | {"q_lora_rank": None}
    model = load_hf_config(_write(tmp_path, lite))
    assert model.q_lora_rank == 0 and model.is_mla


def test_new_fields_at_default_leave_the_plan_dict_unchanged():
    llama = ModelSpec("m", 2, 64, 4, 2, 128, 256)
    assert "qk_norm" not in llama.to_dict() and "sliding_window" not in llama.to_dict()
    gemma = spec("gemma-3-27b")
    assert ModelSpec.from_dict(gemma.to_dict()) == gemma
    assert gemma.to_dict()["sliding_window"] == 1024


@pytest.mark.parametrize("name", ["qwen3-8b", "qwen3-32b", "qwen3-235b-a22b", "deepseek-v3", "gemma-3-27b",
                                  "olmo-2-13b"])
def test_catalog_entries_are_their_published_configs(name):
    from dataclasses import replace

    from autoplan.inputs.catalog import catalog_model, model_source

    entry = catalog_model(name)
    assert replace(entry, name="x", max_seq_len=0) == replace(spec(name), name="x", max_seq_len=0)
    assert "config.json" in model_source(name)


@pytest.mark.parametrize("name, gpus, framework", [("deepseek-v3", 256, "megatron-core"),
                                                     ("qwen3-235b-a22b", 64, "autoplan"),
                                                     ("gemma-3-27b", 32, "autoplan")])
def test_search_plans_the_flagships(name, gpus, framework, capsys):
    """`autoplan search` finds a plan that fits; the MoE models get expert parallelism. DeepSeek-V3's
    multi-head latent attention is planned for Megatron-Core (autoplan's executor builds none)."""
    from autoplan.cli.main import main

    assert main(["search", "--model", name, "--gpus", str(gpus), "--trials", "60", "--json",
                 "--framework", framework]) == 0
    doc = json.loads(capsys.readouterr().out)
    parallel, prediction = doc["parallel"], doc["prediction"]
    from cost_model import builtin_profile

    # fits: within the H100's usable capacity (79.11 GiB, the built-in profile's), as search judges it
    capacity = builtin_profile("h100-80gb").memory_capacity_bytes
    assert prediction["peak_memory_bytes"] <= capacity and prediction["step_time_s"] > 0
    if spec(name).is_moe:
        assert parallel["ep"] > 1
    assert ModelSpec.from_dict(doc["model"]) == replace_name(spec(name), doc["model"]["name"])


def replace_name(model, name):
    from dataclasses import replace

    return replace(model, name=name, family=model.family)
