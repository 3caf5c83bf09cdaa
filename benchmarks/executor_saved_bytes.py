"""Bytes autograd saves for the backward of one micro-batch, per kernel choice of the executor's
model, measured on CPU with saved-tensor hooks (executor/saved_bytes.py), in bf16 weights and
activations as on a GPU with FSDP2 mixed precision (or fp32: `--dtype fp32`).

    python benchmarks/executor_saved_bytes.py --config CONFIG_DIR --layers 2 --seq-len 512

A real forward at the config's widths (hidden size, heads, vocabulary), with fewer layers and tokens
than a GPU step so it fits a laptop: the saved bytes are a sum over layers plus the head and the
loss, each proportional to the micro-batch's tokens, so the figures scale linearly to the full
model and shape (the script prints that extrapolation too, labelled as such).
"""
from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", required=True, help="Hugging Face config.json or its folder")
    parser.add_argument("--layers", type=int, default=1, help="layers to build (default 1)")
    parser.add_argument("--seq-len", type=int, default=64)
    parser.add_argument("--micro-batch", type=int, default=1)
    parser.add_argument("--dtype", default="bf16", choices=("bf16", "fp32"),
                        help="weights and activations (bf16 as on a GPU; fp32 where a CPU's bf16 matmuls are slow)")
    parser.add_argument("--scale-to", default="", metavar="MBS,SEQ",
                        help="also print the figures scaled to the full model at this micro-batch and length")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    import torch

    from autoplan.inputs.hf_config import load_hf_config
    from executor.loss import auto_chunk_tokens
    from executor.model import Kernels, build_model, rope_cache
    from executor.saved_bytes import saved_bytes

    full = load_hf_config(args.config)
    dtype = {"bf16": torch.bfloat16, "fp32": torch.float32}[args.dtype]
    spec = dataclasses.replace(full, num_layers=args.layers)
    torch.manual_seed(0)
    tokens = torch.randint(0, spec.vocab_size, (args.micro_batch, args.seq_len))
    chunk = auto_chunk_tokens(spec.vocab_size)
    variants = {
        "all off": Kernels(native_gqa=False, rope_in_compute_dtype=False, loss_chunk_tokens=0),
        "native GQA": Kernels(native_gqa=True, rope_in_compute_dtype=False, loss_chunk_tokens=0),
        "RoPE in bf16": Kernels(native_gqa=False, rope_in_compute_dtype=True, loss_chunk_tokens=0),
        f"chunked loss ({chunk} tokens)": Kernels(native_gqa=False, rope_in_compute_dtype=False, loss_chunk_tokens=chunk),
        "all on": Kernels(loss_chunk_tokens=chunk),
    }
    scale = 1.0
    if args.scale_to:
        mbs, seq = (int(x) for x in args.scale_to.split(","))
        scale = (mbs * seq) / (args.micro_batch * args.seq_len)
    print(f"{full.name}: {args.layers} of {full.num_layers} layers, micro-batch {args.micro_batch} x {args.seq_len} "
          f"tokens, {args.dtype} weights and activations, CPU. Saved-for-backward bytes (distinct storages, parameters "
          f"and buffers excluded), measured at 0 and {args.layers} layers:")
    print(f"  {'variant':<28} {'measured':>12} {'per layer':>11} {'head+loss':>11}"
          + (f" {'scaled GiB':>11}" if args.scale_to else ""))

    def measure(kernels, num_layers: int) -> int:
        # Built on meta in bf16 and given uninitialized storage: the values do not change what is
        # saved, and initializing a large vocabulary's embedding on a CPU takes long.
        torch.set_default_dtype(dtype)
        try:
            model = build_model(dataclasses.replace(full, num_layers=num_layers), "meta", kernels)
        finally:
            torch.set_default_dtype(torch.float32)
        model.to_empty(device="cpu")
        for param in model.parameters():
            param.data.normal_(0.0, 0.02)  # finite values (uninitialized bf16 memory may hold NaNs)
        if model.rope is not None:
            model.rope = rope_cache(full.head_dim, full.max_seq_len)
        held = list(model.parameters()) + list(model.buffers())  # held anyway (RoPE rows are views of a buffer)
        _, saved = saved_bytes(lambda: model(tokens, labels=tokens.roll(-1, 1)), held)
        return saved

    for name, kernels in variants.items():
        head, total = measure(kernels, 0), measure(kernels, args.layers)
        layer = (total - head) / args.layers
        line = f"  {name:<28} {total / 2**20:>8.1f} MiB {layer / 2**20:>7.1f} MiB {head / 2**20:>7.1f} MiB"
        if args.scale_to:
            line += f" {(head + layer * full.num_layers) * scale / 2**30:>11.2f}"
        print(line)
    if args.scale_to:
        print(f"  scaled GiB: {full.num_layers} layers at {args.scale_to.replace(',', ' x ')} tokens, a linear "
              "extrapolation of the measured terms (every term is proportional to the tokens), not a measurement")
    return 0


if __name__ == "__main__":
    sys.exit(main())
