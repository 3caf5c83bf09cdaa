"""A decoder-only transformer built from a `ModelSpec`, at any size, torchtitan style.

Two families from one set of modules:
- Llama/Qwen: RMSNorm, rotary positions (RoPE, Su et al. 2021, arXiv 2104.09864), grouped-query
  attention (Ainslie et al. 2023, arXiv 2305.13245), SwiGLU MLP (Shazeer 2020, arXiv 2002.05202),
  optional q/k/v bias (Qwen).
- GPT-2/3: LayerNorm, GeLU MLP, biases on every linear layer, learned positions, tied embeddings.

ALiBi models (BLOOM, MPT) are built with RoPE in place of ALiBi: neither has parameters, so the
parameter count, the matmul shapes and the FLOPs are unchanged, but the numerics are not BLOOM's
(`model_notes` says so and the executor logs it). Mixture-of-experts models (Mixtral) replace the
MLP by `executor.moe.MoEFeedForward`; the XLA backend refuses them.

The module names are a contract shared by both backends (and by checkpoints):
`tok_embeddings`, `pos_embeddings` (learned positions only), `layers.<i>.attention_norm`,
`layers.<i>.attention.{wq,wk,wv,wo}`, `layers.<i>.ffn_norm`, `layers.<i>.feed_forward.{w1,w2,w3}`
(SwiGLU: w1 gate, w3 up, w2 down; GeLU: w1 up, w2 down), MoE: `layers.<i>.feed_forward.router` and
`layers.<i>.feed_forward.experts.{w1,w2,w3}` (stacked [num_experts, ...]), `norm`, `output`.
`layers` is a ModuleDict keyed by the global layer index, so a pipeline stage that keeps layers 4-7
still names them `layers.4` .. `layers.7`; a stage without the embedding or the head sets those
attributes to None and `forward` passes hidden states through.

Attention reads the number of heads from the projections' outputs (`view(b, s, -1, head_dim)`), so
a tensor-parallel module whose wq/wk/wv produce 1/tp of the heads runs unchanged.

`Kernels` picks how some parts are computed, never what: each choice gives the same function (up to
rounding) and is switchable from `autoplan run --without NAME` (executor.options.SPEEDUPS).
Given labels, `forward` returns the loss instead of the logits, so the head and the loss can be
fused (executor.loss) inside the forward, where a sharded (FSDP2) head weight is gathered.
"""
from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from autoplan.specs import AutoplanError, ModelSpec

from executor.loss import chunked_cross_entropy, plain_cross_entropy
from executor.moe import GroupedExperts, MoEFeedForward

ROPE_THETA = 10000.0
"""RoPE base of Llama 1/2 (Touvron et al. 2023); ModelSpec carries no theta, and the base changes
no shape, FLOP or byte the planner reasons about."""
INIT_STD = 0.02
"""Normal init of GPT-2 (Radford et al. 2019) and Megatron-LM for every weight matrix."""
WRAPPER_PREFIXES = ("_checkpoint_wrapped_module.", "_orig_mod.", "_fsdp_wrapped_module.")
"""Names wrappers (activation checkpointing, torch.compile, FSDP1) insert into parameter FQNs."""


def model_notes(spec: ModelSpec) -> list[str]:
    """What this executor builds differently from the named architecture (empty when faithful)."""
    notes = []
    if spec.position == "alibi":
        notes.append(f"model {spec.name!r} uses ALiBi; the executor substitutes RoPE "
                     "(same parameters, shapes and FLOPs, different numerics)")
    return notes


def check_buildable(spec: ModelSpec, moe: bool = False) -> None:
    """Raise AutoplanError for architectures this module cannot build; mixture-of-experts models
    too unless the caller (a backend) runs them (`moe=True`)."""
    if spec.is_moe and not moe:
        raise AutoplanError(
            f"model {spec.name!r} is a mixture of experts ({spec.num_experts} experts); this backend runs "
            "dense models only; run it with --backend torch, or run a dense model")
    if spec.is_moe and (spec.mlp != "swiglu" or spec.linear_bias):
        raise AutoplanError(
            f"model {spec.name!r}: the executor's experts are Mixtral's SwiGLU MLPs without biases, got "
            f"mlp={spec.mlp!r}, linear_bias={spec.linear_bias}; plan and estimate it, or run a dense model")
    if spec.head_dim % 2 and spec.position != "learned":
        raise AutoplanError(f"model {spec.name!r}: RoPE needs an even head_dim, got {spec.head_dim}")


def _norm(spec: ModelSpec) -> nn.Module:
    if spec.norm == "layernorm":
        return nn.LayerNorm(spec.hidden_size, eps=1e-5)
    return nn.RMSNorm(spec.hidden_size, eps=1e-6)


@dataclass(frozen=True)
class Kernels:
    """How the model computes some of its parts (the function is the same either way)."""

    native_gqa: bool = True
    """Grouped-query attention by SDPA's `enable_gqa` (K/V heads broadcast inside the kernel);
    False: K/V heads copied q_heads/kv_heads times with `repeat_interleave` before SDPA."""
    rope_in_compute_dtype: bool = True
    """RoPE in the activations' dtype with a cos/sin table cast to it once per forward; False:
    the rotation in fp32 (the activations cast up and back down in every layer)."""
    loss_chunk_tokens: int = 0
    """Given labels, the head and the loss fused over chunks of this many tokens
    (executor.loss.chunked_cross_entropy); 0: whole fp32 logits, then cross-entropy."""


def rope_cache(head_dim: int, max_seq_len: int, device=None) -> torch.Tensor:
    """cos and sin of position * theta^(-2i/d), shape (2, max_seq_len, head_dim), fp32, in the
    rotate-half layout: angle i serves dimensions i and i + head_dim/2 (GPT-NeoX's and Hugging
    Face's Llama layout, no interleaving, so the rotation needs no strided stack/flatten)."""
    inv_freq = 1.0 / (ROPE_THETA ** (torch.arange(0, head_dim, 2, dtype=torch.float32, device=device) / head_dim))
    angles = torch.outer(torch.arange(max_seq_len, dtype=torch.float32, device=device), inv_freq)
    angles = torch.cat([angles, angles], dim=-1)
    return torch.stack([angles.cos(), angles.sin()])


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    first, second = x.chunk(2, dim=-1)
    return torch.cat([-second, first], dim=-1)


def apply_rope(x: torch.Tensor, cache: torch.Tensor, in_compute_dtype: bool = True) -> torch.Tensor:
    """Rotate pairs (x[i], x[i + head_dim/2]) of x (b, s, heads, head_dim) by the cached angles;
    in x's dtype (cache already cast to it) or, with in_compute_dtype=False, in fp32."""
    seq_len = x.shape[1]
    cos = cache[0, :seq_len].view(1, seq_len, 1, -1)
    sin = cache[1, :seq_len].view(1, seq_len, 1, -1)
    if in_compute_dtype:
        return x * cos.to(x.dtype) + _rotate_half(x) * sin.to(x.dtype)
    xf = x.float()
    return (xf * cos.float() + _rotate_half(xf) * sin.float()).type_as(x)


def repeat_kv(q: torch.Tensor, kv: torch.Tensor) -> torch.Tensor:
    """Grouped-query attention: each K/V head serves q_heads/kv_heads query heads (b, heads, s, d)."""
    num_queries_per_kv = q.shape[1] // kv.shape[1]
    return kv.repeat_interleave(num_queries_per_kv, dim=1) if num_queries_per_kv > 1 else kv


class CausalAttention(nn.Module):
    """The attention core: causal softmax(QK^T/sqrt(d))V over (batch, heads, seq, head_dim), with
    fewer K/V heads than query heads under GQA. A module of its own, without parameters, so
    selective recompute can wrap exactly this part (Korthikanti et al. 2022, section 4) and
    context parallelism can replace it."""

    def __init__(self, native_gqa: bool = True):
        super().__init__()
        self.native_gqa = native_gqa

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        if self.native_gqa:
            return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=k.shape[1] != q.shape[1])
        return F.scaled_dot_product_attention(q, repeat_kv(q, k), repeat_kv(q, v), is_causal=True)


class Attention(nn.Module):
    def __init__(self, spec: ModelSpec, kernels: Kernels):
        super().__init__()
        h, q_bias = spec.hidden_size, spec.qkv_bias or spec.linear_bias
        self.head_dim = spec.head_dim
        self.use_rope = spec.position != "learned"
        self.rope_in_compute_dtype = kernels.rope_in_compute_dtype
        self.wq = nn.Linear(h, spec.q_size, bias=q_bias)
        self.wk = nn.Linear(h, spec.kv_size, bias=q_bias)
        self.wv = nn.Linear(h, spec.kv_size, bias=q_bias)
        self.wo = nn.Linear(spec.q_size, h, bias=spec.linear_bias)
        self.core = CausalAttention(kernels.native_gqa)

    def forward(self, x: torch.Tensor, rope: torch.Tensor | None) -> torch.Tensor:
        batch, seq_len = x.shape[0], x.shape[1]
        # -1: the local head count, whatever share of the heads this rank's projections produce.
        q = self.wq(x).view(batch, seq_len, -1, self.head_dim)
        k = self.wk(x).view(batch, seq_len, -1, self.head_dim)
        v = self.wv(x).view(batch, seq_len, -1, self.head_dim)
        if self.use_rope:
            q, k = (apply_rope(t, rope, self.rope_in_compute_dtype) for t in (q, k))
        out = self.core(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))
        return self.wo(out.transpose(1, 2).reshape(batch, seq_len, -1))


class FeedForward(nn.Module):
    def __init__(self, spec: ModelSpec):
        super().__init__()
        h, f, bias = spec.hidden_size, spec.ffn_hidden_size, spec.linear_bias
        self.swiglu = spec.mlp == "swiglu"
        self.w1 = nn.Linear(h, f, bias=bias)
        self.w2 = nn.Linear(f, h, bias=bias)
        self.w3 = nn.Linear(h, f, bias=bias) if self.swiglu else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.swiglu:
            return self.w2(F.silu(self.w1(x)) * self.w3(x))
        return self.w2(F.gelu(self.w1(x), approximate="tanh"))  # GPT-2's tanh approximation


class TransformerBlock(nn.Module):
    """Pre-norm block: x + attention(norm(x)), then + feed_forward(norm(x))."""

    def __init__(self, spec: ModelSpec, kernels: Kernels):
        super().__init__()
        self.attention_norm = _norm(spec)
        self.attention = Attention(spec, kernels)
        self.ffn_norm = _norm(spec)
        self.feed_forward = MoEFeedForward(spec) if spec.is_moe else FeedForward(spec)

    def forward(self, x: torch.Tensor, rope: torch.Tensor | None) -> torch.Tensor:
        x = x + self.attention(self.attention_norm(x), rope)
        return x + self.feed_forward(self.ffn_norm(x))


class Transformer(nn.Module):
    """tokens (batch, seq) int64 -> logits (batch, seq, vocab) fp32, or with labels (batch, seq)
    the mean cross-entropy (a scalar); hidden states in and out for a pipeline stage without the
    embedding or the head (labels are then ignored)."""

    def __init__(self, spec: ModelSpec, kernels: Kernels | None = None):
        super().__init__()
        check_buildable(spec, moe=True)
        self.spec = spec
        self.kernels = kernels = kernels or Kernels()
        h = spec.hidden_size
        self.tok_embeddings = nn.Embedding(spec.vocab_size, h)
        self.pos_embeddings = nn.Embedding(spec.max_seq_len, h) if spec.position == "learned" else None
        self.layers = nn.ModuleDict({str(i): TransformerBlock(spec, kernels) for i in range(spec.num_layers)})
        self.norm = _norm(spec)
        self.output = nn.Linear(h, spec.vocab_size, bias=False)
        if spec.tied_embeddings:
            self.output.weight = self.tok_embeddings.weight
        self._rope_cast, self._rope_cast_key = None, None  # `rope` in the compute dtype (forward)
        # Not persistent: recomputed by init_weights, never saved in checkpoints.
        self.register_buffer("rope", rope_cache(spec.head_dim, spec.max_seq_len)
                             if spec.position != "learned" else None, persistent=False)

    def forward(self, tokens: torch.Tensor, labels: torch.Tensor | None = None) -> torch.Tensor:
        if self.tok_embeddings is not None:
            x = self.tok_embeddings(tokens)
            if self.pos_embeddings is not None:
                positions = torch.arange(tokens.shape[1], device=tokens.device)
                x = x + self.pos_embeddings(positions)
        else:
            x = tokens
        rope = self.rope
        if rope is not None and self.kernels.rope_in_compute_dtype and rope.dtype != x.dtype:
            # The table in the activations' dtype (bf16 under FSDP2 mixed precision), cast once and
            # kept; a new table (init_weights, context parallelism's rows) is cast anew.
            key = (x.dtype, rope.data_ptr())
            if self._rope_cast_key != key:
                self._rope_cast, self._rope_cast_key = rope.to(x.dtype), key
            rope = self._rope_cast
        for layer in self.layers.values():
            x = layer(x, rope)
        if self.norm is not None:
            x = self.norm(x)
        if self.output is None:
            return x
        if labels is not None and self.kernels.loss_chunk_tokens:
            return chunked_cross_entropy(x, self.output.weight, labels, self.kernels.loss_chunk_tokens)
        logits = self.output(x).float()
        return logits if labels is None else plain_cross_entropy(logits, labels)

    @torch.no_grad()
    def init_weights(self, seed: int) -> None:
        """Materialized weights that depend only on (seed, parameter name).

        Each tensor is drawn on the CPU from its own generator, so the values do not depend on the
        device, on which layers this pipeline stage holds, or on the order of initialization; a
        sharded parameter (DTensor) receives its shard of the same full tensor. That is what lets a
        parallel run be compared number for number with a single-device run.
        """
        if self.spec.tied_embeddings and self.tok_embeddings is not None and self.output is not None:
            self.output.weight = self.tok_embeddings.weight  # to_empty() gives each its own storage
        if self.spec.position != "learned":
            self.rope = rope_cache(self.spec.head_dim, self.spec.max_seq_len).to(self._device())
        residual_std = INIT_STD / math.sqrt(2 * self.spec.num_layers)  # GPT-2: scale residual outputs
        for raw_name, param in self.named_parameters():
            name = canonical_name(raw_name)
            module_name = name.rsplit(".", 1)[0].rsplit(".", 1)[-1]
            if module_name.endswith("norm"):  # norms start as identity: weight 1, bias 0
                full = torch.ones(param.shape) if name.endswith(".weight") else torch.zeros(param.shape)
            elif name.endswith(".bias"):
                full = torch.zeros(param.shape)
            else:
                std = residual_std if name.endswith(("wo.weight", "w2.weight", "experts.w2")) else INIT_STD
                gen = torch.Generator().manual_seed(_name_seed(seed, name))
                owner = self.get_submodule(raw_name.rsplit(".", 1)[0])
                if isinstance(owner, GroupedExperts):  # draw all experts, keep this rank's
                    full = owner.local_rows(torch.empty((owner.num_experts, *param.shape[1:])).normal_(
                        0.0, std, generator=gen))
                else:
                    full = torch.empty(param.shape).normal_(0.0, std, generator=gen)
            _copy_full(param, full)

    def _device(self) -> torch.device:
        return next(iter(self.parameters())).device


def canonical_name(name: str) -> str:
    """The parameter FQN without wrapper prefixes: the contract name."""
    for prefix in WRAPPER_PREFIXES:
        name = name.replace(prefix, "")
    return name


def _name_seed(seed: int, name: str) -> int:
    digest = hashlib.sha256(f"{seed}:{name}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)


def _copy_full(param: torch.Tensor, full: torch.Tensor) -> None:
    """Copy a full CPU tensor into `param`, or into this rank's shard when param is a DTensor."""
    from torch.distributed.tensor import DTensor, distribute_tensor

    if isinstance(param, DTensor):
        # Every rank holds the same full tensor, so no rank needs to send it (src_data_rank=None).
        shard = distribute_tensor(full.to(param.device), param.device_mesh, param.placements,
                                  src_data_rank=None)
        param.to_local().copy_(shard.to_local())
    else:
        param.copy_(full.to(device=param.device, dtype=param.dtype))


def build_model(spec: ModelSpec, device: str | torch.device = "meta", kernels: Kernels | None = None) -> Transformer:
    """The model with uninitialized storage on `device` (meta: no memory at all)."""
    with torch.device(device):
        return Transformer(spec, kernels)


def count_params(model: nn.Module) -> int:
    """Distinct parameters (a tied embedding counted once), whatever device they live on."""
    return sum(p.numel() for p in model.parameters())
