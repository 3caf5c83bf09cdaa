"""Kernel rates the cost model prices but `autoplan profile` does not sweep, measured on one GPU.

    python benchmarks/kernel_rates.py -o kernels.json [--soak-s 10] [--smoke]   # on the GPU
    python benchmarks/kernel_rates.py --summary kernels.json                     # anywhere: the tables

Three families, each a fact some cost-model term takes today from a fitted constant or an assumption:

- **fp8 GEMMs, tensor-wise vs row-wise scaling** (`torch._scaled_mm` with one scale per tensor, or one
  per row of A and column of B), beside bf16 at the same transformer shapes. torchtitan's row-wise
  recipe is priced with a fitted `fp8_rowwise_efficiency`; the GEMM part of it is this ratio.
- **Causal attention per occupancy**: `scaled_dot_product_attention` forward and forward+backward over
  batch x heads (the CTAs a flash kernel spreads over the SMs) and sequence length, for the flash
  backend and the cuDNN fused backend (the kernel Transformer Engine, hence Megatron-Core, calls).
  The built-in tables ramp with sequence length only.
- **Grouped expert GEMMs** (`torch._grouped_mm`, one kernel over all local experts, as torchtitan and
  Megatron-Core's grouped GEMM run them) at per-expert token counts, balanced and imbalanced, beside
  one expert's dense GEMM and a loop of per-expert GEMMs (what the executor runs).

Every rate is FLOP/s counted as 2mnk per GEMM (causal attention: half the square, as
`profiler.compute.attention_forward_flops`). Each entry is the median of several samples; a sample is
the mean of back-to-back runs timed by CUDA events after warm-up, after a soak that lets clocks settle
under load. The JSON carries an environment stamp (GPU, driver, torch, CUDA, git revision) and every
failure as an entry with its error, so a kernel that does not run on this torch is a recorded fact.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from profiler.timing import Clock  # noqa: E402 - the repository root first, as the other benchmarks

GEMM_PAIRS = (  # (n, k): squares, then Llama-3-8B, Llama-3-70B at TP 8 and at TP 4 (QKV, out, gate+up, down)
    (1024, 1024), (2048, 2048), (4096, 4096), (8192, 8192), (16384, 16384),
    (6144, 4096), (4096, 4096), (28672, 4096), (4096, 14336),
    (1280, 8192), (8192, 1024), (7168, 8192), (8192, 3584),
    (2560, 8192), (8192, 2048), (14336, 8192), (8192, 7168),
)
GEMM_TOKENS = (2048, 8192, 16384)
ATTENTION_BATCH_HEADS = ((1, 8), (1, 16), (1, 32), (2, 32), (4, 32), (8, 32), (16, 32))
ATTENTION_SEQ = (1024, 2048, 4096, 8192, 16384)
# Long context (the MoE zoo's and Megatron-Core's 32k-128k rows; the family above stops at 16k):
# one sequence, few heads per GPU as tensor/context parallelism leaves them.
ATTENTION_LONG_BATCH_HEADS = ((1, 8), (1, 32))
ATTENTION_LONG_SEQ = (32768, 65536, 131072)
EXPERT_SHAPES = {  # (hidden, expert ffn): the routed experts of these models' config.json files
    "qwen3-30b-a3b": (2048, 768), "qwen3-235b-a22b": (4096, 1536),
    "deepseek-v3": (7168, 2048), "mixtral-8x7b": (4096, 14336),
}
EXPERT_TOKENS = (128, 256, 512, 1024, 2048, 4096, 8192)
LOCAL_EXPERTS = (8, 32)


class Timer:
    """Warm-up, then the median of `samples` samples, each ~`target_sample_s` of back-to-back runs
    timed by the profiler's clock (CUDA events on the current stream, read after a synchronize)."""

    def __init__(self, device: torch.device, target_sample_s: float, samples: int):
        self.device, self.target_sample_s, self.samples = device, target_sample_s, samples
        self.clock = Clock(device.type)

    def seconds(self, fn) -> float:
        for _ in range(3):
            fn()
        self.clock.synchronize()
        estimate = self.clock.time_per_run_s(fn, 1)
        inner = max(1, min(1000, int(self.target_sample_s / max(estimate, 1e-7))))
        return statistics.median(self.clock.time_per_run_s(fn, inner) for _ in range(self.samples))


def _record(out: list, kind: str, fn_build, flops: float, timer: Timer, **facts) -> None:
    try:
        fn = fn_build()
        seconds = timer.seconds(fn)
        out.append(dict(kind=kind, **facts, seconds=seconds, flops_per_s=flops / seconds))
    except Exception as exc:  # a kernel this torch/GPU cannot run is recorded, not fatal
        out.append(dict(kind=kind, **facts, error=f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"))
    finally:
        if timer.device.type == "cuda":
            torch.cuda.empty_cache()
    last = out[-1]
    rate = f"{last['flops_per_s'] / 1e12:8.1f} TFLOP/s" if "flops_per_s" in last else last["error"]
    print(kind, {k: v for k, v in facts.items()}, rate, flush=True)


def gemms(device, tokens, pairs, timer) -> list:
    out = []
    fp8 = getattr(torch, "float8_e4m3fn", None)
    for m in tokens:
        for n, k in pairs:
            flops = 2.0 * m * n * k

            def bf16(m=m, n=n, k=k):
                a = torch.randn(m, k, device=device, dtype=torch.bfloat16)
                b = torch.randn(n, k, device=device, dtype=torch.bfloat16).t()
                return lambda: a @ b

            def scaled(rowwise: bool, m=m, n=n, k=k):
                a = torch.randn(m, k, device=device).to(fp8)
                b = torch.randn(n, k, device=device).to(fp8).t()  # column-major B, as _scaled_mm wants
                sa = torch.ones(m, 1, device=device) if rowwise else torch.ones((), device=device)
                sb = torch.ones(1, n, device=device) if rowwise else torch.ones((), device=device)
                return lambda: torch._scaled_mm(a, b, scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16)

            _record(out, "gemm", bf16, flops, timer, m=m, n=n, k=k, dtype="bf16")
            _record(out, "gemm", lambda: scaled(False), flops, timer, m=m, n=n, k=k, dtype="fp8-tensorwise")
            _record(out, "gemm", lambda: scaled(True), flops, timer, m=m, n=n, k=k, dtype="fp8-rowwise")
    return out


def _backends():
    from torch.nn.attention import SDPBackend
    return {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION, "math": SDPBackend.MATH}


def attention(device, batch_heads, seqs, head_dim, backends, timer) -> list:
    from torch.nn.attention import sdpa_kernel
    out = []
    for name in backends:
        backend = _backends()[name]
        for s in seqs:
            for b, h in batch_heads:
                fwd_flops = 2.0 * b * h * s * s * head_dim  # 4bhs^2d, halved by the causal mask

                def build(backward: bool, b=b, h=h, s=s):
                    q, k, v = (torch.randn(b, h, s, head_dim, device=device, dtype=torch.bfloat16,
                                           requires_grad=backward) for _ in range(3))
                    grad = torch.randn(b, h, s, head_dim, device=device, dtype=torch.bfloat16)

                    def run():
                        with sdpa_kernel([backend]):
                            o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
                            if backward:
                                torch.autograd.grad(o, (q, k, v), grad)
                    return run

                facts = dict(backend=name, batch=b, heads=h, seq_len=s, head_dim=head_dim)
                _record(out, "attention", lambda: build(False), fwd_flops, timer, **facts, passes="fwd")
                # backward counts 2.5x the forward's FLOPs (recomputed scores, four GEMMs): FA2 paper
                _record(out, "attention", lambda: build(True), 3.5 * fwd_flops, timer, **facts, passes="fwd+bwd")
    return out


VARIANT_SHAPES = ((1, 32, 2048), (4, 32, 4096), (1, 32, 16384), (1, 8, 4096))  # (batch, heads, seq)


def attention_variants(device, shapes, head_dims, backends, timer) -> list:
    """What the main grid holds fixed: head_dim 64 against 128, grouped-query attention (a quarter of the
    heads as K/V heads, SDPA's enable_gqa) against full heads, and SDPA with its own backend choice
    ("sdpa", no sdpa_kernel context), whose pick is recorded as `torch._fused_sdp_choice` names it."""
    from torch.nn.attention import sdpa_kernel
    out = []
    for name in backends:
        for b, h, s in shapes:
            for head_dim in head_dims:
                for kv in (h, h // 4):
                    fwd_flops = 2.0 * b * h * s * s * head_dim

                    def build(backward: bool, b=b, h=h, s=s, head_dim=head_dim, kv=kv, name=name):
                        q = torch.randn(b, h, s, head_dim, device=device, dtype=torch.bfloat16, requires_grad=backward)
                        k, v = (torch.randn(b, kv, s, head_dim, device=device, dtype=torch.bfloat16,
                                            requires_grad=backward) for _ in range(2))
                        grad = torch.randn_like(q)

                        def attend():
                            o = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=kv != h)
                            if backward:
                                torch.autograd.grad(o, (q, k, v), grad)

                        if name == "sdpa":
                            return attend

                        def run():
                            with sdpa_kernel([_backends()[name]]):
                                attend()
                        return run

                    facts = dict(backend=name, batch=b, heads=h, kv_heads=kv, seq_len=s, head_dim=head_dim)
                    _record(out, "attention-variant", lambda: build(False), fwd_flops, timer, **facts, passes="fwd")
                    _record(out, "attention-variant", lambda: build(True), 3.5 * fwd_flops, timer, **facts,
                            passes="fwd+bwd")
    return out


def sdpa_choice(device) -> str:
    """The backend SDPA picks by itself for a causal bf16 training call (head_dim 128, 32 heads, 4k)."""
    try:
        q = torch.randn(1, 32, 4096, 128, device=device, dtype=torch.bfloat16, requires_grad=True)
        choice = torch._fused_sdp_choice(q, q, q, is_causal=True)
        return {int(b): b.name for b in _backends().values()}.get(int(choice), str(choice))
    except Exception as exc:  # a private helper: its absence is recorded, not fatal
        return f"unknown ({type(exc).__name__})"


def _offsets(counts, device):
    return torch.tensor(counts, device=device, dtype=torch.int32).cumsum(0, dtype=torch.int32)


def _imbalanced(tokens_per_expert: int, experts: int) -> list:
    """Same total, max/mean 2: half the experts get 1.5x, half 0.5x, rounded to 16 (grouped-GEMM alignment)."""
    counts = [tokens_per_expert * (3 if i % 2 == 0 else 1) // 2 for i in range(experts)]
    counts = [max(16, c // 16 * 16) for c in counts]
    counts[-1] += tokens_per_expert * experts - sum(counts)
    return counts


def grouped(device, shapes, tokens, local_experts, timer) -> list:
    out = []
    for model, (hidden, ffn) in shapes.items():
        for g in local_experts:
            for t in tokens:
                for proj, (k, n) in (("up", (hidden, 2 * ffn)), ("down", (ffn, hidden))):
                    flops = 2.0 * g * t * n * k
                    facts = dict(model=model, experts=g, tokens_per_expert=t, proj=proj, k=k, n=n)

                    def build(counts, g=g, t=t, k=k, n=n):
                        a = torch.randn(g * t, k, device=device, dtype=torch.bfloat16)
                        w = torch.randn(g, n, k, device=device, dtype=torch.bfloat16)
                        offs = _offsets(counts, device)
                        return lambda: torch._grouped_mm(a, w.transpose(-2, -1), offs=offs,
                                                         out_dtype=torch.bfloat16)

                    def loop(g=g, t=t, k=k, n=n):
                        a = torch.randn(g * t, k, device=device, dtype=torch.bfloat16)
                        w = torch.randn(g, n, k, device=device, dtype=torch.bfloat16)
                        chunks = a.split(t)
                        return lambda: [c @ w[i].t() for i, c in enumerate(chunks)]

                    def dense(t=t, k=k, n=n):
                        a = torch.randn(t, k, device=device, dtype=torch.bfloat16)
                        w = torch.randn(n, k, device=device, dtype=torch.bfloat16)
                        return lambda: a @ w.t()

                    _record(out, "grouped", lambda: build([t] * g), flops, timer, **facts, variant="grouped-balanced")
                    _record(out, "grouped", lambda: build(_imbalanced(t, g)), flops, timer, **facts,
                            variant="grouped-imbalanced-2x")
                    _record(out, "grouped", loop, flops, timer, **facts, variant="loop")
                    _record(out, "grouped", dense, flops / g, timer, **facts, variant="one-expert-dense")
    return out


def environment() -> dict:
    env = dict(created_utc=datetime.now(timezone.utc).isoformat(timespec="seconds"), python=sys.version.split()[0],
               torch=torch.__version__, cuda=torch.version.cuda)
    try:
        git = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True)
        env["git_revision"] = git.stdout.strip()
    except OSError:
        env["git_revision"] = "unknown"
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        env.update(device_name=props.name, multiprocessors=props.multi_processor_count,
                   memory_bytes=props.total_memory, cudnn=torch.backends.cudnn.version())
        try:
            env["nvidia_smi"] = subprocess.run(
                ["nvidia-smi", "--query-gpu=name,driver_version,power.limit,clocks.max.sm,clocks.sm",
                 "--format=csv,noheader"], capture_output=True, text=True).stdout.strip()
        except OSError:
            env["nvidia_smi"] = "unavailable"
    return env


def soak(device, seconds: float) -> None:
    a = torch.randn(8192, 8192, device=device, dtype=torch.bfloat16)
    end = time.time() + seconds
    while time.time() < end:
        for _ in range(20):
            a @ a
        torch.cuda.synchronize()


def _median(values) -> float:
    return statistics.median(values) if values else float("nan")


def summary(path: str) -> str:
    """The record's figures as the tables docs/cost_model.md quotes (TFLOP/s, medians over shapes)."""
    with open(path) as f:
        record = json.load(f)
    entries = [e for e in record["entries"] if "flops_per_s" in e]
    env = record["environment"]
    lines = [f"{env.get('device_name', '?')}, torch {env['torch']}, CUDA {env['cuda']}, {env['created_utc']}",
             f"entries {len(record['entries'])}, failed {len(record['entries']) - len(entries)}", ""]
    gemm = {}
    for e in (e for e in entries if e["kind"] == "gemm"):
        gemm.setdefault((e["m"], e["n"], e["k"]), {})[e["dtype"]] = e["flops_per_s"] / 1e12
    full = [v for v in gemm.values() if len(v) == 3]
    ratio = sorted(v["fp8-rowwise"] / v["fp8-tensorwise"] for v in full)
    big = [v for (m, n, k), v in gemm.items() if len(v) == 3 and m >= 8192]
    big_ratio = _median([v["fp8-rowwise"] / v["fp8-tensorwise"] for v in big])
    if full:
        lines += ["GEMM (TFLOP/s, median over shapes; m >= 8192 in brackets)",
                  *(f"  {d:15s} {_median([v[d] for v in full]):6.0f} [{_median([v[d] for v in big]):6.0f}]"
                    for d in ("bf16", "fp8-tensorwise", "fp8-rowwise")),
                  f"  row-wise / tensor-wise: median {_median(ratio):.3f} [{big_ratio:.3f}], "
                  f"range {ratio[0]:.3f}-{ratio[-1]:.3f} over {len(ratio)} shapes", ""]
    attn = [e for e in entries if e["kind"] == "attention"]
    seqs = sorted({e["seq_len"] for e in attn})
    for backend in sorted({e["backend"] for e in attn}):
        for passes in ("fwd", "fwd+bwd"):
            rows = [e for e in attn if e["backend"] == backend and e["passes"] == passes]
            cols = sorted({(e["batch"] * e["heads"], e["batch"], e["heads"]) for e in rows})
            lines.append(f"attention {backend} {passes} (TFLOP/s; columns batch x heads)")
            lines.append("  seq    " + "".join(f"{f'{b}x{h}':>7s}" for _, b, h in cols))
            for s in seqs:
                by = {(e["batch"], e["heads"]): e["flops_per_s"] / 1e12 for e in rows if e["seq_len"] == s}
                lines.append(f"  {s:<7d}" + "".join(f"{by.get((b, h), float('nan')):7.0f}" for _, b, h in cols))
            lines.append("")
    variants = {(e["backend"], e["batch"], e["heads"], e["kv_heads"], e["seq_len"], e["head_dim"], e["passes"]): e
                for e in entries if e["kind"] == "attention-variant"}
    if variants:
        lines += [f"attention variants (forward/backward TFLOP/s; SDPA's own pick: {env.get('sdpa_choice', '?')})",
                  "  backend  batch x heads x seq      d128       d128 gqa/4       d64        d64 gqa/4"]
    for (backend, b, h, kv, s, d, passes), fwd in variants.items():
        if kv != h or d != 128 or passes != "fwd":
            continue
        cells = []
        for head_dim, kv_heads in ((128, h), (128, h // 4), (64, h), (64, h // 4)):
            one = variants[(backend, b, h, kv_heads, s, head_dim, "fwd")]
            both = variants[(backend, b, h, kv_heads, s, head_dim, "fwd+bwd")]
            bwd = 2.5 * one["flops_per_s"] * one["seconds"] / (both["seconds"] - one["seconds"])
            cells.append(f"{one['flops_per_s'] / 1e12:5.0f}/{bwd / 1e12:4.0f}")
        lines.append(f"  {backend:8s} {f'{b} x {h} x {s}':22s}" + "".join(f"{c:>15s}" for c in cells))
    if variants:
        lines.append("")
    grouped = {}
    for e in (e for e in entries if e["kind"] == "grouped"):
        grouped.setdefault(e["tokens_per_expert"], {}).setdefault(e["variant"], []).append(e["flops_per_s"] / 1e12)
    variants = ("grouped-balanced", "grouped-imbalanced-2x", "loop", "one-expert-dense")
    if not grouped:
        return "\n".join(lines)
    lines.append("expert GEMMs (TFLOP/s, median over models, experts 8/32, up/down)")
    lines.append("  tokens/expert " + "".join(f"{v:>22s}" for v in variants))
    for t in sorted(grouped):
        lines.append(f"  {t:<14d}" + "".join(f"{_median(grouped[t].get(v, [])):22.0f}" for v in variants))
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("-o", "--output", help="JSON to write (rewritten after each family)")
    p.add_argument("--summary", metavar="JSON", help="print the tables of a written record and stop")
    p.add_argument("--soak-s", type=float, default=10.0)
    p.add_argument("--only", choices=("gemm", "attention", "grouped", "variants", "long"), action="append",
                   help="families to measure (default: all but long)")
    p.add_argument("--smoke", action="store_true", help="tiny shapes on any device: checks the script runs")
    args = p.parse_args(argv)
    if args.summary:
        print(summary(args.summary))
        return 0
    if not args.output:
        p.error("-o/--output is required to measure")
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.type != "cuda" and not args.smoke:
        print("kernel_rates.py: no CUDA device here; run it on the GPU (or pass --smoke to check the script)",
              file=sys.stderr)
        return 2
    timer = Timer(device, target_sample_s=0.02 if device.type == "cuda" else 1e-3, samples=5 if not args.smoke else 2)
    if args.smoke:
        plan = dict(gemm=lambda: gemms(device, (64,), ((64, 64),), timer),
                    attention=lambda: attention(device, ((1, 2),), (64,), 16, ("math",), timer),
                    grouped=lambda: grouped(device, {"tiny": (64, 32)}, (16,), (2,), timer),
                    variants=lambda: attention_variants(device, ((1, 4, 64),), (16,), ("math", "sdpa"), timer),
                    long=lambda: attention(device, ((1, 2),), (128,), 16, ("math",), timer))
    else:
        if args.soak_s > 0:
            soak(device, args.soak_s)
        plan = dict(gemm=lambda: gemms(device, GEMM_TOKENS, GEMM_PAIRS, timer),
                    attention=lambda: attention(device, ATTENTION_BATCH_HEADS, ATTENTION_SEQ, 128,
                                                ("flash", "cudnn"), timer),
                    grouped=lambda: grouped(device, EXPERT_SHAPES, EXPERT_TOKENS, LOCAL_EXPERTS, timer),
                    variants=lambda: attention_variants(device, VARIANT_SHAPES, (64, 128), ("flash", "cudnn", "sdpa"),
                                                        timer),
                    long=lambda: attention(device, ATTENTION_LONG_BATCH_HEADS, ATTENTION_LONG_SEQ, 128,
                                           ("flash", "cudnn"), timer))
    result = dict(schema="autoplan.kernel_rates/v1", environment={**environment(), "sdpa_choice": sdpa_choice(device)},
                  soak_s=args.soak_s,
                  timing="median of 5 samples; a sample is the CUDA-event mean of back-to-back runs (~20 ms)",
                  entries=[])
    for family in args.only or ("gemm", "attention", "grouped", "variants"):
        result["entries"] += plan[family]()
        tmp = args.output + ".tmp"
        with open(tmp, "w") as f:
            json.dump(result, f, indent=1)
        os.replace(tmp, args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
