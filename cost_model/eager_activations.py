"""What an eager PyTorch decoder saves for backward under bf16 autocast over fp32 weights: the
activation recipe "eager-autocast" (`Framework.activation_recipe`), as autoplan's executor runs
(executor/model.py inside `torch.autocast(dtype=bfloat16)`, executor/torch_backend/train.py).

Every term is a tensor autograd keeps, named after the line that creates it, in bytes per
micro-batch of `b` sequences of `s` tokens on one GPU. tests/test_memory_counting.py counts the
executor's saved tensors (saved-tensor hooks, each storage once) and holds these sums to 3%.
Why it differs from Megatron's 34*s*b*h (Korthikanti et al. 2022, Table 2):

- The residual stream is fp32: the embedding runs outside autocast and `x + attention(...)` adds a
  bf16 branch to an fp32 tensor, so each norm saves an fp32 input (4 B per element), plus its fp32
  statistics (rstd; LayerNorm also the mean). A composite RMSNorm (torch 2.9 on CPU) also saves its
  fp32 normalized output; the fused CUDA kernel (`_fused_rms_norm`) does not (`fused_norm`).
- Autocast casts a non-leaf input once per consuming op: wq, wk and wv each save their own bf16
  copy of the norm output (3 x 2h), w1 and w3 theirs (2 x 2h).
- Grouped-query attention repeats K and V to all query heads (`repeat_kv`) before SDPA, which
  saves q, the repeated k and v, its output (also wo's input, a view) and the fp32 log-sum-exp.
- The loss runs on fp32 logits (`output(x).float()`, F.cross_entropy): log_softmax saves its fp32
  output (4 B per logit); its backward adds the fp32 gradient of that output and of the logits.
- Tensor parallelism (executor/torch_backend/parallelize.py TP_PLAN_*) splits heads and the MLP
  width; the head's logits are gathered whole (`output_layouts=Replicate`), so the vocabulary is
  never divided; with sequence parallelism the norms run on 1/tp of the sequence.
"""
from __future__ import annotations

from autoplan.specs import ModelSpec
from cost_model.memory import mlp_activation_elems

FP32, BF16, INT64 = 4, 2, 8


def _norm(model: ModelSpec, tokens: float, outside: int, fused_norm: bool, name: str) -> dict:
    """A pre-norm over the fp32 residual stream: its input, its statistics, and (composite RMSNorm
    only) its fp32 normalized output (torch.nn.RMSNorm / LayerNorm, executor/model.py `_norm`)."""
    stats = 2 if model.norm == "layernorm" else 1          # LayerNorm: mean + rstd; RMSNorm: rstd
    parts = {f"{name}_input": FP32 * tokens * model.hidden_size / outside,
             f"{name}_stats": FP32 * stats * tokens / outside}
    if model.norm != "layernorm" and not fused_norm:
        parts[f"{name}_output"] = FP32 * tokens * model.hidden_size / outside
    return parts


def _kv_saved_widths(model: ModelSpec) -> tuple:
    """(K, V) widths SDPA saves: repeated to every query head under GQA (`repeat_kv`)."""
    if model.num_heads > model.num_kv_heads:
        return model.q_size, model.attn_out_size
    return model.kv_size, model.v_size


def uncounted_features(model: ModelSpec) -> list[str]:
    """Block features of executor/blocks.py whose extra saved tensors this recipe does not count yet
    (tests/test_memory_counting.py covers pre-norm Llama/Qwen2/GPT-2 blocks); with them the layer
    terms are those of the plain pre-norm block."""
    features = {"qk_norm": bool(model.qk_norm), "norm_placement": model.norm_placement != "pre",
                "parallel_block": model.parallel_block, "attn_logit_softcap": bool(model.attn_logit_softcap),
                "sliding_window": bool(model.sliding_window), "moe": model.is_moe,
                # SDPA's flash kernels need one head width for q, k and v; otherwise another kernel runs
                "v_head_dim": bool(model.v_head_dim) and model.v_head_dim != model.head_dim}
    return [name for name, used in features.items() if used]


def layer_saved(model: ModelSpec, b: int, s: int, tp: int, sp: bool, fused_norm: bool = True) -> dict:
    """Tensors one TransformerBlock saves without recompute (executor/model.py)."""
    tokens, outside = b * s, (tp if sp else 1)
    h = model.hidden_size
    mlp_inputs = 1 if model.mlp == "gelu" else 2
    parts = _norm(model, tokens, outside, fused_norm, "attention_norm")
    k_width, v_width = _kv_saved_widths(model)
    parts.update({
        "qkv_input_casts": 3 * BF16 * tokens * h,                        # wq, wk, wv each cast x
        "q": BF16 * tokens * model.q_size / tp,                           # after RoPE, SDPA input
        "k": BF16 * tokens * k_width / tp,                                # repeat_kv(q, k)
        "v": BF16 * tokens * v_width / tp,                                # repeat_kv(q, v)
        "attention_out": BF16 * tokens * model.attn_out_size / tp,        # SDPA output = wo input
        "softmax_lse": FP32 * tokens * model.num_heads / tp,              # flash attention's statistics
    })
    parts.update(_norm(model, tokens, outside, fused_norm, "ffn_norm"))
    parts["mlp_input_casts"] = mlp_inputs * BF16 * tokens * h           # w1 (and w3) cast x
    # Gated (SwiGLU/GeGLU): w1 out (activation input), activation out, w3 out, their product (w2
    # input), 4 per 3 elements of mlp_activation_elems; GeLU: w1 out, gelu out. A MoE layer's
    # token passes its k routed experts and the shared ones (not counted by the test: dense only).
    elems = mlp_activation_elems(model, model.is_moe) * (4 / 3 if model.mlp != "gelu" else 1)
    parts["mlp"] = BF16 * tokens * elems / tp
    return parts


def selective_layer_saved(model: ModelSpec, b: int, s: int, tp: int, sp: bool, fused_norm: bool = True) -> dict:
    """The attention core checkpointed (executor/torch_backend/parallelize.py apply_recompute): its
    inputs q, k, v are kept before the repeat, the repeated K/V and the log-sum-exp are not."""
    parts = layer_saved(model, b, s, tp, sp, fused_norm)
    tokens = b * s
    parts["k"], parts["v"] = BF16 * tokens * model.kv_size / tp, BF16 * tokens * model.v_size / tp
    del parts["softmax_lse"]
    return parts


def full_layer_saved(model: ModelSpec, b: int, s: int, tp: int, sp: bool) -> dict:
    """A checkpointed block keeps only its fp32 input (the residual stream)."""
    return {"layer_input": FP32 * b * s * model.hidden_size / (tp if sp else 1)}


def embedding_saved(model: ModelSpec, b: int, s: int) -> dict:
    """The first stage: token ids for the embedding's backward, positions for learned ones."""
    parts = {"token_ids": INT64 * b * s}
    if model.position == "learned":
        parts["positions"] = INT64 * s
    return parts


def head_saved(model: ModelSpec, b: int, s: int, tp: int, sp: bool, fused_norm: bool = True) -> dict:
    """The last stage: final norm, the output projection's bf16 input, log_softmax's fp32 output."""
    tokens, outside = b * s, (tp if sp else 1)
    parts = _norm(model, tokens, outside, fused_norm, "final_norm")
    parts["output_input_cast"] = BF16 * tokens * model.hidden_size
    parts["log_softmax"] = FP32 * tokens * model.vocab_size
    return parts


def loss_backward_working(model: ModelSpec, b: int, s: int) -> float:
    """Backward of the loss: nll_loss's fp32 gradient of the log-probabilities and log_softmax's
    fp32 gradient of the logits, both alive while the saved log_softmax output still is."""
    return 2 * FP32 * b * s * model.vocab_size


def largest_transient_block(model: ModelSpec, b: int, s: int) -> float:
    """The largest single allocation of a step: one fp32 (tokens x vocab) tensor."""
    return FP32 * b * s * model.vocab_size
