"""Build the model of `autoplan export --to megatron` commands with megatron-core 0.16.1 on the CPU.

`python tests/megatron_core_build.py EXPORTS.json`: EXPORTS.json is a list of exported command
texts (tp = pp = 1), or of {"accepts": text, "num_gpus": n} for the flag and validate_args checks of
tests/framework_acceptance.py alone (any plan); the last line printed is a JSON list with one verdict
per export: {"error": "" or megatron-core's complaint, "params": parameters of the GPTModel built,
"layers": its transformer layers, "moe_layers": those whose MLP is a MoELayer, "padded_vocab": its
embedding rows, "facts": what model_facts reads off it, "version": the megatron-core that ran}. The
same script runs megatron-core 0.19.2 (tests/test_megatron_core_019.py) with it first on PYTHONPATH.
tests/test_export_engines.py runs it in a subprocess, so the process group it opens stays there.

What Megatron-LM's pretrain_gpt.py does with those flags, step by step (core_v0.16.1):
- parallel_state.initialize_model_parallel(1, 1) on a one-rank gloo group;
- the TransformerConfig core_transformer_config_from_args builds (tests/framework_acceptance.py
  derives its arguments from the flags), with use_cpu_initialization (a real pretrain_gpt.py flag);
- the layer spec of gpt_builders.py for --transformer-impl local (no Transformer Engine):
  get_gpt_decoder_block_spec with --num-experts, else get_gpt_layer_local_spec;
- the vocabulary NullTokenizer makes of --vocab-size (one end-of-document id more), padded to a
  multiple of 128 * tp (_vocab_size_with_padding, --make-vocab-size-divisible-by's default);
- GPTModel(config, spec, vocab_size, max_sequence_length, share_embeddings_and_output_weights,
  position_embedding_type, rotary_percent).

Where megatron-core 0.16.1 stops without CUDA and Transformer Engine, and what is done instead
(only for multi-latent attention; every other family builds as released):
1. MLASelfAttention builds YarnRotaryEmbedding without use_cpu_initialization
   (multi_latent_attention.py line 138), which calls torch.cuda.current_device()
   (yarn_rotary_pos_embedding.py lines 76 and 122): "Found no NVIDIA driver on your system".
   torch.cuda.current_device answers "cpu" for the build; the module holds buffers, no parameters.
2. The local spec's core attention is DotProductAttention, which MLASelfAttention passes k_channels
   and v_channels (multi_latent_attention.py line 155): "DotProductAttention.__init__() got an
   unexpected keyword argument 'k_channels'". A subclass drops the two; it holds no parameters.
3. megatron.core.extensions.transformer_engine imports without Transformer Engine, so HAVE_TE is
   True while TELinear is None: "isinstance() arg 2 must be a type" (multi_latent_attention.py
   line 185). HAVE_TE is set False in that module, as it would be without the extension.
"""
from __future__ import annotations

import contextlib
import json
import os
import sys
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.framework_acceptance

MAKE_VOCAB_SIZE_DIVISIBLE_BY = 128
"""Megatron-LM's default --make-vocab-size-divisible-by; the export does not set it."""


def padded_vocab(vocab_size_flag: int, tp: int) -> int:
    """NullTokenizer's vocabulary (--vocab-size plus its end-of-document id), padded as Megatron-LM's
    _vocab_size_with_padding pads it."""
    multiple = MAKE_VOCAB_SIZE_DIVISIBLE_BY * tp
    return -(-(vocab_size_flag + 1) // multiple) * multiple


def build(text: str) -> dict:
    import megatron.core.utils as mcore_utils
    import torch
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_decoder_block_spec, get_gpt_layer_local_spec
    from megatron.core.transformer.moe.moe_layer import MoELayer
    from megatron.core.transformer.transformer_config import MLATransformerConfig, TransformerConfig
    from packaging.version import Version

    from tests import framework_acceptance as fa

    _, a = fa.megatron_command(text)
    assert a.get("--tensor-model-parallel-size", "1") == "1" and a.get("--pipeline-model-parallel-size", "1") == "1"
    mla = "--multi-latent-attention" in a
    kwargs = fa.transformer_config_kwargs(a, 1, 1, 1, 1)
    # gradient_accumulation_fusion needs APEX's CUDA kernel; pretrain_gpt.py turns it off without it.
    # perform_initialization=False: the weights' values do not matter here, their shapes do.
    kwargs.update(use_cpu_initialization=True, perform_initialization=False, gradient_accumulation_fusion=False)
    mcore_utils.get_te_version = lambda: Version("2.9.0")  # as megatron_accepts does: TE is CUDA-only
    config = (MLATransformerConfig if mla else TransformerConfig)(**kwargs)
    if "--num-experts" in a:
        spec = get_gpt_decoder_block_spec(config, use_transformer_engine=False, normalization=a.get("--normalization"))
    else:
        spec = get_gpt_layer_local_spec(None, False, "--qk-layernorm" in a, mla, normalization=a.get("--normalization"))
    vocab = padded_vocab(int(a["--vocab-size"]), 1)
    with _mla_without_cuda(spec) if mla else contextlib.nullcontext():
        model = GPTModel(config=config, transformer_layer_spec=spec, vocab_size=vocab,
                         max_sequence_length=int(a["--max-position-embeddings"]),
                         share_embeddings_and_output_weights="--untie-embeddings-and-output-weights" not in a,
                         position_embedding_type=a.get("--position-embedding-type", "learned_absolute"),
                         rotary_percent=float(a.get("--rotary-percent", 1.0)),
                         # pretrain_gpt.py's gpt_builder passes these three from the args (core_v0.16.1)
                         rotary_base=int(a.get("--rotary-base", 10000)), rope_scaling="--use-rope-scaling" in a,
                         rope_scaling_factor=float(a.get("--rope-scaling-factor", 8.0)))
    layers = list(model.decoder.layers)
    return {"error": "", "params": sum(p.numel() for p in model.parameters()), "layers": len(layers),
            "moe_layers": sum(isinstance(layer.mlp, MoELayer) for layer in layers), "padded_vocab": vocab,
            "dtype": str(next(model.parameters()).dtype).replace("torch.", ""), "facts": model_facts(model, layers)}


def model_facts(model, layers) -> dict:
    """The architecture of the GPTModel megatron-core built, read off its modules (the names
    tests/test_export_fidelity.py compares with the model's config): widths from weight shapes, the
    RoPE base and scaling from the rotary embedding's inverse frequencies, the norms' epsilons."""
    import torch
    from megatron.core.transformer.moe.moe_layer import MoELayer

    config, attention = model.config, layers[0].self_attention
    norms = [m for m in model.modules() if type(m).__name__ in ("RMSNorm", "LayerNorm", "FusedLayerNorm",
                                                                 "WrappedTorchNorm", "TENorm")]
    dense = next((layer.mlp for layer in layers if not isinstance(layer.mlp, MoELayer)), None)
    moe = next((layer.mlp for layer in layers if isinstance(layer.mlp, MoELayer)), None)
    gated = 2 if config.gated_linear_unit else 1
    facts = {
        "hidden": config.hidden_size, "heads": config.num_attention_heads,
        "kv_heads": config.num_query_groups or config.num_attention_heads,
        "head_dim": getattr(config, "qk_head_dim", 0) + getattr(config, "qk_pos_emb_head_dim", 0)
        if config.multi_latent_attention else config.kv_channels,
        "ffn": dense.linear_fc1.weight.shape[0] // gated if dense is not None else 0,
        "vocab_rows": model.embedding.word_embeddings.weight.shape[0],
        "tied": bool(model.share_embeddings_and_output_weights),
        "norm": sorted({"layernorm" if "LayerNorm" in type(m).__name__ or isinstance(getattr(m, "bias", None),
                        torch.Tensor) else "rmsnorm" for m in norms}),
        "norm_eps": sorted({float(getattr(m, "eps", getattr(m, "epsilon", -1))) for m in norms}),
        "activation": ("swiglu" if config.gated_linear_unit else "gelu")
        if config.activation_func.__name__ in ("silu", "gelu") else config.activation_func.__name__,
        "qkv_bias": any(name.endswith("bias") and "proj" not in name and "linear_qkv" in name
                        for name, _ in attention.named_parameters()),
        "linear_bias": bool(config.add_bias_linear),
        "qk_norm": type(getattr(attention, "q_layernorm", None)).__name__ not in ("NoneType", "IdentityOp"),
    }
    rotary = getattr(model, "rotary_pos_emb", None) or getattr(attention, "rotary_pos_emb", None)
    if hasattr(rotary, "inv_freq_extra"):  # YaRN (yarn_rotary_pos_embedding.py lines 79-86): unscaled / divided
        inv = rotary.inv_freq_extra.double()
        facts["rope_scaling_factor"] = round(float(inv[0] / rotary.inv_freq_inter.double()[0]), 3)
    elif rotary is not None:
        # inv_freq[k] = base^(-2k/dim), Llama 3.1's scaling (rotary_pos_embedding.py line 84) divides the
        # long wavelengths by the factor and leaves the short ones (the second) as they are
        inv = rotary.inv_freq.double()
        dim = 2 * inv.numel()
        unscaled_last = float((1 / inv[1]) ** (dim / 2)) ** (-(dim - 2) / dim)
        facts["rope_scaling_factor"] = round(unscaled_last / float(inv[-1]), 3)
    if rotary is not None:
        facts["rope_theta"] = round(float((1 / inv[1]) ** inv.numel()))
    if config.multi_latent_attention:
        facts.update(q_lora_rank=config.q_lora_rank or 0, kv_lora_rank=config.kv_lora_rank,
                     qk_rope_head_dim=config.qk_pos_emb_head_dim, v_head_dim=config.v_head_dim)
    if moe is not None:
        shared = getattr(moe, "shared_experts", None)
        facts.update(experts=config.num_moe_experts, top_k=config.moe_router_topk,
                     expert_ffn=config.moe_ffn_hidden_size, router_score=config.moe_router_score_function,
                     shared_ffn=shared.linear_fc1.weight.shape[0] // gated if shared is not None else 0)
    return facts


@contextlib.contextmanager
def _mla_without_cuda(spec):
    """The three stand-ins of the module docstring, none holding a parameter, for one build."""
    import megatron.core.transformer.multi_latent_attention as mla_module
    import torch
    from megatron.core.transformer.dot_product_attention import DotProductAttention

    class MLADotProductAttention(DotProductAttention):
        def __init__(self, *args, k_channels=None, v_channels=None, **kwargs):
            super().__init__(*args, **kwargs)

    for layer_spec in getattr(spec, "layer_specs", [spec]):
        layer_spec.submodules.self_attention.submodules.core_attention = MLADotProductAttention
    saved = torch.cuda.current_device, mla_module.HAVE_TE
    torch.cuda.current_device, mla_module.HAVE_TE = (lambda: "cpu"), False
    try:
        yield
    finally:
        torch.cuda.current_device, mla_module.HAVE_TE = saved


def main(path: str) -> None:
    import torch.distributed as dist

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29517")
    dist.init_process_group("gloo", rank=0, world_size=1)
    from megatron.core import parallel_state

    parallel_state.initialize_model_parallel(tensor_model_parallel_size=1, pipeline_model_parallel_size=1)
    verdicts = []
    for text in json.loads(Path(path).read_text()):
        if isinstance(text, dict):  # {"accepts": text, "num_gpus": n}: the flag and validate_args checks only
            from tests import framework_acceptance as fa

            verdicts.append({"error": fa.megatron_accepts(text["accepts"], text["num_gpus"])})
            continue
        try:
            verdicts.append(build(text))
        except Exception as exc:  # megatron-core's complaint, whatever its type, is the verdict
            where = traceback.extract_tb(exc.__traceback__)[-1]
            verdicts.append({"error": f"{type(exc).__name__}: {str(exc).strip().splitlines()[0]} "
                                      f"({where.filename.split('site-packages/')[-1]} line {where.lineno})"})
    parallel_state.destroy_model_parallel()
    dist.destroy_process_group()
    import megatron.core

    print(json.dumps([{**verdict, "version": megatron.core.__version__} for verdict in verdicts]))


if __name__ == "__main__":
    main(sys.argv[1])
