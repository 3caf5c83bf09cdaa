"""Round-robin passes over a device's shapes: every shape measured early, in the middle and late.

Measuring all samples of one shape back to back and then the next means the shapes measured last
are measured hottest (the clock drops under sustained load), and a quick sweep (few shapes, short)
and a full one (many shapes, long) then disagree on the same shape. Here the sweep visits every
shape once per pass and takes its share of that shape's samples each time, so each shape's median
mixes the whole sweep's conditions. A visit builds the shape's tensors, runs it once untimed
(caches, kernel choice), samples, and frees them: big shapes never coexist in device memory.

One procedure for every sweep: the first visit warms up (TimingPolicy.warmup_iterations) and fixes
the runs per sample and the number of samples (TimingPolicy.plan), later visits only re-warm once.
Every sample row records its pass (`sweep_pass`), so the drift between passes is visible.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from profiler.timing import TimingPolicy


@dataclass(frozen=True)
class Timed:
    """One timed operation of a shape: what to run and what one run does."""
    kind: str
    """Recorder kind: "matmul", "attention", "memory_op"."""
    fn: Callable[[], object]
    work: dict
    """flops= or bytes_moved= per run (Recorder.add keywords)."""
    fields: dict
    """The shape's columns in the samples CSV."""


@dataclass(frozen=True)
class Probe:
    """One shape: a memory guard and how to build its timed operations (allocates on call)."""
    what: str
    num_bytes: int
    build: Callable[[], list]
    """-> list of Timed, in the order they run (attention: forward, then backward)."""
    num_steps: int = 1
    """Progress-bar steps per pass."""


@dataclass
class _Plan:
    inner: int
    num_samples: int
    taken: int = 0


@dataclass
class PassState:
    plans: dict = field(default_factory=dict)
    """(probe index, op index) -> _Plan, fixed on the first visit."""
    skipped: set = field(default_factory=set)
    """Probe indices that did not fit (not revisited)."""


def share(num_samples: int, num_passes: int, pass_index: int) -> int:
    """Samples a shape takes in pass `pass_index`: an even share, the first passes taking the rest."""
    base, extra = divmod(num_samples, num_passes)
    return base + (pass_index < extra)


def run_passes(bench, probes: list, policy: TimingPolicy, num_passes: int) -> None:
    """Measure every probe in `num_passes` round-robin passes (bench: profiler.compute.Bench)."""
    state = PassState()
    for pass_index in range(num_passes):
        for index, probe in enumerate(probes):
            if index in state.skipped:
                for _ in range(probe.num_steps):
                    bench.tick()
                continue
            _visit(bench, probe, index, policy, num_passes, pass_index, state)


def _visit(bench, probe: Probe, index: int, policy: TimingPolicy, num_passes: int, pass_index: int,
           state: PassState) -> None:
    with bench.shape(probe.what, probe.num_bytes, probe.num_steps) as runs:
        if not runs:
            state.skipped.add(index)
            return
        state.skipped.add(index)          # until this visit completes (out of memory -> stays skipped)
        for op_index, op in enumerate(probe.build()):
            key = (index, op_index)
            plan = state.plans.get(key)
            if plan is None:
                # First visit: the full warm-up fixes this shape's runs per sample and sample count.
                bench.clock.synchronize()
                estimate_s = float("inf")
                for _ in range(max(1, policy.warmup_iterations)):
                    estimate_s = bench.clock.time_per_run_s(op.fn, 1)
                plan = state.plans[key] = _Plan(*policy.plan(estimate_s))
            samples = _samples(op.fn, bench.clock, plan.inner, share(plan.num_samples, num_passes, pass_index),
                               warm=plan.taken == 0)
            bench.recorder.add(op.kind, samples, plan.inner, **op.work, **op.fields,
                               sweep_pass=pass_index, first_index=plan.taken)
            plan.taken += len(samples)
        state.skipped.discard(index)


def _samples(fn, clock, inner: int, count: int, warm: bool) -> list[float]:
    """`count` samples of `inner` runs, after one untimed run unless just warmed up (the tensors
    are new on every visit)."""
    if count and not warm:
        clock.synchronize()
        clock.time_per_run_s(fn, 1)
    return [clock.time_per_run_s(fn, inner) for _ in range(count)]
