"""Hugging Face config.json files of each supported family, written here as small fixtures.

Where the family has a well-known checkpoint, the fixture holds its real config values and the test
checks the published parameter count (GPT-2 small 124,439,808; Pythia-160M 162,322,944; Falcon-7B
6,921,720,704; BLOOM-560M 559,214,592) or equality with the catalog entry built from models.md.
"""
import json

import pytest

from autoplan.inputs.catalog import catalog_model, resolve_model
from autoplan.inputs.hf_config import load_hf_config
from autoplan.specs import AutoplanError

LLAMA2_7B = {"model_type": "llama", "hidden_size": 4096, "intermediate_size": 11008, "num_attention_heads": 32,
             "num_hidden_layers": 32, "num_key_value_heads": 32, "vocab_size": 32000,
             "max_position_embeddings": 4096, "hidden_act": "silu", "tie_word_embeddings": False}
QWEN25_7B = {"model_type": "qwen2", "hidden_size": 3584, "intermediate_size": 18944, "num_attention_heads": 28,
             "num_hidden_layers": 28, "num_key_value_heads": 4, "vocab_size": 152064,
             "max_position_embeddings": 131072, "tie_word_embeddings": False}
MIXTRAL = {"model_type": "mixtral", "hidden_size": 4096, "intermediate_size": 14336, "num_attention_heads": 32,
           "num_hidden_layers": 32, "num_key_value_heads": 8, "vocab_size": 32000, "num_local_experts": 8,
           "num_experts_per_tok": 2, "max_position_embeddings": 32768}
MISTRAL_7B = {"model_type": "mistral", "hidden_size": 4096, "intermediate_size": 14336, "num_attention_heads": 32,
              "num_hidden_layers": 32, "num_key_value_heads": 8, "vocab_size": 32000}
GPT2_SMALL = {"model_type": "gpt2", "n_embd": 768, "n_head": 12, "n_layer": 12, "n_positions": 1024,
              "vocab_size": 50257, "n_inner": None}
PYTHIA_160M = {"model_type": "gpt_neox", "hidden_size": 768, "intermediate_size": 3072, "num_attention_heads": 12,
               "num_hidden_layers": 12, "vocab_size": 50304, "max_position_embeddings": 2048,
               "tie_word_embeddings": False}
BLOOM_560M = {"model_type": "bloom", "hidden_size": 1024, "n_head": 16, "n_layer": 24, "vocab_size": 250880}
FALCON_7B = {"model_type": "falcon", "hidden_size": 4544, "num_attention_heads": 71, "num_hidden_layers": 32,
             "vocab_size": 65024, "multi_query": True, "new_decoder_architecture": False, "bias": False,
             "alibi": False, "parallel_attn": True}
QWEN_V1_72B = {"model_type": "qwen", "hidden_size": 8192, "intermediate_size": 49152, "num_attention_heads": 64,
               "num_hidden_layers": 80, "vocab_size": 152064, "seq_length": 32768, "no_bias": True}


def write(tmp_path, data, name="config.json"):
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize("data, catalog_name", [
    (LLAMA2_7B, "llama-2-7b"), (QWEN25_7B, "qwen2.5-7b"), (MIXTRAL, "mixtral-8x7b"), (QWEN_V1_72B, "qwen-72b"),
])
def test_configs_read_like_the_catalog_entry(tmp_path, data, catalog_name):
    spec = load_hf_config(write(tmp_path, data))
    expected = catalog_model(catalog_name)
    assert spec.num_params == expected.num_params
    assert (spec.num_kv_heads, spec.qkv_bias, spec.num_experts) == (expected.num_kv_heads, expected.qkv_bias,
                                                                      expected.num_experts)
    assert spec.family == data["model_type"]


@pytest.mark.parametrize("data, published, rel", [
    (GPT2_SMALL, 124_439_808, 0.0),
    (PYTHIA_160M, 162_322_944, 0.0),
    (FALCON_7B, 6_921_720_704, 0.0),    # one input_layernorm shared by the parallel block
    (BLOOM_560M, 559_214_592, 1e-5),    # the embedding LayerNorm (2h) is not counted
    (MISTRAL_7B, 7_241_732_096, 0.0),
])
def test_published_parameter_counts(tmp_path, data, published, rel):
    assert load_hf_config(write(tmp_path, data)).num_params == pytest.approx(published, rel=rel)


def test_family_specific_fields(tmp_path):
    gpt2 = load_hf_config(write(tmp_path, GPT2_SMALL))
    assert (gpt2.position, gpt2.tied_embeddings, gpt2.ffn_hidden_size, gpt2.mlp) == ("learned", True, 3072, "gelu")
    falcon = load_hf_config(write(tmp_path, FALCON_7B))
    assert falcon.num_kv_heads == 1 and falcon.head_dim == 64
    falcon40 = load_hf_config(write(tmp_path, {**FALCON_7B, "new_decoder_architecture": True, "num_kv_heads": 8,
                                               "num_attention_heads": 128, "hidden_size": 8192}))
    assert falcon40.num_kv_heads == 8
    bloom = load_hf_config(write(tmp_path, BLOOM_560M))
    assert (bloom.position, bloom.ffn_hidden_size) == ("alibi", 4096)


def test_model_argument_takes_a_folder(tmp_path):
    write(tmp_path, LLAMA2_7B)
    assert resolve_model(str(tmp_path)).num_params == catalog_model("llama-2-7b").num_params


@pytest.mark.parametrize("data, words", [
    ({k: v for k, v in LLAMA2_7B.items() if k != "hidden_size"}, ["'hidden_size'", "missing"]),
    ({**LLAMA2_7B, "num_hidden_layers": "32"}, ["'num_hidden_layers'", "positive integer"]),
    ({**LLAMA2_7B, "model_type": "t5"}, ["'model_type'", "'t5'", "llama"]),
    ({**LLAMA2_7B, "num_key_value_heads": 5}, ["num_kv_heads must divide num_heads"]),
    ({**LLAMA2_7B, "hidden_act": "gelu"}, ["'hidden_act'"]),
    ({k: v for k, v in GPT2_SMALL.items() if k != "n_layer"}, ["'n_layer'", "num_hidden_layers"]),
])
def test_bad_configs_name_the_file_and_the_field(tmp_path, data, words):
    expect_refusal(write(tmp_path, data), words)


def expect_refusal(path, words):
    """Reading `path` fails with one line naming the file and each of `words`."""
    with pytest.raises(AutoplanError) as exc:
        load_hf_config(path)
    msg = str(exc.value)
    assert str(path) in msg and "\n" not in msg
    for word in words:
        assert word in msg


def test_unreadable_or_absent_configs(tmp_path):
    bad = tmp_path / "broken.json"
    bad.write_text("{not json")
    with pytest.raises(AutoplanError, match="not valid JSON"):
        resolve_model(str(bad))
    with pytest.raises(AutoplanError, match="holds no config.json"):
        resolve_model(str(tmp_path))
    with pytest.raises(AutoplanError, match="does not exist"):
        resolve_model(str(tmp_path / "nope" / "config.json"))
