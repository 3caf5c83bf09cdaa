"""Time KempnerForge's own MoE model on one GPU, at the per-GPU shape of its published MoE rows.

    python benchmarks/kempnerforge_moe.py --kempnerforge DIR [--plan depth|full] > records.jsonl
    python benchmarks/kempnerforge_moe.py --kempnerforge DIR --plan published [--tokens SHARD] > published.jsonl

DIR holds the `kempnerforge` package at the commit of its moe_packed benchmark (abbbac33; e.g.
`git archive abbbac33 kempnerforge | tar -x -C DIR`). This script builds the model with KempnerForge's
own code (its ModelConfig, model registry, MoEMLP with torch._grouped_mm and its per-block activation
checkpointing, apply_ac) and only drives and times it; nothing of it is copied here.

The shape is the per-GPU one of the KEMPNERMOE rows (cost_model/data/published_runs.csv): batch 4 x
4096 tokens, dim 2048, 16 heads / 4 KV heads, vocab 128256, SwiGLU experts of 7168 (ffn multiplier
1.3), top-2 softmax router with aux loss 0.01, dropless, full activation checkpointing, bf16 weights
(FSDP2's bf16 compute dtype; one GPU, so no FSDP and no communication).

Tokens are uniform random ids, or Zipf(1) ids (the unigram shape of natural text) spread over the
vocabulary: with KempnerForge's padded grouped GEMM every expert computes the busiest expert's token
count, so how routing spreads tokens at initialisation sets the expert GEMMs' size. Each record carries
the max/mean expert load of every layer at every step.

--plan depth (default): 2 and 4 layers (the per-layer time is the slope), packed and unpacked experts,
E = 8 and 16, forward + backward, and 20 training steps (AdamW, lr 3e-4 warmed up over 5 steps, as the
published bench) on Zipf tokens; the labels are the input ids (a copy task: timing and routing, not
learning, are what is measured). --plan full: the published 24 layers.

--plan published: what settles the KEMPNERMOE rows' miss (docs/cost_model.md, Limits): the four rows'
cells (8 and 16 experts, packed and unpacked, 24 layers) trained as moe_packed_bench.sh @abbbac33 ran
them, 20 steps timed over the last 10 (its "median over last 10 steps"): AdamW betas (0.9, 0.95),
weight decay 0.1 (configs/train/debug.toml), lr 3e-4 warmed up over 5 steps then cosine to 0.1x over
the rest (kempnerforge/training/scheduler.py), gradient norm clipped at 1.0, next-token labels. With
--tokens, the batches are windows of a KempnerForge token shard (the bench read FineWeb-Edu tokenized
with Llama-3's tokenizer, tokenized_*.bin: flat uint32, or uint16 when the size says so, as
kempnerforge/data/dataset.py MemoryMappedDataset reads it; or .npy); else Zipf(1) ids. At every timed
step the other --ranks - 1 ranks' batches are routed too (forward only, no gradient: the published run's
8 ranks hold the same weights and their own batches), and the record keeps each rank's max/mean
load per layer: under FSDP every layer waits for its slowest rank. No CUDA: tiny shapes, to check the
script runs.
"""
import argparse
import json
import math
import subprocess
import sys
import time

import numpy as np
import torch

dev = "cuda" if torch.cuda.is_available() else "cpu"
SMALL = dev == "cpu"
B, S = (1, 128) if SMALL else (4, 4096)
DIM, HEADS, KV, VOCAB = (256, 4, 2, 4096) if SMALL else (2048, 16, 4, 128256)


def tokens(kind, gen):
    """(input ids, labels) of one rank's batch: the ids themselves as labels (a copy task)."""
    ids = _ids(kind, gen)
    return ids, ids


def _ids(kind, gen):
    if kind == "uniform":
        return torch.randint(0, VOCAB, (B, S), generator=gen)
    ranks = torch.arange(1, VOCAB + 1, dtype=torch.float64)
    p = 1.0 / ranks
    p /= p.sum()
    ids = torch.multinomial(p, B * S, replacement=True, generator=gen).view(B, S)
    perm = torch.randperm(VOCAB, generator=gen)  # frequent ids spread over the vocabulary
    return perm[ids]


def shard_batches(path):
    """A source of (input ids, next-token labels) windows of S + 1 tokens from a KempnerForge token shard."""
    if path.endswith(".npy"):
        data = np.load(path, mmap_mode="r")
    else:
        size = np.memmap(path, dtype=np.uint8, mode="r").shape[0]
        data = np.memmap(path, dtype=np.uint32 if size % 4 == 0 else np.uint16, mode="r")
    windows = (data.shape[0] - 1) // S
    if windows < B:
        raise ValueError(f"--tokens {path}: {data.shape[0]} tokens, fewer than {B} windows of {S + 1}; "
                         f"give a larger shard")

    def draw(gen):
        starts = (torch.randint(0, windows, (B,), generator=gen) * S).tolist()
        rows = torch.stack([torch.from_numpy(data[i:i + S + 1].astype(np.int64)) for i in starts]) % VOCAB
        return rows[:, :-1], rows[:, 1:]
    return draw


def bench_lr(step, steps, peak=3e-4, warmup=5, floor=0.1):
    """moe_packed_bench.sh's schedule: linear warmup from 0, then cosine to floor x peak (debug.toml
    scheduler cosine, min_lr_ratio 0.1; kempnerforge/training/scheduler.py _warmup_factor, _cosine_decay)."""
    if step < warmup:
        return peak * step / warmup
    progress = (step - warmup) / max(1, steps - warmup)
    return peak * (floor + 0.5 * (1.0 - floor) * (1.0 + math.cos(math.pi * progress)))


def routing_loads(model):
    """Max/mean routed tokens of every MoE layer in the model's last forward."""
    counts = [c.float() for c in model.get_expert_counts().values()]
    return [round((c.max() / c.mean()).item(), 3) for c in counts]


def build(experts, packed, layers):
    """KempnerForge's transformer at the rows' shape, bf16, each block checkpointed (its apply_ac full)."""
    from kempnerforge.config.model import ModelConfig
    from kempnerforge.config.registry import registry
    import kempnerforge.model.transformer  # noqa: F401  (registers "transformer")
    from kempnerforge.config.training import ActivationCheckpointing
    from kempnerforge.distributed.parallel import apply_ac
    torch.manual_seed(42)
    cfg = ModelConfig(dim=DIM, n_layers=layers, n_heads=HEADS, n_kv_heads=KV, vocab_size=VOCAB,
                      ffn_dim_multiplier=1.3, max_seq_len=S, rope_theta=500000.0, num_experts=experts,
                      moe_top_k=2, moe_frequency=1, moe_router="softmax_topk", moe_aux_loss_weight=0.01,
                      moe_capacity_factor=0.0, moe_packed_experts=packed)
    with torch.device(dev):
        model = registry.get_model("transformer")(cfg)
    if hasattr(model, "init_weights_and_freqs"):
        model.init_weights_and_freqs()
    model = model.to(device=dev, dtype=torch.bfloat16)
    apply_ac(model, ActivationCheckpointing.full)
    return model


def case(experts, packed, layers, kind, steps, warmup, train, bench=False, draw=None, ranks=1):
    """One cell: `warmup` + `steps` steps, the last `steps` timed. `bench`: the published bench's
    optimizer, schedule and clipping (bench_lr); `draw`: the batch source (default `tokens(kind)`);
    `ranks` > 1: route that many - 1 other ranks' batches at each timed step, untimed."""
    model = build(experts, packed, layers)
    draw = draw or (lambda g: tokens(kind, g))
    opt = None
    if train:
        opt = (torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.95), weight_decay=0.1,
                                 fused=dev == "cuda") if bench
               else torch.optim.AdamW(model.parameters(), lr=3e-4, fused=dev == "cuda"))
    gen = torch.Generator().manual_seed(0)
    times, loads, by_rank, mem = [], [], [], 0
    if dev == "cuda":
        torch.cuda.reset_peak_memory_stats()
    for step in range(warmup + steps):
        x, y = (t.to(dev) for t in draw(gen))
        if dev == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        logits = model(x)
        loss = torch.nn.functional.cross_entropy(logits.view(-1, logits.size(-1)).float(), y.reshape(-1))
        loss = loss + 0.01 * model.get_moe_aux_loss()
        loss.backward()
        if opt is not None:
            for g in opt.param_groups:
                g["lr"] = bench_lr(step, warmup + steps) if bench else 3e-4 * min(1.0, (step + 1) / 5)
            if bench:
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
        model.zero_grad(set_to_none=True)
        if dev == "cuda":
            torch.cuda.synchronize()
        dt = time.perf_counter() - t0
        loads.append(routing_loads(model))
        if step >= warmup:
            times.append(dt)
            if ranks > 1:
                by_rank.append([loads[-1]] + other_ranks_loads(model, draw, gen, ranks - 1))
    if dev == "cuda":
        mem = torch.cuda.max_memory_allocated()
    del model, opt
    if dev == "cuda":
        torch.cuda.empty_cache()
    times.sort()
    record = {"experts": experts, "packed": packed, "layers": layers, "tokens": kind, "train": train,
              "batch": B, "seq": S, "median_step_s": times[len(times) // 2],
              "step_times_s": [round(t, 4) for t in times],
              "max_over_mean_load_per_step_per_layer": loads, "max_memory_allocated_bytes": mem}
    if bench:
        record["bench_schedule"] = True
    if by_rank:
        record["max_over_mean_load_per_timed_step_per_rank_per_layer"] = by_rank
    return record


def other_ranks_loads(model, draw, gen, count):
    """Each other rank's per-layer max/mean load: its own batch through the same weights, forward only."""
    out = []
    with torch.no_grad():
        for _ in range(count):
            x, _ = draw(gen)
            model(x.to(dev))
            out.append(routing_loads(model))
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--kempnerforge", required=True, help="folder holding the kempnerforge package (commit abbbac33)")
    p.add_argument("--plan", choices=("depth", "full", "published"), default="depth")
    p.add_argument("--tokens", help="--plan published: a KempnerForge token shard (.bin or .npy) to draw batches from")
    p.add_argument("--ranks", type=int, default=8, help="--plan published: ranks whose routing is recorded (8)")
    args = p.parse_args(argv)
    if args.tokens and args.plan != "published":
        p.error(f"--tokens is read by --plan published only (got --plan {args.plan})")
    if args.ranks < 1:
        p.error(f"--ranks must be at least 1 (got {args.ranks})")
    try:
        draw = shard_batches(args.tokens) if args.tokens else None
    except ValueError as exc:
        p.error(str(exc))
    except OSError as exc:
        p.error(f"--tokens {args.tokens}: {exc.strerror or exc}; give a KempnerForge token shard (.bin or .npy)")
    sys.path.insert(0, args.kempnerforge)
    env = {"torch": torch.__version__, "device": torch.cuda.get_device_name() if dev == "cuda" else "cpu"}
    if dev == "cuda":
        env["nvidia_smi"] = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,power.limit,clocks.max.sm",
                                            "--format=csv,noheader"], capture_output=True, text=True).stdout.strip()
    print(json.dumps({"environment": env}), flush=True)
    plan = [  # (experts, packed, layers, tokens, steps, warmup, train)
        (8, True, 2, "uniform", 5, 2, False), (8, True, 4, "uniform", 5, 2, False),
        (8, False, 4, "uniform", 5, 2, False), (16, True, 4, "uniform", 5, 2, False),
        (16, False, 4, "uniform", 5, 2, False),
        (8, True, 4, "zipf", 5, 2, False), (16, True, 4, "zipf", 5, 2, False),
        (8, True, 4, "zipf", 15, 5, True), (16, True, 4, "zipf", 15, 5, True),
        (16, False, 4, "zipf", 15, 5, True), (8, False, 4, "zipf", 15, 5, True),
    ]
    if args.plan == "full":  # the published depth: 24 layers
        plan = [(8, True, 24, "zipf", 10, 5, True), (8, False, 24, "zipf", 10, 5, True),
                (16, True, 24, "zipf", 8, 4, False), (16, False, 24, "zipf", 8, 4, False),
                (8, True, 24, "uniform", 6, 3, False)]
    if SMALL:
        plan = [(e, packed, n, k, 1, 1, t) for (e, packed, n, k, _, _, t) in plan[:3] + plan[-1:]]
    options = {}
    if args.plan == "published":  # the four rows' cells, 20 steps, the last 10 timed
        kind = "shard" if draw else "zipf"
        plan = [(e, packed, 2 if SMALL else 24, kind, 1 if SMALL else 10, 1 if SMALL else 10, True)
                for e in (8, 16) for packed in (False, True)]
        options = {"bench": True, "draw": draw, "ranks": min(args.ranks, 2) if SMALL else args.ranks}
    for case_args in plan:
        try:
            r = case(*case_args, **options)
        except Exception as exc:  # an OOM or API break is recorded, the next case still runs
            r = {"case": list(case_args), "error": repr(exc)[:300]}
        print(json.dumps(r), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
