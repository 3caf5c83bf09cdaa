"""ModelSpec: the architecture of a decoder-only transformer, and its parameter count.

The parameter count is a short sum of named terms (nanoGPT/EleutherAI style). Tests check it against
published sizes (Llama-2-70B ~ 69.0B, GPT-3 ~ 174.6B, Qwen3-8B 8.19B, DeepSeek-V3 671B / 37B active,
...) and against the real module's numel().

Layers need not be alike: a model may start with dense layers before its MoE layers (DeepSeek's
`first_k_dense_replace`), place MoE every n-th layer (`moe_layer_freq`), and mix sliding-window and
global attention layers (Gemma 2/3). `layer_kinds()` says how many layers of each kind there are;
the parameter count and the cost model sum over those kinds.

Fields added after plan schema v1 default to "off" and are left out of `to_dict()` while they are,
so the plan files (and plan ids) of models that do not use them stay as they were.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from functools import lru_cache

from autoplan.specs.schemas import validate_model, validate_model_shape
from autoplan.specs.validation import Issues, check_spec_fields, spec_from_dict

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
    """MLP inner size of a dense layer; for gated MLPs the size of each of the gate and up
    projections. For MoE models without `moe_ffn_hidden_size` also the size of each expert."""
    vocab_size: int
    """Embedding rows, padded as the framework pads them."""
    mlp: str = "swiglu"
    """"swiglu" (3 matrices h x ffn, SiLU gate, Shazeer 2020), "geglu" (3 matrices, tanh-GeLU gate:
    Gemma), or "gelu" (2 matrices)."""
    norm: str = "rmsnorm"
    position: str = "rope"
    tied_embeddings: bool = False
    qkv_bias: bool = False
    """Bias on the q/k/v projections only (Qwen)."""
    linear_bias: bool = False
    """Bias on every linear layer (GPT-2/3, BLOOM)."""
    max_seq_len: int = 4096
    head_dim: int = 0
    """Width of one query/key head. 0 means hidden_size // num_heads; set it when the two differ
    (Qwen3, Gemma, Mistral-Nemo: num_heads * head_dim != hidden_size). Under multi-head latent
    attention it is qk_nope_head_dim + qk_rope_head_dim (DeepSeek-V2 paper, arXiv 2405.04434, sec. 2.1)."""
    num_experts: int = 1
    """1 for a dense model; MoE layers replace the MLP by num_experts routed experts."""
    num_experts_per_token: int = 1
    family: str = ""
    """Hugging Face model_type the spec came from, if any (llama, qwen2, gpt2, ...)."""
    # -- fields added for the 2024-2025 families (defaults: the architecture above, unchanged) --
    v_head_dim: int = 0
    """Width of one value head, 0 = head_dim (differs under MLA: DeepSeek-V3 v 128, q/k 192)."""
    qk_norm: str = ""
    """RMSNorm on queries and keys before RoPE: "" none, "head" one norm of head_dim shared by the
    heads (Qwen3, Gemma 3; Dehghani et al. 2023 arXiv 2302.05442), "full" over the whole q and k
    projections (OLMo 2, arXiv 2501.00656 sec. 3.1)."""
    norm_placement: str = "pre"
    """"pre": x + f(norm(x)) (Llama). "post": x + norm(f(x)) (OLMo 2's reordered norm).
    "sandwich": x + norm(f(norm(x))), four norms per layer (Gemma 2/3)."""
    parallel_block: bool = False
    """x + attention(n1(x)) + mlp(n2(x)) instead of two residual steps (GPT-J, GPT-NeoX/Pythia's
    use_parallel_residual, Falcon, PaLM: Chowdhery et al. 2022 arXiv 2204.02311 sec. 2)."""
    shared_block_norm: bool = False
    """A parallel block whose attention and MLP read one norm (GPT-J, Falcon-7B): one norm per layer."""
    rotary_dim: int = 0
    """Dimensions of each q/k head that RoPE rotates; 0 = all of head_dim. Partial rotary: Pythia
    and GPT-J rotate 1/4 (rotary_pct 0.25, rotary_dim 64), Phi-4-mini 3/4 (partial_rotary_factor)."""
    sliding_window: int = 0
    """Tokens a query of a local layer attends to (itself included); 0 = every layer global."""
    global_attention_every: int = 0
    """With sliding_window: layers n-1, 2n-1, ... (0-based) attend globally (Gemma 2: 2, Gemma 3: 6,
    i.e. 5 local : 1 global); 0 = every layer uses the window (Mistral-7B-v0.1, StarCoder2)."""
    attn_logit_softcap: float = 0.0
    """Attention scores pass through c*tanh(s/c) (Gemma 2: 50); 0 = off."""
    final_logit_softcap: float = 0.0
    """The LM head's logits pass through c*tanh(z/c) (Gemma 2: 30); 0 = off."""
    mlp_bias: bool = False
    """Bias on the MLP's linear layers only (GPT-J)."""
    output_bias: bool = False
    """Bias on the LM head (GPT-J)."""
    moe_ffn_hidden_size: int = 0
    """Inner size of one routed expert when it differs from the dense ffn_hidden_size (DeepSeek
    moe_intermediate_size 2048 vs 18432; Qwen3-MoE 1536); 0 = ffn_hidden_size."""
    shared_expert_ffn_size: int = 0
    """Total inner size of the shared experts every token passes through (DeepSeekMoE, arXiv
    2401.06066 sec. 3.2: n_shared_experts * moe_intermediate_size); 0 = none."""
    num_dense_layers: int = 0
    """MoE models: the first k layers keep a dense MLP (DeepSeek first_k_dense_replace)."""
    moe_layer_freq: int = 1
    """MoE models: after the dense layers, layer i is MoE when i % moe_layer_freq == 0 (DeepSeek's
    and Megatron's --moe-layer-freq); 1 = every layer."""
    q_lora_rank: int = 0
    """MLA: rank of the compressed query (DeepSeek-V3 1536); 0 = full-rank query projection."""
    kv_lora_rank: int = 0
    """MLA: rank of the compressed key/value latent (DeepSeek-V2/V3 512); 0 = no MLA."""
    qk_rope_head_dim: int = 0
    """MLA: the decoupled RoPE dimensions of each q/k head, shared key over heads (DeepSeek 64)."""
    moe_router_num_groups: int = 0
    """Group-limited routing: the experts split into this many equal groups, in order (DeepSeek-V3
    n_group 8; Megatron-Core --moe-router-num-groups); 0 = every expert open to every token."""
    moe_router_group_topk: int = 0
    """Group-limited routing: each token picks its experts from this many groups (DeepSeek-V3 topk_group
    4: with a group per node, "each token will be sent to at most 4 nodes", arXiv 2412.19437 sec. 2.1.2;
    Megatron-Core --moe-router-group-topk)."""
    # -- numerics the exports hand to the frameworks (0 / "" = not stated: the framework's default) --
    rope_theta: float = 0.0
    """RoPE base (HF rope_theta, Qwen v1 / GPT-NeoX rotary_emb_base): Llama 2 10000, Llama 3 500000,
    Qwen 1000000. Unused by the cost model; the exports set it, or say they cannot."""
    rope_scaling: str = ""
    """Kind of RoPE frequency scaling (HF rope_scaling's rope_type/type): "llama3" (Llama 3.1),
    "yarn" (DeepSeek-V3), "linear", "dynamic", "longrope"; "" none."""
    rope_scaling_factor: float = 0.0
    """rope_scaling's factor (Llama 3.1: 8, DeepSeek-V3 YaRN: 40); 0 with rope_scaling "" ."""
    norm_eps: float = 0.0
    """Epsilon of every RMSNorm/LayerNorm (HF rms_norm_eps / layer_norm_eps(ilon))."""
    moe_router_score: str = ""
    """MoE router scoring (HF scoring_func): "softmax" (Mixtral, Qwen3-MoE) or "sigmoid" (DeepSeek-V3)."""

    def __post_init__(self) -> None:
        if self.head_dim == 0:
            object.__setattr__(self, "head_dim", self.hidden_size // max(self.num_heads, 1))

    # -- derived sizes -------------------------------------------------------------------------
    @property
    def value_dim(self) -> int:
        return self.v_head_dim or self.head_dim

    @property
    def kv_size(self) -> int:
        """Width of the K projection output: num_kv_heads * head_dim (V: `v_size`)."""
        return self.num_kv_heads * self.head_dim

    @property
    def v_size(self) -> int:
        return self.num_kv_heads * self.value_dim

    @property
    def q_size(self) -> int:
        return self.num_heads * self.head_dim

    @property
    def attn_out_size(self) -> int:
        """Input width of the attention output projection: num_heads * value_dim."""
        return self.num_heads * self.value_dim

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 1

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank > 0

    @property
    def expert_ffn_size(self) -> int:
        return self.moe_ffn_hidden_size or self.ffn_hidden_size

    @property
    def rope_dim(self) -> int:
        """Dimensions of each q/k head RoPE rotates (0 without RoPE)."""
        if self.position != "rope":
            return 0
        return self.qk_rope_head_dim if self.is_mla else (self.rotary_dim or self.head_dim)

    @property
    def num_mlp_matrices(self) -> int:
        return 2 if self.mlp == "gelu" else 3

    @property
    def num_layer_norms(self) -> int:
        """Norms of one layer (q/k norms aside): 1 shared by a parallel block, 4 sandwich, else 2."""
        if self.parallel_block and self.shared_block_norm:
            return 1
        return 4 if self.norm_placement == "sandwich" else 2

    @property
    def dense_param_tensors_per_layer(self) -> int:
        """Parameter tensors of one dense layer as Megatron's GPT builds it: fused QKV and output
        projections, the MLP's matrices, a bias on each where the model has biases, and each norm's
        weight (and bias, for LayerNorm). GPT-3 style: (2 + 2) x 2 + 2 x 2 = 12."""
        linears = 2 + self.num_mlp_matrices
        biased = linears if self.linear_bias else 0
        return linears + biased + self.num_layer_norms * (2 if self.norm == "layernorm" else 1)

    # -- layer kinds -----------------------------------------------------------------------------
    def is_moe_layer(self, layer: int) -> bool:
        return self.is_moe and layer >= self.num_dense_layers and layer % self.moe_layer_freq == 0

    def layer_window(self, layer: int) -> int:
        """Keys a query of `layer` may attend to: the sliding window, or 0 for global attention."""
        if not self.sliding_window:
            return 0
        every = self.global_attention_every
        return 0 if every and (layer + 1) % every == 0 else self.sliding_window

    def layer_kinds(self) -> tuple:
        """((is_moe, window), number of layers) for each kind of layer, in order of first use."""
        return _layer_kinds(self)

    @property
    def num_moe_layers(self) -> int:
        return sum(n for (moe, _), n in self.layer_kinds() if moe)

    # -- parameters ------------------------------------------------------------------------------
    def attention_params_per_layer(self) -> int:
        h = self.hidden_size
        if self.is_mla:  # DeepSeek-V2 sec. 2.1: W_DQ, norm, W_UQ(+W_QR); W_DKV + W_KR, norm, W_UK, W_UV; W_O
            r_q, r_kv = self.q_lora_rank, self.kv_lora_rank
            q = (h * r_q + r_q + r_q * self.q_size) if r_q else h * self.q_size
            nope = self.head_dim - self.qk_rope_head_dim
            kv = h * (r_kv + self.qk_rope_head_dim) + r_kv + r_kv * self.num_heads * (nope + self.value_dim)
            return q + kv + self.attn_out_size * h
        weights = h * (self.q_size + self.kv_size + self.v_size) + self.attn_out_size * h
        bias = 0
        if self.qkv_bias or self.linear_bias:
            bias += self.q_size + self.kv_size + self.v_size
        if self.linear_bias:
            bias += h
        qk_norm = {"": 0, "head": 2 * self.head_dim, "full": self.q_size + self.kv_size}[self.qk_norm]
        return weights + bias + qk_norm

    def _mlp_params(self, width: int) -> int:
        weights = self.num_mlp_matrices * self.hidden_size * width
        bias = (width * (self.num_mlp_matrices - 1) + self.hidden_size) if self.linear_bias or self.mlp_bias else 0
        return weights + bias

    def dense_mlp_params(self) -> int:
        return self._mlp_params(self.ffn_hidden_size)

    def mlp_params_per_expert(self) -> int:
        return self._mlp_params(self.expert_ffn_size)

    def moe_mlp_params(self) -> int:
        """Routed experts + shared experts + router (h x num_experts, no bias)."""
        shared = self._mlp_params(self.shared_expert_ffn_size) if self.shared_expert_ffn_size else 0
        return self.num_experts * self.mlp_params_per_expert() + shared + self.hidden_size * self.num_experts

    def mlp_params_per_layer(self) -> int:
        """The MLP of a MoE layer for MoE models, of a dense layer otherwise."""
        return self.moe_mlp_params() if self.is_moe else self.dense_mlp_params()

    def norm_params(self) -> int:
        """One norm's parameters: weight, plus bias for LayerNorm."""
        return self.hidden_size * (2 if self.norm == "layernorm" else 1)

    def params_per_layer(self) -> int:
        """A MoE layer of a MoE model, a dense layer otherwise (see `layer_params`)."""
        return self.attention_params_per_layer() + self.mlp_params_per_layer() + self.num_layer_norms * self.norm_params()

    def layer_params(self, moe: bool) -> int:
        mlp = self.moe_mlp_params() if moe else self.dense_mlp_params()
        return self.attention_params_per_layer() + mlp + self.num_layer_norms * self.norm_params()

    def all_layers_params(self) -> int:
        moe = self.num_moe_layers
        return moe * self.layer_params(True) + (self.num_layers - moe) * self.layer_params(False)

    def expert_params_all_layers(self) -> int:
        """Routed-expert parameters over all layers: what expert parallelism splits."""
        return self.num_moe_layers * self.num_experts * self.mlp_params_per_expert()

    def embedding_params(self) -> int:
        """Token embedding, learned positions, and BLOOM's embedding LayerNorm is not counted here."""
        pos = self.max_seq_len * self.hidden_size if self.position == "learned" else 0
        return self.vocab_size * self.hidden_size + pos

    def output_params(self) -> int:
        """Final norm plus the LM head (zero extra when tied to the embedding) and its bias."""
        head = 0 if self.tied_embeddings else self.vocab_size * self.hidden_size
        return self.norm_params() + head + (self.vocab_size if self.output_bias else 0)

    @property
    def num_params(self) -> int:
        return self.embedding_params() + self.all_layers_params() + self.output_params()

    @property
    def num_active_params(self) -> int:
        """Parameters a token passes through (MoE: top-k routed experts only). Used for 6·N FLOPs."""
        if not self.is_moe:
            return self.num_params
        inactive = (self.num_experts - self.num_experts_per_token) * self.mlp_params_per_expert()
        return self.num_params - self.num_moe_layers * inactive

    # -- JSON ----------------------------------------------------------------------------------
    def to_dict(self) -> dict:
        """Every v1 field; a later field only when it differs from its default (stable plan ids)."""
        d = asdict(self)
        for f in fields(self):
            if f.name in _LATER_FIELDS and d[f.name] == f.default:
                del d[f.name]
        d["num_params"] = self.num_params
        return d

    @classmethod
    def from_dict(cls, data: dict, what: str = "model") -> "ModelSpec":
        return spec_from_dict(cls, data, what, validate_model, derived=("num_params",))

    def check(self) -> None:
        """Raise SchemaError naming every field out of range, then every rule across fields broken
        (autoplan.specs.schemas): for a catalog entry, a config.json and a plan file alike."""
        check_spec_fields(self, f"model {self.name!r}", validate_model)
        issues = Issues(f"model {self.name!r}")
        validate_model_shape(issues, self)
        issues.raise_if_any()


_LATER_FIELDS = frozenset(f.name for f in fields(ModelSpec)
                          if f.name not in {"name", "num_layers", "hidden_size", "num_heads", "num_kv_heads",
                                            "ffn_hidden_size", "vocab_size", "mlp", "norm", "position",
                                            "tied_embeddings", "qkv_bias", "linear_bias", "max_seq_len", "head_dim",
                                            "num_experts", "num_experts_per_token", "family"})


@lru_cache(maxsize=512)
def _layer_kinds(model: ModelSpec) -> tuple:
    # Cached: the estimator asks for every plan it scores, and the answer is the model's alone.
    counts: dict = {}
    for i in range(model.num_layers):
        key = (model.is_moe_layer(i), model.layer_window(i))
        counts[key] = counts.get(key, 0) + 1
    return tuple(counts.items())
