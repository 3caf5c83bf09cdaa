"""Public training recipes next to the plan autoplan picks for the same problem, both predicted.

    PYTHONPATH=. .venv/bin/python benchmarks/recipes_side_by_side.py            # text, every recipe
    PYTHONPATH=. .venv/bin/python benchmarks/recipes_side_by_side.py --markdown # the tables of docs/recipes.md
    PYTHONPATH=. .venv/bin/python benchmarks/recipes_side_by_side.py bridge-llama3-70b

For each recipe of benchmarks/recipes_table.py: the recipe's plan is costed the way `autoplan
estimate` costs pins (autoplan.planning.planner.score_one: ParallelPlan.check, the framework's check,
then the framework's estimator), and the same problem (model, GPU type and count, global batch,
sequence length, precision, framework) is searched the way `autoplan search` does (plan_search, the
exact branch-and-bound search). Printed: step time, tokens/s/GPU, MFU and peak memory of both, and
the time and memory terms that separate them, largest first. A recipe the framework's rules refuse,
or predicted not to fit, is printed with the rule or the memory it breaks: a finding about the model
or the recipe (docs/recipes.md says which). Everything printed is a prediction; no measured figure of
any source is read or printed.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from recipes_table import RECIPES, Recipe  # noqa: E402

from autoplan.inputs.catalog import resolve_model  # noqa: E402
from autoplan.inputs.clusters import resolve_cluster  # noqa: E402
from autoplan.planning.nearest import nearest_fitting  # noqa: E402
from autoplan.planning.planner import PlanRequest, make_estimator, plan_search, score_one  # noqa: E402
from autoplan.planning.space import SearchSpace  # noqa: E402
from autoplan.planning.training_shape import training_shape  # noqa: E402
from autoplan.rendering.render import plan_line  # noqa: E402
from autoplan.specs import AutoplanError, InfeasiblePlan, ParallelPlan, get_framework, resolve_headroom  # noqa: E402

GIB = 2 ** 30
NUM_TERMS = 4


@dataclass
class Problem:
    model: object
    training: object
    cluster: object
    profile: object
    headroom_bytes: int
    """The default memory margin `autoplan search` and `estimate` keep free (autoplan.specs.headroom):
    the recipe and the pick are judged against the same usable memory."""


def problem_of(recipe: Recipe) -> Problem:
    """The model, training shape and cluster the recipe trains (what `autoplan estimate` resolves)."""
    model = resolve_model(recipe.model)
    cluster, profile = resolve_cluster(recipe.num_gpus, recipe.gpu)
    training, _ = training_shape(model, cluster, recipe.seq_len, recipe.global_batch, recipe.dtype)
    return Problem(model, training, cluster, profile,
                   resolve_headroom(None, profile.memory_capacity_bytes, cluster.name))


def plan_of(recipe: Recipe) -> ParallelPlan:
    """The recipe's knobs as a ParallelPlan: dp what the GPU count leaves, micro-batches what the
    batch leaves; raises InfeasiblePlan when the knobs do not divide the GPUs or the batch."""
    k = dict(recipe.knobs)
    model_parallel = k.get("tp", 1) * k.get("pp", 1) * k.get("cp", 1)
    dp, left = divmod(recipe.num_gpus, model_parallel)
    if left:
        raise InfeasiblePlan(f"{recipe.key}: tp*pp*cp={model_parallel} does not divide {recipe.num_gpus} GPUs",
                             "degree_product")
    per_step, left = divmod(recipe.global_batch, dp * k.get("micro_batch_size", 1))
    if left:
        raise InfeasiblePlan(f"{recipe.key}: global batch {recipe.global_batch} is not a multiple of dp={dp} x "
                             f"micro-batch {k.get('micro_batch_size', 1)}", "batch_product")
    return ParallelPlan(dp=dp, num_microbatches=per_step, **k)


def outside_space(recipe: Recipe, problem: Problem, plan: ParallelPlan) -> list:
    """The recipe's knobs the default search never tries (its space's domains, recompute modules)."""
    space = SearchSpace(problem.model, problem.training, problem.cluster, framework=get_framework(recipe.framework))
    knobs, _ = space.canonical_knobs(space.knobs_of(plan))
    outside = [f"{k}={v}" for k, v in knobs.items() if k in space.domains and v not in space.domains[k]]
    if plan.recompute_modules:
        outside.append(f"recompute_modules={' '.join(plan.recompute_modules)}")
    return outside


@dataclass
class SideBySide:
    recipe: Recipe
    plan: ParallelPlan
    scored: object = None
    """The recipe's Scored (None when a rule refused it)."""
    refusal: str = ""
    pick: object = None
    pick_error: str = ""
    outside: tuple = ()
    fitted: object = None
    """For a recipe predicted not to fit: the nearest plan that does (what `autoplan estimate` suggests:
    its memory levers first, then tp/pp/sp, then vpp), None when none does or the recipe fits."""


def compare(recipe: Recipe) -> SideBySide:
    problem = problem_of(recipe)
    plan = plan_of(recipe)
    row = SideBySide(recipe, plan, outside=tuple(outside_space(recipe, problem, plan)))
    try:
        row.scored = score_one(problem.model, problem.training, problem.cluster, problem.profile, plan,
                               allow_tp_across_nodes=False, framework=recipe.framework,
                               memory_headroom_bytes=problem.headroom_bytes)
    except InfeasiblePlan as exc:
        row.refusal = f"{exc.reason}: {exc}"
    if row.scored is not None and not row.scored.estimate.fits:
        estimator = make_estimator(problem.model, problem.training, problem.cluster, problem.profile,
                                   framework=recipe.framework, memory_headroom_bytes=problem.headroom_bytes)
        row.fitted = nearest_fitting(problem.model, problem.training, problem.cluster, estimator, plan)
    try:
        row.pick = plan_search(PlanRequest(model=recipe.model, num_gpus=recipe.num_gpus, gpu=recipe.gpu,
                                           global_batch_size=recipe.global_batch, seq_len=recipe.seq_len,
                                           dtype=recipe.dtype, framework=recipe.framework)).best
    except AutoplanError as exc:
        row.pick_error = str(exc)
        return row
    # The pick must run where the recipe runs: the rules every plan obeys and the framework's own
    # (the search already keeps to both; said here so that a search that stopped would show).
    row.pick.plan.check(problem.model, problem.training, problem.cluster)
    get_framework(recipe.framework).check(problem.model, problem.training, row.pick.plan)
    return row


def term_deltas(recipe_terms: dict, pick_terms: dict, scale: float = 1.0) -> list:
    """(term, recipe - pick) for every term, largest magnitude first."""
    names = set(recipe_terms) | set(pick_terms)
    deltas = [(k, (recipe_terms.get(k, 0.0) - pick_terms.get(k, 0.0)) / scale) for k in names]
    return sorted((d for d in deltas if abs(d[1]) > 0), key=lambda d: (-abs(d[1]), d[0]))


def verdict(row: SideBySide) -> str:
    if row.refusal:
        return "recipe refused by the framework's rules"
    if row.pick is None:
        return "no plan found"
    r, p = row.scored.estimate, row.pick.estimate
    fits = "" if r.fits else " (recipe predicted not to fit)"
    if p.step_time_s <= r.step_time_s:
        return f"pick {r.step_time_s / p.step_time_s - 1:+.1%} faster{fits}"
    return f"RECIPE faster by {p.step_time_s / r.step_time_s - 1:.1%}{fits}"


def _figures(e) -> str:
    return (f"{e.step_time_s:9.2f} s  {e.tokens_per_s_per_gpu:8,.0f} tok/s/GPU  MFU {e.mfu:5.1%}  "
            f"{e.peak_memory_bytes / GIB:6.1f} GiB {'fits' if e.fits else 'DOES NOT FIT'} "
            f"({e.usable_memory_bytes / GIB:.1f} usable)")


def print_text(row: SideBySide) -> None:
    r = row.recipe
    print(f"== {r.key} ({r.family}): {r.model} on {r.num_gpus} x {r.gpu}, GBS {r.global_batch} x {r.seq_len}, "
          f"{r.dtype}, {r.framework}")
    print(f"   source: {r.source}")
    if r.assumed:
        print(f"   assumed: {r.assumed}")
    print(f"   recipe  {plan_line(row.plan.to_dict())}")
    print(f"           {row.refusal or _figures(row.scored.estimate)}")
    if row.outside:
        print(f"           outside the search space: {', '.join(row.outside)}")
    if row.fitted is not None:
        print(f"   fitted  {plan_line(row.fitted.scored.plan.to_dict())} (the recipe's nearest plan that fits)")
        print(f"           {_figures(row.fitted.scored.estimate)}")
    if row.pick is None:
        print(f"   pick    none: {row.pick_error}")
        return
    print(f"   pick    {plan_line(row.pick.plan.to_dict())}")
    print(f"           {_figures(row.pick.estimate)}")
    print(f"   verdict {verdict(row)}")
    if row.scored is not None:
        time = term_deltas(row.scored.estimate.time_breakdown_s, row.pick.estimate.time_breakdown_s)
        mem = term_deltas(row.scored.estimate.memory_breakdown_bytes, row.pick.estimate.memory_breakdown_bytes, GIB)
        print("   time terms, recipe - pick: " + ", ".join(f"{k} {v:+.2f} s" for k, v in time[:NUM_TERMS]))
        print("   memory terms, recipe - pick: " + ", ".join(f"{k} {v:+.1f} GiB" for k, v in mem[:NUM_TERMS]))
    print()


def _md_figures(e) -> list:
    return [f"{e.step_time_s:.2f}", f"{e.tokens_per_s_per_gpu:,.0f}", f"{e.mfu:.1%}",
            f"{e.peak_memory_bytes / GIB:.1f}" + ("" if e.fits else f" (> {e.usable_memory_bytes / GIB:.1f})")]


def markdown(rows: list) -> str:
    """Two tables: the recipes and the picks side by side, and the terms that separate them."""
    head = ("| recipe | problem | | plan | step s | tok/s/GPU | MFU | peak GiB |\n"
            "|---|---|---|---|---:|---:|---:|---:|")
    lines = [head]
    for row in rows:
        r = row.recipe
        problem = f"{r.model}, {r.num_gpus} x {r.gpu}, {r.global_batch} x {r.seq_len}, {r.dtype}, {r.framework}"
        recipe_figs = [row.refusal, "", "", ""] if row.refusal else _md_figures(row.scored.estimate)
        lines.append(f"| {r.key} | {problem} | recipe | `{plan_line(row.plan.to_dict())}` | "
                     + " | ".join(recipe_figs) + " |")
        if row.fitted is not None:
            lines.append(f"| | | recipe made to fit | `{plan_line(row.fitted.scored.plan.to_dict())}` | "
                         + " | ".join(_md_figures(row.fitted.scored.estimate)) + " |")
        pick_figs = ([row.pick_error, "", "", ""] if row.pick is None else _md_figures(row.pick.estimate))
        pick_plan = "" if row.pick is None else f"`{plan_line(row.pick.plan.to_dict())}`"
        lines.append(f"| | {verdict(row)} | pick | {pick_plan} | " + " | ".join(pick_figs) + " |")
    lines += ["", "| recipe | time terms, recipe - pick (s) | memory terms, recipe - pick (GiB) | "
                  "recipe knobs the search does not try |", "|---|---|---|---|"]
    for row in rows:
        if row.scored is None or row.pick is None:
            time_s, mem = "", ""
        else:
            time_s = ", ".join(f"{k} {v:+.2f}" for k, v in term_deltas(
                row.scored.estimate.time_breakdown_s, row.pick.estimate.time_breakdown_s)[:NUM_TERMS])
            mem = ", ".join(f"{k} {v:+.1f}" for k, v in term_deltas(
                row.scored.estimate.memory_breakdown_bytes, row.pick.estimate.memory_breakdown_bytes,
                GIB)[:NUM_TERMS])
        lines.append(f"| {row.recipe.key} | {time_s} | {mem} | {', '.join(row.outside) or '-'} |")
    return "\n".join(lines)


def summary(rows: list) -> str:
    """The issue's contract in one line: of the recipes that run (no rule refuses them, they fit), how
    many the pick is predicted at least as fast as; and the ones that do not fit or are refused."""
    running = [r for r in rows if r.scored is not None and r.scored.estimate.fits and r.pick is not None]
    slower = [r.recipe.key for r in running if r.pick.estimate.step_time_s > r.scored.estimate.step_time_s]
    not_fit = [r.recipe.key for r in rows if r.scored is not None and not r.scored.estimate.fits]
    refused = [r.recipe.key for r in rows if r.refusal]
    return (f"pick at least as fast as {len(running) - len(slower)} of the {len(running)} recipes that fit"
            + (f" (slower than: {', '.join(slower)})" if slower else "")
            + f"; predicted not to fit: {', '.join(not_fit) or 'none'}; refused by a rule: {', '.join(refused) or 'none'}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("keys", nargs="*", help="recipe keys (default: every recipe)")
    parser.add_argument("--markdown", action="store_true", help="print docs/recipes.md's tables")
    args = parser.parse_args(argv)
    known = {r.key: r for r in RECIPES}
    unknown = [k for k in args.keys if k not in known]
    if unknown:
        print(f"unknown recipe {unknown[0]!r}; known: {', '.join(known)}", file=sys.stderr)
        return 2
    rows = [compare(known[k]) for k in (args.keys or known)]
    if args.markdown:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                cwd=Path(__file__).parent).stdout.strip()
        print(f"<!-- benchmarks/recipes_side_by_side.py --markdown at commit {commit} -->")
        print(markdown(rows))
        print(f"\n{summary(rows)}.")
    else:
        for row in rows:
            print_text(row)
        print(summary(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
