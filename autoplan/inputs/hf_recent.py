"""config.json readers for the 2024-2025 families: Qwen3 (dense and MoE), Qwen2-MoE, DeepSeek-V2/V3,
gpt-oss, Gemma 2/3, OLMo 2, Phi-3, StarCoder2 and GPT-J. `autoplan.inputs.hf_config` dispatches to them by
`model_type`.

Each reader takes `f`, the typed view of one config.json (`autoplan.inputs.hf_config._Fields`), and returns
ModelSpec keyword arguments. Defaults for absent fields are those of the matching `transformers`
configuration class (v4.5x); where a family's config class has no default for a field a released
config always sets, the field is required. What a config says that the planner does not model
(a feature that changes numerics but no shape, FLOP or byte: RoPE bases, Gemma's embedding scale
and query_pre_attn_scalar) is read past; what it cannot represent is refused naming the field.
"""
from __future__ import annotations

SUPPORTED_RECENT = ("qwen3", "qwen3_moe", "qwen2_moe", "deepseek_v2", "deepseek_v3", "gpt_oss", "gemma2",
                    "gemma3_text", "gemma3", "olmo2", "phi3", "starcoder2", "gptj")


def _base(f, *, hidden_default=None, heads_default=None, layers_default=None, ffn_default=None, vocab_default=None,
          kv_default=None, seq_default=4096, tied_default=False) -> dict:
    """The Llama-shaped core most families share (num_hidden_layers, hidden_size, ...)."""
    hidden = f.get_int("hidden_size", default=hidden_default)
    heads = f.get_int("num_attention_heads", default=heads_default)
    return dict(
        num_layers=f.get_int("num_hidden_layers", default=layers_default), hidden_size=hidden, num_heads=heads,
        num_kv_heads=f.get_int("num_key_value_heads", default=kv_default or heads),
        ffn_hidden_size=f.get_int("intermediate_size", default=ffn_default),
        vocab_size=f.get_int("vocab_size", default=vocab_default),
        max_seq_len=f.get_int("max_position_embeddings", default=seq_default),
        tied_embeddings=f.get_bool("tie_word_embeddings", tied_default),
    )


def _silu(f, model_type: str) -> None:
    act = f.get_str("hidden_act", "silu")
    if act not in ("silu", "swish"):
        raise f.fail("hidden_act", f"is {act!r}; {model_type} configs are read as SwiGLU (silu)")


def _no_sliding(f, model_type: str) -> None:
    if f.get_bool("use_sliding_window", False):
        raise f.fail("use_sliding_window", f"is true; {model_type}'s per-layer sliding window (max_window_layers) "
                                           "is not modeled; plan the config with use_sliding_window false")


def qwen3(f, model_type: str) -> dict:
    """Qwen3 (Qwen3 technical report, arXiv 2505.09388, sec. 2): Llama shape without q/k/v bias,
    per-head RMSNorm on q and k, head_dim 128 independent of hidden/heads."""
    _silu(f, model_type)
    _no_sliding(f, model_type)
    spec = _base(f, seq_default=32768)
    spec.update(head_dim=f.get_int("head_dim", default=128 if model_type == "qwen3" else None),
                qkv_bias=f.get_bool("attention_bias", False), qk_norm="head")
    if model_type == "qwen3_moe":
        spec.update(_qwen3_moe_layers(f, spec["num_layers"]))
    return spec


def _qwen3_moe_layers(f, num_layers: int, experts: int = 128, top_k: int = 8, width: int = 768) -> dict:
    """Qwen3-MoE (and Qwen2-MoE, with its own defaults): every layer MoE unless listed in
    mlp_only_layers or off the decoder_sparse_step."""
    step = f.get_int("decoder_sparse_step", default=1)
    dense = f.get_list("mlp_only_layers")
    if step != 1 or dense != list(range(len(dense))):
        raise f.fail("mlp_only_layers", f"with decoder_sparse_step={step} is {dense!r}; only a leading run of "
                                        "dense layers (0, 1, ..., k-1) with decoder_sparse_step 1 is modeled")
    return dict(num_experts=f.get_int("num_experts", default=experts),
                num_experts_per_token=f.get_int("num_experts_per_tok", default=top_k),
                moe_ffn_hidden_size=f.get_int("moe_intermediate_size", default=width), num_dense_layers=len(dense))


def qwen2_moe(f, model_type: str) -> dict:
    """Qwen2-MoE (Qwen2 technical report, arXiv 2407.10671 sec. 2.2.2; the Qwen1.5-MoE blog):
    Qwen2's attention (bias on q/k/v), fine-grained routed experts and one shared expert of
    `shared_expert_intermediate_size` every token passes through, every layer MoE unless listed in
    `mlp_only_layers`. Not counted: the shared expert's sigmoid gate (h weights per layer)."""
    _silu(f, model_type)
    _no_sliding(f, model_type)
    spec = _base(f, hidden_default=2048, heads_default=16, layers_default=24, ffn_default=5632,
                 vocab_default=151936, seq_default=32768)
    spec.update(qkv_bias=f.get_bool("qkv_bias", True),
                shared_expert_ffn_size=f.get_int("shared_expert_intermediate_size", default=5632,
                                                 allow_null_as_zero=True),
                **_qwen3_moe_layers(f, spec["num_layers"], experts=60, top_k=4, width=1408))
    return spec


def gpt_oss(f, model_type: str) -> dict:
    """gpt-oss (OpenAI gpt-oss model card, arXiv 2508.10925, sec. 2.1): GQA with 64-wide heads and a
    bias on every attention projection, sliding-window layers of 128 tokens alternating with global
    ones, routed SwiGLU experts with biases, no shared expert, untied unembedding. Not counted: the
    router bias (num_experts per layer) and the per-head attention sinks (num_heads per layer); the
    clamped SwiGLU and YaRN RoPE scaling change no shape."""
    _silu(f, model_type)
    spec = _base(f, hidden_default=2880, heads_default=64, layers_default=36, ffn_default=2880,
                 vocab_default=201088, kv_default=8, seq_default=131072)
    spec.update(head_dim=f.get_int("head_dim", default=64),
                # attention_bias puts a bias on q, k, v and o; the experts' gate/up and down
                # projections always carry one (GptOssExperts gate_up_proj_bias, down_proj_bias).
                linear_bias=f.get_bool("attention_bias", True), mlp_bias=True,
                num_experts=f.get_int("num_local_experts", default=128),
                num_experts_per_token=f.get_int("num_experts_per_tok", default=4),
                sliding_window=f.get_int("sliding_window", default=128),
                global_attention_every=_global_every(f, spec["num_layers"], default=2, pattern_key=""))
    return spec


def deepseek(f, model_type: str) -> dict:
    """DeepSeek-V2/V3: multi-head latent attention (arXiv 2405.04434 sec. 2.1) and DeepSeekMoE with
    shared experts after `first_k_dense_replace` dense layers (arXiv 2412.19437 sec. 2). The
    multi-token-prediction module (num_nextn_predict_layers) is not part of the main model's count
    (DeepSeek-V3's 671B excludes it) and is not planned."""
    _silu(f, model_type)
    v3 = model_type == "deepseek_v3"
    spec = _base(f, hidden_default=7168 if v3 else None, heads_default=128 if v3 else None,
                 layers_default=61 if v3 else None, ffn_default=18432 if v3 else None,
                 vocab_default=129280 if v3 else 102400)
    rope = f.get_int("qk_rope_head_dim", default=64)
    nope = f.get_int("qk_nope_head_dim", default=128)
    spec.update(num_kv_heads=spec["num_heads"],  # MLA: every head has its own K/V from the latent
                head_dim=nope + rope, v_head_dim=f.get_int("v_head_dim", default=128),
                q_lora_rank=f.get_int("q_lora_rank", default=1536, allow_null_as_zero=True),
                kv_lora_rank=f.get_int("kv_lora_rank", default=512), qk_rope_head_dim=rope,
                qkv_bias=f.get_bool("attention_bias", False))
    routed = f.get_int("n_routed_experts", default=256 if v3 else 0, allow_null_as_zero=True)
    if routed:
        width = f.get_int("moe_intermediate_size", default=2048 if v3 else None)
        spec.update(num_experts=routed, num_experts_per_token=f.get_int("num_experts_per_tok", default=8 if v3 else None),
                    moe_ffn_hidden_size=width,
                    shared_expert_ffn_size=f.get_int("n_shared_experts", default=1 if v3 else 0,
                                                     allow_null_as_zero=True) * width,
                    num_dense_layers=f.get_int("first_k_dense_replace", default=3 if v3 else 0, allow_null_as_zero=True),
                    moe_layer_freq=f.get_int("moe_layer_freq", default=1),
                    # Group-limited routing (V3: 8 groups, 4 picked; V2's greedy router has n_group but
                    # topk_method "greedy" ignores it).
                    **({"moe_router_num_groups": f.get_int("n_group", default=8 if v3 else 1, allow_null_as_zero=True),
                        "moe_router_group_topk": f.get_int("topk_group", default=4 if v3 else 1, allow_null_as_zero=True)}
                       if f.get_str("topk_method", "noaux_tc" if v3 else "greedy") != "greedy" else {}))
    return spec


def gemma(f, model_type: str) -> dict:
    """Gemma 2 (arXiv 2408.00118 sec. 2) and Gemma 3 (arXiv 2503.19786 sec. 2): GeGLU MLP, four
    norms per layer (pre and post each block), local sliding-window layers interleaved with global
    ones (Gemma 2 1:1 window 4096; Gemma 3 5:1 window 1024), logit soft-capping (Gemma 2), per-head
    q/k norms (Gemma 3). Embeddings are always tied. `gemma3` (multimodal) is read from its
    text_config; the vision tower is not planned."""
    if model_type == "gemma3":
        f = f.nested("text_config")
        model_type = "gemma3_text"
    act = f.get_str("hidden_activation", f.get_str("hidden_act", "gelu_pytorch_tanh"))
    if not act.startswith("gelu"):
        raise f.fail("hidden_activation", f"is {act!r}; Gemma configs are read as GeGLU (gelu_pytorch_tanh)")
    g3 = model_type == "gemma3_text"
    spec = _base(f, hidden_default=2304, heads_default=8, layers_default=26, ffn_default=9216,
                 vocab_default=262208 if g3 else 256000, kv_default=4, seq_default=131072 if g3 else 8192,
                 tied_default=True)
    spec.update(head_dim=f.get_int("head_dim", default=256), mlp="geglu", norm_placement="sandwich",
                qkv_bias=f.get_bool("attention_bias", False), qk_norm="head" if g3 else "",
                attn_logit_softcap=f.get_float("attn_logit_softcapping", default=0.0 if g3 else 50.0),
                final_logit_softcap=f.get_float("final_logit_softcapping", default=0.0 if g3 else 30.0))
    window = f.get_int("sliding_window", default=4096)
    every = _global_every(f, spec["num_layers"], default=6 if g3 else 2, pattern_key="sliding_window_pattern" if g3 else "")
    spec.update(sliding_window=window, global_attention_every=every)
    return spec


def _global_every(f, num_layers: int, default: int, pattern_key: str) -> int:
    """n such that layers n-1, 2n-1, ... are global: from `layer_types` when the config lists them
    (newer transformers), else from the pattern key or the family's fixed interleave."""
    types = f.get_list("layer_types")
    if types:
        global_ids = [i for i, t in enumerate(types) if t == "full_attention"]
        every = global_ids[0] + 1 if global_ids else 0
        expected = ["full_attention" if every and (i + 1) % every == 0 else "sliding_attention"
                    for i in range(num_layers)]
        if types != expected:
            raise f.fail("layer_types", "is not a repeating run of sliding_attention layers closed by one "
                                        "full_attention layer; only that pattern is modeled")
        return every
    return f.get_int(pattern_key, default=default) if pattern_key else default


def olmo2(f, model_type: str) -> dict:
    """OLMo 2 (arXiv 2501.00656 sec. 3.1): RMSNorm after attention and after the MLP (inside the
    residual) instead of before, and RMSNorm over the whole q and k projections."""
    _silu(f, model_type)
    spec = _base(f, vocab_default=50304, seq_default=2048)
    spec.update(qkv_bias=f.get_bool("attention_bias", False), qk_norm="full", norm_placement="post")
    return spec


def phi3(f, model_type: str) -> dict:
    """Phi-3/3.5/4-mini (arXiv 2404.14219): Llama shape with fused qkv and gate/up projections (same
    parameters), optional partial rotary (Phi-4-mini partial_rotary_factor 0.75) and a sliding window
    (Phi-3-mini-4k 2047; Phi-3.5's 262144 exceeds its context and so changes nothing)."""
    _silu(f, model_type)
    spec = _base(f, vocab_default=32064)
    head_dim = spec["hidden_size"] // spec["num_heads"]
    spec.update(**_partial_rotary(f, "partial_rotary_factor", head_dim), **_window(f, spec["max_seq_len"]))
    return spec


def starcoder2(f, model_type: str) -> dict:
    """StarCoder2 (arXiv 2402.19173 sec. 5): LayerNorm, biases, GeLU MLP, GQA, RoPE, sliding window
    4096 on every layer."""
    spec = _base(f, hidden_default=3072, heads_default=24, layers_default=30, ffn_default=12288,
                 vocab_default=49152, kv_default=2, tied_default=True)
    spec.update(mlp="gelu", norm="layernorm", linear_bias=f.get_bool("use_bias", True),
                **_window(f, spec["max_seq_len"]))
    return spec


def gptj(f, model_type: str) -> dict:
    """GPT-J-6B (Wang & Komatsuzaki 2021, mesh-transformer-jax): one LayerNorm feeding attention and
    MLP in parallel, RoPE on the first rotary_dim=64 of 256 head dims, bias on the MLP and the LM head
    only."""
    hidden = f.get_int("n_embd", default=4096)
    heads = f.get_int("n_head", default=16)
    return dict(
        num_layers=f.get_int("n_layer", default=28), hidden_size=hidden, num_heads=heads, num_kv_heads=heads,
        ffn_hidden_size=f.get_int("n_inner", default=4 * hidden), vocab_size=f.get_int("vocab_size", default=50400),
        max_seq_len=f.get_int("n_positions", default=2048), mlp="gelu", norm="layernorm",
        tied_embeddings=f.get_bool("tie_word_embeddings", False), parallel_block=True, shared_block_norm=True,
        rotary_dim=f.get_int("rotary_dim", default=64, allow_null_as_zero=True), mlp_bias=True, output_bias=True)


def _partial_rotary(f, key: str, head_dim: int) -> dict:
    factor = f.get_float(key, default=1.0)
    if not 0.0 < factor <= 1.0:
        raise f.fail(key, f"must be in (0, 1], got {factor!r}")
    dim = int(head_dim * factor)
    return {"rotary_dim": 0 if dim == head_dim else dim}


def _window(f, max_seq_len: int) -> dict:
    """A window on every layer; one at least the context long changes nothing and is dropped."""
    window = f.get_int("sliding_window", default=0, allow_null_as_zero=True)
    return {"sliding_window": window if window and window < max_seq_len else 0}


RECENT_FAMILIES = {
    "qwen3": qwen3, "qwen3_moe": qwen3, "qwen2_moe": qwen2_moe, "deepseek_v2": deepseek, "deepseek_v3": deepseek,
    "gpt_oss": gpt_oss,
    "gemma2": gemma, "gemma3_text": gemma, "gemma3": gemma, "olmo2": olmo2, "phi3": phi3,
    "starcoder2": starcoder2, "gptj": gptj,
}
