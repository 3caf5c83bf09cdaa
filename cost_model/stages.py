"""Which pipeline ranks can bound a plan's step time and memory, when the stages are uneven.

`ParallelPlan.stage_num_layers` says how many layers each pipeline rank holds. Evaluating every
rank on every estimate would cost O(pp); only a few ranks can be the worst, so the split and those
ranks are computed once per (pp, vpp, num_layers):

- memory: the first rank (most micro-batches in flight under 1F1B, Narayanan 2021 sec. 2.2.1, and
  the embedding), the last (the logits) and, for each layer count above the first rank's, the
  lowest-index middle rank holding it. A middle rank with no more layers than the first holds no
  more of anything (fewer micro-batches in flight, no embedding), and among ranks of one count the
  lowest index holds the most micro-batches (with interleaving, ranks of one count below the last
  also have the same chunks, ParallelPlan.chunk_num_layers), so no other rank can be the peak.
- time per micro-batch: the first rank (embedding), the last (head and loss) and the middle rank
  with the most layers; the slowest of them sets the pace of the whole pipeline.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from autoplan.specs import ParallelPlan


@dataclass(frozen=True)
class StageSplit:
    num_layers: tuple
    """Layers of each pipeline rank, rank 0 first (summed over its virtual stages)."""
    memory_ranks: tuple
    """Ranks whose memory can be the peak: 0, pp-1, and the first middle rank of each count above rank 0's."""
    time_ranks: tuple
    """Ranks whose per-micro-batch time can be the slowest: 0, pp-1 and the largest middle rank
    (the last two also bound the data-parallel traffic and the optimizer step)."""
    layer_groups: tuple
    """(layers, number of ranks holding that many), for sums over all ranks."""
    chunk_layers: tuple
    """Layers of each rank's virtual stages (model chunks), [rank][chunk]; one chunk when vpp = 1."""


@lru_cache(maxsize=4096)
def _split(pp: int, vpp: int, num_layers: int) -> StageSplit:
    split = ParallelPlan(pp=pp, vpp=vpp)
    counts = tuple(split.stage_num_layers(num_layers))
    chunks = tuple(tuple(c) for c in split.chunk_num_layers(num_layers))
    last = pp - 1
    memory_ranks, time_ranks = [0], [0]
    if pp > 1:
        memory_ranks.append(last)
        time_ranks.append(last)
    middle = range(1, last)
    for count in sorted({counts[r] for r in middle if counts[r] > counts[0]}):
        memory_ranks.append(next(r for r in middle if counts[r] == count))
    if len(middle):
        time_ranks.append(max(middle, key=lambda r: counts[r]))
    groups = tuple((n, counts.count(n)) for n in sorted(set(counts)))
    return StageSplit(counts, tuple(memory_ranks), tuple(time_ranks), groups, chunks)


def stage_split(plan: ParallelPlan, num_layers: int) -> StageSplit:
    """The (cached) split of `num_layers` over the plan's pipeline ranks."""
    return _split(plan.pp, plan.vpp, num_layers)


def bubble_in_slowest_rank_times(slowest_s: float, total_s: float) -> float:
    """The 1F1B pipeline bubble in units of the slowest rank's micro-batch time, from that time and
    the sum over all ranks: with per-rank forward+backward times t_i the step of m micro-batches
    takes (m-1)·max t + sum t (Narayanan et al. 2021 sec. 2.2; each other rank's micro-batch is
    paid once in the fill and drain), so the bubble is (sum t - max t) / max t, p-1 for equal ranks.
    Exact when the slowest rank is the last (the head's) and the others are equal, an upper bound
    otherwise (tests/test_pipeline_bubble.py simulates the schedule step by step)."""
    return (total_s - slowest_s) / slowest_s if slowest_s > 0 else 0.0
