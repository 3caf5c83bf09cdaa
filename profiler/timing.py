"""Timing with measurement hygiene: warm-up, device clocks, every sample kept.

One *sample* is the mean time of `inner` back-to-back runs of an operation, so that ops far shorter
than the clock's resolution (or than a kernel launch) are still timed honestly. On a GPU the clock
is a pair of CUDA events on the current stream, read after a synchronize; on the CPU it is
`time.perf_counter`. How many runs a sample holds and how many samples a shape gets follow from a
warm-up estimate and a `TimingPolicy`, so big shapes get few long samples and small shapes many.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True)
class TimingPolicy:
    warmup_iterations: int
    """Untimed runs first: kernel selection, caches, lazy allocation and NCCL channels settle."""
    min_samples: int
    """Never fewer samples than this, however slow the shape (the median needs a few)."""
    max_samples: int
    target_sample_s: float
    """One sample repeats the op until it lasts about this long (clock resolution, launch cost)."""
    budget_s: float
    """Time one shape may spend being sampled after warm-up, before min/max are applied."""

    def plan(self, estimate_s: float) -> tuple[int, int]:
        """(runs per sample, number of samples) for an op that takes about `estimate_s`."""
        estimate_s = max(estimate_s, 1e-9)
        inner = max(1, min(10_000, math.ceil(self.target_sample_s / estimate_s)))
        num_samples = int(self.budget_s / (estimate_s * inner))
        return inner, max(self.min_samples, min(self.max_samples, num_samples))


class Clock:
    """Times `fn` run `inner` times; returns seconds per run."""

    def __init__(self, device_type: str):
        self.device_type = device_type
        if device_type == "cuda":
            import torch

            self._torch = torch

    def synchronize(self) -> None:
        if self.device_type == "cuda":
            self._torch.cuda.synchronize()

    def time_per_run_s(self, fn: Callable[[], object], inner: int) -> float:
        if self.device_type == "cuda":
            # Events are recorded on the stream the work is queued on, so host-side launch gaps
            # before the first kernel are not counted; synchronizing on the end event reads them.
            start = self._torch.cuda.Event(enable_timing=True)
            end = self._torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(inner):
                fn()
            end.record()
            end.synchronize()
            return start.elapsed_time(end) / 1e3 / inner
        began = time.perf_counter()
        for _ in range(inner):
            fn()
        return (time.perf_counter() - began) / inner


def sample_times_s(fn: Callable[[], object], clock: Clock, policy: TimingPolicy,
                   before_sample: Callable[[], None] | None = None,
                   agree: Callable[[float], float] | None = None) -> tuple[list[float], int]:
    """Warm up, then return (seconds per run of every sample, runs per sample).

    `agree` maps this process's warm-up estimate to one shared by every rank of a collective, so
    all ranks run the same number of collectives (different counts would hang). `before_sample`
    runs untimed before each sample (a barrier, so ranks start a collective together).
    """
    clock.synchronize()
    estimate_s = float("inf")
    for _ in range(max(1, policy.warmup_iterations)):
        estimate_s = clock.time_per_run_s(fn, 1)
    if agree is not None:
        estimate_s = agree(estimate_s)
    inner, num_samples = policy.plan(estimate_s)
    samples = []
    for _ in range(num_samples):
        if before_sample is not None:
            before_sample()
        samples.append(clock.time_per_run_s(fn, inner))
    return samples, inner


class Recorder:
    """Collects every timed sample of one process as flat rows (the raw samples CSV)."""

    def __init__(self, rank: int, host: str):
        self.rank = rank
        self.host = host
        self.rows: list[dict] = []

    def add(self, kind: str, samples_s: list[float], runs_per_sample: int, *, flops: float = 0.0,
            bytes_moved: float = 0.0, bus_factor: float = 0.0, first_index: int = 0, **fields) -> None:
        """One row per sample; rates follow from the work done per run and the sample's time.
        `first_index` numbers samples on from an earlier call for the same shape (sweep passes)."""
        for index, time_s in enumerate(samples_s, start=first_index):
            row = {"rank": self.rank, "host": self.host, "kind": kind, **fields,
                   "sample_index": index, "runs_per_sample": runs_per_sample, "time_s": time_s}
            if flops:
                row["flops_per_s"] = flops / time_s
            if bytes_moved:
                row["bytes_per_s"] = bytes_moved / time_s
            if bus_factor:
                row["bus_bandwidth_bytes_per_s"] = row["bytes_per_s"] * bus_factor
            self.rows.append(row)
