"""Plan records and their featurization for the learned plan-level correction.

A *plan record* is one flat dict per (model, training, cluster, plan) holding the raw plan fields,
the hardware figures the analytical model used and the analytical estimate's totals. Records are
what calibration data is made of (published runs, Measurement records) and what the search scores.

`PlanFeaturizer` turns a table of records into the numeric features the correction learns from. It
is a stateless scikit-learn transformer, so `Pipeline([("features", PlanFeaturizer()), ...])` and
`cross_validate` work on raw records. The feature list is versioned (FEATURE_SCHEMA): a calibration
file trained on one schema is refused by another.
"""
from __future__ import annotations

import math

import numpy as np
from sklearn.base import BaseEstimator, TransformerMixin

from autoplan.specs import DEFAULT_FRAMEWORK

FEATURE_SCHEMA = "autoplan.plan-features/1"

SOFTWARE_FAMILIES = {
    "megatron": ("megatron-core", "megatron-2021", "megatron-deepspeed"),
    "zero3": ("deepspeed",),
    "fsdp": ("llm-foundry", "torchtitan", "autoplan"),
}
"""Families of the frameworks the analytical estimate can assume (autoplan.specs.frameworks), one 0/1 feature each, plus the stack's flash-attention switch. Families rather than
stacks, so that a search for the default megatron-core stack is corrected by what was learned on the
other Megatron versions; a stack of no known family is out of distribution (`software_other`).
Leave-one-group-out on the published rows scored families+flash at least as well as one switch per
stack (docs/learned.md)."""

# Name -> one-line meaning. The order is the column order of the feature matrix.
FEATURES = {
    "log10_num_params": "model size, log10 of the parameter count",
    "log2_num_gpus": "cluster size",
    "log2_num_nodes": "nodes the job spans (0 = one node: no scale-out network)",
    "log2_tp": "tensor-parallel degree",
    "log2_pp": "pipeline-parallel degree",
    "log2_dp": "data-parallel degree",
    "log2_cp": "context-parallel degree",
    "log2_vpp": "virtual pipeline stages per rank",
    "sequence_parallel": "Megatron sequence parallelism on (1) or off (0)",
    "zero_stage": "ZeRO stage 0-3 (3 = FSDP)",
    "log2_micro_batch": "sequences per micro-batch",
    "recompute_full_fraction": "share of each stage's layers fully recomputed",
    "recompute_selective": "selective (attention-core) recompute on (1) or off (0)",
    "bubble_fraction": "pipeline bubble (p-1)/(v*m), Narayanan et al. 2021 (arXiv 2104.04473) sec. 2.2",
    "comm_share": "analytical exposed communication time / analytical step time",
    "log2_tokens_per_gpu": "tokens each GPU processes per step",
    "log2_seq_len": "sequence length",
    "log10_peak_flops": "the GPU's dense peak for the dtype (identifies the GPU generation)",
    "log10_hbm_bandwidth": "the GPU's achievable HBM bandwidth (separates A100 40/80GB, H100/H200)",
    "fp8": "fp8 matmuls (1) or 16-bit (0)",
    "analytical_mfu": "the MFU the analytical model predicts",
    **{f"software_{family}": f"the analytical estimate assumed a {family} software stack ({', '.join(stacks)})"
       for family, stacks in SOFTWARE_FAMILIES.items()},
    "software_other": "the analytical estimate assumed a stack of no known family",
    "flash_attention": "the stack runs fused flash attention (1) or materializes the scores (0)",
}
FEATURE_NAMES = tuple(FEATURES)

GUARD_FEATURES = (
    "log10_num_params", "log2_num_gpus", "log2_num_nodes", "log2_tokens_per_gpu", "log2_seq_len",
    "log10_peak_flops", "log10_hbm_bandwidth", "fp8",
    *[f"software_{family}" for family in SOFTWARE_FAMILIES], "software_other", "flash_attention",
)
"""The features of the problem (model, cluster, GPU, software), the same for every plan of one search:
they decide whether the correction may be used at all (see correction.py). The rest describe the plan."""

# Raw fields a plan record must carry for featurization.
RECORD_FIELDS = (
    "num_params", "num_layers", "seq_len", "global_batch_size", "num_gpus", "gpus_per_node",
    "dp", "tp", "pp", "cp", "vpp", "sequence_parallel", "zero_stage", "micro_batch_size",
    "num_microbatches", "recompute", "recompute_num_layers", "dtype", "peak_flops_per_s",
    "memory_bandwidth_bytes_per_s", "analytical_step_time_s", "analytical_comm_time_s",
    "analytical_mfu", "software", "flash_attention",
)

COMM_TERMS = ("tp_comm", "cp_comm", "pp_comm", "dp_comm", "ep_comm")
"""Time-breakdown terms counted as communication in `comm_share` (others: compute, bubble, ...)."""


def plan_record(model, training, cluster, plan, profile, estimate, framework=None) -> dict:
    """One flat record of a plan and its analytical estimate (the unit of calibration data);
    `framework` is the Framework the analytical estimate assumed (None: the default, autoplan).
    The record keeps the historical key "software" for the framework's name."""
    comm_s = sum(v for k, v in estimate.time_breakdown_s.items() if k in COMM_TERMS or k.endswith("_comm"))
    return {
        "model_name": model.name, "gpu": cluster.name,
        "num_params": int(model.num_params), "num_layers": model.num_layers,
        "hidden_size": model.hidden_size, "seq_len": training.seq_len,
        "global_batch_size": training.global_batch_size, "dtype": training.dtype,
        "num_gpus": cluster.num_gpus, "gpus_per_node": cluster.gpus_per_node,
        "dp": plan.dp, "tp": plan.tp, "pp": plan.pp, "cp": plan.cp, "vpp": plan.vpp,
        "sequence_parallel": bool(plan.sequence_parallel), "zero_stage": plan.zero_stage,
        "micro_batch_size": plan.micro_batch_size, "num_microbatches": plan.num_microbatches,
        "recompute": plan.recompute, "recompute_num_layers": plan.recompute_num_layers,
        "peak_flops_per_s": float(profile.peak(training.dtype)),
        "memory_bandwidth_bytes_per_s": float(profile.memory_bandwidth_bytes_per_s),
        "analytical_step_time_s": float(estimate.step_time_s),
        "analytical_comm_time_s": float(comm_s),
        "analytical_mfu": float(estimate.mfu),
        "analytical_peak_memory_bytes": int(estimate.peak_memory_bytes),
        "software": framework.name if framework is not None else DEFAULT_FRAMEWORK,
        "flash_attention": bool(framework.flash_attention) if framework is not None else True,
    }


def _log2(x: float) -> float:
    return math.log2(max(float(x), 1.0))


def featurize_record(r) -> list[float]:
    """The FEATURE_NAMES values of one record (a dict or a pandas row)."""
    # The largest stage (uneven splits: ParallelPlan.layers_per_stage), which bounds recompute_num_layers.
    layers_per_stage = max(-(-int(r["num_layers"]) // max(int(r["pp"]), 1)), 1)
    full = r["recompute"] == "full"
    m = max(int(r["num_microbatches"]), 1)
    step_s = float(r["analytical_step_time_s"])
    return [
        math.log10(float(r["num_params"])),
        _log2(r["num_gpus"]),
        _log2(int(r["num_gpus"]) / int(r["gpus_per_node"])),
        _log2(r["tp"]), _log2(r["pp"]), _log2(r["dp"]), _log2(r["cp"]), _log2(r["vpp"]),
        float(bool(r["sequence_parallel"])),
        float(r["zero_stage"]),
        _log2(r["micro_batch_size"]),
        min(int(r["recompute_num_layers"]) / layers_per_stage, 1.0) if full else 0.0,
        float(r["recompute"] == "selective"),
        # Narayanan et al. 2021 sec. 2.2.1-2.2.2: bubble share (p-1)/m, interleaved (p-1)/(v*m).
        (int(r["pp"]) - 1) / (int(r["vpp"]) * m),
        float(r["analytical_comm_time_s"]) / step_s if step_s > 0 else 0.0,
        _log2(int(r["global_batch_size"]) * int(r["seq_len"]) / int(r["num_gpus"])),
        _log2(r["seq_len"]),
        math.log10(float(r["peak_flops_per_s"])),
        math.log10(float(r["memory_bandwidth_bytes_per_s"])),
        float(r["dtype"] == "fp8"),
        float(r["analytical_mfu"]),
        *[float(r["software"] in stacks) for stacks in SOFTWARE_FAMILIES.values()],
        float(not any(r["software"] in stacks for stacks in SOFTWARE_FAMILIES.values())),
        float(bool(r["flash_attention"])),
    ]


def _rows(X):
    """Iterate the records of a DataFrame or a list of dicts."""
    if hasattr(X, "to_dict"):
        return X.to_dict("records")
    return list(X)


class PlanFeaturizer(TransformerMixin, BaseEstimator):
    """Plan records (DataFrame or list of dicts) -> the FEATURE_NAMES matrix. Stateless."""

    def fit(self, X, y=None):
        rows = _rows(X)
        missing = sorted({f for r in rows[:1] for f in RECORD_FIELDS if f not in r})
        if missing:
            raise ValueError(f"plan records are missing the fields {missing}")
        self.n_features_out_ = len(FEATURE_NAMES)
        return self

    def transform(self, X):
        return np.array([featurize_record(r) for r in _rows(X)], dtype=float).reshape(-1, len(FEATURE_NAMES))

    def get_feature_names_out(self, input_features=None):
        return np.array(FEATURE_NAMES, dtype=object)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.two_d_array = False
        tags.input_tags.dict = True
        tags.requires_fit = False
        return tags
