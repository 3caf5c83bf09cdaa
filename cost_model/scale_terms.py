"""What makes the same per-GPU workload slower as a job grows, beyond the collectives' own bytes.

The collectives' bandwidth and latency at a group's size are priced where they run (the profile's
collective table, cost_model/tables.py: NCCL's ring and tree latencies over the nodes a group spans,
cost_model/profiles.py `nccl_inter_node_latency_s`, with fewer ranks per node too: `_ring_time_s`). What is left is synchronisation: every step ends
in collectives that span all the job's GPUs (the data-parallel gradient reduction or weight gather
joins the replicas; each replica's tensor and pipeline ranks are joined inside it), so the step lasts
as long as its slowest GPU's. With per-GPU step times that scatter independently by a relative
standard deviation sigma around the mean, the step waits on average

    sync_wait = sigma x busy_s x E[max of N standard normals]

beyond the mean (order statistics of N i.i.d. normals: E[max] grows as ~sqrt(2 ln N), 1/sqrt(pi) at
N = 2, 3/(2 sqrt(pi)) at N = 3). N counts GPUs, not nodes: each GPU's kernels and clocks vary on
their own. `busy_s` is the step without the wait.
"""
from __future__ import annotations

import math
from functools import lru_cache

STEP_JITTER_REL = 0.0027
"""Relative standard deviation of one GPU's step time from step to step: measured, the median over the
13 `autoplan run` records of cost_model/data/h100_runs that trained (one H100 SXM, 4-5 timed steps
each after warm-up; runs.jsonl and 2026-11-27/runs-h100-2026-11-27.jsonl) of stdev/mean of their
step_times_s, 0.0005-0.025 (tests/test_scale_terms.py recomputes it from the records). Assumption: a GPU
of a large job scatters as much, and independently of the others."""

_GRID_STEP = 0.01
"""Integration step (in standard deviations) of expected_max_normal: the integral converges to ~1e-6."""


def _normal_cdf(x: float) -> float:
    return 0.5 * (1.0 + math.erf(x / math.sqrt(2.0)))


@lru_cache(maxsize=None)
def expected_max_normal(num_ranks: int) -> float:
    """E[max of `num_ranks` i.i.d. standard normals]: the integral of x d(Phi(x)^N), written as
    int_0^inf (1 - Phi^N) dx - int_-inf^0 Phi^N dx (the mean of a variable from its distribution
    function), by the trapezoid rule over [-8, 8 + sqrt(2 ln N)]. 0 for one rank."""
    if num_ranks <= 1:
        return 0.0
    top = 8.0 + math.sqrt(2.0 * math.log(num_ranks))
    upper = _trapezoid(lambda x: 1.0 - _normal_cdf(x) ** num_ranks, 0.0, top)
    lower = _trapezoid(lambda x: _normal_cdf(x) ** num_ranks, -8.0, 0.0)
    return upper - lower


def _trapezoid(f, a: float, b: float) -> float:
    steps = max(1, math.ceil((b - a) / _GRID_STEP))
    h = (b - a) / steps
    return h * (0.5 * f(a) + sum(f(a + i * h) for i in range(1, steps)) + 0.5 * f(b))


def sync_wait_s(busy_s: float, num_gpus: int, jitter_rel: float | None = None) -> float:
    """Seconds per step the job waits for its slowest GPU: jitter_rel (STEP_JITTER_REL unless given)
    x busy_s x E[max of num_gpus standard normals] (module docstring). 0 on one GPU."""
    jitter = STEP_JITTER_REL if jitter_rel is None else jitter_rel
    return jitter * busy_s * expected_max_normal(num_gpus)
