"""config.json readers for two mixture-of-experts families: Qwen2-MoE (Qwen1.5-MoE-A2.7B,
Qwen2-57B-A14B) and gpt-oss (gpt-oss-20b, gpt-oss-120b). `autoplan.hf_config` dispatches to them by
`model_type`.

Defaults for absent fields are those of transformers' Qwen2MoeConfig and GptOssConfig (v4.5x). What
changes no shape, FLOP or byte the planner counts is read past and named here: Qwen2-MoE's sigmoid
gate on the shared expert (h weights per layer), gpt-oss's router bias (num_experts per layer), its
per-head attention sinks (num_heads per layer), its clamped SwiGLU and its YaRN RoPE scaling.
"""
from __future__ import annotations

from autoplan.hf_recent import _base, _global_every, _no_sliding, _qwen3_moe_layers, _silu

SUPPORTED_MOE = ("qwen2_moe", "gpt_oss")


def qwen2_moe(f, model_type: str) -> dict:
    """Qwen2-MoE (Qwen2 technical report, arXiv 2407.10671 sec. 2.2.2; the Qwen1.5-MoE blog):
    Qwen2's attention (bias on q/k/v), fine-grained routed experts and one shared expert of
    `shared_expert_intermediate_size` every token passes through, every layer MoE unless listed in
    `mlp_only_layers`."""
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
    ones, routed SwiGLU experts with biases, no shared expert, untied unembedding."""
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


MOE_FAMILIES = {"qwen2_moe": qwen2_moe, "gpt_oss": gpt_oss}
