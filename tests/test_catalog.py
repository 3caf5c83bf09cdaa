"""The model catalog: published parameter counts, architecture flags, names and suggestions."""
import pytest

from autoplan.inputs.catalog import catalog_model, model_names, resolve_model
from autoplan.specs import AutoplanError

BRIEF_MODELS = ("qwen-72b", "qwen2-72b", "qwen2.5-7b", "qwen2.5-72b", "llama-2-7b", "llama-2-13b", "llama-2-70b",
                "llama-3-8b", "llama-3-70b", "llama-3-405b", "gpt3-175b", "baichuan2-13b", "chatglm3-6b",
                "olmo-7b", "bloom-176b", "mixtral-8x7b")


def test_catalog_holds_every_model_of_the_tracker():
    assert set(BRIEF_MODELS) <= set(model_names())


@pytest.mark.parametrize("name, published, rel", [
    ("llama-2-70b", 69.0e9, 0.002),   # Llama 2 paper (models.md)
    ("qwen-72b", 72.3e9, 0.01),       # Qwen "72B"
    ("gpt3-175b", 174.6e9, 0.002),    # Narayanan 2021 Table 2
    ("llama-3-405b", 405e9, 0.005),   # Llama 3 paper
    ("bloom-176b", 176e9, 0.005),     # BigScience tr11 README
    ("mixtral-8x7b", 46.7e9, 0.002),  # Mistral AI: 46.7B total
    ("llama-2-7b", 6.74e9, 0.002),
])
def test_param_counts_match_published_sizes(name, published, rel):
    assert catalog_model(name).num_params == pytest.approx(published, rel=rel)


def test_mixtral_is_moe_with_top2_routing():
    m = catalog_model("mixtral-8x7b")
    assert (m.num_experts, m.num_experts_per_token) == (8, 2)
    assert m.num_active_params == pytest.approx(12.9e9, rel=0.01)  # Mistral AI: 12.9B active


def test_architecture_flags_follow_models_md():
    assert catalog_model("qwen-72b").qkv_bias
    for name in ("gpt3-175b", "bloom-176b"):
        m = catalog_model(name)
        assert (m.mlp, m.norm, m.linear_bias, m.tied_embeddings) == ("gelu", "layernorm", True, True)
    assert catalog_model("gpt3-175b").position == "learned"
    assert catalog_model("bloom-176b").position == catalog_model("baichuan2-13b").position == "alibi"
    assert catalog_model("llama-3-405b").num_kv_heads == 8


def test_names_forgive_case_and_underscores():
    assert catalog_model("Qwen_72B") == catalog_model("qwen-72b")


def test_unknown_name_suggests_close_ones():
    with pytest.raises(AutoplanError) as exc:
        resolve_model("llama-2-70")
    msg = str(exc.value)
    assert "\n" not in msg and "llama-2-70b" in msg and "llama-2-7b" in msg


def test_unknown_name_without_neighbours_points_to_the_list():
    with pytest.raises(AutoplanError, match="autoplan models"):
        resolve_model("zzzz")
