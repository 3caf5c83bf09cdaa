"""A decoder-only transformer built from a `ModelSpec`, at any size, torchtitan style.

Every family from one set of modules (`executor.blocks`, whose switches list the 2024-2025 facts):
- Llama/Qwen: RMSNorm, rotary positions (RoPE, Su et al. 2021, arXiv 2104.09864), grouped-query
  attention (Ainslie et al. 2023, arXiv 2305.13245), SwiGLU MLP (Shazeer 2020, arXiv 2002.05202),
  optional q/k/v bias (Qwen); Qwen3's q/k norms; Mistral/StarCoder2 sliding windows.
- GPT-2/3: LayerNorm, GeLU MLP, biases on every linear layer, learned positions, tied embeddings.
- Gemma 2/3 (sandwich norms, GeGLU, local/global layers, soft-capping), OLMo 2 (post-norm, full
  q/k norms), GPT-J/NeoX/Falcon (parallel blocks, partial rotary), DeepSeek-style MoE layers
  (shared experts, leading dense layers) on Qwen3-MoE-style attention.
Multi-head latent attention (DeepSeek-V2/V3) is refused by `check_buildable`: planned only.

ALiBi models (BLOOM, MPT) are built with RoPE in place of ALiBi: neither has parameters, so the
parameter count, the matmul shapes and the FLOPs are unchanged, but the numerics are not BLOOM's
(`model_notes` says so and the executor logs it). Mixture-of-experts models (Mixtral) replace the
MLP by `executor.moe.MoEFeedForward`; the XLA backend refuses them.

The module names are a contract shared by both backends (and by checkpoints):
`tok_embeddings`, `pos_embeddings` (learned positions only), `layers.<i>.attention_norm`,
`layers.<i>.attention.{wq,wk,wv,wo}` (+ `q_norm`, `k_norm`), `layers.<i>.ffn_norm`,
`layers.<i>.post_attention_norm`, `layers.<i>.post_ffn_norm` (post and sandwich norms),
`layers.<i>.feed_forward.{w1,w2,w3}` (gated: w1 gate, w3 up, w2 down; GeLU: w1 up, w2 down), MoE:
`layers.<i>.feed_forward.router`, `layers.<i>.feed_forward.experts.{w1,w2,w3}` (stacked
[num_experts, ...]) and `layers.<i>.feed_forward.shared_mlp.{w1,w2,w3}`, `norm`, `output`.
`layers` is a ModuleDict keyed by the global layer index, so a pipeline stage that keeps layers 4-7
still names them `layers.4` .. `layers.7`; a stage without the embedding or the head sets those
attributes to None and `forward` passes hidden states through.

Attention reads the number of heads from the projections' outputs (`view(b, s, -1, head_dim)`), so
a tensor-parallel module whose wq/wk/wv produce 1/tp of the heads runs unchanged.

Given labels, `forward` returns the loss instead of the logits, so the head and the loss can be
fused (executor.loss) inside the forward, where a sharded (FSDP2) head weight is gathered;
`Kernels` (executor.blocks) says how, e.g. over how many tokens per chunk.
"""
from __future__ import annotations

import hashlib
import math

import torch
from torch import nn

from autoplan.specs import AutoplanError, ModelSpec

from executor.blocks import Kernels, TransformerBlock, make_norm, rope_cache
from executor.loss import chunked_cross_entropy, plain_cross_entropy
from executor.moe import GroupedExperts

INIT_STD = 0.02
"""Normal init of GPT-2 (Radford et al. 2019) and Megatron-LM for every weight matrix."""
WRAPPER_PREFIXES = ("_checkpoint_wrapped_module.", "_orig_mod.", "_fsdp_wrapped_module.")
"""Names wrappers (activation checkpointing, torch.compile, FSDP1) insert into parameter FQNs."""


def model_notes(spec: ModelSpec) -> list[str]:
    """What this executor builds differently from the named architecture (empty when faithful).
    Each difference changes numerics only, never a parameter shape, FLOP or byte the planner uses."""
    notes = []
    if spec.position == "alibi":
        notes.append(f"model {spec.name!r} uses ALiBi; the executor substitutes RoPE "
                     "(same parameters, shapes and FLOPs, different numerics)")
    if spec.family.startswith("gemma"):
        notes.append(f"model {spec.name!r} is a Gemma: the executor does not scale the embedding by sqrt(hidden), "
                     "uses plain RMSNorm weights (Gemma's is 1 + w), 1/sqrt(head_dim) attention scaling (not "
                     "query_pre_attn_scalar) and one RoPE base for local and global layers")
    if spec.is_moe and spec.family in ("deepseek_v2", "deepseek_v3", "qwen3_moe"):
        notes.append(f"model {spec.name!r}: routing is softmax over the top-k router logits (Mixtral); "
                     f"{spec.family}'s own scoring (group-limited or sigmoid with bias, scaling) is not reproduced")
    return notes


def check_buildable(spec: ModelSpec, moe: bool = False) -> None:
    """Raise AutoplanError, naming the architecture feature, for what this module cannot build;
    mixture-of-experts models too unless the caller (a backend) runs them (`moe=True`)."""
    if spec.is_moe and not moe:
        raise AutoplanError(
            f"model {spec.name!r} is a mixture of experts ({spec.num_experts} experts); this backend runs "
            "dense models only; run it with --backend torch, or run a dense model")
    if spec.is_moe and (spec.mlp != "swiglu" or spec.linear_bias or spec.mlp_bias):
        raise AutoplanError(
            f"model {spec.name!r}: the executor's experts are Mixtral's SwiGLU MLPs without biases, got "
            f"mlp={spec.mlp!r}, linear_bias={spec.linear_bias}, mlp_bias={spec.mlp_bias}; plan and estimate it, "
            "or run a dense model")
    if spec.rope_dim % 2:
        raise AutoplanError(f"model {spec.name!r}: RoPE needs an even number of rotated dims, got {spec.rope_dim}")


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
        self.layers = nn.ModuleDict({str(i): TransformerBlock(spec, i, kernels) for i in range(spec.num_layers)})
        self.norm = make_norm(spec)
        self.output = nn.Linear(h, spec.vocab_size, bias=spec.output_bias)
        if spec.tied_embeddings:
            self.output.weight = self.tok_embeddings.weight
        self._rope_cast, self._rope_cast_key = None, None  # `rope` in the compute dtype (forward)
        # Not persistent: recomputed by init_weights, never saved in checkpoints.
        self.register_buffer("rope", rope_cache(spec.rope_dim, spec.max_seq_len)
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
        cap = self.spec.final_logit_softcap
        if labels is not None and self.kernels.loss_chunk_tokens:
            return self._chunked_loss(x, labels)
        logits = self.output(x).float()
        if cap:  # Gemma 2: logits c*tanh(z/c)
            logits = cap * torch.tanh(logits / cap)
        return logits if labels is None else plain_cross_entropy(logits, labels)

    def _chunked_loss(self, x: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """The fused head + loss (executor/loss.py), on this rank's vocabulary rows when tensor
        parallelism shards the head (a DTensor weight, Shard(0)): the hidden states gathered whole
        first (with sequence parallelism they arrive sharded on the sequence)."""
        from torch.distributed.tensor import DTensor, Replicate

        weight, bias = self.output.weight, self.output.bias
        group, vocab_start = None, 0
        if isinstance(weight, DTensor):
            mesh = weight.device_mesh
            group = mesh.get_group()
            # Shard(0) gives each rank ceil(V / tp) rows (the last ones fewer)
            vocab_start = mesh.get_local_rank() * -(-self.spec.vocab_size // mesh.size())
            if isinstance(x, DTensor):
                x = x.redistribute(mesh, [Replicate()]).to_local()
            weight = weight.to_local()
            bias = bias.to_local() if bias is not None else None
        return chunked_cross_entropy(x, weight, labels, self.kernels.loss_chunk_tokens, bias=bias,
                                     softcap=self.spec.final_logit_softcap, group=group, vocab_start=vocab_start)

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
            self.rope = rope_cache(self.spec.rope_dim, self.spec.max_seq_len).to(self._device())
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
