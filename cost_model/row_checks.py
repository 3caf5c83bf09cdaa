"""Published rows that contradict a sibling: one plan timed twice in one session with a different
number of micro-batches, where the extra micro-batches took less time than their FLOPs need at peak.

Under any pipeline schedule a step is a fixed part (bubble, data-parallel collectives, optimizer) plus
the slowest stage's micro-batches run one after another (Narayanan et al. 2021, arXiv 2104.04473, sec.
2.2: (m + p - 1) micro-batch times under 1F1B). The same plan measured twice in one session (one
software stack, one cluster: cost_model.validation.problem_key's session) has the same fixed part and
the same per-micro-batch time, so going from m1 to m2 micro-batches adds their time, which is at least
the model FLOPs of the extra tokens divided over the GPUs at the GPU's dense peak. A pair whose step
times differ by less than that (beyond the noise a repeated plan shows) cannot both be right: one of
them is not what the plan costs, whatever the model. The check needs no fitted constant and no
prediction: only the FLOP count (autoplan.specs.flops) and the datasheet peak (cost_model.profiles).

EXCLUDED_ROWS names, for each pair the check flags, the row the other evidence contradicts, with that
evidence. An excluded row stays in the CSV (it is what the source printed); no fit sees it and
`autoplan validate` lists it among the skipped rows with its reason. tests/test_row_checks.py holds
the list and the check to each other: every flagged pair has one excluded row, and no row is excluded
that no pair flags.
"""
from __future__ import annotations

from dataclasses import dataclass

from autoplan.specs.flops import model_flops_per_token
from cost_model.profiles import builtin_profile

REPEAT_NOISE = 0.05
"""Allowance for timing noise, as a fraction of the longer step: about twice the spread of the one plan
timed twice in one session in the data (BigScience tr11 02-25, tp4 pp12 mbs2, BLOOM-PREQ-21 and -22:
110.48 and 113.54 s, 2.8 %). Every row of those sweeps is a single-iteration snapshot (their notes)."""

EXCLUDED_ROWS = {
    "BLOOM-PREQ-08": ("BLOOM-PREQ-09",
                      "its plan (tp8 pp6 dp8 mbs4) timed in the same session with 64 micro-batches instead of 49 "
                      "(-09) took 114.11 s against its 113.01 s, while the 15 extra micro-batches need at least "
                      "9.1 s at the A100's peak. -09 is 6 % faster than the same plan timed on 02-21 (-07, "
                      "121.5 s), as the two plans timed on both days are 4-5 % faster after that day's NUMA fix "
                      "(-03/-12, -02/-14); at -11/-12's ratio for 98 vs 128 micro-batches (0.79), -08 would "
                      "take ~90 s, not 113 s."),
}
"""Row id -> (the sibling it contradicts, the evidence beyond the pair that says which of the two is
wrong). No fit and no score uses the row."""


def excluded_reason(run_id: str) -> str:
    """Why the row is left out of every fit and score, in one line ("" when it is not)."""
    if run_id not in EXCLUDED_ROWS:
        return ""
    sibling = EXCLUDED_ROWS[run_id][0]
    return (f"inconsistent_measurement: {sibling} ran the same plan in the same session with more micro-batches, "
            f"in less added time than their FLOPs need at peak (cost_model/row_checks.py EXCLUDED_ROWS)")


@dataclass(frozen=True)
class PairCheck:
    fewer: str
    """The row with fewer micro-batches."""
    more: str
    extra_micro_batches: int
    step_difference_s: float
    """Measured step time of `more` minus that of `fewer`."""
    min_difference_s: float
    """The least the extra micro-batches can add: their model FLOPs over every GPU at peak."""
    noise_s: float

    @property
    def contradicts(self) -> bool:
        return self.step_difference_s + self.noise_s < self.min_difference_s


def step_time_s(run) -> float:
    """The measured step time of a published row (from its tokens/s/GPU: every row carries it)."""
    tokens = run.training.global_batch_size * run.training.seq_len
    return tokens / (run.measured_tokens_per_s_per_gpu * run.cluster.num_gpus)


def _same_plan_key(run) -> tuple:
    """One plan in one session: the campaign (PublishedRun.campaign, the problem less its global batch),
    the plan less its micro-batch count, and the switches."""
    return (*run.campaign(), repr(run.plan.replace(num_microbatches=0)), *run.switches())


def pair_check(fewer, more) -> PairCheck:
    """The check of two rows of one plan and session, `fewer` with fewer micro-batches than `more`."""
    extra_tokens = (more.training.global_batch_size - fewer.training.global_batch_size) * more.training.seq_len
    peak = builtin_profile(more.gpu).peak(more.training.dtype)
    min_s = extra_tokens * model_flops_per_token(more.model, more.training.seq_len) / (more.cluster.num_gpus * peak)
    longer = max(step_time_s(fewer), step_time_s(more))
    return PairCheck(fewer.id, more.id, more.plan.num_microbatches - fewer.plan.num_microbatches,
                     step_time_s(more) - step_time_s(fewer), min_s, REPEAT_NOISE * longer)


def same_plan_pairs(runs: list) -> list:
    """PairCheck of every two rows of one plan and session that differ in micro-batch count."""
    groups = {}
    for run in runs:
        groups.setdefault(_same_plan_key(run), []).append(run)
    checks = []
    for rows in groups.values():
        rows = sorted(rows, key=lambda r: r.plan.num_microbatches)
        checks += [pair_check(a, b) for i, a in enumerate(rows) for b in rows[i + 1:]
                   if a.plan.num_microbatches < b.plan.num_microbatches]
    return checks


def contradicting_pairs(runs: list) -> list:
    """The pairs of `runs` that cannot both be right (PairCheck.contradicts)."""
    return [c for c in same_plan_pairs(runs) if c.contradicts]


def unexplained(runs: list, excluded: dict = EXCLUDED_ROWS) -> list:
    """What keeps the exclusions and the check apart, one line each: a contradicting pair with neither
    or both rows excluded, an excluded row whose named sibling does not contradict it. [] when the two
    agree (tests/test_row_checks.py holds the shipped data to it)."""
    problems, flagged = [], set()
    for pair in contradicting_pairs(runs):
        out = [row for row in (pair.fewer, pair.more) if row in excluded]
        flagged |= {(pair.fewer, pair.more), (pair.more, pair.fewer)}
        if len(out) != 1:
            problems.append(f"{pair.fewer} and {pair.more} contradict each other ({pair.step_difference_s:.2f} s "
                            f"apart for {pair.extra_micro_batches} more micro-batches, at least "
                            f"{pair.min_difference_s:.2f} s at peak) and {'both are' if out else 'neither is'} excluded; "
                            f"exclude the one the other evidence contradicts")
    problems += [f"{row} is excluded but {sibling} does not contradict it" for row, (sibling, _) in excluded.items()
                 if (row, sibling) not in flagged]
    return problems
