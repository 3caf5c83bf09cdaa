"""Read a Hugging Face `config.json` into a ModelSpec, without transformers and without downloads.

Each supported `model_type` names its fields differently; `_FAMILIES` maps them. The defaults
used when a field is absent are the defaults of the matching `transformers` configuration class
(so a config.json saved by transformers, which omits defaults, reads the same). Errors name the
file and the field.
"""
from __future__ import annotations

from pathlib import Path

from autoplan.inputs.hf_recent import RECENT_FAMILIES, SUPPORTED_RECENT
from autoplan.specs import AutoplanError, ModelSpec, SchemaError, read_json
from autoplan.specs.choices import ROPE_SCALING_KINDS, ROUTER_SCORES
from autoplan.specs.validation import (
    MAX_EXPERTS, MAX_FFN, MAX_HEAD_DIM, MAX_HEADS, MAX_HIDDEN, MAX_LAYERS, MAX_SEQ_LEN, MAX_VOCAB, show,
)

SUPPORTED_TYPES = ("llama", "mistral", "mixtral", "qwen2", "qwen", "gpt2", "gpt_neox", "bloom", "falcon",
                   *SUPPORTED_RECENT)


# Upper bound of each integer field of a config.json, by the size it names (autoplan.specs.validation).
_BOUNDS = {
    **dict.fromkeys(("num_hidden_layers", "n_layer"), MAX_LAYERS),
    **dict.fromkeys(("hidden_size", "n_embd", "n_embed"), MAX_HIDDEN),
    **dict.fromkeys(("num_attention_heads", "n_head", "num_key_value_heads", "num_kv_heads", "n_head_kv"), MAX_HEADS),
    **dict.fromkeys(("intermediate_size", "n_inner", "ffn_hidden_size"), MAX_FFN),
    "vocab_size": MAX_VOCAB, "head_dim": MAX_HEAD_DIM,
    **dict.fromkeys(("max_position_embeddings", "seq_length", "n_positions", "n_ctx"), MAX_SEQ_LEN),
    **dict.fromkeys(("num_local_experts", "num_experts_per_tok", "num_experts"), MAX_EXPERTS),
}


class _Fields:
    """Typed access to one config.json. Problems are collected, not raised one by one, so that an
    incomplete config names every missing field at once (`raise_if_any` after reading them all)."""

    def __init__(self, data: dict, path: Path):
        self.data, self.path = data, path
        self.missing: list[str] = []
        self.problems: list[str] = []

    def fail(self, key: str, problem: str) -> AutoplanError:
        """An error about one field at once (a family's reading rule, not a value to collect)."""
        model_type = self.data.get("model_type")
        return AutoplanError(f"config.json {str(self.path)!r} (model_type {model_type!r}): field {key!r} {problem}")

    def raise_if_any(self) -> None:
        parts = ([f"missing field{'s' if len(self.missing) > 1 else ''} {', '.join(self.missing)}"]
                 if self.missing else []) + self.problems
        if parts:
            model_type = self.data.get("model_type")
            raise AutoplanError(f"config.json {str(self.path)!r} (model_type {model_type!r}): {'; '.join(parts)}")

    def get_int(self, *keys: str, default: int | None = None, allow_null_as_zero: bool = False) -> int:
        """The first of `keys` present (families rename fields, e.g. n_layer/num_hidden_layers).
        A missing or bad value is recorded and stands in as 1 until `raise_if_any`.
        `allow_null_as_zero`: null and 0 mean "none" (DeepSeek-V2-Lite's q_lora_rank null)."""
        for key in keys:
            if allow_null_as_zero and key in self.data and self.data[key] in (None, 0) \
                    and not isinstance(self.data[key], bool):
                return 0
            if key in self.data and self.data[key] is not None:
                value = self.data[key]
                high = _BOUNDS.get(key)
                if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                    self.problems.append(f"field {key!r} must be a positive integer, got {show(value)}")
                    return 1
                if high is not None and value > high:
                    self.problems.append(f"field {key!r} must be at most {high:,}, got {show(value)}")
                    return 1
                return value
        if default is None:
            self.missing.append(repr(keys[0]) + (f" (or {', '.join(map(repr, keys[1:]))})" if keys[1:] else ""))
            return 1
        return default

    def get_bool(self, key: str, default: bool) -> bool:
        value = self.data.get(key, default)
        if value is None:
            return default
        if not isinstance(value, bool):
            self.problems.append(f"field {key!r} must be true or false, got {show(value)}")
            return default
        return value

    def get_float(self, key: str, default: float) -> float:
        """A non-negative number; null reads as the default (Gemma 3's null soft-capping: off)."""
        value = self.data.get(key)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
            raise self.fail(key, f"must be a non-negative number, got {value!r}")
        return float(value)

    def get_list(self, key: str) -> list:
        value = self.data.get(key) or []
        if not isinstance(value, list):
            raise self.fail(key, f"must be a list, got {value!r}")
        return value

    def nested(self, key: str) -> "_Fields":
        """The object under `key` (gemma3's text_config), with errors naming the same file."""
        value = self.data.get(key)
        if not isinstance(value, dict):
            raise self.fail(key, f"must be a JSON object holding the text model's fields, got {value!r}")
        return _Fields({"model_type": f"{self.data.get('model_type')}.{key}", **value}, self.path)

    def get_str(self, key: str, default: str) -> str:
        value = self.data.get(key, default)
        if not isinstance(value, str):
            self.problems.append(f"field {key!r} must be a string, got {show(value)}")
            return default
        return value


def _llama_like(f: _Fields, model_type: str) -> dict:
    """llama, mistral, mixtral, qwen2: RMSNorm, RoPE, SwiGLU, optional GQA."""
    heads = f.get_int("num_attention_heads")
    hidden = f.get_int("hidden_size")
    spec = dict(
        num_layers=f.get_int("num_hidden_layers"), hidden_size=hidden, num_heads=heads,
        num_kv_heads=f.get_int("num_key_value_heads", default=heads),
        ffn_hidden_size=f.get_int("intermediate_size"), vocab_size=f.get_int("vocab_size"),
        max_seq_len=f.get_int("max_position_embeddings", default=4096 if model_type == "llama" else 32768),
        tied_embeddings=f.get_bool("tie_word_embeddings", False),
        # Qwen2 always puts a bias on q/k/v; Llama has `attention_bias` (default false).
        qkv_bias=True if model_type == "qwen2" else f.get_bool("attention_bias", False),
        head_dim=f.get_int("head_dim", default=hidden // heads),
    )
    if f.get_str("hidden_act", "silu") not in ("silu", "swish"):
        f.problems.append(f"field 'hidden_act' is {show(f.data['hidden_act'])}; {model_type} configs are read as "
                          f"SwiGLU (silu)")
    if model_type == "mixtral":
        spec.update(num_experts=f.get_int("num_local_experts", default=8),
                    num_experts_per_token=f.get_int("num_experts_per_tok", default=2))
    return spec


def _qwen_v1(f: _Fields, model_type: str) -> dict:
    """Qwen (v1, remote code): its `intermediate_size` is twice the SwiGLU width (gate and up fused)."""
    heads = f.get_int("num_attention_heads")
    return dict(
        num_layers=f.get_int("num_hidden_layers"), hidden_size=f.get_int("hidden_size"), num_heads=heads,
        num_kv_heads=heads, ffn_hidden_size=f.get_int("intermediate_size") // 2, vocab_size=f.get_int("vocab_size"),
        max_seq_len=f.get_int("seq_length", "max_position_embeddings", default=8192),
        tied_embeddings=f.get_bool("tie_word_embeddings", False), qkv_bias=True,
    )


def _gpt2(f: _Fields, model_type: str) -> dict:
    """GPT-2 (and GPT-3-shaped configs): learned positions, LayerNorm, GeLU, biases, tied head."""
    hidden = f.get_int("n_embd", "hidden_size")
    heads = f.get_int("n_head", "num_attention_heads")
    return dict(
        num_layers=f.get_int("n_layer", "num_hidden_layers"), hidden_size=hidden, num_heads=heads, num_kv_heads=heads,
        ffn_hidden_size=f.get_int("n_inner", default=4 * hidden), vocab_size=f.get_int("vocab_size"),
        max_seq_len=f.get_int("n_positions", "n_ctx", default=1024), mlp="gelu", norm="layernorm",
        position="learned", tied_embeddings=f.get_bool("tie_word_embeddings", True), linear_bias=True,
    )


def _gpt_neox(f: _Fields, model_type: str) -> dict:
    """GPT-NeoX/Pythia: partial RoPE (rotary_pct, default 0.25), LayerNorm, GeLU, biases, untied head,
    attention and MLP in parallel on two norms (use_parallel_residual, default true)."""
    heads = f.get_int("num_attention_heads")
    hidden = f.get_int("hidden_size")
    pct = f.get_float("rotary_pct", default=0.25)
    if not 0.0 < pct <= 1.0:
        raise f.fail("rotary_pct", f"must be in (0, 1], got {pct!r}")
    rotary = int(hidden // heads * pct)
    return dict(
        num_layers=f.get_int("num_hidden_layers"), hidden_size=hidden, num_heads=heads,
        num_kv_heads=heads, ffn_hidden_size=f.get_int("intermediate_size"), vocab_size=f.get_int("vocab_size"),
        max_seq_len=f.get_int("max_position_embeddings", default=2048), mlp="gelu", norm="layernorm",
        tied_embeddings=f.get_bool("tie_word_embeddings", False), linear_bias=f.get_bool("attention_bias", True),
        parallel_block=f.get_bool("use_parallel_residual", True),
        rotary_dim=0 if rotary == hidden // heads else rotary,
    )


def _bloom(f: _Fields, model_type: str) -> dict:
    """BLOOM: ALiBi, LayerNorm, GeLU with a 4h MLP, biases, tied head."""
    hidden = f.get_int("hidden_size", "n_embed")
    heads = f.get_int("n_head", "num_attention_heads")
    return dict(
        num_layers=f.get_int("n_layer", "num_hidden_layers"), hidden_size=hidden, num_heads=heads, num_kv_heads=heads,
        ffn_hidden_size=4 * hidden, vocab_size=f.get_int("vocab_size"), max_seq_len=f.get_int("seq_length", default=2048),
        mlp="gelu", norm="layernorm", position="alibi", tied_embeddings=f.get_bool("tie_word_embeddings", True),
        linear_bias=True,
    )


def _falcon(f: _Fields, model_type: str) -> dict:
    """Falcon: multi-query (7B) or grouped KV (new_decoder_architecture, 40B/180B), GeLU 4h MLP."""
    hidden = f.get_int("hidden_size")
    heads = f.get_int("num_attention_heads", "n_head")
    new_arch = f.get_bool("new_decoder_architecture", False)
    if new_arch:
        kv = f.get_int("num_kv_heads", "n_head_kv", default=heads)
    else:
        kv = 1 if f.get_bool("multi_query", True) else heads
    parallel = new_arch or f.get_bool("parallel_attn", True)
    return dict(
        num_layers=f.get_int("num_hidden_layers", "n_layer"), hidden_size=hidden, num_heads=heads, num_kv_heads=kv,
        ffn_hidden_size=f.get_int("ffn_hidden_size", default=4 * hidden), vocab_size=f.get_int("vocab_size"),
        max_seq_len=f.get_int("max_position_embeddings", default=2048), mlp="gelu", norm="layernorm",
        position="alibi" if f.get_bool("alibi", False) else "rope",
        tied_embeddings=f.get_bool("tie_word_embeddings", True), linear_bias=f.get_bool("bias", False),
        # Falcon-7B's parallel block reads one input_layernorm; the new architecture has ln_attn + ln_mlp.
        parallel_block=parallel, shared_block_norm=parallel and not new_arch,
    )


_FAMILIES = {
    "llama": _llama_like, "mistral": _llama_like, "mixtral": _llama_like, "qwen2": _llama_like,
    "qwen": _qwen_v1, "gpt2": _gpt2, "gpt_neox": _gpt_neox, "bloom": _bloom, "falcon": _falcon,
    **RECENT_FAMILIES,
}


_THETA_KEYS = ("rope_theta", "rotary_emb_base")  # Qwen v1 and GPT-NeoX spell the RoPE base rotary_emb_base
_EPS_KEYS = ("rms_norm_eps", "layer_norm_eps", "layer_norm_epsilon", "norm_epsilon")


def _numerics(data: dict, fields: dict) -> dict:
    """RoPE base and scaling, norm epsilon and MoE router scoring, where the config states them (the
    exports hand them to the frameworks; the planner does not use them). Missing or malformed: not stated."""
    out: dict = {}
    number = lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0  # noqa: E731
    theta = next((data[k] for k in _THETA_KEYS if number(data.get(k))), 0)
    if theta and fields.get("position", "rope") == "rope":
        out["rope_theta"] = float(theta)
    eps = next((data[k] for k in _EPS_KEYS if number(data.get(k))), 0)
    if eps:
        out["norm_eps"] = float(eps)
    scaling = data.get("rope_scaling")
    if isinstance(scaling, dict):
        kind = scaling.get("rope_type", scaling.get("type"))
        if kind in ROPE_SCALING_KINDS and kind != "default":
            out["rope_scaling"] = kind
            out["rope_scaling_factor"] = float(scaling["factor"]) if number(scaling.get("factor")) else 0.0
    if data.get("scoring_func") in ROUTER_SCORES and fields.get("num_experts", 1) > 1:
        out["moe_router_score"] = data["scoring_func"]
    return out


def config_path(path: str | Path) -> Path:
    """The config.json itself, given it or the folder that holds it."""
    try:
        return _config_path(path)
    except OSError as exc:  # a name too long for the file system, a folder we may not list
        shown = show(str(path))
        raise AutoplanError(f"cannot use {shown} as a model: {exc.strerror or exc}; pass a catalog name "
                            f"(see `autoplan models`), a config.json path or a folder holding one") from None


def _config_path(path: str | Path) -> Path:
    p = Path(path).expanduser()
    if p.is_dir():
        inner = p / "config.json"
        if not inner.is_file():
            raise AutoplanError(f"folder {str(p)!r} holds no config.json; pass the file or a model folder that has one")
        return inner
    if not p.exists():
        raise AutoplanError(f"config.json {str(p)!r} does not exist; pass a catalog name (see `autoplan models`), "
                            f"a config.json path or a folder holding one")
    return p


def load_hf_config(path: str | Path) -> ModelSpec:
    """A ModelSpec from a Hugging Face config.json (or a folder holding one)."""
    p = config_path(path)
    data = read_json(p, "config.json")
    if not isinstance(data, dict):
        raise AutoplanError(f"config.json {str(p)!r} must hold a JSON object, got {type(data).__name__}")
    return spec_from_hf_dict(data, p)


def spec_from_hf_dict(data: dict, path: Path) -> ModelSpec:
    f = _Fields(data, path)
    model_type = data.get("model_type")
    if not isinstance(model_type, str) or model_type not in _FAMILIES:
        raise AutoplanError(f"config.json {str(path)!r}: field 'model_type' is {show(model_type)}; "
                            f"supported: {', '.join(SUPPORTED_TYPES)}")
    fields = _FAMILIES[model_type](f, model_type)
    fields.update(_numerics(data, fields))
    f.raise_if_any()
    try:
        spec = ModelSpec(name=str(path), family=model_type, **fields)
        spec.check()
    except SchemaError as exc:
        raise AutoplanError(f"config.json {str(path)!r}: {exc}") from None
    return spec
