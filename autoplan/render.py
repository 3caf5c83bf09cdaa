"""Text output of the planner: the chosen plan, its breakdowns, the runners-up and the Pareto front.

Sizes are base-2 (GiB), times in seconds; each breakdown prints its parts and their share, and the
parts sum to the total printed under them.
"""
from __future__ import annotations

GIB = 2**30


def _table(headers: list, rows: list, align: str) -> list:
    """Left/right aligned columns ('l'/'r' per column), two spaces apart."""
    cells = [headers] + [[str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    out = []
    for row in cells:
        parts = [c.ljust(w) if a == "l" else c.rjust(w) for c, w, a in zip(row, widths, align)]
        out.append("  " + "  ".join(parts).rstrip())
    return out


def plan_line(parallel: dict) -> str:
    """One plan on one line, in the vocabulary of DESIGN.md."""
    p = parallel
    parts = [f"dp={p['dp']}", f"tp={p['tp']}", f"pp={p['pp']}", f"cp={p.get('cp', 1)}"]
    if p.get("vpp", 1) > 1:
        parts.append(f"vpp={p['vpp']}")
    if p.get("ep", 1) > 1:
        parts.append(f"ep={p['ep']}")
    parts.append("sp" if p.get("sequence_parallel") else "no-sp")
    parts.append(f"zero={p.get('zero_stage', 0)}")
    parts.append(f"mbs={p['micro_batch_size']}x{p['num_microbatches']}")
    rc = p.get("recompute", "none")
    parts.append(f"recompute={rc}" + (f"({p['recompute_num_layers']}/stage)" if rc == "full" else ""))
    return " ".join(parts)


# One line per breakdown term, so the table reads without the docs (docs/cost_model.md has the formulas).
TERM_LEGEND = {
    "compute": "GEMMs and attention, forward + backward, at the profile's shape efficiency",
    "memory_bound": "norms, activations, residual adds, RoPE, loss: HBM-bandwidth bound",
    "recompute": "forward passes re-run by activation checkpointing",
    "tp_comm": "tensor-parallel all-reduce / SP all-gather + reduce-scatter, exposed part",
    "cp_comm": "context-parallel K/V exchange not hidden behind attention",
    "ep_comm": "MoE all-to-all dispatch and combine",
    "pp_comm": "pipeline point-to-point sends",
    "pp_bubble": "pipeline fill and drain: (pp-1)/(vpp*micro-batches) of the step",
    "dp_comm": "data-parallel / ZeRO gradient and weight collectives, exposed part",
    "optimizer": "AdamW update of the local shard",
    "overhead": "host time of sharding hooks or a blocking pipeline engine",
    "params": "bf16 weights held by this GPU",
    "grads": "fp32 gradients held by this GPU",
    "optimizer_states": "fp32 master weights + Adam moments",
    "activations": "saved for backward, all micro-batches in flight",
    "activation_working": "one layer's backward working set",
    "logits": "last stage: logits and loss in fp32",
    "comm_buffers": "ZeRO-3 gathered weights and unsharded gradients",
    "allocator_overhead": "caching-allocator fragmentation",
    "cuda_context": "CUDA context and kernels",
}
MEMORY_LEGEND = {**TERM_LEGEND, "optimizer": TERM_LEGEND["optimizer_states"]}


def breakdown_lines(prediction: dict) -> list:
    time_s = prediction["time_breakdown_s"]
    total_s = sum(time_s.values())
    rows = [[k, f"{v:.3f}", f"{100 * v / total_s:.1f}", TERM_LEGEND.get(k, "")] for k, v in time_s.items() if v > 0]
    rows.append(["total (step time)", f"{total_s:.3f}", "100.0", "the sum of the terms above"])
    lines = ["time per step", *_table(["term", "s", "%", "what it is"], rows, "lrrl")]
    mem = prediction["memory_breakdown_bytes"]
    total_b = sum(mem.values())
    rows = [[k, f"{v / GIB:.2f}", f"{100 * v / total_b:.1f}", MEMORY_LEGEND.get(k, "")] for k, v in mem.items() if v > 0]
    rows.append(["total (peak per GPU)", f"{total_b / GIB:.2f}", "100.0", "the sum of the terms above"])
    cap = prediction.get("memory_capacity_bytes")
    lines += ["", "memory per GPU (worst pipeline stage)" + (f", capacity {cap / GIB:.1f} GiB" if cap else ""),
              *_table(["term", "GiB", "%", "what it is"], rows, "lrrl")]
    return lines


def headline_lines(prediction: dict) -> list:
    p = prediction
    return [f"  step time {p['step_time_s']:.3f} s   tokens/s {p['tokens_per_s']:,.0f}   "
            f"tokens/s/GPU {p['tokens_per_s_per_gpu']:,.0f}   MFU {100 * p['mfu']:.1f}%",
            f"  memory {p['peak_memory_bytes'] / GIB:.1f} GiB per GPU of {p['memory_capacity_bytes'] / GIB:.1f} GiB"]


def human_count(n: float) -> str:
    """1.23B / 45.6M / 7.8K / 12: large counts in the unit that keeps them readable (base 10)."""
    for scale, suffix in ((1e9, "B"), (1e6, "M"), (1e3, "K")):
        if n >= scale:
            return f"{n / scale:.{1 if n >= 10 * scale else 2}f}{suffix}"
    return f"{n:.0f}"


def setup_lines(doc) -> list:
    m, t, c = doc.model, doc.training, doc.cluster
    moe = f", {m.num_experts} experts top-{m.num_experts_per_token}" if m.is_moe else ""
    return [f"model    {m.name}: {human_count(m.num_params)} params, {m.num_layers} layers, hidden {m.hidden_size}, "
            f"{m.num_heads} heads ({m.num_kv_heads} kv){moe}",
            f"cluster  {c.num_gpus} x {c.name} ({c.num_nodes} node{'s' if c.num_nodes > 1 else ''} of {c.gpus_per_node}), profile {c.profile}",
            f"training global batch {t.global_batch_size} x seq {t.seq_len} = {human_count(t.tokens_per_step)} tokens/step, "
            f"{t.dtype}, {t.optimizer}"]


def alternatives_lines(doc) -> list:
    rows = []
    for i, alt in enumerate(doc.alternatives, 1):
        pred = alt.get("prediction") or {}
        step = f"{pred['step_time_s']:.3f}" if pred else "-"
        tpg = f"{pred['tokens_per_s_per_gpu']:,.0f}" if pred else "-"
        mem = f"{pred['peak_memory_bytes'] / GIB:.1f}" if pred else "-"
        rows.append([str(i), plan_line(alt["parallel"]), step, tpg, mem, alt.get("why_not", "")])
    if not rows:
        return ["runners-up: none (no other plan runs)"]
    return ["runners-up (why each lost)", *_table(["#", "plan", "step s", "tok/s/GPU", "GiB", "why not"], rows, "rlrrrl")]


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
            *_table(["plan", "step s", "GiB"], rows, "lrr")]


def search_lines(search: dict) -> list:
    rejected = ", ".join(f"{n} {tag}" for tag, n in search.get("rejected", {}).items())
    seed = f", seed {search['seed']}" if search.get("seed") is not None else ""
    extra = "".join(f" + {search[k]} {what}" for k, what in (("num_polish_moves", "polish moves"),
                                                             ("num_resumed_trials", "resumed trials")) if search.get(k))
    return [f"search   {search['sampler']}, {search['num_trials']} trials{extra}{seed}, {search['num_plans_scored']} plans scored, "
            f"{search['num_feasible']} run, {search['wall_time_s']:.2f} s" + (f"; rejected: {rejected}" if rejected else "")]


def render_document(doc, defaults: list = (), title: str = "best plan", with_search: bool = True) -> str:
    lines = setup_lines(doc)
    for d in defaults:
        lines.append(f"default  {d}")
    par = doc.parallel
    lines += ["", f"{title}: {plan_line(par.to_dict())}",
              f"  (mbs={par.micro_batch_size}x{par.num_microbatches}: micro-batches of {par.micro_batch_size} "
              f"sequence{'s' if par.micro_batch_size > 1 else ''}, {par.num_microbatches} per step per data-parallel "
              f"replica; sp = Megatron sequence parallelism; zero = ZeRO stage over dp)",
              *headline_lines(doc.prediction), ""]
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
    return "\n".join(_table(["model", "params", "L", "hidden", "heads/kv", "ffn", "vocab", "mlp", "experts", "source"],
                            table, "lrrrrrrlll")) + "\n"
