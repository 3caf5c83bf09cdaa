"""`autoplan compare A.json B.json`: two plan files side by side, term by term, and why one wins.

Reads the predictions the files carry, through the plan reader every command uses: a file without
one is scored with today's cost model, a file the checker refuses is refused here too (re-score
either first with `autoplan estimate PLAN -o` to compare them under today's cost model or another
framework/GPU). Tokens/s per GPU decides between plans on different GPU counts; step time between
plans of the same job. Plans that answer different problems (another model, GPU count, GPU type or
training shape) are still compared, with a warning that names each field that differs: the verdict
then weighs two different jobs, not two plans for one job.
"""
from __future__ import annotations

GIB = 2 ** 30


def register(subparsers) -> None:
    p = subparsers.add_parser("compare", help="two plan files side by side, term by term, and why one wins",
                              description=__doc__.split("\n\n")[0])
    p.add_argument("plans", nargs=2, metavar="PLAN.json", help="two plan files (from `search -o` or `estimate -o`)")
    p.set_defaults(func=run)


def _rows(a: dict, b: dict, scale: float, fmt: str) -> list:
    """One row per term of either breakdown: A, B, B - A (terms both leave at zero are dropped)."""
    rows = []
    for term in list(a) + [t for t in b if t not in a]:
        va, vb = a.get(term, 0.0) / scale, b.get(term, 0.0) / scale
        if va or vb:
            rows.append([term, format(va, fmt), format(vb, fmt), format(vb - va, "+" + fmt)])
    total_a, total_b = sum(a.values()) / scale, sum(b.values()) / scale
    rows.append(["total", format(total_a, fmt), format(total_b, fmt), format(total_b - total_a, "+" + fmt)])
    return rows


def _terms(prediction: dict, key: str) -> dict:
    """A breakdown of a prediction; a hand-edited file may leave it out (the plan checker allows it)."""
    return prediction.get(key) or {}


def problem_differences(a, b) -> list:
    """Each field of the problem (model, GPUs, training shape) on which plans A and B differ, as
    'field A vs B'; empty when both answer the same question."""
    diffs = []
    ma, mb = a.model.to_dict(), b.model.to_dict()
    if ma["name"] != mb["name"]:
        diffs.append(f"model {ma['name']} vs {mb['name']}")
    elif ma != mb:  # one name, an edited architecture
        edited = "; ".join(f"{k} {ma[k]} vs {mb.get(k)}" for k in ma if ma[k] != mb.get(k))
        diffs.append(f"model {ma['name']} edited: {edited}")
    ca, cb = a.cluster.to_dict(), b.cluster.to_dict()
    for key, words in (("num_gpus", "GPU count"), ("name", "GPU type"), ("gpus_per_node", "GPUs per node"),
                       ("profile", "hardware profile")):
        if ca.get(key) != cb.get(key):
            diffs.append(f"{words} {ca.get(key)} vs {cb.get(key)}")
    ta, tb = a.training.to_dict(), b.training.to_dict()
    diffs += [f"training {key} {ta.get(key)} vs {tb.get(key)}" for key in list(ta) + [k for k in tb if k not in ta]
              if ta.get(key) != tb.get(key)]
    return diffs


def verdict(a, b) -> str:
    """Which plan wins and the terms that make the difference (largest first)."""
    pa, pb = a.prediction, b.prediction
    same_job = a.cluster.num_gpus == b.cluster.num_gpus and a.training.tokens_per_step == b.training.tokens_per_step
    key, unit = ("step_time_s", "step time") if same_job else ("tokens_per_s_per_gpu", "tokens/s per GPU")
    better_b = pb[key] < pa[key] if same_job else pb[key] > pa[key]
    win, lose, wn, ln = (b, a, "B", "A") if better_b else (a, b, "A", "B")
    ratio = abs(pb[key] / pa[key] - 1)
    win_terms, lose_terms = _terms(win.prediction, "time_breakdown_s"), _terms(lose.prediction, "time_breakdown_s")
    diffs = {t: win_terms.get(t, 0.0) - lose_terms.get(t, 0.0) for t in set(win_terms) | set(lose_terms)}
    biggest = sorted((d for d in diffs.items() if abs(d[1]) > 0), key=lambda d: -abs(d[1]))[:3]
    why = ", ".join(f"{d * 1e3:+.3f} ms {t}" if abs(d) < 1 else f"{d:+.3f} s {t}" for t, d in biggest)
    mem = (win.prediction["peak_memory_bytes"] - lose.prediction["peak_memory_bytes"]) / GIB
    usable = win.prediction.get("memory_capacity_bytes", float("inf")) - win.prediction.get("memory_headroom_bytes", 0)
    fits = "" if win.prediction.get("peak_memory_bytes", 0) <= usable else f"; but {wn} does not fit in memory"
    if ratio < 1e-9:
        return f"verdict: A and B tie on {unit}"
    return (f"verdict: {wn} wins by {ratio:.1%} {unit} ({why} per step against {ln}); "
            f"its memory is {mem:+.1f} GiB per GPU against {ln}'s{fits}")


def run(args) -> int:
    from autoplan.planning.planfiles import load_plan
    from autoplan.rendering.render import plan_line
    from autoplan.rendering.text import text_table

    a, b = (load_plan(path) for path in args.plans)
    pa, pb = a.prediction, b.prediction
    lines = [f"A  {args.plans[0]}: {plan_line(a.parallel.to_dict())}",
             f"   {a.cluster.num_gpus} x {a.cluster.name}, framework {a.framework}, {a.model.name}",
             f"B  {args.plans[1]}: {plan_line(b.parallel.to_dict())}",
             f"   {b.cluster.num_gpus} x {b.cluster.name}, framework {b.framework}, {b.model.name}", ""]
    head = [["step time (s)", f"{pa['step_time_s']:.3f}", f"{pb['step_time_s']:.3f}",
             f"{pb['step_time_s'] - pa['step_time_s']:+.3f}"],
            ["tokens/s per GPU", f"{pa['tokens_per_s_per_gpu']:,.0f}", f"{pb['tokens_per_s_per_gpu']:,.0f}",
             f"{pb['tokens_per_s_per_gpu'] - pa['tokens_per_s_per_gpu']:+,.0f}"],
            ["MFU", f"{pa['mfu']:.1%}", f"{pb['mfu']:.1%}", f"{(pb['mfu'] - pa['mfu']) * 100:+.1f} pt"],
            ["peak memory (GiB)", f"{pa['peak_memory_bytes'] / GIB:.1f}", f"{pb['peak_memory_bytes'] / GIB:.1f}",
             f"{(pb['peak_memory_bytes'] - pa['peak_memory_bytes']) / GIB:+.1f}"]]
    lines += text_table(["", "A", "B", "B - A"], head, "lrrr")
    # Each breakdown in the unit that reads at its scale (a tiny model's step is milliseconds).
    t_unit, t_scale = ("s", 1.0) if max(pa["step_time_s"], pb["step_time_s"]) >= 1 else ("ms", 1e-3)
    m_unit, m_scale = ("GiB", GIB) if max(pa["peak_memory_bytes"], pb["peak_memory_bytes"]) >= GIB else ("MiB", 2 ** 20)
    lines += ["", f"time per step ({t_unit})",
              *text_table(["term", "A", "B", "B - A"],
                          _rows(_terms(pa, "time_breakdown_s"), _terms(pb, "time_breakdown_s"), t_scale, ".3f"),
                          "lrrr")]
    lines += ["", f"memory per GPU ({m_unit})",
              *text_table(["term", "A", "B", "B - A"],
                          _rows(_terms(pa, "memory_breakdown_bytes"), _terms(pb, "memory_breakdown_bytes"), m_scale,
                                ".2f"), "lrrr")]
    lines += ["", verdict(a, b)]
    differences = problem_differences(a, b)
    if differences:
        lines.append(f"warning: A and B answer different problems ({'; '.join(differences)}): the verdict "
                     f"weighs two different jobs, not two plans for one job")
    print("\n".join(lines))
    return 0
