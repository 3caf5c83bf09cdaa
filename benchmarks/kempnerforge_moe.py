"""Time KempnerForge's own MoE model on one GPU, at the per-GPU shape of its published MoE rows.

    python benchmarks/kempnerforge_moe.py --kempnerforge DIR [--plan depth|full] > records.jsonl

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
learning, are what is measured). --plan full: the published 24 layers. No CUDA: tiny shapes, to check
the script runs.
"""
import argparse
import json
import subprocess
import sys
import time

import torch

dev = "cuda" if torch.cuda.is_available() else "cpu"
SMALL = dev == "cpu"
B, S = (1, 128) if SMALL else (4, 4096)
DIM, HEADS, KV, VOCAB = (256, 4, 2, 4096) if SMALL else (2048, 16, 4, 128256)


def tokens(kind, gen):
    if kind == "uniform":
        return torch.randint(0, VOCAB, (B, S), generator=gen)
    ranks = torch.arange(1, VOCAB + 1, dtype=torch.float64)
    p = 1.0 / ranks
    p /= p.sum()
    ids = torch.multinomial(p, B * S, replacement=True, generator=gen).view(B, S)
    perm = torch.randperm(VOCAB, generator=gen)  # frequent ids spread over the vocabulary
    return perm[ids]


def case(experts, packed, layers, kind, steps, warmup, train):
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
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, fused=dev == "cuda") if train else None
    gen = torch.Generator().manual_seed(0)
    times, loads, mem = [], [], 0
    if dev == "cuda":
        torch.cuda.reset_peak_memory_stats()
    for step in range(warmup + steps):
        x = tokens(kind, gen).to(dev)
        if dev == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        logits = model(x)
        loss = torch.nn.functional.cross_entropy(logits.view(-1, logits.size(-1)).float(), x.view(-1))
        loss = loss + 0.01 * model.get_moe_aux_loss()
        loss.backward()
        if opt is not None:
            for g in opt.param_groups:
                g["lr"] = 3e-4 * min(1.0, (step + 1) / 5)
            opt.step()
        model.zero_grad(set_to_none=True)
        if dev == "cuda":
            torch.cuda.synchronize()
        dt = time.perf_counter() - t0
        counts = [c.float() for c in model.get_expert_counts().values()]
        lf = [round((c.max() / c.mean()).item(), 3) for c in counts]
        loads.append(lf)
        if step >= warmup:
            times.append(dt)
    if dev == "cuda":
        mem = torch.cuda.max_memory_allocated()
    del model, opt
    if dev == "cuda":
        torch.cuda.empty_cache()
    times.sort()
    return {"experts": experts, "packed": packed, "layers": layers, "tokens": kind, "train": train,
            "batch": B, "seq": S, "median_step_s": times[len(times) // 2], "step_times_s": [round(t, 4) for t in times],
            "max_over_mean_load_per_step_per_layer": loads, "max_memory_allocated_bytes": mem}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--kempnerforge", required=True, help="folder holding the kempnerforge package (commit abbbac33)")
    p.add_argument("--plan", choices=("depth", "full"), default="depth")
    args = p.parse_args(argv)
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
    for case_args in plan:
        try:
            r = case(*case_args)
        except Exception as exc:  # an OOM or API break is recorded, the next case still runs
            r = {"case": list(case_args), "error": repr(exc)[:300]}
        print(json.dumps(r), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
