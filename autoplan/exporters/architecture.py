"""The architecture facts of a model beyond the Llama/GPT shape every exporter writes (head count,
widths, norm, MLP kind, position), named once so each exporter maps the ones its framework takes
and lists the rest as not mapped."""
from __future__ import annotations

from autoplan.specs import ModelSpec


def architecture_facts(model: ModelSpec) -> dict:
    """fact name -> its value in words, for every fact this model has (an empty dict for Llama)."""
    facts = {}
    if model.is_mla:
        facts["mla"] = (f"multi-head latent attention (q_lora_rank={model.q_lora_rank}, kv_lora_rank="
                        f"{model.kv_lora_rank}, qk_nope_head_dim={model.head_dim - model.qk_rope_head_dim}, "
                        f"qk_rope_head_dim={model.qk_rope_head_dim}, v_head_dim={model.value_dim})")
    elif model.v_head_dim and model.v_head_dim != model.head_dim:
        facts["v_head_dim"] = f"value heads {model.v_head_dim} wide (q/k heads {model.head_dim})"
    if model.qk_norm:
        facts["qk_norm"] = {"head": "RMSNorm on each q and k head (qk_norm='head')",
                            "full": "RMSNorm over the whole q and k projections (qk_norm='full', OLMo 2)"}[model.qk_norm]
    if model.sliding_window:
        every = model.global_attention_every
        facts["sliding_window"] = (f"sliding-window attention of {model.sliding_window} tokens"
                                   + (f", every {every}th layer global" if every else " on every layer"))
    if model.attn_logit_softcap:
        facts["attn_softcap"] = f"attention scores soft-capped at {model.attn_logit_softcap:g}"
    if model.final_logit_softcap:
        facts["final_softcap"] = f"output logits soft-capped at {model.final_logit_softcap:g}"
    if model.norm_placement != "pre":
        facts["norm_placement"] = {"post": "norms after attention and MLP inside the residual (OLMo 2)",
                                   "sandwich": "norms before and after attention and MLP (Gemma)"}[model.norm_placement]
    if model.parallel_block:
        facts["parallel_block"] = ("attention and MLP in parallel on "
                                   + ("one shared norm" if model.shared_block_norm else "two norms"))
    if model.rope_dim and model.rope_dim != model.head_dim and not model.is_mla:
        facts["partial_rotary"] = f"RoPE on {model.rope_dim} of {model.head_dim} head dims"
    if model.mlp == "geglu":
        facts["geglu"] = "GeGLU MLP (tanh-GeLU gate)"
    if model.mlp_bias and not model.linear_bias:
        facts["mlp_bias"] = "bias on the MLP layers only"
    if model.output_bias:
        facts["output_bias"] = "bias on the output layer"
    if model.is_moe and model.moe_ffn_hidden_size:
        facts["moe_ffn"] = f"experts {model.expert_ffn_size} wide (dense MLP {model.ffn_hidden_size})"
    if model.is_moe and model.shared_expert_ffn_size:
        facts["shared_experts"] = f"shared experts {model.shared_expert_ffn_size} wide in every MoE layer"
    if model.is_moe and model.num_moe_layers != model.num_layers:
        facts["moe_layers"] = (f"{model.num_moe_layers} MoE layers of {model.num_layers} (first "
                               f"{model.num_dense_layers} dense, then every {model.moe_layer_freq})")
    return facts


def unmapped_note(facts: dict, mapped: set, target: str) -> list:
    """One note naming the facts `target` takes no setting for, or none."""
    rest = [text for key, text in facts.items() if key not in mapped]
    if not rest:
        return []
    return [f"architecture not expressible in {target}; carry it in the model code: " + "; ".join(rest)]


def moe_layer_pattern(model: ModelSpec) -> str:
    """Megatron's --moe-layer-freq list expression: 1 for a MoE layer, 0 for a dense one, e.g.
    "([0]*3+[1]*58)" for DeepSeek-V3 (Megatron-LM arguments.py: a string evaluated to a list)."""
    runs: list = []
    for i in range(model.num_layers):
        bit = 1 if model.is_moe_layer(i) else 0
        if runs and runs[-1][0] == bit:
            runs[-1][1] += 1
        else:
            runs.append([bit, 1])
    return "(" + "+".join(f"[{bit}]*{n}" for bit, n in runs) + ")"
