"""The modules of one transformer layer, built from a `ModelSpec`: attention, MLP, norms, and the
block that wires them. Each architecture fact is a switch here, not a new model class:

- q/k norms (`qk_norm`): RMSNorm over each head's q and k ("head": Qwen3, Gemma 3) or over the whole
  q and k projections ("full": OLMo 2), before RoPE, as Hugging Face's implementations do.
- Sliding-window layers (`ModelSpec.layer_window`): a causal mask that also hides keys more than
  window-1 positions back (Mistral, Gemma 2/3, StarCoder2); global layers keep the plain causal mask.
- Attention soft-capping (`attn_logit_softcap`, Gemma 2): scores c*tanh(s/c) before the mask.
- Partial rotary (`rotary_dim`): RoPE on the first rotary_dim dimensions of each head (GPT-J, Pythia).
- Value heads of their own width (`v_head_dim`).
- Norm placement: pre-norm (Llama), post-norm inside the residual (OLMo 2), sandwich (Gemma 2/3:
  norms before and after each block), and the parallel block (GPT-J/NeoX/Falcon) with one shared
  norm or two.
- GeGLU (Gemma), MLP-only biases (GPT-J), dense layers in MoE models (DeepSeek's first k) and shared
  experts beside the routed ones (`executor.moe`).

- Multi-head latent attention (`kv_lora_rank`: DeepSeek-V2/V3): `LatentAttention`.

What this module cannot build `executor.model.check_buildable` refuses before anything starts.

`Kernels` picks how some parts are computed, never what: each choice gives the same function (up to
rounding) and is switchable from `autoplan run --without NAME` (executor.options.SPEEDUPS).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from autoplan.specs import ModelSpec

from executor.moe import MoEFeedForward

ROPE_THETA = 10000.0
"""RoPE base of Llama 1/2 (Touvron et al. 2023); ModelSpec carries no theta, and the base changes
no shape, FLOP or byte the planner reasons about."""


@dataclass(frozen=True)
class Kernels:
    """How the model computes some of its parts (the function is the same either way)."""

    native_gqa: bool = True
    """Grouped-query attention by SDPA's `enable_gqa` (K/V heads broadcast inside the kernel) on the
    plain causal path; False (and with a window or soft-capping, whose masked or explicit paths have
    no GQA kernel): K/V heads copied q_heads/kv_heads times with `repeat_interleave` first."""
    rope_in_compute_dtype: bool = True
    """RoPE in the activations' dtype with a cos/sin table cast to it once; False: the rotation in
    fp32 (the activations cast up and back down in every layer)."""
    loss_chunk_tokens: int = 0
    """Given labels, the head and the loss fused over chunks of this many tokens
    (executor.loss.chunked_cross_entropy); 0: whole fp32 logits, then cross-entropy."""
    grouped_experts: bool = True
    """A MoE layer's local experts as one grouped GEMM per weight where torch._grouped_mm runs
    (executor.moe.GroupedExperts); False: a loop of per-expert matmuls."""


def make_norm(spec: ModelSpec, width: int | None = None) -> nn.Module:
    width = width or spec.hidden_size
    if spec.norm == "layernorm":
        return nn.LayerNorm(width, eps=1e-5)
    return nn.RMSNorm(width, eps=1e-6)


def rope_cache(rope_dim: int, max_seq_len: int, device=None) -> torch.Tensor:
    """cos and sin of position * theta^(-2i/d), shape (2, max_seq_len, rope_dim), fp32, in the
    rotate-half layout: angle i serves dimensions i and i + rope_dim/2 (GPT-NeoX's and Hugging
    Face's Llama layout, no interleaving, so the rotation needs no strided stack/flatten)."""
    inv_freq = 1.0 / (ROPE_THETA ** (torch.arange(0, rope_dim, 2, dtype=torch.float32, device=device) / rope_dim))
    angles = torch.outer(torch.arange(max_seq_len, dtype=torch.float32, device=device), inv_freq)
    angles = torch.cat([angles, angles], dim=-1)
    return torch.stack([angles.cos(), angles.sin()])


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    first, second = x.chunk(2, dim=-1)
    return torch.cat([-second, first], dim=-1)


def apply_rope(x: torch.Tensor, cache: torch.Tensor, in_compute_dtype: bool = True) -> torch.Tensor:
    """Rotate pairs (x[i], x[i + r/2]) of the first r = cache.shape[-1] dims of x (b, s, heads,
    head_dim); the rest of each head passes unrotated (partial rotary). In x's dtype (the cache
    cast to it) or, with in_compute_dtype=False, in fp32."""
    seq_len, rotated_dims = x.shape[1], cache.shape[-1]
    cos = cache[0, :seq_len].view(1, seq_len, 1, -1)
    sin = cache[1, :seq_len].view(1, seq_len, 1, -1)
    x_rot, x_pass = x[..., :rotated_dims], x[..., rotated_dims:]
    if in_compute_dtype:
        rotated = x_rot * cos.to(x.dtype) + _rotate_half(x_rot) * sin.to(x.dtype)
    else:
        xf = x_rot.float()
        rotated = (xf * cos.float() + _rotate_half(xf) * sin.float()).type_as(x)
    return torch.cat([rotated, x_pass], dim=-1) if x_pass.shape[-1] else rotated


def repeat_kv(q: torch.Tensor, kv: torch.Tensor) -> torch.Tensor:
    """Grouped-query attention: each K/V head serves q_heads/kv_heads query heads (b, heads, s, d)."""
    num_queries_per_kv = q.shape[1] // kv.shape[1]
    return kv.repeat_interleave(num_queries_per_kv, dim=1) if num_queries_per_kv > 1 else kv


class CausalAttention(nn.Module):
    """The attention core: causal softmax(QK^T/sqrt(d))V over (batch, heads, seq, head_dim), with
    fewer K/V heads than query heads under GQA, optionally a sliding window and soft-capped scores.
    A module of its own, without parameters, so selective recompute can wrap exactly this part
    (Korthikanti et al. 2022, section 4) and context parallelism can replace it."""

    def __init__(self, window: int = 0, softcap: float = 0.0, native_gqa: bool = True):
        super().__init__()
        self.window, self.softcap, self.native_gqa = window, softcap, native_gqa

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        if not self.window and not self.softcap and self.native_gqa:
            return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=k.shape[1] != q.shape[1])
        k, v = repeat_kv(q, k), repeat_kv(q, v)
        if not self.window and not self.softcap:
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)
        seq_len = q.shape[2]
        pos = torch.arange(seq_len, device=q.device)
        distance = pos.view(-1, 1) - pos.view(1, -1)            # query position - key position
        allowed = (distance >= 0) & ((distance < self.window) if self.window else True)
        if not self.softcap:
            return F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)
        scores = (q.float() @ k.float().transpose(-1, -2)) / math.sqrt(q.shape[-1])
        scores = self.softcap * torch.tanh(scores / self.softcap)
        weights = scores.masked_fill(~allowed, float("-inf")).softmax(dim=-1)
        return (weights @ v.float()).type_as(q)


class Attention(nn.Module):
    def __init__(self, spec: ModelSpec, layer: int = 0, kernels: Kernels = Kernels()):
        super().__init__()
        h, q_bias = spec.hidden_size, spec.qkv_bias or spec.linear_bias
        self.head_dim, self.value_dim = spec.head_dim, spec.value_dim
        self.use_rope = spec.position != "learned"
        self.rope_in_compute_dtype = kernels.rope_in_compute_dtype
        self.wq = nn.Linear(h, spec.q_size, bias=q_bias)
        self.wk = nn.Linear(h, spec.kv_size, bias=q_bias)
        self.wv = nn.Linear(h, spec.v_size, bias=q_bias)
        self.wo = nn.Linear(spec.attn_out_size, h, bias=spec.linear_bias)
        self.qk_norm = spec.qk_norm
        if spec.qk_norm:
            head = spec.qk_norm == "head"
            self.q_norm = make_norm(spec, spec.head_dim if head else spec.q_size)
            self.k_norm = make_norm(spec, spec.head_dim if head else spec.kv_size)
        self.core = CausalAttention(spec.layer_window(layer), spec.attn_logit_softcap, kernels.native_gqa)

    def forward(self, x: torch.Tensor, rope: torch.Tensor | None) -> torch.Tensor:
        batch, seq_len = x.shape[0], x.shape[1]
        q, k, v = self.wq(x), self.wk(x), self.wv(x)
        if self.qk_norm == "full":
            q, k = self.q_norm(q), self.k_norm(k)
        # -1: the local head count, whatever share of the heads this rank's projections produce.
        q = q.view(batch, seq_len, -1, self.head_dim)
        k = k.view(batch, seq_len, -1, self.head_dim)
        v = v.view(batch, seq_len, -1, self.value_dim)
        if self.qk_norm == "head":
            q, k = self.q_norm(q), self.k_norm(k)
        if self.use_rope:
            q, k = (apply_rope(t, rope, self.rope_in_compute_dtype) for t in (q, k))
        out = self.core(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))
        return self.wo(out.transpose(1, 2).reshape(batch, seq_len, -1))


class LatentAttention(nn.Module):
    """Multi-head latent attention (DeepSeek-V2, arXiv 2405.04434, sec. 2.1): queries through a low-rank
    bottleneck (wq_a to q_lora_rank, RMSNorm, wq_b; one wq without it), keys and values from one
    compressed latent c_kv (wkv_a to kv_lora_rank, RMSNorm, wkv_b to every head's non-rotary key and value)
    plus one decoupled RoPE key of qk_rope_head_dim that every head shares (the rest of wkv_a's output).
    Each head's query and key: (qk_nope_head_dim non-rotary | qk_rope_head_dim rotary), head_dim wide;
    values v_head_dim wide. Softmax scale 1/sqrt(head_dim) (SDPA's default; DeepSeek's YaRN mscale is a
    long-context extension, not reproduced)."""

    def __init__(self, spec: ModelSpec, kernels: Kernels = Kernels()):
        super().__init__()
        h, heads = spec.hidden_size, spec.num_heads
        self.head_dim, self.value_dim, self.rope_dim = spec.head_dim, spec.value_dim, spec.qk_rope_head_dim
        self.kv_lora_rank = spec.kv_lora_rank
        self.rope_in_compute_dtype = kernels.rope_in_compute_dtype
        if spec.q_lora_rank:
            self.wq_a = nn.Linear(h, spec.q_lora_rank, bias=False)
            self.q_norm = make_norm(spec, spec.q_lora_rank)
            self.wq_b = nn.Linear(spec.q_lora_rank, heads * spec.head_dim, bias=False)
        else:
            self.wq = nn.Linear(h, heads * spec.head_dim, bias=False)
        self.wkv_a = nn.Linear(h, spec.kv_lora_rank + spec.qk_rope_head_dim, bias=False)
        self.kv_norm = make_norm(spec, spec.kv_lora_rank)
        nope = spec.head_dim - spec.qk_rope_head_dim
        self.wkv_b = nn.Linear(spec.kv_lora_rank, heads * (nope + spec.value_dim), bias=False)
        self.wo = nn.Linear(heads * spec.value_dim, h, bias=False)
        self.core = CausalAttention(native_gqa=kernels.native_gqa)
        self.tp_mesh = None
        """Under tensor parallelism (executor/torch_backend/parallelize.py apply_tp): the heads split over
        it (wq or wq_b, wkv_b column-wise, wo row-wise); the down-projections and latent norms replicated
        DTensors, whose gradients, and the shared RoPE key's, come back as partial sums over tp."""

    def forward(self, x: torch.Tensor, rope: torch.Tensor | None) -> torch.Tensor:
        batch, seq_len = x.shape[0], x.shape[1]
        if self.tp_mesh is not None:
            from torch.distributed.tensor import DTensor, Replicate

            if not isinstance(x, DTensor):  # without SP the input arrives whole on every tp rank
                x = DTensor.from_local(x, self.tp_mesh, [Replicate()], run_check=False)
        q = self.wq_b(self.q_norm(self.wq_a(x))) if hasattr(self, "wq_a") else self.wq(x)
        q = q.view(batch, seq_len, -1, self.head_dim)
        c_kv, k_rope = self.wkv_a(x).split([self.kv_lora_rank, self.rope_dim], dim=-1)
        if self.tp_mesh is not None:  # one key for every head: the local heads' gradients summed over tp
            from torch.distributed.tensor import Partial

            k_rope = k_rope.to_local(grad_placements=[Partial()])
        kv = self.wkv_b(self.kv_norm(c_kv)).view(batch, seq_len, -1, self.head_dim - self.rope_dim + self.value_dim)
        k_nope, v = kv.split([self.head_dim - self.rope_dim, self.value_dim], dim=-1)
        q_nope, q_rope = q.split([self.head_dim - self.rope_dim, self.rope_dim], dim=-1)
        q_rope = apply_rope(q_rope, rope, self.rope_in_compute_dtype)
        k_rope = apply_rope(k_rope.unsqueeze(2), rope, self.rope_in_compute_dtype)
        q = torch.cat([q_nope, q_rope], dim=-1)
        k = torch.cat([k_nope, k_rope.expand(-1, -1, k_nope.shape[2], -1)], dim=-1)
        if self.value_dim != self.head_dim:
            # SDPA's flash kernels (CUDA and CPU) take one head width for q, k and v: the values padded
            # with zeros to head_dim and the output cut back (torchtitan 0.3.0's deepseek_v3 passes them
            # unpadded and lets its attention backend pick a kernel that takes them).
            v = F.pad(v, (0, self.head_dim - self.value_dim))
        out = self.core(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))[..., :self.value_dim]
        return self.wo(out.transpose(1, 2).reshape(batch, seq_len, -1))


class FeedForward(nn.Module):
    """SwiGLU w2(silu(w1 x) * w3 x), GeGLU w2(gelu(w1 x) * w3 x) (Gemma), or GeLU w2(gelu(w1 x))."""

    def __init__(self, spec: ModelSpec, width: int | None = None):
        super().__init__()
        h, f = spec.hidden_size, width or spec.ffn_hidden_size
        bias = spec.linear_bias or spec.mlp_bias
        self.kind = spec.mlp
        self.w1 = nn.Linear(h, f, bias=bias)
        self.w2 = nn.Linear(f, h, bias=bias)
        self.w3 = nn.Linear(h, f, bias=bias) if spec.mlp != "gelu" else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.kind == "swiglu":
            return self.w2(F.silu(self.w1(x)) * self.w3(x))
        if self.kind == "geglu":
            return self.w2(F.gelu(self.w1(x), approximate="tanh") * self.w3(x))
        return self.w2(F.gelu(self.w1(x), approximate="tanh"))  # GPT-2's tanh approximation


class TransformerBlock(nn.Module):
    """Layer `layer` of the model: attention and MLP with the spec's norm placement.

    pre (Llama):       x + attn(attention_norm(x)), then + mlp(ffn_norm(x))
    post (OLMo 2):     x + post_attention_norm(attn(x)), then + post_ffn_norm(mlp(x))
    sandwich (Gemma):  x + post_attention_norm(attn(attention_norm(x))), the same around the MLP
    parallel (GPT-J):  x + attn(attention_norm(x)) + mlp(ffn_norm(x)), ffn_norm = attention_norm when shared
    """

    def __init__(self, spec: ModelSpec, layer: int = 0, kernels: Kernels = Kernels()):
        super().__init__()
        self.placement = "parallel" if spec.parallel_block else spec.norm_placement
        if self.placement != "post":
            self.attention_norm = make_norm(spec)
        if self.placement in ("post", "sandwich"):
            self.post_attention_norm = make_norm(spec)
            self.post_ffn_norm = make_norm(spec)
        if self.placement != "post" and not spec.shared_block_norm:
            self.ffn_norm = make_norm(spec)
        self.attention = LatentAttention(spec, kernels) if spec.is_mla else Attention(spec, layer, kernels)
        self.feed_forward = MoEFeedForward(spec, kernels.grouped_experts) if spec.is_moe_layer(layer) \
            else FeedForward(spec)
        if spec.is_moe_layer(layer) and spec.shared_expert_ffn_size:
            self.feed_forward.shared_mlp = FeedForward(spec, spec.shared_expert_ffn_size)

    def forward(self, x: torch.Tensor, rope: torch.Tensor | None) -> torch.Tensor:
        if self.placement == "pre":
            x = x + self.attention(self.attention_norm(x), rope)
            return x + self.feed_forward(self.ffn_norm(x))
        if self.placement == "parallel":
            normed = self.attention_norm(x)
            mlp_in = self.ffn_norm(x) if hasattr(self, "ffn_norm") else normed
            return x + self.attention(normed, rope) + self.feed_forward(mlp_in)
        if self.placement == "post":
            x = x + self.post_attention_norm(self.attention(x, rope))
            return x + self.post_ffn_norm(self.feed_forward(x))
        x = x + self.post_attention_norm(self.attention(self.attention_norm(x), rope))
        return x + self.post_ffn_norm(self.feed_forward(self.ffn_norm(x)))
