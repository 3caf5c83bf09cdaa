"""At what rate did the published runs' attention run in training? Read from their own sequence sweeps.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/attention_slopes.py

Two runs of one source, model, GPU type and count, precision and recompute setting that differ in
sequence length do the same GEMM work per token; what the longer one adds per token is attention (plus
whatever else grows with the sequence, which this reading charges to attention: an upper bound on its
time, a lower bound on its rate). The rate is the attention FLOPs it adds per token over the time it adds
per token:

    rate = (A(s2) - A(s1)) / (1/T(s2) - 1/T(s1))

with T the measured tokens/s/GPU and A the executed attention FLOPs per token of the whole model, causal
(s/2 keys per query), forward once, backward 2.5x, and the forward again under full recompute
(cost_model.flops.attention_core_fwd_flops; the tokens/s/GPU already share the model over the GPUs).
Printed beside it: the kernel the run read (its facts, cost_model/row_stack_facts.py) and that kernel's
table rate at the longer length, forward + backward, with the framework's fitted attention efficiency
(cost_model/data/constants.json), which is what the model prices. The mixture-of-experts rows are read
too: they are validation-only, and reading what their attention ran at fits nothing. The figures in
docs/cost_model.md ("Kernels no record of ours timed") come from here.
"""
from __future__ import annotations

import itertools

from autoplan.specs import AutoplanError
from autoplan.specs.flops import ATTENTION_BACKWARD_FLOPS_RATIO as BWD
from cost_model import builtin_profile, load_constants
from cost_model.attention_tables import fwd_bwd_flops_per_s
from cost_model.flops import attention_core_fwd_flops
from cost_model.layer_terms import tile_head_dim
from cost_model.published_rows import load_published_runs
from cost_model.tables import ProfileTables


def _attention_flops_per_token(run) -> float:
    seq = run.training.seq_len
    passes = 1.0 + BWD + (1.0 if run.plan.recompute == "full" else 0.0)
    return run.model.num_layers * attention_core_fwd_flops(run.model, 1, seq, 1, 1) / seq * passes


def _key(run) -> tuple:
    """One sweep: the same source, architecture, kernel, GPUs, precision and recompute setting."""
    m = run.model
    kernel = dict(run.framework_then).get("attention_kernel")
    return (run.source, m.num_layers, m.hidden_size, m.num_heads, m.ffn_hidden_size, kernel, run.gpu,
            run.cluster.num_gpus, run.training.dtype, run.plan.recompute)


def _table_rate(run, constants) -> tuple:
    """(kernel, fitted efficiency x the kernel's forward+backward table rate) at the run's shape, in useful
    FLOPs (a kernel that pads the head width computes more: cost_model/layer_terms.py tile_head_dim)."""
    fw = run.framework_facts(constants)
    tables = ProfileTables(builtin_profile(run.gpu))
    seq, heads = run.training.seq_len, run.plan.micro_batch_size * run.model.num_heads // run.plan.tp
    tile = tile_head_dim(fw.attention_kernel, run.model.head_dim)
    fwd, bwd = (tables.attention_flops_per_s(seq, heads, tile, run.training.dtype, p, fw.attention_kernel)
                for p in ("fwd", "bwd"))
    both = fwd_bwd_flops_per_s(fwd, bwd)
    return fw.attention_kernel, fw.attention_efficiency * both * run.model.head_dim / tile


def pairs(runs: list) -> list:
    """(shorter, longer) run pairs of one sweep, neighbours in sequence length, with flash attention. A
    sweep may change other knobs with the length (context parallelism in the MoE model zoo's): their cost
    is charged to attention too."""
    groups = {}
    for r in runs:
        if r.flash_attention is not False:
            groups.setdefault(_key(r), {}).setdefault(r.training.seq_len, r)
    out = []
    for by_len in groups.values():
        lengths = sorted(by_len)
        out += [(by_len[a], by_len[b]) for a, b in itertools.pairwise(lengths)]
    return out


def implied_rate(short, long) -> float | None:
    added_s = 1.0 / long.measured_tokens_per_s_per_gpu - 1.0 / short.measured_tokens_per_s_per_gpu
    added_flops = _attention_flops_per_token(long) - _attention_flops_per_token(short)
    return added_flops / added_s if added_s > 0 else None


def main() -> int:
    constants = load_constants()
    print(f"{'source':14s} {'model':28s} {'gpu':16s} {'seq':>13s} {'kernel':12s} "
          f"{'implied':>8s} {'priced':>8s}  (TFLOP/s, attention forward+backward[+recompute])")
    for short, long in pairs(load_published_runs()):
        rate = implied_rate(short, long)
        try:
            kernel, priced = _table_rate(long, constants)
        except AutoplanError:  # a framework the model does not price (validate skips its rows too)
            continue
        shown = f"{rate / 1e12:8.0f}" if rate else "   (n/a)"
        print(f"{short.source[:14]:14s} {short.model.name[:28]:28s} {short.gpu[:16]:16s} "
              f"{short.training.seq_len:>6d}-{long.training.seq_len:<6d} {kernel:12s} {shown} {priced / 1e12:8.0f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
