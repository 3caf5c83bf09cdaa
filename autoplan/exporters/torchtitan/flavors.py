"""The model shapes torchtitan ships ("flavors"), per release, and which of them a plan's model is.

A plan's model is exported as a shipped flavor only when its shape is that flavor's; otherwise each
release's exporter registers (0.2.0) or builds (0.3.0) the shape itself."""
from __future__ import annotations

# torchtitan 0.2.0's llama3 flavors (torchtitan/models/llama3/__init__.py, llama3_args): dim, n_layers,
# n_heads, n_kv_heads and the FFN width its multiple_of/ffn_dim_multiplier give.
LLAMA3_02_FLAVORS = {
    "8B": (4096, 32, 32, 8, 14336),
    "70B": (8192, 80, 64, 8, 28672),
    "405B": (16384, 126, 128, 8, 53248),
}
# torchtitan 0.3.0's llama3 flavors (torchtitan/models/llama3/__init__.py: _8b line 236, _70b 277, _405b 318):
# dim, layers, heads, kv heads, FFN width (compute_ffn_hidden_dim of its multiple_of and multiplier),
# vocabulary (128256: the flavor builds its embedding and head that size) and tied embeddings. A model is
# built from a flavor only when its whole shape is that flavor's: Llama-2-70B has the 70B's blocks but a
# 32000-row vocabulary (68.98B parameters, the 70B flavor 70.55B), so the module builds it.
LLAMA3_03_FLAVORS = {
    "8B": (4096, 32, 32, 8, 14336, 128256, False),
    "70B": (8192, 80, 64, 8, 28672, 128256, False),
    "405B": (16384, 126, 128, 8, 53248, 128256, False),
}
# deepseek_v3 flavors, the same in 0.2.0 and 0.3.0 (torchtitan/models/deepseek_v3/__init__.py): dim,
# n_layers, dense inter_dim, expert moe_inter_dim (DeepSeek-V2-Lite, V2, V3).
DEEPSEEK_V3_FLAVORS = {
    "16B": (2048, 27, 10944, 1408),
    "236B": (5120, 60, 12288, 1536),
    "671B": (7168, 61, 18432, 2048),
}
# torchtitan 0.3.0's qwen3 flavors (torchtitan/models/qwen3/__init__.py: _0_6b line 253, _1_7b 291, _4b 329,
# _8b 367, _14b 402, _32b 437, _30b_a3b 516, _235b_a22b 557): dim, layers, heads, kv heads, head dim, FFN
# width (the experts' for MoE), experts, top-k, tied embeddings; with the recipe each starts from
# (qwen3/config_registry.py: qwen3_0_6b line 176, qwen3_1_7b 206, qwen3_14b 260, qwen3_30b_a3b 295,
# qwen3_32b 330; 4B, 8B and 235B-A22B have none: the nearest recipe, the flavor swapped in).
QWEN3_FLAVORS = {
    "0.6B": ((1024, 28, 16, 8, 128, 3072, 0, 0, True), "qwen3_0_6b"),
    "1.7B": ((2048, 28, 16, 8, 128, 6144, 0, 0, True), "qwen3_1_7b"),
    "4B": ((2560, 36, 32, 8, 128, 9728, 0, 0, True), "qwen3_1_7b"),
    "8B": ((4096, 36, 32, 8, 128, 12288, 0, 0, False), "qwen3_14b"),
    "14B": ((5120, 40, 40, 8, 128, 17408, 0, 0, False), "qwen3_14b"),
    "32B": ((5120, 64, 64, 8, 128, 25600, 0, 0, False), "qwen3_32b"),
    "30B-A3B": ((2048, 48, 32, 4, 128, 768, 128, 8, False), "qwen3_30b_a3b"),
    "235B-A22B": ((4096, 94, 64, 4, 128, 1536, 128, 8, False), "qwen3_30b_a3b"),
}
LLAMA3_ARCHITECTURE = ("swiglu", "rmsnorm", "rope")
"""(mlp, norm, position) of torchtitan's llama3 model, in both releases."""


def is_deepseek_v3(model) -> bool:
    """MoE and MLA models map onto torchtitan's deepseek_v3 (Qwen3-MoE onto 0.3.0's qwen3 first)."""
    return model.is_moe or model.is_mla


def deepseek_v3_flavor(model) -> str:
    """The deepseek_v3 flavor with the model's shape, else ""."""
    shape = (model.hidden_size, model.num_layers, model.ffn_hidden_size, model.expert_ffn_size)
    return next((name for name, dims in DEEPSEEK_V3_FLAVORS.items() if dims == shape), "")


def llama3_02_flavor(model) -> str:
    """The 0.2.0 llama3 flavor with the model's block shape (its vocabulary comes from the tokenizer), else ""."""
    shape = (model.hidden_size, model.num_layers, model.num_heads, model.num_kv_heads, model.ffn_hidden_size)
    return next((name for name, dims in LLAMA3_02_FLAVORS.items() if dims == shape), "")


def llama3_03_flavor(model) -> str:
    """The 0.3.0 llama3 flavor whose whole shape is the model's, else ""."""
    shape = (model.hidden_size, model.num_layers, model.num_heads, model.num_kv_heads, model.ffn_hidden_size,
             model.vocab_size, model.tied_embeddings)
    if is_deepseek_v3(model) or (model.mlp, model.norm, model.position) != LLAMA3_ARCHITECTURE:
        return ""
    return next((name for name, dims in LLAMA3_03_FLAVORS.items() if dims == shape), "")


def qwen3_flavor(model) -> str:
    """The 0.3.0 qwen3 flavor with the model's shape (Qwen3 and Qwen3-MoE), else ""."""
    if model.family not in ("qwen3", "qwen3_moe") or model.is_mla:
        return ""
    shape = (model.hidden_size, model.num_layers, model.num_heads, model.num_kv_heads,
             model.head_dim or model.hidden_size // model.num_heads,
             model.expert_ffn_size if model.is_moe else model.ffn_hidden_size,
             model.num_experts if model.is_moe else 0, model.num_experts_per_token if model.is_moe else 0,
             model.tied_embeddings)
    return next((name for name, (dims, _) in QWEN3_FLAVORS.items() if dims == shape), "")


def llama3_architecture_notes(model) -> list:
    """A note for each of the model's MLP, norm, positions, head width and linear biases that torchtitan's
    llama3 (both releases) does not build: SwiGLU + RMSNorm + RoPE, heads hidden/heads wide, no biases
    but the q/k/v ones 0.3.0's module adds."""
    notes = []
    if (model.mlp, model.norm, model.position) != LLAMA3_ARCHITECTURE:
        notes.append(f"architecture mlp={model.mlp} norm={model.norm} position={model.position}: "
                     f"torchtitan's llama3 is SwiGLU + RMSNorm + RoPE only")
    if model.head_dim * model.num_heads != model.hidden_size:
        notes.append(f"head_dim={model.head_dim}: torchtitan's llama3 uses hidden/heads = "
                     f"{model.hidden_size // model.num_heads}")
    if model.linear_bias or model.mlp_bias or model.output_bias:
        notes.append("linear biases (linear_bias/mlp_bias/output_bias): torchtitan's llama3 linears have none")
    return notes
