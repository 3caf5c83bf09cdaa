"""The cluster to ask for: GPU type and count to train N tokens by a deadline and/or within a budget.

For each GPU type (a built-in profile or a measured one) and each GPU count (powers of two below a
node, whole nodes in powers of two from one node up), the plan search of `autoplan.planning.search` runs with
a smaller budget than `autoplan search` (CLUSTER_TRIALS TPE trials, then the local polish from the
CLUSTER_POLISH_STARTS best layouts; the same seed at every point). The best plan's throughput gives
days, GPU-hours and cost through `cost_model.budget.training_run`, the formulas `search
--train-tokens` prints.

The choice: with a deadline, the cheapest point that meets it (and the budget, if given), cheapest
by cost when every type has a price and by GPU-hours otherwise; with a budget alone, the fastest
point within it. The global batch is the same at every point (a cluster should not change the
training recipe), so days differ only by throughput.

Pruning, per type, counts ascending: a count on which not even the leanest plan of any layout fits
in memory costs one cheap check (`planner.leanest_fitting_knobs`) and is skipped; where few plans
fit, the plan that check found is the search's first trial, so a short search cannot miss them
all. Growth stops when the time to train stops falling (more GPUs than the batch and the model can
use), when the cost passes the budget and still rises with the count, when a count met the
deadline and the next one costs more (larger ones, less efficient still, would cost more again),
or when no plan is valid at all (the batch cannot be split that many ways).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

from autoplan.inputs.catalog import resolve_model
from autoplan.inputs.clusters import DEFAULT_GPUS_PER_NODE, builtin_gpu_names, resolve_cluster
from cost_model.budget import training_run
from autoplan.planning.estimators import make_estimator, resolve_framework
from autoplan.planning.no_plan import leanest_fitting_knobs
from autoplan.planning.planner import plan_document
from autoplan.planning.prediction import prediction_block
from autoplan.planning.training_shape import training_shape
from autoplan.planning.search import PlanScorer, SearchResult, search
from autoplan.planning.space import SearchSpace
from autoplan.specs import (
    DEFAULT_FRAMEWORK, AutoplanError, ClusterSpec, MemoryHeadroom, get_framework, resolve_headroom,
)

CLUSTER_TRIALS = 30
CLUSTER_POLISH_STARTS = 4
"""Per count: 30 trials + a polish from the 4 best layouts. benchmarks/cluster_search.py (2026-11-23):
of the 38 counts `cluster` searched for llama-3-70b (2T tokens in 30 days, every built-in type), 36
have a plan as fast as the default search's (200 trials, 12 starts), 2 (32 GPUs, where memory is
tight) 1.6% and 3.0% slower; llama-2-7b 34 of 34. 2 starts left up to 3.3% at 2/3 of the time."""
DEFAULT_GPUS_MIN, DEFAULT_GPUS_MAX = 8, 4096
NUM_RUNNERS_UP = 4


@dataclass(frozen=True)
class GpuOption:
    """One GPU type to search: a built-in profile (`gpu`) or a measured one (`profile_path`)."""
    name: str
    gpu: str | None = None
    profile_path: str | None = None
    price: float | None = None
    """Price of one GPU-hour; None: cost unknown."""


@dataclass
class Point:
    """One GPU type at one count: its best plan and what training the tokens on it takes."""
    option: GpuOption
    num_gpus: int
    status: str = "ok"
    """"ok", or why there is no plan: "does not fit", "no valid plan", or a reason the count cannot be planned."""
    result: SearchResult | None = None
    cluster: ClusterSpec | None = None
    run: dict | None = None
    """budget.training_run: days, gpu_hours, cost (None without a price)."""
    prediction: dict | None = None
    """The best plan's prediction block, its 80 % interval included (planning.prediction)."""
    meets: bool = False
    stop: str = ""
    """Why larger counts of this type were not searched (empty when they were, or none were left)."""

    @property
    def best(self):
        return self.result.best if self.result else None


@dataclass(frozen=True)
class Goal:
    train_tokens: float
    deadline_days: float | None = None
    budget: float | None = None

    def meets(self, run: dict) -> bool:
        on_time = self.deadline_days is None or run["days"] <= self.deadline_days
        affordable = self.budget is None or (run["cost"] is not None and run["cost"] <= self.budget)
        return on_time and affordable


@dataclass
class ClusterRequest:
    model: str
    goal: Goal
    options: list
    """GpuOption per type, from `gpu_options`."""
    gpus_min: int = DEFAULT_GPUS_MIN
    gpus_max: int = DEFAULT_GPUS_MAX
    framework: str = DEFAULT_FRAMEWORK
    seq_len: int | None = None
    global_batch_size: int | None = None
    dtype: str = "bf16"
    moe_load_imbalance: float = 0.0
    """MoE: the busiest expert-parallel rank's routed tokens over the mean, measured (0: the framework's)."""
    """Training precision of the matmuls; a GPU type without it (fp8 before Hopper) is left out."""
    num_trials: int = CLUSTER_TRIALS
    seed: int = 0
    memory_headroom: MemoryHeadroom | None = None
    """GPU memory to keep free on every type (`--memory-headroom`); a share is of each type's capacity."""
    progress: Callable[[str], None] | None = None


@dataclass
class ClusterOutcome:
    request: ClusterRequest
    model: object
    training: object
    defaults: list
    points: list
    chosen: Point | None
    runners_up: list
    wall_time_s: float
    priced: bool = field(default=False)

    @property
    def planned(self) -> list:
        return [p for p in self.points if p.run is not None]

    @property
    def fastest(self) -> Point | None:
        return min(self.planned, key=lambda p: p.run["days"], default=None)

    @property
    def cheapest(self) -> Point | None:
        return min(self.planned, key=lambda p: _price_key(p, self.priced), default=None)

    def document(self, point: Point):
        """The plan file of one point (the chosen one for `-o`), with the run's budget and the table."""
        doc = plan_document(self.model, self.training, point.cluster, self.request.framework, point.result,
                            self.defaults)
        goal = self.request.goal
        doc.extra["train_budget"] = {"train_tokens": goal.train_tokens, "gpu_hour_price": point.option.price}
        doc.extra["cluster_search"] = self.summary(point.meets)
        return doc

    def summary(self, meets: bool) -> dict:
        """The goal, how the search went and every point: the plan file's `cluster_search` block."""
        goal = self.request.goal
        return {"train_tokens": goal.train_tokens, "deadline_days": goal.deadline_days, "budget": goal.budget,
                "meets": meets, "trials_per_point": self.request.num_trials, "seed": self.request.seed,
                "wall_time_s": round(self.wall_time_s, 3), "points": [_point_entry(p) for p in self.points]}


def _point_entry(p: Point) -> dict:
    entry = {"gpu": p.option.name, "num_gpus": p.num_gpus, "status": p.status, "meets": p.meets}
    if p.best is not None:
        pred = p.best.estimate
        entry.update(step_time_s=pred.step_time_s, tokens_per_s=pred.tokens_per_s,
                     tokens_per_s_per_gpu=pred.tokens_per_s_per_gpu, mfu=pred.mfu, **p.run,
                     gpu_hour_price=p.option.price, parallel=p.best.plan.to_dict())
    return entry


def gpu_counts(gpus_per_node: int, lo: int, hi: int) -> list:
    """Powers of two below one node, then whole nodes in powers of two, within [lo, hi]."""
    counts, n = [], 1
    while n < gpus_per_node:
        counts.append(n)
        n *= 2
    n = gpus_per_node
    while n <= hi:
        counts.append(n)
        n *= 2
    return [c for c in counts if lo <= c <= hi]


def gpu_options(gpus: list | None, profile_paths: list, prices) -> list:
    """The types to search, each with its price. `prices`: None, one price for all, or {type: price}.

    Without --gpu or --profile every built-in type is searched, or, with prices per type, the priced
    ones. A price for a type that is not searched, or a type without a price when others have one,
    is one line (a cost ranking that silently mixes priced and unpriced types would mislead)."""
    from autoplan.inputs.clusters import load_profile_file

    names = list(dict.fromkeys(g.strip().lower() for g in gpus)) if gpus else []
    if not names and not profile_paths:
        names = list(prices) if isinstance(prices, dict) else list(builtin_gpu_names())
    options = []
    for name in names:
        resolve_cluster(DEFAULT_GPUS_PER_NODE, name)  # an unknown type: one line, with "did you mean"
        options.append(GpuOption(name, gpu=name))
    for path in dict.fromkeys(profile_paths):
        profile = load_profile_file(path)
        if any(o.name == profile.name for o in options):
            raise AutoplanError(f"--profile {path} is named {profile.name!r} like another type searched; "
                                f"search one of the two, or rename the profile's name field")
        options.append(GpuOption(profile.name, profile_path=path))
    if isinstance(prices, dict):
        searched = [o.name for o in options]
        unknown = [k for k in prices if k not in searched]
        if unknown:
            raise AutoplanError(f"--gpu-hour-price names {', '.join(unknown)}, which is not searched "
                                f"(searched: {', '.join(searched)}); add it to --gpu or drop its price")
        missing = [k for k in searched if k not in prices]
        if missing:
            raise AutoplanError(f"--gpu-hour-price has no price for {', '.join(missing)}; give one per searched "
                                f"type (TYPE=PRICE,...), one price for all, or none (GPU-hours ranking)")
        options = [GpuOption(o.name, o.gpu, o.profile_path, prices[o.name]) for o in options]
    elif prices is not None:
        options = [GpuOption(o.name, o.gpu, o.profile_path, float(prices)) for o in options]
    return options


def _price_key(p: Point, priced: bool) -> tuple:
    return ((p.run["cost"] if priced else p.run["gpu_hours"]), p.run["days"])


def _search_point(option: GpuOption, n: int, model, training, request: ClusterRequest) -> Point:
    try:
        cluster, profile = resolve_cluster(n, option.gpu, None, option.profile_path)
    except AutoplanError as exc:  # e.g. a one-node measured profile without cross-node bandwidth
        return Point(option, n, status=f"cannot plan: {exc}")
    point = Point(option, n, cluster=cluster)
    if training.dtype not in profile.peak_flops_per_s:
        point.status = f"no {training.dtype} matmuls"
        return point
    headroom = resolve_headroom(request.memory_headroom, profile.memory_capacity_bytes, cluster.name)
    framework = resolve_framework(request.framework, training.dtype)
    leanest = leanest_fitting_knobs(model, training, cluster, profile, framework, headroom)
    if leanest is None:
        point.status = "does not fit"
        return point
    scorer = PlanScorer(make_estimator(model, training, cluster, profile, framework=framework,
                                       memory_headroom_bytes=headroom))
    space = SearchSpace(model, training, cluster, framework=framework)
    point.result = search(space, scorer, num_trials=request.num_trials, seed=request.seed,
                          polish_starts=CLUSTER_POLISH_STARTS, first_knobs=(leanest,))
    if point.best is None:
        point.status = "no valid plan"
        return point
    point.run = training_run(point.best.estimate.tokens_per_s, n, request.goal.train_tokens, option.price)
    point.meets = request.goal.meets(point.run)
    point.prediction = prediction_block(point.best.estimate, model, training, cluster, request.framework)
    return point


def _why_stop(point: Point, previous: Point | None, goal: Goal) -> str:
    """Why counts above `point` need no search (see the module doc), or "" to keep growing."""
    if point.run is None:
        return "larger counts not searched"
    if previous is None:
        return ""
    priced = point.option.price is not None
    if point.run["days"] >= previous.run["days"]:
        return f"no faster than {previous.num_gpus:,} GPUs: larger counts not searched"
    if goal.budget is not None and point.run["cost"] > goal.budget and point.run["cost"] >= previous.run["cost"]:
        return "over the budget and rising: larger counts not searched"
    if goal.deadline_days is not None and previous.meets and _price_key(point, priced) > _price_key(previous, priced):
        return f"met the goal at {previous.num_gpus:,} GPUs and costs more here: larger counts not searched"
    return ""


def _search_type(option: GpuOption, counts: list, model, training, request: ClusterRequest, say) -> list:
    points, previous = [], None
    for n in counts:
        say(f"{option.name} x {n:,} GPUs")
        point = _search_point(option, n, model, training, request)
        points.append(point)
        if point.status == "does not fit":
            continue  # more GPUs hold more: keep growing
        point.stop = _why_stop(point, previous, request.goal)
        if point.stop:
            break
        previous = point
    return points


def cluster_search(request: ClusterRequest) -> ClusterOutcome:
    """Search every type and count; choose the point to ask for (None when none meets the goal)."""
    started = time.perf_counter()
    goal = request.goal
    if goal.deadline_days is None and goal.budget is None:
        raise AutoplanError("give --deadline-days D or --budget USD (or both): what the cluster must meet")
    if request.gpus_min > request.gpus_max:
        raise AutoplanError(f"--gpus-min {request.gpus_min} is above --gpus-max {request.gpus_max}")
    priced = all(o.price is not None for o in request.options)
    if goal.budget is not None and not priced:
        raise AutoplanError(f"--budget {goal.budget:,.0f} needs --gpu-hour-price (one price, or TYPE=PRICE per type): "
                            f"autoplan ships no price list")
    model = resolve_model(request.model)
    framework = get_framework(request.framework)
    framework.check_model(model)
    if request.dtype not in framework.dtypes:
        raise AutoplanError(f"--dtype {request.dtype}: framework {framework.name} trains in {', '.join(framework.dtypes)}; "
                            f"pick one of those or another --framework")
    # One global batch for every point: the default is the one for a power-of-two cluster (~4M tokens).
    training, defaults = training_shape(model, ClusterSpec("any", DEFAULT_GPUS_PER_NODE, DEFAULT_GPUS_PER_NODE),
                                        request.seq_len, request.global_batch_size, request.dtype,
                                        request.moe_load_imbalance)
    framework.check_problem(model, training)  # a seq_len beyond the model's: no cluster can help
    if request.global_batch_size is None:
        at = next(i for i, line in enumerate(defaults) if line.startswith("global batch "))
        defaults[at] = (f"global batch {training.global_batch_size} sequences = "
                        f"{training.global_batch_size * training.seq_len / 1e6:.2f}M tokens (default: ~4M tokens, "
                        f"the same on every cluster; set --global-batch)")
    say = request.progress or (lambda line: None)
    points = []
    for option in request.options:
        per_node = DEFAULT_GPUS_PER_NODE
        if option.profile_path is not None:
            from autoplan.inputs.clusters import load_profile_file

            per_node = load_profile_file(option.profile_path).gpus_per_node or DEFAULT_GPUS_PER_NODE
        counts = gpu_counts(per_node, request.gpus_min, request.gpus_max)
        if not counts:
            raise AutoplanError(f"no GPU count of {option.name} between --gpus-min {request.gpus_min} and --gpus-max "
                                f"{request.gpus_max} (counts searched: powers of two up to a node of {per_node}, "
                                f"then whole nodes in powers of two)")
        points += _search_type(option, counts, model, training, request, say)
    meeting = [p for p in points if p.meets]
    if goal.deadline_days is not None:
        meeting.sort(key=lambda p: _price_key(p, priced))
    else:  # a budget alone: the fastest cluster it pays for
        meeting.sort(key=lambda p: (p.run["days"], p.run["cost"]))
    chosen = meeting[0] if meeting else None
    return ClusterOutcome(request, model, training, defaults, points, chosen, meeting[1:1 + NUM_RUNNERS_UP],
                          time.perf_counter() - started, priced)
