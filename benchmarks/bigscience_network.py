"""What Jean Zay's network delivered to BLOOM's data-parallel collectives, measured by BigScience's pairs.

BigScience timed one 200B model (80 layers, hidden 14400, 96 heads, vocab 250k, sequence 2048, TP 8,
PP 10, micro-batch 1, batch 2048, ZeRO-1) on the A100 nodes that later trained BLOOM, once on one
replica (80 GPUs) and once on two (160 GPUs, DP = 2), in fp16 and in bf16 (bigscience-workshop/
bigscience train/tr11-176B-ml/chronicles-prequel.md, "Best TFLOPs", 2022-02-17, "elapsed time per
iteration" of each log line):

    fp16: one replica 844.81 s, two replicas 430.21 s
    bf16: one replica 853.81 s, two replicas 434.14 s

Two replicas each run half the micro-batches, so the two-replica time less half the one-replica time
is what the second replica costs: the gradient all-reduce and ZeRO-1's weight all-gather between the
replicas, which sit on different nodes, and the longer relative pipeline bubble. Everything else the
model prices (the per-micro-batch costs included) cancels. This script prices both runs with the
model and solves, for each pair, the fraction of the profile's bus bandwidth (Jean Zay's 4 x 100 Gb/s
Omni-Path links per 8-GPU node: 6.25 GB/s per GPU) at which the model's second replica costs what the
measured one did:

    .venv/bin/python benchmarks/bigscience_network.py

The geometric mean of the two is BLOOM's `dp_bandwidth_scale` (cost_model/source_facts.py
SOURCES["BLOOM"]): a measured fact of that network under that DeepSpeed, so no fit sets it. It is
low, and BigScience said why: NCCL did not use the Omni-Path links' bandwidth (experiments/bandwidth/
README.md, "an issue with nccl that doesn't fully utilize Intel OPA"); their all_reduce_bench on 4 of
the A100 nodes (all_reduce_bench-a100-n4.txt, 2022-01) reached a bus bandwidth of 40.5 Gb/s (5.07
GB/s) on one 32-rank ring, a tenth of the 50 GB/s each node's links carry.
"""
from __future__ import annotations

import dataclasses
import math
import sys
from functools import lru_cache
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cost_model.constants import load_constants  # noqa: E402
from cost_model.estimator import Estimator  # noqa: E402
from cost_model.published_rows import load_published_runs  # noqa: E402

MEASURED_S = {"fp16": {1: 844.81, 2: 430.21}, "bf16": {1: 853.81, 2: 434.14}}
"""Seconds per iteration, by dtype and number of replicas (chronicles-prequel.md, 2022-02-17)."""
TEMPLATE_ROW = "BLOOM-PREQ-01"
"""A BLOOM row of the same cluster and software: its profile, framework facts and architecture."""


@lru_cache(maxsize=1)
def _template():
    return next(r for r in load_published_runs() if r.id == TEMPLATE_ROW)


def step_s(dtype: str, replicas: int, dp_bandwidth_scale: float, constants=None) -> float:
    """The model's step time of the 200B run on `replicas` replicas."""
    constants = constants or load_constants()
    template = _template()
    model = dataclasses.replace(template.model, num_layers=80, hidden_size=14400, num_heads=96, num_kv_heads=96,
                                ffn_hidden_size=4 * 14400, vocab_size=250880)
    plan = dataclasses.replace(template.plan, dp=replicas, tp=8, pp=10, vpp=1, micro_batch_size=1,
                               num_microbatches=2048 // replicas, zero_stage=1, recompute="full")
    cluster = dataclasses.replace(template.cluster, num_gpus=80 * replicas)
    training = dataclasses.replace(template.training, global_batch_size=2048, seq_len=2048, dtype=dtype)
    framework = template.framework_facts(constants).with_overrides(dp_bandwidth_scale=dp_bandwidth_scale)
    est = Estimator(model, training, cluster, template.profile(), framework=framework, constants=constants,
                    allow_tp_across_nodes=True)
    return est.estimate(plan).step_time_s


def second_replica_s(dtype: str, dp_bandwidth_scale: float, constants=None) -> float:
    return step_s(dtype, 2, dp_bandwidth_scale, constants) - step_s(dtype, 1, dp_bandwidth_scale, constants) / 2


def solved_scale(dtype: str, constants=None) -> float:
    """The bandwidth fraction at which the model's second replica costs the measured seconds
    (bisection in log space; a lower fraction makes the second replica dearer)."""
    measured = MEASURED_S[dtype][2] - MEASURED_S[dtype][1] / 2
    low, high = 0.01, 1.0
    for _ in range(20):                           # to 1e-5 of the fraction, far below the pairs' noise
        mid = math.sqrt(low * high)
        low, high = (mid, high) if second_replica_s(dtype, mid, constants) > measured else (low, mid)
    return math.sqrt(low * high)


def measured_dp_bandwidth_scale(constants=None) -> float:
    """The geometric mean of the fp16 and bf16 pairs' solved fractions."""
    return math.sqrt(solved_scale("fp16", constants) * solved_scale("bf16", constants))


def main() -> None:
    constants = load_constants()
    print(f"{'dtype':5s} {'DP=1 s':>8s} {'DP=2 s':>8s} {'2nd replica s':>14s} | model at scale 1: {'DP=1 s':>7s} "
          f"{'2nd replica s':>14s} | solved scale")
    for dtype, times in MEASURED_S.items():
        print(f"{dtype:5s} {times[1]:8.2f} {times[2]:8.2f} {times[2] - times[1] / 2:14.2f} | "
              f"{'':17s} {step_s(dtype, 1, 1.0, constants):7.1f} {second_replica_s(dtype, 1.0, constants):14.2f} | "
              f"{solved_scale(dtype, constants):.3f}")
    print(f"BLOOM's dp_bandwidth_scale (geometric mean): {measured_dp_bandwidth_scale(constants):.3f}")


if __name__ == "__main__":
    main()
