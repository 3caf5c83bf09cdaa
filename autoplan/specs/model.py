"""ModelSpec: the architecture of a decoder-only transformer, and its parameter count.

The parameter count is a short sum of named terms (nanoGPT/EleutherAI style). Tests check it against
published sizes (Llama-2-70B ~ 69.0B, GPT-3 ~ 174.6B) and against the real module's numel().
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, fields

from autoplan.specs.schemas import MODEL_INTS, validate_model, validate_model_shape
from autoplan.specs.validation import Issues, require_object, take_int, take_str

MLP_KINDS = ("swiglu", "gelu")
NORM_KINDS = ("rmsnorm", "layernorm")
POSITION_KINDS = ("rope", "alibi", "learned")


@dataclass(frozen=True)
class ModelSpec:
    name: str
    """Catalog name or the config.json path it was read from."""
    num_layers: int
    hidden_size: int
    num_heads: int
    """Query heads."""
    num_kv_heads: int
    """Key/value heads (grouped-query attention when smaller than num_heads)."""
    ffn_hidden_size: int
    """MLP inner size; for SwiGLU the size of each of the gate and up projections; per expert for MoE."""
    vocab_size: int
    """Embedding rows, padded as the framework pads them."""
    mlp: str = "swiglu"
    """"swiglu" (3 matrices h x ffn) or "gelu" (2 matrices)."""
    norm: str = "rmsnorm"
    position: str = "rope"
    tied_embeddings: bool = False
    qkv_bias: bool = False
    """Bias on the q/k/v projections only (Qwen)."""
    linear_bias: bool = False
    """Bias on every linear layer (GPT-2/3, BLOOM)."""
    max_seq_len: int = 4096
    head_dim: int = 0
    """0 means hidden_size // num_heads."""
    num_experts: int = 1
    """1 for a dense model; MoE models replace each MLP by num_experts experts."""
    num_experts_per_token: int = 1
    family: str = ""
    """Hugging Face model_type the spec came from, if any (llama, qwen2, gpt2, ...)."""

    def __post_init__(self) -> None:
        if self.head_dim == 0:
            object.__setattr__(self, "head_dim", self.hidden_size // max(self.num_heads, 1))

    # -- derived sizes -------------------------------------------------------------------------
    @property
    def kv_size(self) -> int:
        """Width of the K (or V) projection output: num_kv_heads * head_dim."""
        return self.num_kv_heads * self.head_dim

    @property
    def q_size(self) -> int:
        return self.num_heads * self.head_dim

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 1

    @property
    def num_mlp_matrices(self) -> int:
        return 3 if self.mlp == "swiglu" else 2

    def attention_params_per_layer(self) -> int:
        h = self.hidden_size
        weights = h * self.q_size + 2 * h * self.kv_size + self.q_size * h  # q, k, v, o
        bias = 0
        if self.qkv_bias or self.linear_bias:
            bias += self.q_size + 2 * self.kv_size
        if self.linear_bias:
            bias += h
        return weights + bias

    def mlp_params_per_expert(self) -> int:
        h, f = self.hidden_size, self.ffn_hidden_size
        weights = self.num_mlp_matrices * h * f
        bias = (f * (self.num_mlp_matrices - 1) + h) if self.linear_bias else 0
        return weights + bias

    def mlp_params_per_layer(self) -> int:
        router = self.hidden_size * self.num_experts if self.is_moe else 0
        return self.num_experts * self.mlp_params_per_expert() + router

    def norm_params(self) -> int:
        """One norm's parameters: weight, plus bias for LayerNorm."""
        return self.hidden_size * (2 if self.norm == "layernorm" else 1)

    def params_per_layer(self) -> int:
        return self.attention_params_per_layer() + self.mlp_params_per_layer() + 2 * self.norm_params()

    def embedding_params(self) -> int:
        """Token embedding, learned positions, and BLOOM's embedding LayerNorm is not counted here."""
        pos = self.max_seq_len * self.hidden_size if self.position == "learned" else 0
        return self.vocab_size * self.hidden_size + pos

    def output_params(self) -> int:
        """Final norm plus the LM head (zero extra when tied to the embedding)."""
        head = 0 if self.tied_embeddings else self.vocab_size * self.hidden_size
        return self.norm_params() + head

    @property
    def num_params(self) -> int:
        return self.embedding_params() + self.num_layers * self.params_per_layer() + self.output_params()

    @property
    def num_active_params(self) -> int:
        """Parameters a token passes through (MoE: top-k experts only). Used for 6·N FLOPs."""
        if not self.is_moe:
            return self.num_params
        inactive = (self.num_experts - self.num_experts_per_token) * self.mlp_params_per_expert()
        return self.num_params - self.num_layers * inactive

    # -- JSON ----------------------------------------------------------------------------------
    def to_dict(self) -> dict:
        d = asdict(self)
        d["num_params"] = self.num_params
        return d

    @classmethod
    def from_dict(cls, data: dict, what: str = "model") -> "ModelSpec":
        issues = Issues(what)
        validate_model(require_object(data, what), issues, prefix="")
        issues.raise_if_any()
        kwargs = {f.name: data[f.name] for f in fields(cls) if f.name in data}
        spec = cls(**kwargs)
        spec.check()
        return spec

    def check(self) -> None:
        """Raise SchemaError naming every field out of range and every rule across fields broken
        (autoplan.specs.schemas): for a catalog entry, a config.json and a plan file alike."""
        issues = Issues(f"model {self.name!r}")
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        for key, (high, _) in MODEL_INTS.items():
            take_int(values, key, issues, "", 1, high)
        for key, kinds in (("mlp", MLP_KINDS), ("norm", NORM_KINDS), ("position", POSITION_KINDS)):
            take_str(values, key, issues, "", kinds)
        issues.raise_if_any()
        validate_model_shape(issues, values)
        issues.raise_if_any()
