"""Accuracy and speed of the analytical cost model, with the constant-MFU baseline beside it.

    .venv/bin/python benchmarks/validate_accuracy.py

Prints, per source and overall, MAPE / median / max APE of tokens/s/GPU against the published runs
(cost_model/data/published_runs.csv) for the analytical model and for one constant MFU, the
Spearman rank correlation within each sweep, the memory prediction against the peak memory some
sources report, and the time one `Estimator.estimate(plan)` takes.
"""
from __future__ import annotations

import itertools
import statistics
import sys
import time

from autoplan.specs import ClusterSpec, InfeasiblePlan, ModelSpec, ParallelPlan, TrainingSpec
from cost_model import Estimator, builtin_profile
from cost_model.published_rows import load_published_runs
from cost_model.splits import predict_with_mfu
from cost_model.validation import memory_summary, predict_runs, summarize



def _line(name: str, s: dict) -> str:
    if not s.get("num_rows"):
        return f"  {name:22s} no rows"
    rho = s.get("spearman_min")
    return (f"  {name:22s} n={s['num_rows']:3d}  MAPE {s['mape']:6.1%}  median {s['median']:6.1%}  "
            f"max {s['max']:7.1%}  Spearman min {'  n/a' if rho is None else f'{rho:+.2f}'}")


def accuracy() -> list:
    results = predict_runs(load_published_runs())
    summary = summarize(results)
    a, base = summary["analytical"], summary["constant_mfu_baseline"]
    print("Throughput (tokens/s/GPU) vs published runs; errors as % of measured")
    print("analytical cost model:")
    for name, s in a["per_source"].items():
        print(_line(name, s))
    print(_line("all", a))
    print(_line("bf16/fp16", a["bf16_fp16"]))
    print(_line("fp8", a["fp8"]))
    done = [r for r in results if not r.skipped]
    print(f"constant MFU {base['mfu']:.1%}:")
    by_source = {}
    for r in done:
        by_source.setdefault(r.run.source, []).append(r)
    for name, rows in sorted(by_source.items()):
        apes = [abs(predict_with_mfu(r.run, base["mfu"]) - r.run.measured_tokens_per_s_per_gpu)
                / r.run.measured_tokens_per_s_per_gpu for r in rows]
        print(f"  {name:22s} n={len(apes):3d}  MAPE {statistics.fmean(apes):6.1%}")
    print(_line("all", base))
    print(_line("bf16/fp16", base["bf16_fp16"]))
    print(f"skipped {len(summary['skipped'])} rows (plan breaks a rule of ours): "
          f"{', '.join(s['id'] for s in summary['skipped'])}")
    return done


def memory(done: list) -> None:
    """Predicted peak memory vs the 'peak mem' / 'max GPU mem' some sources print in their notes."""
    print("Peak memory, predicted / reported (sources that report it):")
    for source, m in memory_summary(done).items():
        print(f"  {source:22s} n={m['num_rows']:3d}  MAPE {m['mape']:6.1%}  median ratio {m['median_ratio']:.2f}  "
              f"range {m['min_ratio']:.2f}-{m['max_ratio']:.2f}")


def speed() -> None:
    """Microseconds per estimate over ~2000 plans of Qwen-72B on 128 H100s (the search's load)."""
    model = ModelSpec(name="qwen-72b", num_layers=80, hidden_size=8192, num_heads=64, num_kv_heads=64,
                      ffn_hidden_size=24576, vocab_size=152064, qkv_bias=True)
    training, cluster = TrainingSpec(global_batch_size=512, seq_len=4096), ClusterSpec(name="h100-80gb", num_gpus=128)
    t0 = time.perf_counter()
    est = Estimator(model, training, cluster, builtin_profile("h100-80gb"))
    build_s = time.perf_counter() - t0
    plans = []
    for tp, pp, cp, mb, zero, vpp in itertools.product((1, 2, 4, 8), (1, 2, 4, 5, 8, 10, 16), (1, 2),
                                                       (1, 2, 4), (0, 1, 3), (1, 2)):
        if 128 % (tp * pp * cp) or 512 % (128 // (tp * pp * cp) * mb):
            continue
        dp = 128 // (tp * pp * cp)
        for recompute, layers in (("none", 0), ("selective", 0), ("full", 80 // pp)):
            plans.append(ParallelPlan(dp=dp, tp=tp, pp=pp, cp=cp, vpp=vpp, zero_stage=zero,
                                      micro_batch_size=mb, num_microbatches=512 // (dp * mb),
                                      recompute=recompute, recompute_num_layers=layers,
                                      sequence_parallel=tp > 1))
    timings = []
    for _ in range(2):
        t0 = time.perf_counter()
        for plan in plans:
            try:
                est.estimate(plan)
            except InfeasiblePlan:
                pass
        timings.append((time.perf_counter() - t0) / len(plans))
    print(f"Speed: Estimator build {build_s * 1e3:.1f} ms; estimate(plan) {timings[0] * 1e6:.0f} us cold, "
          f"{timings[1] * 1e6:.0f} us warm per plan ({len(plans)} plans incl. plan.check)")


def main() -> int:
    done = accuracy()
    print()
    memory(done)
    print()
    speed()
    return 0


if __name__ == "__main__":
    sys.exit(main())
