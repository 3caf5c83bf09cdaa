"""What autoplan's eager PyTorch decoder saves for backward: the activation recipes "eager" (today's
executor) and "eager-autocast" (the executor before its speed-ups, which the shipped H100 records
ran), `Framework.activation_recipe`.

Every term is a tensor autograd keeps, named after the line that creates it, in bytes per
micro-batch of `b` sequences of `s` tokens on one GPU. tests/test_memory_counting.py counts the
executor's saved tensors (saved-tensor hooks, each storage once) in both compute modes and holds
these sums to 3%. Why they differ from Megatron's 34*s*b*h (Korthikanti et al. 2022, Table 2):

- Compute mode (`EagerRecipe.autocast`). Where FSDP2 wraps the model, its mixed-precision policy
  hands the forward bf16 copies of the fp32 weights and no autocast runs: the residual stream and
  every activation are bf16 and a norm's output, shared by the linears that read it, is saved once.
  Elsewhere (DDP at ZeRO 0 with several replicas, MoE at one replica) fp32 weights run under bf16
  autocast: the embedding and the residual stream stay fp32 (4 B per element), and autocast casts a
  non-leaf input once per consuming op, so wq, wk and wv each save their own bf16 copy of the norm
  output (3 x 2h), w1 and w3 theirs (2 x 2h). Which mode a plan runs in is
  `autoplan.specs.plan.compute_mode`, which the executor applies and `autocast_for` reads.
- A norm saves its input and fp32 statistics (rstd; LayerNorm also the mean). A composite RMSNorm
  (torch 2.9 on the CPU) also upcasts and saves its fp32 normalized output; the fused CUDA kernel
  (`_fused_rms_norm`) does not (`fused_norm`).
- Grouped-query attention: SDPA's `enable_gqa` saves K and V at their own width; the executor before
  it (and any window or soft-capping, whose paths have no GQA kernel) repeats them to every query head.
- The loss. Fused head + cross-entropy over token chunks (executor/loss.py; with a head bias and
  logit soft-capping too; vocabulary-parallel under tp > 1): the head saves its (whole-sequence)
  input, the labels and one fp32 log-sum-exp per token, and its backward holds one chunk of fp32
  logits over the rank's V/tp rows at a time (two with soft-capping). Otherwise (`--without
  chunked-loss`) fp32 logits (`output(x).float()`, F.cross_entropy): log_softmax saves its fp32
  output, its backward adds two more of that size.
- Tensor parallelism (executor/torch_backend/parallelize.py TP_PLAN_*) splits heads and the MLP
  width; without the fused loss the head's logits are gathered whole (`output_layouts=Replicate`),
  so the vocabulary is not divided; with sequence parallelism the norms run on 1/tp of the sequence.
- Context parallelism (executor/torch_backend/context_parallel.py `ContextParallelAttention`): each
  rank all-gathers K and V of the whole sequence over the cp group and repeats them to every query
  head (`repeat_kv`) before SDPA, which saves them; its boolean causal mask over global positions
  becomes an additive mask in the compute dtype (aten attention.cpp `convert_boolean_attn_mask`),
  (s/cp x s) per layer, saved too. torch's own ring attention (torch.distributed.tensor.experimental
  `context_parallel`) would keep one K/V block per ring step instead, but dispatches only CUDA kernels,
  so the executor does not use it.
- fp8 plans (executor/fp8.py, torchao Float8Linear) save what bf16 plans save: the float8 linear
  keeps its input and weight in the compute dtype and casts both again in the backward
  (tests/test_fp8.py counts it), so the recipes hold for them unchanged.
"""
from __future__ import annotations

from dataclasses import dataclass

from autoplan.specs import ModelSpec
from autoplan.specs.plan import compute_mode
from cost_model.memory import mlp_activation_elems

FP32, BF16, INT64 = 4, 2, 8
RECIPES = ("eager", "eager-autocast")
CHUNK_LOGIT_BYTES = 256 * 2**20
"""One chunk of the fused loss's fp32 logits (executor/loss.py CHUNK_LOGIT_BYTES, its default)."""


@dataclass(frozen=True)
class EagerRecipe:
    """How one plan's micro-batch runs, as far as what it saves depends on it."""

    autocast: bool
    """fp32 weights under bf16 autocast (fp32 residual stream, a bf16 cast per consuming linear);
    False: bf16 weight copies from FSDP2's mixed precision, everything bf16."""
    native_gqa: bool
    """K/V saved at their own width (SDPA enable_gqa); False: repeated to every query head."""
    chunked_loss: bool
    """The fused, chunked head + cross-entropy; False: whole fp32 logits."""
    rope_table_casts: bool
    """RoPE in the compute dtype under autocast: each layer casts cos and sin for q and for k."""
    fused_norm: bool = True
    """RMSNorm saves only its input and rstd (the fused CUDA kernel)."""
    vocab_shards: int = 1
    """The fused loss's head rows are split over this many ranks (tp): a chunk's logits span V/tp."""
    softcap: bool = False
    """Logit soft-capping: the fused loss's backward keeps a chunk's tanh beside its logits."""
    context_shards: int = 1
    """The plan's cp: attention gathers K/V over this many ranks' tokens (context_parallel.py)."""
    compute_bytes: int = BF16
    """Bytes of an activation in the compute dtype: bf16 on a GPU; fp32 where the executor runs on
    a CPU, which has no mixed precision there (executor/torch_backend/parallelize.py
    `mixed_precision`: fp32 off CUDA; train.py: autocast only on CUDA)."""

    compiled_blocks: bool = False
    """Each block under torch.compile (the executor's default on CUDA: executor/options.py
    RunOptions.compiles). Inductor's partition then keeps a gated MLP's gate and up outputs and their
    product and recomputes the activation in the backward: 3 of the eager 4 ffn-wide tensors (the H200
    allocator histories of Llama-3.2-1B and Qwen2.5-1.5B, cost_model/data/h100_runs/2026-11-28). A GeLU
    MLP keeps its 2 (GPT-2 medium), and every other saved tensor of those blocks was the eager count.
    Those were dense blocks on FSDP2's bf16 weights; MoE and autocast blocks are counted as eager
    (not measured compiled)."""

    @property
    def residual_bytes(self) -> int:
        return FP32 if self.autocast else self.compute_bytes


def autocast_for(model: ModelSpec, plan) -> bool:
    """Whether today's executor runs `plan` under autocast over fp32 weights rather than on FSDP2's
    bf16 weight copies (the rule: autoplan.specs.plan.compute_mode)."""
    return not compute_mode(plan, model).bf16_weight_copies


def recipe_for(name: str, model: ModelSpec, plan, fused_norm: bool = True, on_cpu: bool = False,
               compiled: bool | None = None) -> EagerRecipe:
    """The recipe `name` as `plan` runs it; `on_cpu`: the executor on a CPU, all fp32 (no autocast);
    `compiled`: blocks under torch.compile (None: the executor's default, on CUDA only)."""
    cp = plan.cp if plan is not None else 1
    if name == "eager-autocast":
        return EagerRecipe(autocast=True, native_gqa=False, chunked_loss=False, rope_table_casts=False,
                           fused_norm=fused_norm, context_shards=cp)
    if name != "eager":
        raise ValueError(f"unknown eager activation recipe {name!r}; choose from {RECIPES}")
    autocast = autocast_for(model, plan) and not on_cpu
    return EagerRecipe(
        autocast=autocast, compute_bytes=FP32 if on_cpu else BF16,
        compiled_blocks=(not on_cpu) if compiled is None else compiled,
        native_gqa=not (model.sliding_window or model.attn_logit_softcap),
        chunked_loss=True, rope_table_casts=autocast and model.position == "rope", fused_norm=fused_norm,
        vocab_shards=plan.tp, softcap=bool(model.final_logit_softcap), context_shards=cp)


def _norm(model: ModelSpec, tokens: float, outside: int, r: EagerRecipe, name: str) -> dict:
    """A pre-norm over the residual stream: its input, its statistics, and (composite RMSNorm
    only) the fp32 upcast input and normalized output (torch.nn.RMSNorm / LayerNorm)."""
    stats = 2 if model.norm == "layernorm" else 1          # LayerNorm: mean + rstd; RMSNorm: rstd
    composite = model.norm != "layernorm" and not r.fused_norm
    width = tokens * model.hidden_size / outside
    parts = {f"{name}_input": (FP32 if composite else r.residual_bytes) * width,
             f"{name}_stats": FP32 * stats * tokens / outside}
    if composite:
        parts[f"{name}_output"] = FP32 * width
    return parts


def uncounted_features(model: ModelSpec) -> list[str]:
    """Block features of executor/blocks.py whose extra saved tensors these recipes do not count yet
    (tests/test_memory_counting.py covers pre-norm Llama/Qwen2/GPT-2 blocks and MLA); with them the layer
    terms are those of the plain pre-norm block."""
    features = {"qk_norm": bool(model.qk_norm), "norm_placement": model.norm_placement != "pre",
                "parallel_block": model.parallel_block, "attn_logit_softcap": bool(model.attn_logit_softcap),
                "sliding_window": bool(model.sliding_window), "moe": model.is_moe,
                # SDPA's flash kernels need one head width for q, k and v; otherwise another kernel runs
                # (MLA pads its values to head_dim: executor/blocks.py LatentAttention)
                "v_head_dim": bool(model.v_head_dim) and model.v_head_dim != model.head_dim and not model.is_mla}
    return [name for name, used in features.items() if used]


def layer_saved(model: ModelSpec, b: int, s: int, tp: int, sp: bool, r: EagerRecipe) -> dict:
    """Tensors one TransformerBlock saves without recompute (executor/blocks.py)."""
    tokens, outside = b * s, (tp if sp else 1)
    h = model.hidden_size
    casts = 3 if r.autocast else 1                       # wq, wk, wv each cast x, or share the bf16 x
    mlp_casts = (1 if model.mlp == "gelu" else 2) if r.autocast else 1
    parts = _norm(model, tokens, outside, r, "attention_norm")
    repeated = model.num_heads > model.num_kv_heads and not r.native_gqa
    if model.is_mla:
        parts.update(_latent_attention(model, tokens, tp, r))
    else:
        parts.update({
            "qkv_input": casts * r.compute_bytes * tokens * h,
            "q": r.compute_bytes * tokens * model.q_size / tp,                           # after RoPE, SDPA input
            "k": r.compute_bytes * tokens * (model.q_size if repeated else model.kv_size) / tp,
            "v": r.compute_bytes * tokens * (model.attn_out_size if repeated else model.v_size) / tp,
            "attention_out": r.compute_bytes * tokens * model.attn_out_size / tp,        # SDPA output = wo input
            "softmax_lse": FP32 * tokens * model.num_heads / tp,              # flash attention's statistics
        })
    if r.context_shards > 1:
        parts.update(_context_parallel_kv(model, b, s, tp, r.context_shards, r.compute_bytes))
    if r.rope_table_casts:   # cos and sin cast to bf16 for q and for k: (s, rope_dim) each
        parts["rope_table_casts"] = 4 * BF16 * s * model.rope_dim
    parts.update(_norm(model, tokens, outside, r, "ffn_norm"))
    parts["mlp_input"] = mlp_casts * r.compute_bytes * tokens * h
    # Gated (SwiGLU/GeGLU): w1 out (activation input), activation out, w3 out, their product (w2
    # input), 4 per 3 elements of mlp_activation_elems, or 3 of them compiled (the activation out is
    # recomputed); GeLU: w1 out, gelu out, compiled too (GPT-2 medium's allocator history). A MoE layer's
    # token passes its k routed experts and the shared ones (not counted by the test: dense only).
    # Measured compiled: dense blocks on bf16 weights; MoE and autocast blocks keep the eager count.
    recomputes_activation = r.compiled_blocks and not r.autocast and not model.is_moe
    per_elem = 4 / 3 if model.mlp != "gelu" and not recomputes_activation else 1
    elems = mlp_activation_elems(model, model.is_moe) * per_elem
    parts["mlp"] = r.compute_bytes * tokens * elems / tp
    return parts


def _latent_attention(model: ModelSpec, tokens: float, tp: int, r: EagerRecipe) -> dict:
    """What executor/blocks.py `LatentAttention` saves (MLA, measured with saved-tensor hooks on the CPU):
    the block input once per down-projection that casts it (wq_a or wq, wkv_a); each latent's RMSNorm --
    fused: its input (c_kv: a view of wkv_a's whole output, the RoPE key's columns included) and rstd;
    composite: the input upcast to fp32 (or, computing in fp32, the input itself), rstd and the fp32
    output -- and the normalized latent its up-projection takes (wq_b, wkv_b, in the compute dtype);
    SDPA's q, k and v at head_dim (the values zero-padded to it), its output and log-sum-exp; and wo's
    input, the output cut back to v_head_dim (a copy of its own when the values were padded)."""
    cb, heads = r.compute_bytes, model.num_heads / tp
    composite = model.norm != "layernorm" and not r.fused_norm
    parts = {"qkv_input": (2 if r.autocast else 1) * cb * tokens * model.hidden_size}
    latents = [("q_latent", model.q_lora_rank, model.q_lora_rank)] if model.q_lora_rank else []
    latents.append(("kv_latent", model.kv_lora_rank, model.kv_lora_rank + model.qk_rope_head_dim))
    for name, rank, produced in latents:
        if composite:
            parts[f"{name}_norm_input"] = FP32 * tokens * (rank if cb != FP32 else produced)
            parts[f"{name}_norm_output"] = FP32 * tokens * rank
        else:
            parts[f"{name}_norm_input"] = cb * tokens * produced
        parts[f"{name}_norm_stats"] = FP32 * tokens
        parts[f"{name}_up_input"] = cb * tokens * rank
    padded = model.value_dim != model.head_dim
    parts.update({
        "q": cb * tokens * heads * model.head_dim,
        "k": cb * tokens * heads * model.head_dim,
        "v": cb * tokens * heads * _mla_value_storage(model),
        "attention_out": cb * tokens * heads * model.value_dim,          # wo's input
        "softmax_lse": FP32 * tokens * heads,
    })
    if padded:
        parts["core_out"] = cb * tokens * heads * model.head_dim       # SDPA's output at the padded width
    return parts


def _mla_value_storage(model: ModelSpec) -> int:
    """Per head, the width of the storage SDPA's saved V lives in: the zero-padded copy (head_dim), or,
    unpadded, a view of wkv_b's output, the head's non-rotary key beside its value."""
    if model.value_dim != model.head_dim:
        return model.head_dim
    return model.head_dim - model.qk_rope_head_dim + model.value_dim


def _context_parallel_kv(model: ModelSpec, b: int, s: int, tp: int, cp: int, dtype_bytes: int = BF16) -> dict:
    """What SDPA saves of a context-parallel attention core (executor/torch_backend/context_parallel.py
    `ContextParallelAttention.forward`): K and V of all cp * s tokens, gathered (`_GatherSequence`
    saves nothing) and repeated to the rank's query heads (`repeat_kv`; at num_kv_heads == num_heads
    the gathered tensor itself); and the causal mask, this rank's s queries by every key, turned from
    bool into the compute dtype (aten attention.cpp `convert_boolean_attn_mask`) and broadcast over
    batch and heads. (On CUDA the efficient-attention kernel pads the mask's key dimension to a
    multiple of 16: no change at the sequence lengths plans use.)"""
    gathered_tokens = b * s * cp
    v_width = model.q_size if model.is_mla else model.attn_out_size   # MLA's values padded to head_dim
    return {"k": dtype_bytes * gathered_tokens * model.q_size / tp,
            "v": dtype_bytes * gathered_tokens * v_width / tp,
            "cp_mask": dtype_bytes * s * (s * cp)}


def selective_layer_saved(model: ModelSpec, b: int, s: int, tp: int, sp: bool, r: EagerRecipe) -> dict:
    """The attention core checkpointed (executor/torch_backend/parallelize.py apply_recompute): its
    inputs q, k, v are kept before any gather or repeat; the gathered or repeated K/V, the CP mask and
    the log-sum-exp are not."""
    parts = layer_saved(model, b, s, tp, sp, r)
    tokens = b * s
    if model.is_mla:  # the core's q, k and v as they enter it; its (padded) output not kept
        k_width, v_width = model.q_size, model.num_heads * _mla_value_storage(model)
        parts.pop("core_out", None)
    else:
        k_width, v_width = model.kv_size, model.v_size
    parts["k"], parts["v"] = (r.compute_bytes * tokens * k_width / tp,
                              r.compute_bytes * tokens * v_width / tp)
    del parts["softmax_lse"]
    parts.pop("cp_mask", None)
    return parts


def full_layer_saved(model: ModelSpec, b: int, s: int, tp: int, sp: bool, r: EagerRecipe) -> dict:
    """A checkpointed block keeps only its input (the residual stream)."""
    return {"layer_input": r.residual_bytes * b * s * model.hidden_size / (tp if sp else 1)}


def embedding_saved(model: ModelSpec, b: int, s: int) -> dict:
    """The first stage: token ids for the embedding's backward, positions for learned ones."""
    parts = {"token_ids": INT64 * b * s}
    if model.position == "learned":
        parts["positions"] = INT64 * s
    return parts


def head_saved(model: ModelSpec, b: int, s: int, tp: int, sp: bool, r: EagerRecipe) -> dict:
    """The last stage: final norm, then the head's input and either the fused loss's labels and
    log-sum-exp, or log_softmax's fp32 output with nll_loss's labels and total weight."""
    tokens, outside = b * s, (tp if sp else 1)
    parts = _norm(model, tokens, outside, r, "final_norm")
    if r.chunked_loss:
        parts["head_input"] = r.residual_bytes * tokens * model.hidden_size   # the norm's output
        parts["labels"] = INT64 * tokens
        parts["logsumexp"] = FP32 * tokens
    else:
        parts["output_input_cast"] = r.compute_bytes * tokens * model.hidden_size
        parts["log_softmax"] = FP32 * tokens * model.vocab_size
        parts["labels"] = INT64 * tokens               # nll_loss keeps its target ...
        parts["loss_total_weight"] = FP32              # ... and the fp32 count it divided by
    return parts


def _local_vocab(model: ModelSpec, r: EagerRecipe) -> int:
    """The fused loss's head rows on one rank: ceil(V / tp) (DTensor Shard(0))."""
    return -(-model.vocab_size // r.vocab_shards)


def _chunk_logits(model: ModelSpec, tokens: int, r: EagerRecipe) -> int:
    """Elements of one chunk's logits: executor/torch_backend/train.py kernels_for's default chunk
    (CHUNK_LOGIT_BYTES of fp32 over the rank's vocabulary rows)."""
    vocab = _local_vocab(model, r)
    return min(tokens, max(1, CHUNK_LOGIT_BYTES // (FP32 * vocab))) * vocab


def loss_backward_working(model: ModelSpec, b: int, s: int, r: EagerRecipe) -> float:
    """Backward of the loss. Fused: the head input's gradient, the fp32 head-weight gradient it
    accumulates over chunks with each chunk's own gradient and that gradient's fp32 copy, and one
    chunk's fp32 softmax (and tanh, soft-capped) and its compute-dtype copy (executor/loss.py
    `_ChunkedLinearCrossEntropy.backward`). Whole logits:
    nll_loss's fp32 gradient of the log-probabilities and log_softmax's of the logits, alive with the
    saved log_softmax output."""
    tokens = b * s
    if r.chunked_loss:
        chunk_bytes = FP32 + r.residual_bytes + (FP32 if r.softcap else 0)
        # `grad_weight += (grad_logits.t() @ h).float()`: each chunk's head-weight gradient in the head
        # input's dtype and its fp32 copy (none when that dtype is fp32) live beside the accumulator
        # (the H200 allocator history, cost_model/data/h100_runs/2026-11-28: 1.47 GiB at V = 128256).
        chunk_weight_grad = r.residual_bytes + (FP32 if r.residual_bytes != FP32 else 0)
        head_rows = _local_vocab(model, r) * model.hidden_size
        return (r.residual_bytes * tokens * model.hidden_size + (FP32 + chunk_weight_grad) * head_rows
                + chunk_bytes * _chunk_logits(model, tokens, r))
    return 2 * FP32 * tokens * model.vocab_size


def largest_transient_block(model: ModelSpec, b: int, s: int, r: EagerRecipe) -> float:
    """The largest single allocation of a step: one fp32 (tokens x vocab) tensor, or with the fused
    loss the larger of a chunk's fp32 logits and the fp32 head-weight gradient (the rank's rows)."""
    if r.chunked_loss:
        return FP32 * max(_chunk_logits(model, b * s, r), _local_vocab(model, r) * model.hidden_size)
    return FP32 * b * s * model.vocab_size
