"""Out-of-sample splits: the ways a user plans beyond the evidence, each scored with refitted constants.

Leaving one source out tests little when each source is one framework on one GPU generation. A
user plans for another GPU generation, another scale or another precision than the runs the
constants saw, so each split below groups the published runs by one of those, and every group is
predicted with the constants refitted without it (benchmarks/fit_constants.py ships the refits in
constants.json "held_out", keyed "<split>:<group>"). Beside each figure stands the one-number guess
a user could make instead: one MFU, fitted on the same training rows (the median measured MFU,
which minimises the mean |log error| of a constant), applied to the held-out rows.

Mixture-of-experts rows (a `moe_num_experts` cell) are validation-only: no fit ever sees them
(`fit_rows`), so they are out of sample by construction and are scored as their own split, "moe",
with the shipped constants and the constant-MFU guess fitted on every non-MoE row.
"""
from __future__ import annotations

import statistics

from autoplan.specs.flops import model_flops_per_token
from cost_model.profiles import builtin_profile

GENERATIONS = {"a100": "ampere", "h100": "hopper", "h200": "hopper"}
"""GPU type prefix -> architecture generation (the built-in profiles' GPUs)."""

SCALE_BANDS = ((64, "<=64 GPUs"), (1024, "65-1024 GPUs"), (None, ">1024 GPUs"))


def gpu_generation(gpu: str) -> str:
    return next((g for prefix, g in GENERATIONS.items() if gpu.startswith(prefix)), gpu)


def scale_band(num_gpus: int) -> str:
    return next(name for limit, name in SCALE_BANDS if limit is None or num_gpus <= limit)


def precision_group(dtype: str) -> str:
    return "fp8" if dtype == "fp8" else "bf16/fp16"


SPLITS = {
    "source": (lambda run: run.source, None),
    "gpu_generation": (lambda run: gpu_generation(run.gpu), None),
    "scale": (lambda run: scale_band(run.cluster.num_gpus), None),
    # Only fp8 is held out: fitting on the few fp8 rows to predict bf16 asks nothing a user asks.
    "precision": (lambda run: precision_group(run.training.dtype), ("fp8",)),
}
"""Split name -> (group of a run, the groups held out in turn; None = every group)."""


MOE_SPLIT = "moe"
"""The split of the validation-only MoE rows (not a key of SPLITS: it has no refits)."""


def validation_only(run) -> bool:
    """A row no constant is fitted on: a mixture-of-experts run (issue 25's evidence)."""
    return run.model.is_moe


def fit_rows(runs: list) -> list:
    """The rows constants are fitted on (the full fit and every refit): all but the validation-only."""
    return [r for r in runs if not validation_only(r)]


def split_groups(runs: list, split: str) -> list:
    """The groups of `split` that are held out in turn, in a stable order (over the fit rows)."""
    key, only = SPLITS[split]
    groups = sorted({key(r) for r in fit_rows(runs)})
    return [g for g in groups if only is None or g in only]


def refit_key(split: str, group: str) -> str:
    return f"{split}:{group}"


def measured_mfu(run) -> float:
    peak = builtin_profile(run.gpu).peak(run.training.dtype)
    return run.measured_tokens_per_s_per_gpu * model_flops_per_token(run.model, run.training.seq_len) / peak


def constant_mfu_guess(training_runs: list) -> float:
    """The one MFU that minimises mean |log(predicted/measured)| over `training_runs`: their median MFU."""
    return statistics.median(measured_mfu(r) for r in training_runs)


def predict_with_mfu(run, mfu: float) -> float:
    peak = builtin_profile(run.gpu).peak(run.training.dtype)
    return mfu * peak / model_flops_per_token(run.model, run.training.seq_len)
