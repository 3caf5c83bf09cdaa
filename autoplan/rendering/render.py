"""Text output of the planner: the chosen plan, its breakdowns, the runners-up and the Pareto front.

Sizes are base-2 (GiB), times in seconds; each breakdown prints its parts and their share, and the
parts sum to the total printed under them.
"""
from __future__ import annotations

import textwrap

from autoplan.rendering.text import WIDTH, human_count, text_table, wrap_line
from autoplan.specs import get_framework
from autoplan.specs.schemas import PREDICTION_INTERVAL_INFO_KEY, PREDICTION_INTERVAL_KEY, PREDICTION_INTERVAL_LEVEL
from cost_model.budget import training_run
from cost_model.memory import BYTES_ACT
from cost_model.terms import meaning as term_meaning

GIB = 2**30


def plan_line(parallel: dict) -> str:
    """One plan on one line, in the vocabulary of DESIGN.md."""
    p = parallel
    parts = [f"dp={p['dp']}", f"tp={p['tp']}", f"pp={p['pp']}", f"cp={p.get('cp', 1)}"]
    if p.get("vpp", 1) > 1:
        parts.append(f"vpp={p['vpp']}")
    if p.get("ep", 1) > 1:
        parts.append(f"ep={p['ep']}")
    if p.get("etp"):  # an expert TP degree of its own (absent: etp = tp)
        parts.append(f"etp={p['etp']}")
    parts.append("sp" if p.get("sequence_parallel") else "no-sp")
    if p.get("tp_comm_overlap"):  # absent: off
        parts.append("tp-overlap")
    parts.append(f"zero={p.get('zero_stage', 0)}" + (f"/shard{p['zero_shard']}" if p.get("zero_shard") else ""))
    parts.append(f"mbs={p['micro_batch_size']}x{p['num_microbatches']}")
    rc = p.get("recompute", "none")
    parts.append(f"recompute={rc}" + (f"({p['recompute_num_layers']}/stage)" if rc == "full" else "")
                 + (f"({' '.join(p['recompute_modules'])})" if p.get("recompute_modules") else ""))
    if p.get("moe_capacity_factor"):  # absent: dropless
        parts.append(f"capacity={p['moe_capacity_factor']:g}")
    return " ".join(parts)


def breakdown_lines(prediction: dict) -> list:
    time_s = prediction["time_breakdown_s"]
    total_s = sum(time_s.values())
    rows = [[k, f"{v:.3f}", f"{100 * v / total_s:.1f}", term_meaning(k)] for k, v in time_s.items() if v > 0]
    rows.append(["total (step time)", f"{total_s:.3f}", "100.0", "the sum of the terms above"])
    lines = ["time per step", *text_table(["term", "s", "%", "what it is"], rows, "lrrl")]
    mem = prediction["memory_breakdown_bytes"]
    total_b = sum(mem.values())
    rows = [[k, f"{v / GIB:.2f}", f"{100 * v / total_b:.1f}", term_meaning(k, memory=True)] for k, v in mem.items() if v > 0]
    rows.append(["total (peak per GPU)", f"{total_b / GIB:.2f}", "100.0", "the sum of the terms above"])
    cap, headroom = prediction.get("memory_capacity_bytes"), prediction.get("memory_headroom_bytes", 0)
    if cap and headroom:
        # Not part of the peak (nothing allocates it): the margin "fits" keeps beside it.
        rows.append(["kept free (headroom)", f"{headroom / GIB:.2f}", "", "--memory-headroom: not allocated; "
                     "fits means total + this <= capacity (0 for none)"])
    lines += ["", "memory per GPU (worst pipeline stage)" + (f", capacity {cap / GIB:.1f} GiB" if cap else ""),
              *text_table(["term", "GiB", "%", "what it is"], rows, "lrrl")]
    return lines


def fits_phrase(peak_bytes: float, capacity_bytes: float, headroom_bytes: float = 0) -> str:
    """'fits (68.1 of 77.1 GiB usable, 2.0 GiB headroom), 11.0 GiB = 13.9% of the device free'
    or 'does NOT fit (... 12.3 GiB over)': "fits" judged against the capacity less the user's
    --memory-headroom, both shown, and the margin the plan leaves of the whole device."""
    usable = capacity_bytes - headroom_bytes
    room = (f"{usable / GIB:.1f} GiB usable, {headroom_bytes / GIB:.1f} GiB headroom" if headroom_bytes
            else f"{capacity_bytes / GIB:.1f} GiB")
    if peak_bytes <= usable:
        margin = capacity_bytes - peak_bytes
        return (f"fits ({peak_bytes / GIB:.1f} of {room}), {margin / GIB:.1f} GiB = "
                f"{margin / capacity_bytes:.1%} of the device free")
    return f"does NOT fit ({peak_bytes / GIB:.1f} GiB > {room}: {(peak_bytes - usable) / GIB:.1f} GiB over)"


def interval_phrase(prediction: dict) -> str:
    """'80 %, new source: 890-1,120' for a prediction that carries its interval of tokens/s/GPU (the
    transfer its residuals assume, where the plan file names it), else ''."""
    interval = prediction.get(PREDICTION_INTERVAL_KEY)
    if not interval:
        return ""
    transfer = prediction.get(PREDICTION_INTERVAL_INFO_KEY, {}).get("transfer")
    return (f"{round(100 * PREDICTION_INTERVAL_LEVEL)} %{', ' + transfer if transfer else ''}: "
            f"{interval[0]:,.0f}-{interval[1]:,.0f}")


def interval_text(prediction: dict) -> str:
    """' (80 %, new source: 890-1,120)' after a predicted tokens/s/GPU, else ''."""
    phrase = interval_phrase(prediction)
    return f" ({phrase})" if phrase else ""


def headline_lines(prediction: dict) -> list:
    p = prediction
    fits = fits_phrase(p["peak_memory_bytes"], p["memory_capacity_bytes"], p.get("memory_headroom_bytes", 0))
    return [f"  step time {p['step_time_s']:.3f} s   tokens/s {p['tokens_per_s']:,.0f}   "
            f"tokens/s/GPU {p['tokens_per_s_per_gpu']:,.0f}{interval_text(p)}   MFU {100 * p['mfu']:.1f}%",
            f"  memory {p['peak_memory_bytes'] / GIB:.1f} GiB per GPU: {fits}"]


def setup_lines(doc) -> list:
    m, t, c = doc.model, doc.training, doc.cluster
    moe = f", {m.num_experts} experts top-{m.num_experts_per_token}" if m.is_moe else ""
    # MoE users compare active parameters per token (what a token's FLOPs follow) beside the total.
    active = f" ({human_count(m.num_active_params)} active)" if m.is_moe else ""
    return [f"model    {m.name}: {human_count(m.num_params)} params{active}, {m.num_layers} layers, hidden {m.hidden_size}, "
            f"{m.num_heads} heads ({m.num_kv_heads} kv){moe}",
            f"cluster  {c.num_gpus} x {c.name} ({c.num_nodes} node{'s' if c.num_nodes > 1 else ''} of {c.gpus_per_node}), profile {c.profile}",
            f"training global batch {t.global_batch_size} x seq {t.seq_len} = {human_count(t.tokens_per_step)} tokens/step, "
            f"{t.dtype}, {t.optimizer}" + (f", MoE load {t.moe_load_imbalance:g}x the mean on the busiest "
                                            f"expert-parallel rank (measured)" if t.moe_load_imbalance else ""),
            f"framework {doc.framework}: {get_framework(doc.framework).description}"] + _calibration_lines(doc)


def _calibration_lines(doc) -> list:
    """Say when the numbers come from a calibrated cost model, not the analytical one alone."""
    path = (doc.provenance or {}).get("calibration")
    if not path:
        return []
    return [f"costed   {doc.provenance.get('cost_model', '?')}, calibrated with {path} (`autoplan calibrate`)"]


def _accumulation(f) -> str:
    """Where a framework adds each micro-batch's gradients (Framework.grad_accumulation_bytes)."""
    if not f.grad_accumulation_bytes:
        # autocast over fp32 weights accumulates in fp32 outside the GEMM: weight_cast_bytes_per_param counts it
        return "with the weight casts" if f.weight_cast_bytes_per_param else "in the GEMM"
    per_dtype = ", ".join(f"{dtype} {later:g} B" + (f" ({first:g} B the first)" if first != later else "")
                          for dtype, (first, later) in f.grad_accumulation_bytes.items())
    pipeline = ", ".join(f"{dtype} {later:g} B ({first:g} B the first)"
                         for dtype, (first, later) in f.pipeline_zero0_grad_accumulation_bytes.items())
    return (f"outside the GEMM at ZeRO 0-1: {per_dtype} per parameter and micro-batch"
            + (f"; under its pipeline at ZeRO-0: {pipeline}" if pipeline else ""))


def _dp_window(f) -> str:
    """How much of its compute window a framework's DP collectives hide under, and at which ZeRO stages."""
    stages = tuple(f.dp_overlap_zero_stages)
    if not stages or not f.dp_comm_overlap:
        return "none (reduced after the backward)"
    where = "" if set(stages) >= {0, 1, 2, 3} else f" at ZeRO {', '.join(map(str, stages))} only"
    return f"{f.dp_comm_overlap:.0%}{where}"


def describe_training_run(run: dict, train_tokens: float, num_gpus: int, gpu_hour_price: float | None) -> str:
    """One line of cost_model.budget.training_run: days, GPU-hours and, with a price, dollars."""
    text = (f"  train {human_count(train_tokens)} tokens: {run['days']:,.1f} days on {num_gpus:,} GPUs, "
            f"{run['gpu_hours']:,.0f} GPU-hours")
    if run["cost"] is not None:
        text += f", ${run['cost']:,.0f} at ${gpu_hour_price:,.2f}/GPU-hour"
    return text + " (steady state)"


def budget_lines(doc) -> list:
    """Days, GPU-hours and cost to train --train-tokens with the plan (nothing when not asked)."""
    b = doc.extra.get("train_budget")
    if not b or not doc.prediction:
        return []
    run = training_run(doc.prediction["tokens_per_s"], doc.cluster.num_gpus, b["train_tokens"], b.get("gpu_hour_price"))
    return [describe_training_run(run, b["train_tokens"], doc.cluster.num_gpus, b.get("gpu_hour_price"))]


def _budget_cells(doc, pred: dict) -> list:
    b = doc.extra.get("train_budget")
    if not b:
        return []
    if not pred:
        return ["-"] * (2 if b.get("gpu_hour_price") else 1)
    run = training_run(pred["tokens_per_s"], doc.cluster.num_gpus, b["train_tokens"], b.get("gpu_hour_price"))
    return [f"{run['days']:,.1f}"] + ([f"${run['cost']:,.0f}"] if run["cost"] is not None else [])


def alternatives_lines(doc) -> list:
    rows = []
    for i, alt in enumerate(doc.alternatives, 1):
        pred = alt.get("prediction") or {}
        step = f"{pred['step_time_s']:.3f}" if pred else "-"
        tpg = f"{pred['tokens_per_s_per_gpu']:,.0f}" if pred else "-"
        mem = f"{pred['peak_memory_bytes'] / GIB:.1f}" if pred else "-"
        rows.append([str(i), plan_line(alt["parallel"]), step, tpg, mem, *_budget_cells(doc, pred)])
    if not rows:
        return ["runners-up: none (no other plan runs)"]
    b = doc.extra.get("train_budget") or {}
    extra = (["days"] if b else []) + (["cost"] if b.get("gpu_hour_price") else [])
    header, *table = text_table(["#", "plan", "step s", "tok/s/GPU", "GiB", *extra], rows, "rlrrr" + "r" * len(extra))
    lines = ["runners-up (why each lost)", header]
    for line, alt in zip(table, doc.alternatives):  # the reason under its plan: rows stay within 120 columns
        lines += [line, *(wrap_line(f"     why not: {alt['why_not']}", 14) if alt.get("why_not") else [])]
    return lines


MAX_FRONT_ROWS = 15


def pareto_lines(front: list) -> list:
    """The front, thinned evenly to MAX_FRONT_ROWS rows (both ends kept); the plan file has all of it."""
    shown = front
    if len(front) > MAX_FRONT_ROWS:
        step = (len(front) - 1) / (MAX_FRONT_ROWS - 1)
        shown = [front[round(i * step)] for i in range(MAX_FRONT_ROWS)]
    rows = [[plan_line(f["parallel"]), f"{f['step_time_s']:.3f}", f"{f['peak_memory_bytes'] / GIB:.1f}"] for f in shown]
    more = f", {len(shown)} shown; all in the plan file's pareto_front" if len(shown) < len(front) else ""
    return [f"Pareto front, step time vs memory ({len(front)} plans{more})",
            *text_table(["plan", "step s", "GiB"], rows, "lrr")]


def search_lines(search: dict, width: int = 120) -> list:
    """How the search went, in lines of at most `width` columns; the counts add up: distinct plans
    tried = plans scored that fit (break no rule, within memory) + plans rejected (by reason: a rule,
    checked before scoring, or out_of_memory, scored)."""
    counts = search.get("rejected", {})
    seed = f", seed {search['seed']}" if search.get("seed") is not None else ""
    extra = "".join(f" + {search[k]} {what}" for k, what in (("num_polish_moves", "polish moves"),
                                                             ("num_resumed_trials", "resumed trials")) if search.get(k))
    pruned = search.get("num_plans_pruned", 0)
    how = (f"exhaustive, {search['num_trials']:,} plans scored and {pruned:,} ruled out unscored by a lower bound on "
           f"step time (exact)" if search["sampler"] == "exhaustive" and pruned else
           f"exhaustive, every one of {search['num_trials']:,} plans scored (exact)" if search["sampler"] == "exhaustive"
           else f"{search['sampler']}, {search['num_trials']} trials{extra}{seed}")
    lines = [f"search   {how}, {search['wall_time_s']:.2f} s",
             f"         {search['num_plans_scored']:,} distinct plans tried = {search['num_feasible']:,} scored and fit + "
             f"{sum(counts.values()):,} rejected" + (":" if counts else "")]
    items = [f"{n:,} {tag}" for tag, n in counts.items()]
    for i, item in enumerate(items):  # wrap between reasons, never inside one
        piece = item + ("," if i < len(items) - 1 else "")
        if len(lines[-1]) + 1 + len(piece) > width:
            lines.append(" " * 11 + piece)
        else:
            lines[-1] += " " + piece
    return lines


def render_document(doc, defaults: list = (), title: str = "best plan", with_search: bool = True) -> str:
    lines = [w for line in setup_lines(doc) for w in wrap_line(line, 9)]
    for d in defaults:
        lines += wrap_line(f"default  {d}", 9)
    par = doc.parallel
    lines += ["", f"{title}: {plan_line(par.to_dict())}",
              *wrap_line(f"  (mbs={par.micro_batch_size}x{par.num_microbatches}: micro-batches of {par.micro_batch_size} "
                         f"sequence{'s' if par.micro_batch_size > 1 else ''}, {par.num_microbatches} per step per "
                         f"data-parallel replica; sp = Megatron sequence parallelism; zero = ZeRO stage over dp"
                         + (f", /shard{par.zero_shard} = sharded within groups of {par.zero_shard} dp*cp ranks, "
                            f"{par.zero_replicas} copies (HSDP)" if par.zero_shard else "")
                         + ("; tp-overlap = TP collectives overlapped with the GEMMs" if par.tp_comm_overlap else "") + ")", 3),
              *headline_lines(doc.prediction), *[w for line in budget_lines(doc) for w in wrap_line(line, 4)], ""]
    lines += breakdown_lines(doc.prediction)
    if doc.search and with_search:
        lines += ["", *alternatives_lines(doc)]
        if doc.extra.get("pareto_front"):
            lines += ["", *pareto_lines(doc.extra["pareto_front"])]
        lines += ["", *search_lines(doc.search)]
    return "\n".join(lines) + "\n"


def render_models(rows: list) -> str:
    """`autoplan models`: rows of (name, ModelSpec, source)."""
    table = []
    for name, m, source in rows:
        moe = f"{m.num_experts}x top-{m.num_experts_per_token}" if m.is_moe else "-"
        table.append([name, f"{m.num_params / 1e9:.1f}B", str(m.num_layers), str(m.hidden_size),
                      f"{m.num_heads}/{m.num_kv_heads}", str(m.ffn_hidden_size), str(m.vocab_size), m.mlp, moe, source])
    headers = ["model", "params", "L", "hidden", "heads/kv", "ffn", "vocab", "mlp", "experts", "source"]
    return "\n".join(text_table(headers, table, "lrrrrrrlll")) + "\n"


def comparison_lines(before: dict, after: dict) -> list:
    """The plan file's own prediction beside the new one (`estimate PLAN.json --framework/--gpu/...`)."""
    def cells(p: dict) -> list:
        if not p.get("step_time_s"):
            return [p.get("framework", "-"), p.get("profile", "-") or "-", "-", "-", "-", "-", "-"]
        fits = p.get("fits")
        return [p["framework"], p.get("profile") or "-", f"{p['step_time_s']:.3f}",
                f"{p['tokens_per_s_per_gpu']:,.0f}", f"{100 * p['mfu']:.1f}",
                f"{p['peak_memory_bytes'] / GIB:.1f}", "-" if fits is None else ("yes" if fits else "no")]

    rows = [["plan file", *cells(before)], ["now", *cells(after)]]
    if before.get("step_time_s") and after.get("step_time_s"):
        rows.append(["change", "", "", f"{100 * (after['step_time_s'] / before['step_time_s'] - 1):+.1f}%", "", "",
                     f"{100 * (after['peak_memory_bytes'] / before['peak_memory_bytes'] - 1):+.1f}%", ""])
    return ["prediction: the plan file's and now", *text_table(
        ["", "framework", "profile", "step s", "tok/s/GPU", "MFU %", "GiB", "fits"], rows, "lllrrrrl")]


def _can_run(f) -> str:
    """The framework's limits beyond the rules every plan obeys, as a short phrase."""
    limits = []
    for degree in ("tp", "pp", "cp", "vpp"):
        if getattr(f, f"max_{degree}") == 1:
            limits.append(f"no {degree}")
    if f.max_pp > 1 and not f.uneven_stages:
        limits.append("pp divides layers")
    if f.max_vpp > 1 and not f.uneven_interleaved:
        limits.append("pp*vpp divides layers")
    if f.zero_stages != (0, 1, 2, 3):
        limits.append("zero " + "/".join(map(str, f.zero_stages)))
    if f.max_zero_with_pp < 3:
        limits.append(f"zero<={f.max_zero_with_pp} with pp")
    if f.max_zero_with_ep < 3:
        limits.append(f"zero<={f.max_zero_with_ep} with ep")
    if not f.zero3_tied_embeddings:
        limits.append("zero 3 untied only")
    if f.zero3_dtypes != ("bf16", "fp16", "fp8", "fp32"):
        limits.append("zero 3 in " + "/".join(f.zero3_dtypes))
    if f.zero0_only_pure_dp:
        limits.append("zero 0 only as pure dp")
    if f.sequence_parallel != "optional":
        limits.append(f"sp {f.sequence_parallel}")
    if not f.moe:
        limits.append("dense only")
    elif not f.moe_with_tp_pp:
        limits.append("MoE without tp/pp")
    if "fp8" in f.dtypes and f.moe and not f.fp8_moe:
        limits.append("fp8 dense only")
    if "fp8" in f.dtypes and f.mla and not f.fp8_mla:
        limits.append("fp8 without MLA")
    if f.min_microbatches_per_stage:
        limits.append("micro-batches >= pp")
    if f.tied_embeddings_one_stage:
        limits.append("tied embeddings without tp/pp")
    if not f.tied_embeddings_with_pp:
        limits.append("tied embeddings without pp")
    if not f.learned_positions_split_sequence:
        limits.append("learned positions without cp/sp")
    if f.seq_len_within_model:
        limits.append("seq_len <= model max")
    if not f.tp_with_block_extras:
        limits.append("q/k-norm, post-norm, parallel blocks without tp")
    if not f.cp_with_masked_attention:
        limits.append("windowed/soft-capped attention without cp")
    if not f.mla:
        limits.append("no MLA")
    if f.dtypes != ("bf16", "fp16", "fp8", "fp32"):
        limits.append("/".join(f.dtypes))
    return ", ".join(limits) or "every plan"


def render_frameworks(frameworks: list) -> str:
    """`autoplan frameworks`: one row each -- bytes per parameter by ZeRO stage, loss, recompute, limits."""
    rows = []
    for f in frameworks:
        per_stage = []
        for stage in (0, 3):
            total = sum(t.bytes_per_param for t in f.states.values() if t.sharded_from_zero > stage)
            per_stage.append(f"{total + (f.compute_weight_copy_bytes if stage < 3 else 0):g}")
        rows.append([f.name, f"{sum(t.bytes_per_param for t in f.states.values()):g}+{f.compute_weight_copy_bytes:g}",
                     "/".join(per_stage), _loss_kind(f),
                     f.selective_recompute, "yes" if f.flash_attention else "no", _can_run(f)])
    # The last column ("can run") wraps within WIDTH columns, its continuation lines under it.
    lines = text_table(["framework", "B/param", "unsharded z0/z3", "loss", "selective", "flash", ""],
                       [row[:-1] + [""] for row in rows], "lrrllll")
    indent = max(len(line) for line in lines) + 2
    out = [lines[0].ljust(indent) + "can run"]
    for line, row in zip(lines[1:], rows):
        wrapped = textwrap.wrap(row[-1], width=max(30, WIDTH - indent), break_on_hyphens=False) or [""]
        out.append(line.ljust(indent) + wrapped[0])
        out += [" " * indent + more for more in wrapped[1:]]
    return "\n".join(out) + (
        "\n\nB/param: model states + compute-weight copy per parameter;\nunsharded z0/z3: bytes per parameter "
        "not divided by dp at ZeRO 0 and 3\n")


def _loss_kind(f) -> str:
    if not f.fused_cross_entropy:
        return "unfused" if f.loss_chunks == 1 else f"unfused, x{f.loss_chunks} chunks"
    return "fused" if f.fused_cross_entropy_max_tp >= 1 << 20 else f"fused at tp<={f.fused_cross_entropy_max_tp}"


def render_framework(f, fitted: dict | None = None) -> str:
    """`autoplan frameworks NAME`: every fact of one framework with its source; `fitted` names the
    efficiency values the cost model fitted on published runs (already merged into `f`)."""
    lines = [f"{f.name}: {f.description}", f"  facts of: {f.version}"]
    for title, states in [("stores (bytes per parameter)", f.states),
                          *((f"stores in {dtype} (bytes per parameter)", facts["states"])
                            for dtype, facts in f.by_dtype.items() if "states" in facts)]:
        lines += ["", title]
        lines += text_table(["state", "bytes", "sharded from ZeRO", "what"],
                            [[k, f"{t.bytes_per_param:g}", str(t.sharded_from_zero) if t.sharded_from_zero <= 3 else "never",
                              t.what] for k, t in states.items()], "lrrl")
    for dtype, facts in f.by_dtype.items():
        others = [f"{k}={v:g}" if isinstance(v, (int, float)) else f"{k}={v}" for k, v in facts.items() if k != "states"]
        if others:
            lines += [f"  in {dtype} also: {', '.join(others)}"]
    lines += [f"  compute-weight copy: {f.compute_weight_copy_bytes:g} B/param, activations {BYTES_ACT} B "
              f"per element, loss {_loss_kind(f) if f.fused_cross_entropy else 'unfused (fp32 logit gradient kept)'}"
              f"{f' over {f.loss_chunks} sequence chunks, one at a time' if f.loss_chunks > 1 else ''}, "
              f"selective recompute = {f.selective_recompute}",
              f"  activations saved as: {f.activation_recipe}; outside the allocator: "
              f"{f.runtime_bytes / 2 ** 30:.2f} GiB (CUDA context, cuBLAS/NCCL)",
              f"fuses: flash attention {'yes' if f.flash_attention else 'no'}, memory-bound bytes x{f.fused_elementwise:g}, "
              f"gradient accumulation {_accumulation(f)}",
              f"overlaps: TP comm {f.tp_comm_overlap:.0%}, DP window {_dp_window(f)}, "
              f"pipeline scatter/gather {'yes' if f.pp_scatter_gather else 'no'}",
              *([f"MoE tokens: {f.moe_dispatch} dispatch"
                 f"{', all-to-all hidden under another micro-batch' if f.moe_a2a_overlap else ''}; experts: "
                 + ("split over an expert TP of their own (--etp)" if f.expert_tensor_parallel else
                    "whole under expert parallelism (etp 1), split over tp without" if f.experts_whole_with_ep else
                    "split over tp")
                 + (", one grouped GEMM per weight (torch._grouped_mm)" if f.moe_grouped_gemm else
                    ", a GEMM per local expert")
                 + ("; in fp8 plans their GEMMs stay bf16" if not f.fp8_expert_gemms and "fp8" in f.dtypes else "")]
                if f.moe else []),
              f"can run: {_can_run(f)}"]
    if fitted:
        lines.append("fitted on published runs (cost_model/data/constants.json): "
                     + ", ".join(f"{k}={v:.3g}" for k, v in fitted.items()))
    lines += ["", "sources"]
    lines += [f"  {k}: {v}" for k, v in f.sources.items()] or ["  (none beyond the field docs)"]
    # Long lines (sources, the "what" of a state) continue 4 columns further in than they start.
    return "\n".join(w for line in lines for w in wrap_line(line, len(line) - len(line.lstrip()) + 4)) + "\n"
