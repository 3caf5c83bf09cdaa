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
from dataclasses import dataclass

from autoplan.specs.flops import model_flops_per_token
from autoplan.specs.frameworks import base_framework_name
from cost_model.profiles import builtin_profile
from cost_model.row_checks import excluded_reason

GENERATIONS = {"a100": "ampere", "h100": "hopper", "h200": "hopper"}
"""GPU type prefix -> architecture generation (the built-in profiles' GPUs)."""

SCALE_BANDS = ((64, "<=64 GPUs"), (1024, "65-1024 GPUs"), (None, ">1024 GPUs"))


@dataclass(frozen=True)
class Where:
    """Where a measurement was made, as the splits group it: a published row's, or the evidence a
    fact was solved from (cost_model.source_facts.RowDerivedFact), which need not be a row of the CSV."""
    source: str
    gpu: str
    num_gpus: int
    dtype: str


def where(measured) -> Where:
    """A published run's Where (a Where is its own)."""
    if isinstance(measured, Where):
        return measured
    return Where(measured.source, measured.gpu, measured.cluster.num_gpus, measured.training.dtype)


def gpu_generation(gpu: str) -> str:
    return next((g for prefix, g in GENERATIONS.items() if gpu.startswith(prefix)), gpu)


def scale_band(num_gpus: int) -> str:
    return next(name for limit, name in SCALE_BANDS if limit is None or num_gpus <= limit)


def precision_group(dtype: str) -> str:
    return "fp8" if dtype == "fp8" else "bf16/fp16"


SPLITS = {
    "source": (lambda run: where(run).source, None),
    "gpu_generation": (lambda run: gpu_generation(where(run).gpu), None),
    "scale": (lambda run: scale_band(where(run).num_gpus), None),
    # Only fp8 is held out: fitting on the few fp8 rows to predict bf16 asks nothing a user asks.
    "precision": (lambda run: precision_group(where(run).dtype), ("fp8",)),
}
"""Split name -> (group of a run or of a Where, the groups held out in turn; None = every group)."""


MOE_SPLIT = "moe"
"""The split of the validation-only MoE rows (not a key of SPLITS: it has no refits)."""


def validation_only(run) -> bool:
    """A row no constant is fitted on: a mixture-of-experts run (issue 25's evidence)."""
    return run.model.is_moe


def fit_rows(runs: list) -> list:
    """The rows constants are fitted on (the full fit and every refit) and scored out of sample: all but
    the validation-only and those a sibling contradicts (cost_model/row_checks.py EXCLUDED_ROWS)."""
    return [r for r in runs if not validation_only(r) and not excluded_reason(r.id)]


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


def withhold(runs: list, split: str, group: str) -> list:
    """`runs` without the facts a source's measured rows chose where those measurements lie in `group`
    of `split` (cost_model.source_facts.RowDerivedFact): the held-out rows must not see them, and neither
    must the refit's training rows (benchmarks/fit_constants.py)."""
    key = SPLITS[split][0]
    return [r.withholding(lambda w: key(w) == group) for r in runs]


FRAMEWORK_FAMILIES = {
    "megatron-2021": "megatron", "megatron-core": "megatron", "megatron-deepspeed": "megatron",
    "deepspeed": "deepspeed",
    "torchtitan": "pytorch", "llm-foundry": "pytorch", "autoplan": "pytorch", "autoplan-91ee867": "pytorch",
    "autoplan-xla": "xla",
}
"""Built-in framework -> its family for the prediction intervals' strata: Megatron's kernels and
model-parallel code (Megatron-DeepSpeed runs them under DeepSpeed's engine), DeepSpeed's ZeRO on
PyTorch modules, PyTorch-native stacks (FSDP, DTensor TP, torch.compile), XLA."""


def stratum(run=None, *, gpu: str = "", num_gpus: int = 0, framework: str = "", dtype: str = "",
            moe: bool = False) -> dict:
    """The prediction-interval stratum of a published run (or of the given facts of a plan):
    GPU generation x scale band x framework family x precision, and dense or MoE."""
    if run is not None:
        gpu, num_gpus, framework, dtype, moe = (run.gpu, run.cluster.num_gpus, run.framework,
                                                run.training.dtype, run.model.is_moe)
    name = base_framework_name(framework)
    return {"generation": gpu_generation(gpu), "scale": scale_band(num_gpus),
            "family": FRAMEWORK_FAMILIES.get(name, name), "precision": precision_group(dtype), "moe": bool(moe)}
