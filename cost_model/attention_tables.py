"""The built-in profiles' attention tables, from kernel records measured on the GPU.

`benchmarks/kernel_rates.py` timed causal `scaled_dot_product_attention` on one H100 SXM and one H200
(cost_model/data/kernels/kernel_rates-*.json, torch 2.11, CUDA 13.0, cuDNN 9.19, 2026-11-27) over
batch x heads 8-512 and sequence lengths 1k-16k, head_dim 128, for two kernels: SDPA's flash backend
(FlashAttention-2) and its cuDNN backend (the fused attention Transformer Engine calls). What a
table of sequence length alone missed, they show:

- occupancy: a flash kernel spreads batch x heads x (seq / block) CTAs over 132 SMs, so at 8 heads
  per GPU (64 heads at TP 8) and 2k tokens FlashAttention-2 runs its forward at a third of its
  long-sequence rate;
- the kernel: cuDNN's fused attention reaches ~1.7x FlashAttention-2 at long sequences on Hopper
  (forward ~600 vs ~335 TFLOP/s, backward ~530 vs ~305), and falls further at small occupancy.

Forward rates are as timed. Backward is timed as forward + backward minus forward, with 2.5x the
forward's FLOPs (autoplan.specs.flops.ATTENTION_BACKWARD_FLOPS_RATIO). head_dim 64 is the main grid's rate times the
median d64/d128 ratio of the same kernel and pass over four shapes of the H100 variants record
(kernel_rates-h100-variants.json): FlashAttention-2 loses ~12% each way, cuDNN 26% forward and 19% backward.
Torch 2.11's own SDPA choice on Hopper is cuDNN (`torch._fused_sdp_choice` in that record, and the
`autoplan profile` sweeps' default-backend rates: 582/512 and 609/513 TFLOP/s forward/backward at 16k
on the H100 and H200), so a framework whose kernel is "sdpa" reads the cuDNN rows. Grouped-query
attention is not a dimension of the tables: in the variants record a quarter of the heads as K/V heads
leaves the forward within a few percent and slows the backward 2-25% (most at short sequences).

Beyond 16k the grid was extrapolated, and read up to 16% low at 32k-128k (the inverse-distance blend
leans on shorter sequences; one shape read 3% high). One record on the H200
(kernel_rates-h200-long.json, 2026-11-28, `--only long`) times both kernels at 32k, 64k and 128k
tokens with 8 and 32 heads: neither falls more than 9% below its 16k rate, and at 8 heads both
forwards still climb (+4% to +17%); cuDNN's forward runs at 555-598 TFLOP/s, FlashAttention-2's at
319-343. The H200 table takes those rows as timed. The H100 tables take them times the H100/H200
ratio of the same kernel, heads and pass at 16k (assumption: the ratio carries over past 16k; the two
chips have the same 132 SMs and differ in clocks under power and in HBM, which long-sequence attention
barely touches). The Ampere tables keep the 1k-16k grid: no Ampere kernel was timed past it.

Ampere has no record of ours: its tables take FlashAttention-2's own A100 figures (PUBLISHED_A100,
"flash_attention_2": forward + backward, causal, at 512-16k tokens with batch x heads = 16k tokens /
seq x 16 heads of 128), and spread each over batch x heads with the same kernel's occupancy curve
measured on the H100 at that sequence length (flash2_published_attention). Between the published
lengths the table interpolates as every table does (cost_model/tables.py, log space). The A100 runs
the figure's shape at 62-76% of the H100's rate, less at long sequences (its 108 SMs fill sooner than
the H100's 132, and its plateau is lower), so the ratio is taken per sequence length, not once.
"""
from __future__ import annotations

import json
import statistics
from functools import lru_cache
from pathlib import Path

from autoplan.specs import AttentionSample
from autoplan.specs.flops import ATTENTION_BACKWARD_FLOPS_RATIO

RECORDS = Path(__file__).resolve().parent / "data" / "kernels"
VARIANTS_RECORD = "kernel_rates-h100-variants.json"
LONG_RECORD = "kernel_rates-h200-long.json"  # 32k-128k tokens, measured on the H200
LONG_RECORD_BASE = "kernel_rates-h200.json"  # the record measured on that same GPU kind
PUBLISHED_A100 = "a100_published.json"  # others' A100 measurements, each with its source
_KERNELS = {"flash": "flash2", "cudnn": "cudnn"}


@lru_cache(maxsize=None)
def _shape_rates(record: str, kind: str) -> dict:
    """{(kernel, batch, heads, kv_heads, seq_len, head_dim): (fwd FLOP/s, bwd FLOP/s)} of a record's `kind`
    entries, for the two kernels. Backward: the forward+backward timing less the forward's, with
    ATTENTION_BACKWARD_FLOPS_RATIO x the forward's FLOPs."""
    with open(RECORDS / record, encoding="utf-8") as f:
        entries = json.load(f)["entries"]
    timed = {(e["backend"], e["batch"], e["heads"], e.get("kv_heads", e["heads"]), e["seq_len"], e["head_dim"],
              e["passes"]): e for e in entries if e["kind"] == kind and "seconds" in e}
    rates = {}
    for (backend, *shape, passes), fwd in timed.items():
        both = timed.get((backend, *shape, "fwd+bwd"))
        if passes != "fwd" or backend not in _KERNELS or both is None or both["seconds"] <= fwd["seconds"]:
            continue
        fwd_flops = fwd["flops_per_s"] * fwd["seconds"]
        rates[(_KERNELS[backend], *shape)] = (
            fwd["flops_per_s"], ATTENTION_BACKWARD_FLOPS_RATIO * fwd_flops / (both["seconds"] - fwd["seconds"]))
    return rates


@lru_cache(maxsize=None)
def head_dim_64_ratio(kernel: str) -> tuple:
    """(forward, backward) median rate at head_dim 64 over head_dim 128, full K/V heads, of the variants record."""
    rates = _shape_rates(VARIANTS_RECORD, "attention-variant")
    ratios = [(small[0] / rates[(k, b, h, kv, s, 128)][0], small[1] / rates[(k, b, h, kv, s, 128)][1])
              for (k, b, h, kv, s, d), small in rates.items()
              if k == kernel and d == 64 and kv == h and (k, b, h, kv, s, 128) in rates]
    return tuple(statistics.median(r[i] for r in ratios) for i in (0, 1))


def measured_rates(record: str) -> dict:
    """{(kernel, batch, heads, seq_len): (fwd FLOP/s, bwd FLOP/s)} of one kernel record, head_dim 128."""
    return {(k, b, h, s): pair for (k, b, h, kv, s, d), pair in _shape_rates(record, "attention").items()
            if d == 128 and kv == h}


@lru_cache(maxsize=None)
def long_context_rates(record: str) -> dict:
    """The long-sequence rows (LONG_RECORD, H200) carried to `record`'s GPU: each rate times `record`'s
    rate over the H200's for the same kernel, batch x heads and pass at the longest sequence both
    records timed (1 for the H200's own record). Shapes `record` did not time at that length are left out."""
    long_rates, base, own = measured_rates(LONG_RECORD), measured_rates(LONG_RECORD_BASE), measured_rates(record)
    out = {}
    for (k, b, h, s), (fwd, bwd) in long_rates.items():
        ref = max((key for key in base if key[:3] == (k, b, h) and (key in own)), key=lambda key: key[3],
                  default=None)
        if ref is None:
            continue
        out[(k, b, h, s)] = (fwd * own[ref][0] / base[ref][0], bwd * own[ref][1] / base[ref][1])
    return out


def _samples(rates: dict, scale_fwd: float, scale_bwd: float, kernels: dict) -> tuple:
    """AttentionSamples of `rates` x the scales; `kernels` maps a table's kernel to the record's."""
    out = []
    for kernel, source in kernels.items():
        for (k, b, h, s), (fwd, bwd) in rates.items():
            if k != source:
                continue
            for head_dim, (eff_fwd, eff_bwd) in ((128, (1.0, 1.0)), (64, head_dim_64_ratio(source))):
                out.append(AttentionSample(b, s, h, head_dim, "bf16", "fwd", fwd * scale_fwd * eff_fwd, kernel))
                out.append(AttentionSample(b, s, h, head_dim, "bf16", "bwd", bwd * scale_bwd * eff_bwd, kernel))
    return tuple(out)


def hopper_attention(record: str, clock: float = 1.0) -> tuple:
    """A Hopper profile's table: both kernels as measured (x `clock`, a power cap's clock factor), and
    "sdpa" as cuDNN's rows (torch 2.11's choice there)."""
    rates = {**measured_rates(record), **long_context_rates(record)}
    return _samples(rates, clock, clock, {"flash2": "flash2", "cudnn": "cudnn", "sdpa": "cudnn"})


@lru_cache(maxsize=None)
def published(name: str = PUBLISHED_A100) -> dict:
    """A record of others' published measurements (cost_model/data/kernels), each with its source."""
    with open(RECORDS / name, encoding="utf-8") as f:
        return json.load(f)


def fwd_bwd_flops_per_s(fwd: float, bwd: float) -> float:
    """The rate of a forward then a backward, as FlashAttention-2's benchmark reports it: (1 + R) x the
    forward's FLOPs over the two times, R = ATTENTION_BACKWARD_FLOPS_RATIO."""
    r = ATTENTION_BACKWARD_FLOPS_RATIO
    return (1.0 + r) / (1.0 / fwd + r / bwd)


def published_fwd_bwd_ratio(record: str, figure: dict) -> dict:
    """{seq_len: published forward+backward rate / `record`'s FlashAttention-2 rate at the figure's own
    shape} for the sequence lengths both hold (head_dim 128). The figure keeps hidden 2048 and 16k
    tokens, so batch x heads = tokens / seq x hidden / 128."""
    rates = measured_rates(record)
    out = {}
    for seq, tflops in figure["causal_fwd_bwd_tflops"]["128"].items():
        seq, bh = int(seq), figure["tokens"] // int(seq) * figure["hidden_size"] // 128
        mine = [pair for (k, b, h, s), pair in rates.items() if k == "flash2" and s == seq and b * h == bh]
        if mine:
            out[seq] = tflops * 1e12 / fwd_bwd_flops_per_s(*mine[0])
    return out


def flash2_published_attention(record: str, name: str = PUBLISHED_A100) -> tuple:
    """The table of a GPU with published FlashAttention-2 figures and no record of ours: `record`'s
    FlashAttention-2 rates (every batch x heads, forward and backward) times the published/record ratio
    at the same sequence length (assumption: the kernel's occupancy curve over batch x heads and its
    forward/backward split carry over between GPUs; the published figure is the forward and backward
    together)."""
    ratio = published_fwd_bwd_ratio(record, published(name)["flash_attention_2"])
    rates = {key: (f * ratio[key[3]], b * ratio[key[3]]) for key, (f, b) in measured_rates(record).items()
             if key[0] == "flash2" and key[3] in ratio}
    return _samples(rates, 1.0, 1.0, {"flash2": "flash2"})
