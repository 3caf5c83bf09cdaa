"""Per-GPU memory terms of one pipeline stage, in bytes. Each term names its source.

- Model states: what the framework keeps per parameter (`Framework.states`; e.g. Megatron: bf16
  weights 2 B, fp32 main grads 4 B, fp32 master + Adam moments 12 B, ZeRO, Rajbhandari et al. 2019,
  arXiv 1910.02054, section 3), each sharded from its ZeRO stage on over the data-parallel group
  (dp x cp ranks that hold replicas) -- never over all GPUs.
- Activations (Korthikanti et al. 2022, arXiv 2205.05198, section 4, Table 2): per layer and
  micro-batch s*b*h*(34 + 5*a*s/h) bytes for GPT (MHA, GeLU, ffn = 4h, dropout), written here as
  named tensors so GQA, SwiGLU and other widths follow. With flash attention (the default) the
  5*a*s^2*b score/softmax/dropout term is never stored; only the softmax statistics (fp32 per query
  and head) are. TP splits the tensors inside the TP region; sequence parallelism splits the rest.
"""
from __future__ import annotations

from autoplan.specs import ModelSpec

BYTES_WEIGHT = 2        # bf16 / fp16 weights
BYTES_GRAD = 4          # fp32 gradient accumulation
BYTES_ACT = 2           # bf16 activations
BYTES_FP8 = 1           # an fp8 tensor (e4m3 / e5m2)
BYTES_LOGITS = 6        # bf16 logits + their fp32 copy for the cross-entropy (Korthikanti sec. 4.3: 4sbv/t)
BYTES_LOGITS_UNFUSED = 10  # + the fp32 gradient of the logits an unfused cross-entropy materializes


def mlp_activation_elems(model: ModelSpec, moe: bool, routed_rows: float = 1.0) -> float:
    """Elements per token around the MLP activation: 3f gated (gate, up, product), 2f GeLU (in,
    out); a MoE layer's token passes its k routed experts (`routed_rows` times as many rows where the
    experts run padded, activation_bytes_per_layer) and the shared experts."""
    per_width = 2 if model.mlp == "gelu" else 3
    if not moe:
        return per_width * model.ffn_hidden_size
    return per_width * (model.expert_ffn_size * model.num_experts_per_token * routed_rows
                        + model.shared_expert_ffn_size)


def activation_bytes_per_layer(model: ModelSpec, micro_batch: int, seq_len: int, tp: int,
                               sequence_parallel: bool, flash_attention: bool = True,
                               dropout: bool = False, moe: bool | None = None, etp: int = 0,
                               fp8_inputs: bool = False, weighted_outputs_saved: bool = False,
                               padded_rows: float = 1.0) -> dict:
    """Stored activations of one layer for one micro-batch (seq_len already divided by cp).

    Returns the named parts (bytes). `dropout=True` with a GPT shape reproduces Korthikanti's
    34*s*b*h + 5*a*s^2*b exactly: norms 4, QKV input 2, Q/K/V 6, projection input 2, attention
    dropout mask 1, MLP input 2, GeLU in/out 16, MLP dropout mask 1. `moe` picks the layer kind
    (default: the model's MoE layer if it has any). A sliding window stores the same per-token
    tensors as global attention (flash attention keeps K/V per token, not per query-key pair), so
    the window changes FLOPs and the CP exchange, not these bytes.

    `fp8_inputs` (Framework.fp8_linear_inputs_saved_in_fp8, fp8 plans): the dense linears keep their
    inputs as fp8, 1 B per element: the two norms' outputs (QKV and MLP inputs) and the MLP's last input
    (the activation's output: 1 of 3 gated widths, 1 of 2 GeLU ones); the projection keeps an fp8 copy
    beside the bf16 output the attention core keeps for its own backward (2 + 1 B). A MoE layer's
    experts keep bf16-sized inputs (Transformer Engine's grouped linear saves row- and column-wise fp8).
    `weighted_outputs_saved` (Framework.moe_weighted_outputs_saved): a MoE layer also keeps its experts'
    outputs, weighed by the router's probabilities in the unpermutation.
    `padded_rows` (Framework.moe_padded_expert_gemm): the routed experts' inputs and activations are
    (local experts, busiest expert's tokens, width) tensors, this many times the routed copies
    (KempnerForge kempnerforge/model/moe.py @abbbac33 grouped_expert_forward_packed lines 124-139:
    x_padded = new_zeros(num_experts, max_tokens, dim), the grouped GEMMs' (E, M, H) outputs, which the
    grouped GEMMs and the SwiGLU keep for backward).
    """
    sb = micro_batch * seq_len
    h = model.hidden_size
    moe = model.is_moe if moe is None else moe
    outside = tp if sequence_parallel else 1            # tensors outside the TP region
    linear_in = BYTES_FP8 if fp8_inputs else BYTES_ACT        # a dense linear's saved input
    act_elems = mlp_activation_elems(model, moe, padded_rows)
    # The MLP's last linear takes the activation's output: 1 of its 3 gated widths, 1 of 2 GeLU ones.
    last_in = 0.0 if moe else act_elems / (2 if model.mlp == "gelu" else 3)
    parts = {
        "norm_inputs": model.num_layer_norms * BYTES_ACT * sb * h / outside,
        "qkv_input": linear_in * sb * h / outside,
        "qkv": BYTES_ACT * sb * (model.q_size + model.kv_size + model.v_size) / tp,
        "attn_out_input": (BYTES_ACT + (BYTES_FP8 if fp8_inputs else 0)) * sb * model.attn_out_size / tp,
        "mlp_input": linear_in * sb * h / outside,
        "mlp_activation": (BYTES_ACT * (act_elems - last_in) + linear_in * last_in) * sb / tp,
    }
    if moe:
        # Megatron-Core's grouped experts save their input, the routed token copies (TEGroupedMLP's
        # GroupedLinear fc1 keeps it for the weight gradient): tokens*k*etp/tp rows of h per rank
        # (cost_model.flops.layer_gemms), etp 0 = tp. The router keeps its fp32 scores over the
        # experts for the softmax backward, on the rank's sequence share (router.py, moe_router_dtype).
        etp = etp or tp
        parts["expert_inputs"] = BYTES_ACT * sb * model.num_experts_per_token * h * etp / tp * padded_rows
        if weighted_outputs_saved:  # Framework.moe_weighted_outputs_saved: the experts' outputs, the same rows
            parts["expert_outputs"] = parts["expert_inputs"]
        parts["router_scores"] = 4.0 * sb * model.num_experts / outside
    if model.qk_norm:  # the un-normed q and k, inputs of their norms
        parts["qk_norm_inputs"] = BYTES_ACT * sb * (model.q_size + model.kv_size) / tp
    if model.is_mla:  # the compressed latents, inputs of the up-projections (unsplit over tp)
        parts["mla_latents"] = BYTES_ACT * sb * (model.q_lora_rank + model.kv_lora_rank + model.qk_rope_head_dim)
    if dropout:
        parts["dropout_masks"] = 2 * sb * h / outside    # 1 byte per element, two masks
    a_local = model.num_heads / tp
    if flash_attention:
        parts["softmax_stats"] = 4.0 * sb * a_local      # fp32 log-sum-exp per query and head
    else:
        # softmax output 2 B + dropout mask 1 B + dropout output 2 B per score: 5*a*s^2*b
        # (soft-capping keeps the capped scores' input too: 2 B more per score)
        per_score = (5 if dropout else 2) + (2 if model.attn_logit_softcap else 0)
        parts["attention_scores"] = per_score * a_local * sb * seq_len
    return parts


def selective_kept_bytes(parts: dict, policy: str, model: ModelSpec, micro_batch: int, seq_len: int,
                         tp: int, sequence_parallel: bool, moe: bool | None = None, modules: tuple = ()) -> float:
    """Stored bytes of a layer under selective recompute.

    "attention" (Megatron, Korthikanti 2022 sec. 5): the attention core is recomputed, so its
    s x s scores are not stored (nothing changes under flash attention, which never stores them).
    "ops" (torchtitan 0.3.0's SelectiveAC): `ops_saved_elems`.
    `modules` (ParallelPlan.recompute_modules, Megatron-Core's names) replaces the policy: `module_freed_bytes`.
    """
    if modules:
        return sum(parts.values()) - sum(module_freed_bytes(parts, model, modules, model.is_moe if moe is None else moe))
    if policy == "ops":
        return BYTES_ACT * micro_batch * seq_len * ops_saved_elems(model, tp, sequence_parallel, moe) + \
            parts.get("softmax_stats", 0.0)
    return sum(v for k, v in parts.items() if k != "attention_scores")


def module_freed_bytes(parts: dict, model: ModelSpec, modules: tuple, moe: bool) -> list:
    """Bytes of `activation_bytes_per_layer` parts one layer stops storing when Megatron-Core recomputes
    `modules` (--recompute-modules; megatron/core/transformer/transformer_config.py core_v0.16.1 lines
    411-424): core_attn its s x s scores (nothing under flash attention); layernorm the two norms'
    outputs, the QKV and MLP inputs (output-discarding checkpoint); moe_act the activation's output
    (the gated product, 1 of 3 stored widths; GeLU's output, 1 of 2) of the routed experts; mlp (dense
    layers) and moe (MoE layers) everything inside the MLP block but its input; shared_experts the
    shared experts' share of the MLP activations; mla_up_proj the up-projected q, k, v."""
    act = parts.get("mlp_activation", 0.0)
    routed = model.expert_ffn_size * model.num_experts_per_token if moe else 0
    shared = model.shared_expert_ffn_size if moe else 0
    routed_share = routed / (routed + shared) if routed else 0.0
    out_share = 1 / 2 if model.mlp == "gelu" else 1 / 3
    freed = []
    if "core_attn" in modules:
        freed.append(parts.get("attention_scores", 0.0))
    if "layernorm" in modules:
        freed.append(parts["qkv_input"] + parts["mlp_input"])
    if "mla_up_proj" in modules and model.is_mla:
        freed.append(parts["qkv"])
    if moe and "moe" in modules:
        # The whole MoE block: routed and shared experts, their inputs and the router's scores.
        freed.append(act + parts.get("expert_inputs", 0.0) + parts.get("expert_outputs", 0.0)
                     + parts.get("router_scores", 0.0))
    elif moe:
        if "moe_act" in modules:
            freed.append(out_share * routed_share * act)
        if "shared_experts" in modules:
            freed.append((1.0 - routed_share) * act)
    elif "mlp" in modules:
        freed.append(act)
    return freed


def ops_saved_elems(model: ModelSpec, tp: int, sequence_parallel: bool, moe: bool | None = None) -> float:
    """Elements per token one layer keeps under torchtitan 0.3.0's op-level selective checkpointing.

    Its policy (distributed/activation_checkpoint.py lines 243-276, SelectiveAC._wrap_block) keeps the
    outputs of the compute ops it lists (lines 40-58 and torch's compute_intensive_ops: mm, the flash and
    flex attention ops) and of reduce_scatter / all_to_all (lines 61-70), except every second mm of the
    block, counted from one (the 2nd, 4th, ... are recomputed); everything else is recomputed from the
    block's input, which the checkpoint keeps. A dense llama3/qwen3 block (fused wqkv: llama3/__init__.py
    line 77) runs wqkv, wo, w1, w3, w2 (feed_forward.py line 54): traced on the CPU through 0.3.0's own
    policy (tests/torchtitan03_check.py sac_trace), it keeps wqkv's, w1's and w2's outputs and the
    attention's. Under tp > 1, w2 is row-parallel: its mm yields the whole-width partial sums on each
    rank (h, not h/tp), and with sequence parallelism the two reduce-scatters after wo and w2 keep their
    h/tp outputs (read from the code; the trace runs tp = 1). (torchtitan 0.2.0's llama3 ran wq, wk, wv apart, models/llama3/model/model.py line 224,
    so the same policy kept wq's and wv's outputs, not wk's: the published torchtitan rows, made with it,
    are counted with 0.3.0's block, k's width more: 1024 of 32768 elements for Llama-3-8B.)
    Mixture-of-experts and MLA layers run other matmuls (grouped expert GEMMs, the latent projections):
    for them half of every matmul output is kept, the policy's every-other rule on average (not traced)."""
    outside = tp if sequence_parallel else 1
    moe = model.is_moe if moe is None else moe
    gated = model.mlp != "gelu"
    qkv = (model.q_size + model.kv_size + model.v_size) / tp
    if moe or model.is_mla:
        mlp_in = mlp_activation_elems(model, moe) * (2 / 3 if gated else 1 / 2)   # the first matmuls' outputs
        matmul_outputs = qkv + mlp_in / tp + 2 * model.hidden_size / outside
        return model.hidden_size / outside + 0.5 * matmul_outputs + model.attn_out_size / tp
    kept = model.hidden_size / outside + qkv + model.attn_out_size / tp + model.ffn_hidden_size / tp
    if gated:  # the 5th mm, w2 (the GeLU MLP's down projection is the 4th: recomputed)
        kept += model.hidden_size
    if tp > 1 and sequence_parallel:
        kept += 2 * model.hidden_size / tp
    return kept


def full_recompute_layer_bytes(model: ModelSpec, micro_batch: int, seq_len: int, tp: int,
                               sequence_parallel: bool) -> float:
    """A fully recomputed layer keeps only its input: 2*s*b*h (/tp with SP), Korthikanti sec. 5."""
    return BYTES_ACT * micro_batch * seq_len * model.hidden_size / (tp if sequence_parallel else 1)


def in_flight_microbatches(pp: int, vpp: int, num_microbatches: int, stage: int,
                           chunk_layers: tuple = ()) -> float:
    """Micro-batches' worth of a rank's activations (all its layers) held at its peak under 1F1B.

    Plain 1F1B: rank i (0-based) holds pp - i micro-batches in flight (Narayanan 2021 section
    2.2.1), never more than exist. Interleaved 1F1B runs (micro-batch, chunk) units, chunk
    (k // pp) % vpp for the k-th forward, and rank i runs 2*(pp-1-i) + (vpp-1)*pp warm-up forwards
    before its first backward (Megatron-LM's interleaved schedule, num_warmup_microbatches;
    torch.distributed.pipelining ScheduleInterleaved1F1B, get_rank_warmup_ops), so it holds one
    more unit than that, at most every unit of the step. The held layers over the rank's layers is
    the answer; `chunk_layers` (the rank's chunk sizes, ParallelPlan.chunk_num_layers) weighs uneven
    chunks, equal ones when left out. For rank 0 with equal chunks this is Korthikanti et al. 2022
    (section 4.2.3)'s pp * (1 + (pp-1)/(pp*vpp)).
    """
    if vpp == 1:
        return float(min(pp - stage, num_microbatches))
    chunks = tuple(chunk_layers) or (1,) * vpp
    units = min(num_microbatches * vpp, 2 * (pp - 1 - stage) + (vpp - 1) * pp + 1)
    rounds, rest = divmod(units, pp)          # pp consecutive units run the same chunk
    laps, partial = divmod(rounds, vpp)
    held = pp * (laps * sum(chunks) + sum(chunks[:partial])) + rest * chunks[partial]
    return held / sum(chunks)


def model_state_bytes(num_local_params: float, zero_stage: int, shard: int, states: dict) -> dict:
    """The framework's model states (`Framework.states`: name -> bytes per parameter and the ZeRO
    stage from which it is sharded) of `num_local_params` (after TP/PP/EP splits)."""
    return {name: term.bytes_per_param * num_local_params / (shard if zero_stage >= term.sharded_from_zero else 1)
            for name, term in states.items()}


def shards_weights(fw, plan) -> bool:
    """ZeRO 1/2 over weights the framework shards at that stage (its "params" state: FSDP2's sharded
    parameters, torchtitan and KempnerForge), not only their optimizer states (Megatron, DeepSpeed)."""
    params = fw.states.get("params")
    return (0 < plan.zero_stage < 3 and plan.dp * plan.cp > 1 and params is not None
            and params.sharded_from_zero <= plan.zero_stage)


def grads_accumulate_unsharded(fw, plan) -> bool:
    """Whether FSDP holds a rank's unsharded gradients across the step's micro-batches, accumulated in
    the reduce dtype (torch 2.9 distributed/fsdp/_fully_shard/_fsdp_param.py
    to_accumulated_grad_if_needed), and reduces them once: ZeRO-3 with gradient sync off until the last
    micro-batch (Framework.zero3_reduce_every_microbatch False), and ZeRO-3, or ZeRO-2 over sharded
    weights, under a pipeline (torch.distributed.pipelining keeps FSDP's sync off until the last
    backward: pipelining/stage.py backward_maybe_with_nosync)."""
    if plan.dp * plan.cp <= 1 or plan.num_microbatches == 1:
        return False
    if plan.zero_stage >= 3:
        return plan.pp > 1 or not fw.zero3_reduce_every_microbatch
    return plan.zero_stage == 2 and plan.pp > 1 and shards_weights(fw, plan)
