"""What each file format autoplan reads must hold: fields, types, ranges and cross-field rules.

One function per format (or per section of one), run by the readers before any dataclass is built:
`ModelSpec/TrainingSpec/ClusterSpec/ParallelPlan/PlanDocument/HardwareProfile/Measurement.from_dict`
and the calibration loader. Each collects every problem of the document into an `Issues`, so a
file with three mistakes is told all three at once, each with its field path, value and rule.
Bounds and the field readers are in `autoplan.specs.validation`.
"""
from __future__ import annotations

import math

from autoplan.specs.choices import (
    ATTENTION_KERNELS, COLLECTIVE_OPS, DTYPES, MEMORY_OPS, MLP_KINDS, NORM_KINDS, NORM_PLACEMENTS, POSITION_KINDS,
    QK_NORM_KINDS, RECOMPUTE_MODULES, RECOMPUTE_POLICIES, ROPE_SCALING_KINDS, ROUTER_SCORES, SCOPES, STATUSES,
)
from autoplan.specs.validation import (
    MAX_BYTES_PER_S, MAX_EXPERTS, MAX_FFN, MAX_FLOPS_PER_S, MAX_GLOBAL_BATCH, MAX_GPUS_PER_NODE, MAX_HEAD_DIM,
    MAX_HEADS, MAX_HIDDEN, MAX_LATENCY_S, MAX_LAYERS, MAX_MEMORY_BYTES, MAX_MOE_LOAD_IMBALANCE, MAX_NUM_GPUS,
    MAX_SEQ_LEN, MAX_VOCAB,
    Issues, bare_file_name, first_non_finite, take_bool, take_float, take_int, take_list, take_object, take_str,
)

MODEL_INTS = {  # field -> (upper bound, required)
    "num_layers": (MAX_LAYERS, True), "hidden_size": (MAX_HIDDEN, True), "num_heads": (MAX_HEADS, True),
    "num_kv_heads": (MAX_HEADS, True), "ffn_hidden_size": (MAX_FFN, True), "vocab_size": (MAX_VOCAB, True),
    "max_seq_len": (MAX_SEQ_LEN, False), "head_dim": (MAX_HEAD_DIM, False),
    "num_experts": (MAX_EXPERTS, False), "num_experts_per_token": (MAX_EXPERTS, False),
    "moe_layer_freq": (MAX_LAYERS, False),
}
MODEL_SIZES_OR_OFF = ("v_head_dim", "rotary_dim", "sliding_window", "global_attention_every", "moe_ffn_hidden_size",
                      "shared_expert_ffn_size", "num_dense_layers", "q_lora_rank", "kv_lora_rank", "qk_rope_head_dim",
                      "moe_router_num_groups", "moe_router_group_topk")
"""The model fields of the 2024-2025 families that are a size or 0 (off)."""
MODEL_CHOICES = (("mlp", MLP_KINDS), ("norm", NORM_KINDS), ("position", POSITION_KINDS), ("qk_norm", QK_NORM_KINDS),
                 ("norm_placement", NORM_PLACEMENTS), ("rope_scaling", ROPE_SCALING_KINDS),
                 ("moe_router_score", ROUTER_SCORES))
MODEL_BOOLS = ("tied_embeddings", "qkv_bias", "linear_bias", "parallel_block", "shared_block_norm", "mlp_bias",
               "output_bias")
PARALLEL_INTS = {  # field -> (low, high, required)
    "dp": (1, MAX_NUM_GPUS, True), "tp": (1, MAX_NUM_GPUS, True), "pp": (1, MAX_NUM_GPUS, True),
    "cp": (1, MAX_NUM_GPUS, False), "vpp": (1, MAX_LAYERS, False), "ep": (1, MAX_NUM_GPUS, False),
    "etp": (0, MAX_NUM_GPUS, False),
    "zero_stage": (0, 3, False), "micro_batch_size": (1, MAX_GLOBAL_BATCH, True),
    "num_microbatches": (1, MAX_GLOBAL_BATCH, True), "recompute_num_layers": (0, MAX_LAYERS, False),
    "zero_shard": (0, MAX_NUM_GPUS, False),
}
SAMPLE_FIELDS = {  # table -> {field: kind}; "int"/"float" are positive, bounded
    "matmul": {"m": "int", "n": "int", "k": "int", "dtype": "dtype", "flops_per_s": "flops"},
    "attention": {"batch": "int", "seq_len": "int", "num_heads": "int", "head_dim": "int", "dtype": "dtype",
                  "pass": ("fwd", "bwd"), "flops_per_s": "flops", "kernel": ATTENTION_KERNELS},
    "memory_ops": {"op": "memory_op", "num_bytes": "int", "bytes_per_s": "bandwidth"},
    "collectives": {"op": "op", "scope": "scope", "group_size": "int", "message_bytes": "int",
                    "bus_bandwidth_bytes_per_s": "bandwidth", "time_s": "time", "ranks_per_node": "count"},
}
SAMPLE_INT_MAX = 2**50
MAX_BREAKDOWN_TERMS = 64
"""Terms of a prediction's time or memory breakdown; the cost model writes about 12 of each, and a
report draws one bar segment and one table row per term."""
MAX_PREDICTED_BYTES = 2**64
"""A predicted memory figure: what a 64-bit byte count holds. Not MAX_MEMORY_BYTES: a plan that does
not fit is still predicted (its figure may exceed any device), but never by 10^30 bytes."""
OPTIONAL_SAMPLE_FIELDS = {"time_s", "kernel", "ranks_per_node"}
MAX_SAMPLE_TIME_S = 3600.0
"""A timed collective: at most an hour; the profiler's largest messages take milliseconds."""


def validate_model(data: dict, issues: Issues, prefix: str = "model") -> None:
    """Every field of a model, alone: its type and range. The one place a model's fields are checked,
    for a plan's model section, a ModelSpec read from JSON and ModelSpec.check alike."""
    if take_str(data, "name", issues, prefix, name=True) == "":
        issues.add(f"{prefix}.name" if prefix else "name",
                   "must name the model (it names the exports and launch scripts)", "")
    # derived from the shape (ModelSpec.num_params) and not read back, but never a nonsense count
    take_int(data, "num_params", issues, prefix, 1, None, required=False)
    for key, (high, required) in MODEL_INTS.items():
        take_int(data, key, issues, prefix, 1, high, required)
    for key in MODEL_SIZES_OR_OFF:
        take_int(data, key, issues, prefix, 0, None, required=False)
    for key, choices in MODEL_CHOICES:
        take_str(data, key, issues, prefix, choices, required=False)
    take_str(data, "family", issues, prefix, required=False, name=True)
    for key in MODEL_BOOLS:
        take_bool(data, key, issues, prefix, required=False)
    # 0 = off (the soft-caps) or not stated (the numerics the exports hand over: the framework's default)
    for key in ("attn_logit_softcap", "final_logit_softcap", "rope_theta", "rope_scaling_factor", "norm_eps"):
        take_float(data, key, issues, prefix, 0.0, None, positive=False, required=False)


def validate_training(data: dict, issues: Issues, prefix: str = "training") -> None:
    take_int(data, "global_batch_size", issues, prefix, 1, MAX_GLOBAL_BATCH)
    take_int(data, "seq_len", issues, prefix, 1, MAX_SEQ_LEN)
    take_str(data, "dtype", issues, prefix, DTYPES, required=False)
    take_str(data, "optimizer", issues, prefix, ("adamw",), required=False)
    load = take_float(data, "moe_load_imbalance", issues, prefix, 0.0, MAX_MOE_LOAD_IMBALANCE, positive=False,
                      required=False)
    if load is not None and 0 < load < 1:
        issues.add(f"{prefix}.moe_load_imbalance" if prefix else "moe_load_imbalance",
                   "must be 0 (the framework's default) or at least 1 (the busiest rank over the mean)", load)


def validate_cluster(data: dict, issues: Issues, prefix: str = "cluster") -> None:
    if take_str(data, "name", issues, prefix, name=True) == "":
        issues.add(f"{prefix}.name", "must name the GPU type or cluster (e.g. 'h100-80gb')", "")
    gpus = take_int(data, "num_gpus", issues, prefix, 1, MAX_NUM_GPUS)
    per_node = take_int(data, "gpus_per_node", issues, prefix, 1, MAX_GPUS_PER_NODE, required=False, default=8)
    if data.get("profile") is not None:  # "" = the cluster's built-in profile (ClusterSpec's default)
        take_str(data, "profile", issues, prefix, required=False, name=True)
    if gpus and per_node and gpus > per_node and gpus % per_node:
        issues.add(f"{prefix}.num_gpus", f"must be a whole number of nodes of {prefix}.gpus_per_node="
                   f"{per_node} GPUs (or at most one node)", gpus)


def validate_parallel(data: dict, issues: Issues, prefix: str = "parallel") -> None:
    for key, (low, high, required) in PARALLEL_INTS.items():
        take_int(data, key, issues, prefix, low, high, required)
    take_bool(data, "sequence_parallel", issues, prefix, required=False)
    take_str(data, "recompute", issues, prefix, RECOMPUTE_POLICIES, required=False)
    modules = take_list(data, "recompute_modules", issues, prefix, required=False)
    for i, name in enumerate(modules or ()):
        if name not in RECOMPUTE_MODULES:
            issues.add(f"{prefix}.recompute_modules[{i}]" if prefix else f"recompute_modules[{i}]",
                       f"must be one of {', '.join(RECOMPUTE_MODULES)}", name)
    # 0 = dropless (Megatron-Core's default: no --moe-expert-capacity-factor)
    take_float(data, "moe_capacity_factor", issues, prefix, 0.0, 100.0, positive=False, required=False)


def validate_plan(data: dict, issues: Issues, framework=None) -> None:
    """A whole plan file: its four sections, the alternatives, and the rules across sections; the
    context rule is `framework`'s (autoplan.specs.framework.Framework.context_rule, the one search
    applies), skipped without one."""
    take_str(data, "plan_id", issues, required=False, name=True)  # derived from the plan; printed as it is
    # the blocks not checked field by field are written back as they are: never with a NaN in them
    for key in sorted(set(data) - {"model", "training", "cluster", "parallel", "prediction", "alternatives",
                                    "tuning"}):
        where = first_non_finite(data[key], key)
        if where:
            issues.add(where, "must be a finite number (NaN and Infinity are not JSON)", show_value=False)
    sections = {}
    for key, check in (("model", validate_model), ("training", validate_training),
                       ("cluster", validate_cluster), ("parallel", validate_parallel)):
        section = take_object(data, key, issues)
        if section is not None:
            check(section, issues, key)
            sections[key] = section
    for key in ("search", "provenance"):
        if data.get(key) is not None:
            take_object(data, key, issues, required=False)
    if data.get("prediction") is not None:
        validate_prediction(take_object(data, "prediction", issues, required=False), issues, "prediction")
    alternatives = take_list(data, "alternatives", issues, required=False) if data.get("alternatives") is not None \
        else []
    for i, alternative in enumerate(alternatives or []):
        path = f"alternatives[{i}]"
        if not isinstance(alternative, dict):
            issues.add(path, "must be a JSON object with a 'parallel' plan", alternative)
            continue
        parallel = take_object(alternative, "parallel", issues, path)
        if parallel is not None:
            validate_parallel(parallel, issues, f"{path}.parallel")
            _degrees_match_gpus(parallel, sections.get("cluster", {}), issues, f"{path}.parallel")
        if alternative.get("prediction") is not None:
            validate_prediction(take_object(alternative, "prediction", issues, path, required=False), issues,
                                f"{path}.prediction")
    if data.get("tuning") is not None:
        validate_tuning(take_object(data, "tuning", issues, required=False), issues, "tuning")
    _degrees_match_gpus(sections.get("parallel", {}), sections.get("cluster", {}), issues, "parallel")
    model, training = sections.get("model", {}), sections.get("training", {})
    max_seq, seq = model.get("max_seq_len"), training.get("seq_len")
    if framework is not None and _ints(max_seq, seq) and 0 < max_seq < seq <= MAX_SEQ_LEN:
        rule = framework.context_rule(max_seq, model.get("position", "rope"), seq)
        if rule:  # the sentence search refuses with (Framework.check_model)
            issues.add("training.seq_len", rule.removeprefix("training.seq_len "), show_value=False)


def _degrees_match_gpus(parallel: dict, cluster: dict, issues: Issues, prefix: str) -> None:
    """dp * tp * pp * cp must be the cluster's GPU count: every reader refuses a hand-edited plan
    that breaks it, as the cost model and the executor would (ParallelPlan.check says the same)."""
    degrees = [parallel.get(key, 1) for key in ("dp", "tp", "pp", "cp")]
    gpus = cluster.get("num_gpus")
    if not _ints(*degrees, gpus) or not all(0 < d <= MAX_NUM_GPUS for d in degrees):
        return  # a bad degree or count is reported by its own field
    dp, tp, pp, cp = degrees
    if dp * tp * pp * cp != gpus:
        issues.add(prefix, f"dp*tp*pp*cp must equal the GPU count, got dp={dp} * tp={tp} * pp={pp} * cp={cp} = "
                   f"{dp * tp * pp * cp}, cluster.num_gpus={gpus}", show_value=False)


def validate_tuning(data: dict | None, issues: Issues, prefix: str) -> None:
    """The optional `tuning` block of a plan `autoplan tune` chose by measurement: how the candidates
    were run and what each measured (a record of the choice; the plan fields stay the plan)."""
    if data is None:
        return
    take_str(data, "chosen_by", issues, prefix, ("measurement",))
    take_str(data, "backend", issues, prefix)
    take_str(data, "device", issues, prefix, required=False)
    take_int(data, "steps", issues, prefix, 1, None)
    take_int(data, "warmup_steps", issues, prefix, 0, None)
    take_str(data, "records", issues, prefix, required=False)
    for i, candidate in enumerate(take_list(data, "candidates", issues, prefix) or []):
        path = f"{prefix}.candidates[{i}]"
        if not isinstance(candidate, dict):
            issues.add(path, "must be a JSON object (one measured candidate)", candidate)
            continue
        take_str(candidate, "plan_id", issues, path)
        take_str(candidate, "status", issues, path, STATUSES)
        for key in ("predicted_step_time_s", "measured_step_time_s"):
            take_float(candidate, key, issues, path, 0.0, required=False)
        for key in ("predicted_peak_memory_bytes", "measured_peak_memory_bytes"):
            take_float(candidate, key, issues, path, 0.0, MAX_MEMORY_BYTES, positive=False, required=False)
    take_list(data, "skipped", issues, prefix, required=False)


def validate_prediction(data: dict | None, issues: Issues, prefix: str) -> None:
    """A prediction block (CostEstimate.to_prediction): empty, or the figures `estimate` compares."""
    if not data:
        return
    take_float(data, "step_time_s", issues, prefix, 0.0)
    take_float(data, "peak_memory_bytes", issues, prefix, 0.0, MAX_PREDICTED_BYTES)
    # Throughput divides (compare's ratios): a trained step moves tokens. A token costs more than one
    # FLOP, so no GPU moves more tokens a second than the largest peak FLOP/s a profile may hold.
    # MFU is a share of the peak; HFU (MFU plus recomputation) is one too, above 0 when given.
    take_float(data, "tokens_per_s_per_gpu", issues, prefix, 0.0, MAX_FLOPS_PER_S)
    take_float(data, "mfu", issues, prefix, 0.0, 1.0)
    take_float(data, "tokens_per_s", issues, prefix, 0.0, MAX_FLOPS_PER_S * MAX_NUM_GPUS, positive=False,
               required=False)
    take_float(data, "hfu", issues, prefix, 0.0, required=False)
    take_float(data, "memory_capacity_bytes", issues, prefix, 0.0, MAX_PREDICTED_BYTES, positive=False,
               required=False)
    take_bool(data, "fits", issues, prefix, required=False)
    take_str(data, "cost_model", issues, prefix, required=False)
    # --memory-headroom (absent in older files: no margin); it must leave some of the capacity to use.
    headroom = take_int(data, "memory_headroom_bytes", issues, prefix, 0, MAX_MEMORY_BYTES, required=False, default=0)
    capacity = data.get("memory_capacity_bytes")
    if isinstance(headroom, int) and _ints(capacity) and 0 < capacity <= headroom:
        issues.add(f"{prefix}.memory_headroom_bytes", f"must be less than memory_capacity_bytes={capacity}", headroom)
    for key in ("time_breakdown_s", "memory_breakdown_bytes"):
        terms = take_object(data, key, issues, prefix, required=False)
        if terms is not None and len(terms) > MAX_BREAKDOWN_TERMS:
            issues.add(f"{prefix}.{key}", f"must hold at most {MAX_BREAKDOWN_TERMS} terms (the cost model writes "
                       f"about 12), got {len(terms):,}", show_value=False)
            continue
        high = MAX_PREDICTED_BYTES if key == "memory_breakdown_bytes" else None
        for term in terms or {}:
            # a term is a share of its total: finite and not negative (what the breakdown tables draw)
            take_float(terms, term, issues, f"{prefix}.{key}", 0.0, high, positive=False)
    _prediction_adds_up(data, issues, prefix)
    _interval_is_a_range(data, issues, prefix)


PREDICTION_INTERVAL_LEVEL = 0.8
"""The share of runs a prediction interval is made to hold (cost_model/intervals.py)."""
PREDICTION_INTERVAL_KEY = f"tokens_per_s_per_gpu_{round(100 * PREDICTION_INTERVAL_LEVEL)}"
"""The prediction's interval of tokens/s/GPU, [low, high] (autoplan/planning/prediction.py)."""
PREDICTION_INTERVAL_INFO_KEY = f"interval_{round(100 * PREDICTION_INTERVAL_LEVEL)}"
"""Where the interval came from: its level, the transfer it assumes, its stratum, the axes pooled away,
how many residuals."""


def _interval_is_a_range(data: dict, issues: Issues, prefix: str) -> None:
    """The interval, where a prediction carries one: two finite numbers, 0 < low <= high."""
    interval = take_list(data, PREDICTION_INTERVAL_KEY, issues, prefix, required=False)
    if interval is None or interval == []:
        return
    ok = (len(interval) == 2 and all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
                                     for v in interval) and 0 < interval[0] <= interval[1])
    if not ok:
        issues.add(f"{prefix}.{PREDICTION_INTERVAL_KEY}", f"must be [low, high] tokens/s/GPU with 0 < low <= high; "
                   f"{REMOVE_PREDICTION}", interval)


BREAKDOWN_REL_TOL = 1e-6
"""How far a breakdown's sum may be from its total: float rounding of ~12 terms is ~1e-15 of it; a
hand edit of one term (the case this catches) moves it by far more."""


REMOVE_PREDICTION = "remove the hand-edited prediction: every command scores a plan file without one"


def _prediction_adds_up(data: dict, issues: Issues, prefix: str) -> None:
    """The rules across a prediction's figures that the cost model writes (CostEstimate.to_prediction):
    each breakdown sums to its total, and `fits` says peak <= capacity - headroom. A hand-edited file
    that breaks one would be compared, exported or tuned on figures that contradict each other."""
    for key, total_key in (("time_breakdown_s", "step_time_s"), ("memory_breakdown_bytes", "peak_memory_bytes")):
        terms, total = data.get(key), data.get(total_key)
        if not isinstance(terms, dict) or not terms or not _finite_numbers(total, *terms.values()):
            continue  # absent, or a bad figure already reported by its own field
        added = sum(terms.values())
        if abs(added - total) > BREAKDOWN_REL_TOL * max(abs(total), 1.0):
            issues.add(f"{prefix}.{key}", f"must sum to {total_key}={total:.6g}, but its terms sum to {added:.6g} "
                       f"({REMOVE_PREDICTION})", show_value=False)
    peak, capacity = data.get("peak_memory_bytes"), data.get("memory_capacity_bytes")
    headroom, fits = data.get("memory_headroom_bytes", 0), data.get("fits")
    if isinstance(fits, bool) and _finite_numbers(peak, capacity, headroom) and capacity > 0:
        if fits != (peak <= capacity - headroom):
            issues.add(f"{prefix}.fits", f"must be {str(not fits).lower()}: peak_memory_bytes={peak:,.0f} is "
                       f"{'above' if fits else 'within'} memory_capacity_bytes={capacity:,.0f} less "
                       f"memory_headroom_bytes={headroom:,.0f} ({REMOVE_PREDICTION})", fits)


def _finite_numbers(*values) -> bool:
    return all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in values)


def validate_model_shape(issues: Issues, model) -> None:
    """Rules across a model's fields (ModelSpec.check, for every source: catalog, config.json, plan
    file), once each field alone passed `validate_model`. `model` is the ModelSpec; each broken rule
    is one issue."""
    heads, kv, hidden, head_dim = model.num_heads, model.num_kv_heads, model.hidden_size, model.head_dim
    if heads % kv:
        issues.add("num_kv_heads", f"must divide num_heads, got num_heads={heads}, num_kv_heads={kv}",
                   show_value=False)
    if hidden % heads and head_dim == hidden // heads:
        # head_dim was derived (hidden // heads, rounded down): the heads cannot split the hidden size.
        issues.add("num_heads", f"must divide hidden_size unless head_dim is given, got hidden_size={hidden}, "
                   f"num_heads={heads} ({hidden / heads:g} per head)", show_value=False)
    if model.position == "rope" and head_dim % 2:
        issues.add("head_dim", "must be even with rotary position embeddings (RoPE rotates pairs of channels)",
                   head_dim)
    if model.num_experts_per_token > model.num_experts:
        issues.add("num_experts_per_token", f"exceeds num_experts={model.num_experts}", model.num_experts_per_token)
    if model.rotary_dim > head_dim or model.rotary_dim % 2:
        issues.add("rotary_dim", f"must be even and at most head_dim={head_dim}", model.rotary_dim)
    _mla_rules(issues, model)
    groups, picked = model.moe_router_num_groups, model.moe_router_group_topk
    if (groups or picked) and not (0 < picked <= groups and model.num_experts % groups == 0):
        issues.add("moe_router_group_topk", f"group-limited routing needs 0 < moe_router_group_topk <= "
                   f"moe_router_num_groups and the groups to divide num_experts={model.num_experts}, got "
                   f"moe_router_num_groups={groups}", picked)
    if model.is_moe and model.num_moe_layers == 0:
        issues.add("num_experts", f"is {model.num_experts} but no layer is MoE (num_dense_layers="
                   f"{model.num_dense_layers}, moe_layer_freq={model.moe_layer_freq}, num_layers={model.num_layers})",
                   show_value=False)
    if model.shared_block_norm and not model.parallel_block:
        issues.add("shared_block_norm", "needs parallel_block=true", show_value=False)
    if model.parallel_block and model.norm_placement != "pre":
        issues.add("norm_placement", "must be 'pre' in a parallel block (it is pre-norm)", model.norm_placement)


def _mla_rules(issues: Issues, model) -> None:
    """Multi-head latent attention (DeepSeek-V2 arXiv 2405.04434 sec. 2.1): head_dim is
    qk_nope_head_dim + qk_rope_head_dim, and the low-rank fields only exist with a KV latent."""
    if model.is_mla and not 0 < model.qk_rope_head_dim < model.head_dim:
        issues.add("qk_rope_head_dim", f"must be between 0 and head_dim={model.head_dim}, exclusive: multi-head latent "
                   f"attention needs 0 < qk_rope_head_dim < head_dim (= qk_nope_head_dim + qk_rope_head_dim)",
                   model.qk_rope_head_dim)
    if not model.is_mla and (model.q_lora_rank or model.qk_rope_head_dim):
        issues.add("kv_lora_rank", "must be above 0 when q_lora_rank or qk_rope_head_dim is set (they are MLA facts)",
                   0)


def validate_profile(data: dict, issues: Issues) -> None:
    """A hardware profile: every figure positive and finite, the sample tables well formed."""
    take_str(data, "name", issues, name=True)  # becomes a plan's cluster.name, written into launch scripts
    take_str(data, "device_name", issues, name=True)
    per_node = take_int(data, "gpus_per_node", issues, "", 1, MAX_GPUS_PER_NODE)
    take_int(data, "memory_capacity_bytes", issues, "", 1, MAX_MEMORY_BYTES)
    take_int(data, "runtime_memory_bytes", issues, "", 0, MAX_MEMORY_BYTES, required=False, default=0)
    for key in ("memory_bandwidth_bytes_per_s", "intra_node_bandwidth_bytes_per_s", "inter_node_bandwidth_bytes_per_s"):
        take_float(data, key, issues, "", 0.0, MAX_BYTES_PER_S)
    for key in ("intra_node_latency_s", "inter_node_latency_s"):
        take_float(data, key, issues, "", 0.0, MAX_LATENCY_S, required=False)
    nodes = take_int(data, "num_nodes", issues, "", 1, MAX_NUM_GPUS, required=False, default=1)
    take_str(data, "device_kind", issues, required=False)
    take_bool(data, "measured", issues, required=False)
    for key in ("environment", "sources"):
        take_object(data, key, issues, required=False)
    peaks = take_object(data, "peak_flops_per_s", issues)
    if peaks is not None and not peaks:
        issues.add("peak_flops_per_s", "must name at least one dtype's peak", peaks)
    for dtype in peaks or {}:
        take_float(peaks, dtype, issues, "peak_flops_per_s", 0.0, MAX_FLOPS_PER_S)
    raw = take_str(data, "raw_samples", issues, required=False)
    if raw and not bare_file_name(raw):
        issues.add("raw_samples", "must be a file name beside the profile (no folder, no '..', not absolute)", raw)
    tables = {table: take_list(data, table, issues, required=False) for table in SAMPLE_FIELDS}
    if tables["matmul"] is not None and not tables["matmul"]:
        issues.add("matmul", "must hold the measured matmul samples (every profile has them)", [])
    if tables["collectives"] is not None and not tables["collectives"] and per_node and (per_node or 1) * (nodes or 1) > 1:
        issues.add("collectives", f"must hold collective samples for {per_node} GPUs per node x {nodes} node(s) "
                   f"(only a one-process profile has none)", [])
    for table, rows in tables.items():
        for i, row in enumerate(rows or []):
            _validate_sample(table, row, issues, f"{table}[{i}]", COLLECTIVE_OPS, SCOPES)
            if len(issues.problems) + len(issues.missing) > Issues.MAX_LISTED:
                return  # a table of 2,000 broken rows is told by its first few


def _validate_sample(table: str, row, issues: Issues, path: str, ops: tuple, scopes: tuple) -> None:
    if not isinstance(row, dict):
        issues.add(path, "must be a JSON object", row)
        return
    fields = SAMPLE_FIELDS[table]
    unknown = sorted(set(row) - set(fields))
    if unknown:
        issues.add(path, f"has unknown field(s) {', '.join(unknown)}; the fields are {', '.join(fields)}",
                   show_value=False)
    for key, kind in fields.items():
        required = key not in OPTIONAL_SAMPLE_FIELDS
        if kind == "int":
            take_int(row, key, issues, path, 1, SAMPLE_INT_MAX, required)
        elif kind == "count":  # 0 = not recorded
            take_int(row, key, issues, path, 0, MAX_GPUS_PER_NODE, required)
        elif kind == "flops":
            take_float(row, key, issues, path, 0.0, MAX_FLOPS_PER_S, required=required)
        elif kind == "bandwidth":
            take_float(row, key, issues, path, 0.0, MAX_BYTES_PER_S, required=required)
        elif kind == "time":
            # 0 = not timed: a learned profile's predicted samples carry no time (cost_model.learned.ops)
            take_float(row, key, issues, path, 0.0, MAX_SAMPLE_TIME_S, positive=False, required=required)
        elif kind == "op":
            take_str(row, key, issues, path, ops, required)
        elif kind == "scope":
            take_str(row, key, issues, path, scopes, required)
        elif kind == "dtype":
            take_str(row, key, issues, path, DTYPES, required)
        elif kind == "memory_op":
            take_str(row, key, issues, path, MEMORY_OPS, required)
        elif isinstance(kind, tuple):
            take_str(row, key, issues, path, kind, required)
        else:
            take_str(row, key, issues, path, required=required)


def validate_measurement(data: dict, issues: Issues) -> None:
    """One line of runs.jsonl. Losses may be NaN (a diverged run is data); times may not."""
    status = take_str(data, "status", issues, choices=STATUSES)
    take_str(data, "plan_id", issues, name=True)
    take_str(data, "backend", issues)
    for key in ("plan", "environment"):
        take_object(data, key, issues)
    # the prediction the plan carried when it ran: the same rules as a plan file's prediction block
    validate_prediction(take_object(data, "prediction", issues), issues, "prediction")
    steps = take_list(data, "step_times_s", issues)
    for i, t in enumerate(steps or []):
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not 0 <= t < float("inf"):
            issues.add(f"step_times_s[{i}]", "must be a finite number of seconds, at least 0", t)
            break
    losses = take_list(data, "losses", issues)
    for i, loss in enumerate(losses or []):
        if isinstance(loss, bool) or not isinstance(loss, (int, float)):
            issues.add(f"losses[{i}]", "must be a number", loss)
            break
    take_int(data, "peak_memory_bytes", issues, "", 0, MAX_MEMORY_BYTES)
    # a run that trained moved tokens: its throughput divides by them (0: a failed run's, or unknown)
    tokens_low = 1 if status == "ok" else 0
    for key, low, high in (("num_warmup_steps", 0, 2**31), ("num_gpus", 0, MAX_NUM_GPUS),
                           ("tokens_per_step", tokens_low, MAX_GLOBAL_BATCH * MAX_SEQ_LEN)):
        take_int(data, key, issues, "", low, high, required=False)
    # the device's peak (0: unknown, as a CPU run records); at most what a profile may hold
    take_float(data, "peak_flops_per_s", issues, "", 0.0, MAX_FLOPS_PER_S, positive=False, required=False)
    take_str(data, "error", issues, required=False)


def validate_calibration(data: dict, issues: Issues) -> None:
    """The sections of a calibration file; the correction's arrays are checked by its own loader."""
    versions = take_object(data, "versions", issues)
    for lib, version in (versions or {}).items():
        if not isinstance(version, str):
            issues.add(f"versions.{lib}", "must be a version string", version)
    features = take_object(data, "feature_schema", issues)
    if features is not None:
        take_str(features, "name", issues, "feature_schema")
        names = take_list(features, "features", issues, "feature_schema")
        if names is not None and not all(isinstance(n, str) for n in names):
            issues.add("feature_schema.features", "must be a list of feature names", names)
    cost_model = take_str(data, "cost_model", issues)
    if cost_model is not None and not cost_model.startswith("learned/"):
        issues.add("cost_model", "must name the learned model that wrote the file, e.g. 'learned/1'", cost_model)
    for key in ("correction", "memory_correction"):
        take_object(data, key, issues, required=False, nullable=True)
        if data.get(key) == {}:
            issues.add(key, "must be null (no correction) or the fitted correction `autoplan calibrate` wrote", {})
    take_object(data, "profile", issues, required=False, nullable=True)
    models = take_list(data, "op_models", issues, required=False) if data.get("op_models") is not None else []
    for i, m in enumerate(models or []):
        if not isinstance(m, dict):
            issues.add(f"op_models[{i}]", "must be a JSON object", m)
    if data.get("training") is not None:
        take_object(data, "training", issues, required=False)


def _ints(*values) -> bool:
    return all(isinstance(v, int) and not isinstance(v, bool) for v in values)
