"""Text output of `autoplan cluster`: the goal, the cluster to ask for (or by how much none meets
it), the runners-up at other sizes and a scaling table per GPU type. Lines fit 120 columns.

Days, GPU-hours and cost in every row come from that row's predicted tokens/s through
`cost_model.budget.training_run` (steady state).
"""
from __future__ import annotations

from autoplan.rendering.render import GIB, headline_lines, plan_line, setup_lines
from autoplan.rendering.text import human_count, text_table, wrap_line

NO_PRICE = ("cost     unknown: no --gpu-hour-price (autoplan ships no price list: prices depend on the provider, the "
            "commitment and the date); ranked by GPU-hours, which is the cost at one price for every type, not "
            "across types priced differently")


def _money(amount) -> str:
    return "-" if amount is None else f"${amount:,.0f}"


def _cluster_name(p) -> str:
    return f"{p.num_gpus:,} x {p.option.name}"


def goal_lines(outcome) -> list:
    goal = outcome.request.goal
    parts = [f"train {human_count(goal.train_tokens)} tokens"
             + (f" within {goal.deadline_days:,.1f} days" if goal.deadline_days is not None else "")]
    if goal.budget is not None:
        parts.append(f"for at most {_money(goal.budget)}")
    rule = ("the cheapest cluster that meets it" if goal.deadline_days is not None
            else "the fastest cluster within the budget")
    lines = [f"goal     {', '.join(parts)}: {rule}"]
    if outcome.priced:
        prices = ", ".join(f"{o.name} ${o.price:,.2f}" for o in outcome.request.options)
        lines += wrap_line(f"prices   per GPU-hour (given): {prices}", 9)
    else:
        lines += wrap_line(NO_PRICE, 9)
    return lines


def _run_line(p, goal) -> str:
    run = p.run
    text = (f"  train {human_count(goal.train_tokens)} tokens: {run['days']:,.1f} days, "
            f"{run['gpu_hours']:,.0f} GPU-hours")
    if run["cost"] is not None:
        text += f", {_money(run['cost'])} at ${p.option.price:,.2f}/GPU-hour"
    return text + " (steady state)"


def _point_block(title: str, p, goal) -> list:
    c = p.cluster
    pred = p.prediction or p.best.estimate.to_prediction()
    return [*wrap_line(f"{title}: {_cluster_name(p)} ({c.num_nodes:,} node{'s' if c.num_nodes > 1 else ''} of "
                       f"{c.gpus_per_node}, profile {c.profile})", 2),
            f"  plan: {plan_line(p.best.plan.to_dict())}", *headline_lines(pred), *wrap_line(_run_line(p, goal), 4)]


def _miss_lines(outcome) -> list:
    goal = outcome.request.goal
    lines = ["no cluster searched meets it (exit code 1; -o writes no plan file)"]
    fastest = outcome.fastest
    if fastest is None:
        return lines + ["  no GPU type and count searched has a plan that fits; widen --gpus-max or add a GPU type"]
    if goal.deadline_days is not None:
        late = fastest.run["days"] - goal.deadline_days
        if late > 0:
            lines.append(f"  the fastest found, {_cluster_name(fastest)}, takes {fastest.run['days']:,.1f} days: "
                         f"{late:,.1f} days ({100 * late / goal.deadline_days:.0f}%) past the deadline")
        on_time = [p for p in outcome.planned if p.run["days"] <= goal.deadline_days]
        if goal.budget is not None and on_time:
            cheapest = min(on_time, key=lambda p: p.run["cost"])
            over = cheapest.run["cost"] - goal.budget
            lines.append(f"  the cheapest in time, {_cluster_name(cheapest)}, costs {_money(cheapest.run['cost'])}: "
                         f"{_money(over)} ({100 * over / goal.budget:.0f}%) over the budget")
    elif goal.budget is not None:
        cheapest = outcome.cheapest
        over = cheapest.run["cost"] - goal.budget
        lines.append(f"  the cheapest found, {_cluster_name(cheapest)}, costs {_money(cheapest.run['cost'])}: "
                     f"{_money(over)} ({100 * over / goal.budget:.0f}%) over the budget")
    return [w for line in lines for w in wrap_line(line, 4)] + [""] + _point_block("fastest found", fastest, goal)


def _versus(p, chosen, priced: bool) -> str:
    key, what = ("cost", "cost") if priced else ("gpu_hours", "GPU-hours")
    return f"{100 * (p.run[key] / chosen.run[key] - 1):+.0f}% {what}, {p.run['days'] - chosen.run['days']:+,.1f} days"


def runners_up_lines(outcome) -> list:
    if outcome.chosen is None:
        return []
    if not outcome.runners_up:
        return ["runners-up at other sizes: none (no other type or count searched meets it)"]
    rows = [[str(i), _cluster_name(p), f"{p.run['days']:,.1f}", f"{p.run['gpu_hours']:,.0f}", _money(p.run["cost"]),
             _versus(p, outcome.chosen, outcome.priced)] for i, p in enumerate(outcome.runners_up, 1)]
    header, *table = text_table(["#", "cluster", "days", "GPU-hours", "cost", "against the chosen"], rows, "rlrrrl")
    lines = ["runners-up at other sizes (they meet it too; the best plan found at each)", header]
    for line, p in zip(table, outcome.runners_up):
        lines += [line, f"     plan: {plan_line(p.best.plan.to_dict())}"]
    return lines


_STATUS = {"does not fit": "no plan fits in memory",
           "no valid plan": "no valid plan (the batch cannot be split so far)"}


def scaling_lines(outcome) -> list:
    lines = ["scaling per GPU type (the best plan found at each count; days and cost from its tokens/s)"]
    headers = ["GPUs", "step s", "tok/s/GPU", "MFU %", "days", "GPU-hours", *(["cost"] if outcome.priced else []),
               "meets"]
    by_type = {}
    for p in outcome.points:
        by_type.setdefault(p.option.name, []).append(p)
    for name, points in by_type.items():
        capacity = next((p.best.estimate.memory_capacity_bytes for p in points if p.best), None)
        first = points[0]
        source = first.cluster.profile if first.cluster else (first.option.profile_path or f"builtin:{name}")
        per_gpu = f", {capacity / GIB:.1f} GiB per GPU)" if capacity else ")"
        lines += ["", *wrap_line(f"{name} ({source}{per_gpu}", 2)]
        rows, notes, missing = [], [], {}
        for i, p in enumerate(points):
            if p.best is None:
                missing[i] = _STATUS.get(p.status, "cannot be planned (below)")
                rows.append([f"{p.num_gpus:,}"] + [""] * (len(headers) - 1))
                if p.status not in _STATUS:  # a reason the count cannot be planned: wrapped under the table
                    notes += wrap_line(f"  {p.num_gpus:,} GPUs: {p.status}", 4)
            else:
                e = p.best.estimate
                rows.append([f"{p.num_gpus:,}", f"{e.step_time_s:.3f}", f"{e.tokens_per_s_per_gpu:,.0f}",
                             f"{100 * e.mfu:.1f}", f"{p.run['days']:,.1f}", f"{p.run['gpu_hours']:,.0f}",
                             *([_money(p.run["cost"])] if outcome.priced else []), "yes" if p.meets else "no"])
            if p.stop:
                notes.append(f"  {p.stop}")
        header, *table = text_table(headers, rows, "r" * (len(headers) - 1) + "l")
        width = len(table[0]) - len(table[0].lstrip()) + max(len(r[0]) for r in rows)
        lines += [header] + [line[:width] + "  " + missing[i] if i in missing else line
                             for i, line in enumerate(table)]
        lines += notes
    return lines


def render_cluster(outcome) -> str:
    req = outcome.request
    any_doc = next((p for p in outcome.points if p.best), None)
    lines = []
    if any_doc is not None:
        doc = outcome.document(any_doc)
        lines += [w for line in setup_lines(doc) if not line.startswith("cluster") for w in wrap_line(line, 9)]
    for d in outcome.defaults:
        lines += wrap_line(f"default  {d}", 9)
    lines += goal_lines(outcome) + [""]
    if outcome.chosen is not None:
        basis = "cost" if outcome.priced else "GPU-hours"
        title = ("chosen (the cheapest by " + basis + " that meets it)" if req.goal.deadline_days is not None
                 else "chosen (the fastest within the budget)")
        lines += _point_block(title, outcome.chosen, req.goal)
    else:
        lines += _miss_lines(outcome)
    runners = runners_up_lines(outcome)
    lines += ([""] + runners if runners else []) + [""] + scaling_lines(outcome)
    searched = sum(1 for p in outcome.points if p.result is not None)
    skipped = sum(1 for p in outcome.points if p.status == "does not fit")
    lines += ["", f"search   {req.num_trials} trials + a local polish per count, seed {req.seed}, {searched} counts "
                  f"searched, {skipped} skipped (nothing fits), {outcome.wall_time_s:.1f} s"]
    return "\n".join(lines) + "\n"
