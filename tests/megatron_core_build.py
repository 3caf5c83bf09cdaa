"""Build the model of `autoplan export --to megatron` commands with megatron-core 0.16.1 on the CPU.

`python tests/megatron_core_build.py EXPORTS.json`: EXPORTS.json is a list of exported command
texts (tp = pp = 1); the last line printed is a JSON list with one verdict per export: {"error": ""
or megatron-core's complaint, "params": parameters of the GPTModel built, "layers": its transformer
layers, "moe_layers": those whose MLP is a MoELayer, "padded_vocab": its embedding rows}.
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
                         rotary_percent=float(a.get("--rotary-percent", 1.0)))
    layers = list(model.decoder.layers)
    return {"error": "", "params": sum(p.numel() for p in model.parameters()), "layers": len(layers),
            "moe_layers": sum(isinstance(layer.mlp, MoELayer) for layer in layers), "padded_vocab": vocab,
            "dtype": str(next(model.parameters()).dtype).replace("torch.", "")}


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
        try:
            verdicts.append(build(text))
        except Exception as exc:  # megatron-core's complaint, whatever its type, is the verdict
            where = traceback.extract_tb(exc.__traceback__)[-1]
            verdicts.append({"error": f"{type(exc).__name__}: {str(exc).strip().splitlines()[0]} "
                                      f"({where.filename.split('site-packages/')[-1]} line {where.lineno})"})
    parallel_state.destroy_model_parallel()
    dist.destroy_process_group()
    print(json.dumps(verdicts))


if __name__ == "__main__":
    main(sys.argv[1])
