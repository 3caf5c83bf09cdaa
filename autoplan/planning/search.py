"""Searching the plan space: Optuna (TPE by default, NSGA-II for a time/memory Pareto front) or an
exhaustive enumeration, the oracle the tests compare the samplers against.

Every candidate is scored by the cost model once (`PlanScorer` caches by plan). A plan that breaks
a rule or does not fit in memory is data, not a crash: the objective reports it to Optuna through
`Trial.set_constraint` (Optuna 5's constraint API), "rules" = 1 for a broken rule and "memory" =
the relative overflow, so the sampler learns how far from fitting a region is.
"""
from __future__ import annotations

import hashlib
import math
import time
from dataclasses import dataclass, field

from autoplan.planning.space import KNOBS, SearchSpace
from autoplan.specs import DEFAULT_FRAMEWORK, AutoplanError, CostEstimate, InfeasiblePlan, ParallelPlan

GIB = 2**30
SAMPLERS = ("tpe", "nsga2")
AUTO = "auto"
"""The default: the exact branch-and-bound enumeration (autoplan.planning.bounded) where the cost model has
a lower bound and no study is stored, else TPE."""
DEFAULT_TRIALS = {"tpe": 200, "nsga2": 600}
NSGA2_POPULATION = 40
POLISH_ROUNDS = 20
POLISH_STARTS = 12


@dataclass(frozen=True)
class Scored:
    """One plan with its estimate (None when a rule is broken) and why it cannot run, if it cannot."""
    plan: ParallelPlan
    estimate: CostEstimate | None
    reason: str = ""
    """Empty for a plan that runs; else the InfeasiblePlan message ("does not fit: ...")."""
    tag: str = ""

    @property
    def feasible(self) -> bool:
        return not self.reason

    @property
    def step_time_s(self) -> float:
        return self.estimate.step_time_s if self.estimate else math.inf

    @property
    def peak_memory_bytes(self) -> int:
        return self.estimate.peak_memory_bytes if self.estimate else 0


class PlanScorer:
    """The cost model behind a cache. `full` recompute plans get the fewest recomputed layers that fit."""

    def __init__(self, estimator, keep_full_recompute: bool = False, recompute_layers: int | None = None):
        self.estimator = estimator
        # A user who pinned --recompute full gets at least one recomputed layer, never a silent "none".
        self.keep_full_recompute = keep_full_recompute
        self.recompute_layers = recompute_layers
        """Pinned layers per stage under full recompute (capped at each plan's stage); None: the fewest that fit."""
        self._cache: dict = {}

    @property
    def num_evaluated(self) -> int:
        return len(self._cache)

    def scored(self) -> list:
        return list(self._cache.values())

    def score(self, plan: ParallelPlan, priced: ParallelPlan | None = None) -> Scored:
        """`plan` scored, once; `priced`: as_scored(plan) where the caller has it already."""
        hit = self._cache.get(plan)
        if hit is None:
            hit = self._cache[plan] = self._score(plan, priced)
        return hit

    def as_scored(self, plan: ParallelPlan) -> ParallelPlan:
        """The plan this scorer prices for `plan`: under full recompute the pinned layers per stage
        or the fewest that fit (every layer when none fits), or its twin without recompute when it
        fits with none; other plans as they are. May raise InfeasiblePlan."""
        if plan.recompute != "full":
            return plan
        est = self.estimator
        if self.recompute_layers is not None:
            return plan.replace(recompute_num_layers=min(self.recompute_layers,
                                                         plan.layers_per_stage(est.model.num_layers)))
        fewest = est.min_full_recompute_layers(plan)
        if fewest == 0 and self.keep_full_recompute:
            return plan.replace(recompute_num_layers=1)
        if fewest == 0:  # fits with no recompute at all: the same plan as recompute="none"
            return plan.replace(recompute="none", recompute_num_layers=0)
        return plan if fewest is None else plan.replace(recompute_num_layers=fewest)

    def _score(self, plan: ParallelPlan, priced: ParallelPlan | None = None) -> Scored:
        est = self.estimator
        try:
            if plan.recompute == "full":
                plan = priced if priced is not None else self.as_scored(plan)
                hit = self._cache.get(plan)  # folded onto a plan scored already (its "none" twin)
                if hit is not None:
                    return hit
            estimate = est.estimate(plan)
        except InfeasiblePlan as exc:
            return Scored(plan, None, str(exc), exc.reason)
        if not estimate.fits:
            return Scored(plan, estimate, out_of_memory_message(estimate), "out_of_memory")
        return Scored(plan, estimate)


def out_of_memory_message(estimate: CostEstimate) -> str:
    headroom = estimate.memory_headroom_bytes
    usable = (f"{estimate.usable_memory_bytes / GIB:.1f} GiB usable ({estimate.memory_capacity_bytes / GIB:.1f} GiB "
              f"less {headroom / GIB:.1f} GiB headroom)" if headroom else f"{estimate.memory_capacity_bytes / GIB:.1f} GiB")
    return f"does not fit: {estimate.peak_memory_bytes / GIB:.1f} GiB > {usable}"


@dataclass
class SearchResult:
    ranked: list
    """Plans that run, fastest first, each once."""
    unfit: list
    """Plans that break no rule but do not fit in memory, fastest first."""
    rejections: dict
    """Reason tag -> (count, first message), for the trials that broke a rule or did not fit."""
    sampler: str
    num_trials: int
    seed: int | None
    wall_time_s: float
    num_evaluated: int
    num_polish_moves: int = 0
    """Improving moves of the local search after the sampler (each recorded as a study trial)."""
    num_resumed_trials: int = 0
    """Trials a stored study already held."""
    pareto: list = field(default_factory=list)
    """NSGA-II only: the non-dominated plans (step time vs memory), fastest first."""
    num_pruned: int = 0
    """Exhaustive search only: plans never scored because a lower bound on their step time
    exceeded the best found (autoplan.planning.bounded); 0 when every plan was scored."""
    capacity_bests: list = field(default_factory=list)
    """With several MoE capacity factors searched: the best plan under each one the best plan does not
    use (what dropping tokens, or not, buys), from a search pinned to it."""

    @property
    def best(self) -> Scored | None:
        return self.ranked[0] if self.ranked else None

    def summary(self) -> dict:
        """The plan file's `search` block."""
        return {"sampler": self.sampler, "num_trials": self.num_trials, "num_polish_moves": self.num_polish_moves,
                "num_resumed_trials": self.num_resumed_trials, "seed": self.seed,
                # Distinct plans tried = those that run + those rejected (by a rule or for memory),
                # so the printed counts add up.
                "wall_time_s": round(self.wall_time_s, 4),
                "num_plans_scored": len(self.ranked) + sum(count for count, _ in self.rejections.values()),
                "num_feasible": len(self.ranked),
                "num_plans_pruned": self.num_pruned,
                "rejected": {tag: count for tag, (count, _) in sorted(self.rejections.items())}}


def _collect(scored: list, sampler: str, num_trials: int, seed, started: float, num_evaluated: int,
             rule_rejections: dict | None = None) -> SearchResult:
    by_plan = {s.plan: s for s in scored}
    ranked = sorted((s for s in by_plan.values() if s.feasible), key=lambda s: s.step_time_s)
    unfit = sorted((s for s in by_plan.values() if s.tag == "out_of_memory"), key=lambda s: s.step_time_s)
    rejections = dict(rule_rejections or {})
    for s in by_plan.values():
        if not s.feasible:
            count, first = rejections.get(s.tag, (0, s.reason))
            rejections[s.tag] = (count + 1, first)
    return SearchResult(ranked, unfit, rejections, sampler, num_trials, seed, time.perf_counter() - started,
                        num_evaluated)


def exhaustive_search(space: SearchSpace, scorer: PlanScorer) -> SearchResult:
    """Score every structurally valid plan: the optimum by construction (the tests' oracle)."""
    started = time.perf_counter()
    plans, rejections = space.enumerate()
    scored = [scorer.score(p) for p in plans]
    return _collect(scored, "exhaustive", len(plans), None, started, scorer.num_evaluated, rejections)


def bounded_search(space: SearchSpace, scorer: PlanScorer) -> SearchResult:
    """The exhaustive search's answer from the plans a lower bound on step time cannot rule out
    (autoplan.planning.bounded); every plan scored if a bound is ever broken."""
    from autoplan.planning.bounded import bounded_scores

    started = time.perf_counter()
    found = bounded_scores(space, scorer)
    if found is None:
        return exhaustive_search(space, scorer)
    scored, rejections, pruned = found
    result = _collect(scored, "exhaustive", len(scored), None, started, scorer.num_evaluated, rejections)
    result.num_pruned = pruned
    return result


def _import_optuna():
    import optuna

    # A Ctrl-C inside a trial is logged at WARNING as a failed trial with its traceback; the CLI
    # says "interrupted" in one line instead.
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    return optuna


def _make_study(optuna, sampler: str, seed: int, directions: list):
    if sampler == "tpe":
        s = optuna.samplers.TPESampler(seed=seed, multivariate=True, n_startup_trials=20)
    elif sampler == "nsga2":
        s = optuna.samplers.NSGAIISampler(seed=seed, population_size=NSGA2_POPULATION)
    else:
        raise AutoplanError(f"unknown sampler {sampler!r}; choose one of {', '.join(SAMPLERS)}")
    return optuna.create_study(sampler=s, directions=directions)


STORAGE_OPEN_ATTEMPTS = 10
STORAGE_RETRY_S = 0.5
"""Opening a stored study is tried this often, this far apart: another search creating the same new
database's tables takes well under a second (measured: two searches started together on 2 cores)."""


def _open_stored_study(optuna, storage: str, study_name: str | None, directions: list, key: str):
    """The stored study to resume, checked to be about the same problem."""
    for attempt in range(STORAGE_OPEN_ATTEMPTS):
        try:
            stored = optuna.create_study(storage=storage, study_name=study_name, directions=directions,
                                         load_if_exists=True)
            break
        except (ValueError, ImportError, RuntimeError) as exc:
            raise AutoplanError(f"cannot open the Optuna study (storage {storage!r}, name {study_name!r}): "
                                f"{str(exc).splitlines()[0]}") from None
        except Exception as exc:
            # Two searches starting on one new database: while one creates the tables, the other's
            # creation fails ("table ... already exists", "UNIQUE constraint failed: alembic_version").
            # Once they exist, opening succeeds; anything still failing then goes to the caller.
            if attempt == STORAGE_OPEN_ATTEMPTS - 1 or not type(exc).__module__.startswith(("sqlalchemy", "optuna")):
                raise
            time.sleep(STORAGE_RETRY_S)
    if len(stored.directions) != len(directions):  # NSGA-II's two objectives against TPE's one
        raise AutoplanError(f"study {stored.study_name!r} in {storage} was searched with "
                            f"{'--sampler nsga2 (two objectives)' if len(stored.directions) == 2 else 'one objective (tpe)'}; "
                            f"resume it with that sampler, or use another --study-name to start a new one")
    found = stored.user_attrs.get("autoplan_space")
    if found is None:
        stored.set_user_attr("autoplan_space", key)
    elif found != key:
        raise AutoplanError(f"study {stored.study_name!r} in {storage} was searched for a different problem "
                            f"({found}); use another --study-name to start a new one")
    return stored


def _outcome(s: Scored, multi: bool) -> tuple:
    """(objective value(s), constraints) that Optuna records for one scored plan."""
    if s.estimate is None:
        return ((math.inf, math.inf) if multi else math.inf), {"rules": 1.0, "memory": 0.0}
    e = s.estimate
    constraints = {"rules": 0.0, "memory": e.peak_memory_bytes / e.usable_memory_bytes - 1.0}
    return ((e.step_time_s, e.peak_memory_bytes / GIB) if multi else e.step_time_s), constraints


def _score_knobs(space: SearchSpace, scorer: PlanScorer, knobs: dict) -> Scored:
    try:
        return scorer.score(space.plan(knobs))
    except InfeasiblePlan as exc:
        return Scored(ParallelPlan(), None, str(exc), exc.reason)


LAYOUT_KNOBS = ("tp", "pp", "cp", "ep", "etp")
"""dp is what the GPU count leaves after tp*pp*cp (and ep*etp regroups tp*cp*dp), so moving one of these alone also moves dp;
trading a factor between two of them (or changing one with a knob it interacts with) keeps the
rest of the plan valid. The polish step therefore also tries pair moves that involve them."""


def _neighbours(space: SearchSpace, current: dict):
    """Plans one knob away, and two knobs away when one of the two is a layout knob."""
    for knob in KNOBS:
        for value in space.domains[knob]:
            if value != current[knob]:
                yield {**current, knob: value}
    for i, a in enumerate(KNOBS):
        for b in KNOBS[i + 1:]:
            if a not in LAYOUT_KNOBS and b not in LAYOUT_KNOBS:
                continue
            for va in space.domains[a]:
                for vb in space.domains[b]:
                    if va != current[a] and vb != current[b]:
                        yield {**current, a: va, b: vb}


def _polish(optuna, study, space: SearchSpace, scorer: PlanScorer, start: dict, max_rounds: int) -> int:
    """Local search from the sampler's best plan: score the neighbours (`_neighbours`), move to the
    fastest one that fits, repeat until none is faster. TPE finds the right region; this settles
    the last per cent that a few hundred samples of a ~10^4-plan space leave on the table. Each
    accepted move is recorded in the study as a trial (user attr phase=polish) so a stored study
    resumes from it; the neighbours are scored through the same cache as the sampler's trials."""
    distributions = {k: optuna.distributions.CategoricalDistribution(list(v)) for k, v in space.domains.items()}
    current, current_time = dict(start), _score_knobs(space, scorer, start).step_time_s
    for moves in range(max_rounds):
        best_move, best_time = None, current_time
        for knobs in _neighbours(space, current):
            s = _score_knobs(space, scorer, knobs)
            if s.feasible and s.step_time_s < best_time:
                best_move, best_time = knobs, s.step_time_s
        if best_move is None:
            return moves
        current, current_time = best_move, best_time
        s = _score_knobs(space, scorer, current)
        value, constraints = _outcome(s, multi=False)
        study.add_trial(optuna.trial.create_trial(value=value, params=current, distributions=distributions,
                                                  constraints=constraints, user_attrs={"tag": s.tag, "phase": "polish"}))
    return max_rounds


def _polish_starts(study, space: SearchSpace, scorer: PlanScorer, count: int) -> list:
    """Knobs of the best sampled plan of each of the `count` best parallel layouts (dp, tp, pp, cp, ep):
    the optimum can sit in a layout whose best plan differs from the sampler's best in three knobs
    or more, too far for one local search, but near the best plan sampled in that layout."""
    best_by_layout = {}
    for t in study.trials:
        if t.state.name != "COMPLETE" or set(t.params) != set(KNOBS):
            continue
        s = _score_knobs(space, scorer, t.params)
        if not s.feasible:
            continue
        layout = (s.plan.dp, s.plan.tp, s.plan.pp, s.plan.cp, s.plan.ep, s.plan.expert_tp)
        if layout not in best_by_layout or s.step_time_s < best_by_layout[layout][0]:
            best_by_layout[layout] = (s.step_time_s, t.params)
    return [params for _, params in sorted(best_by_layout.values(), key=lambda v: v[0])[:count]]


STORE_EVERY_TRIALS = 20
STORE_EVERY_S = 2.0
"""A stored study receives the new trials in batches of at most this many trials or seconds (one
transaction each): a killed search keeps what it had scored, at the cost of one commit per batch."""


class TrialStore:
    """Copies the in-memory study's new trials into the stored study, in small batches and once more
    on the way out (also when the search is interrupted): the sampler works in memory, since a
    database commit per suggested value (~20 per trial) would cost more than the search."""

    def __init__(self, study, stored, start: int):
        self.study, self.stored, self.done = study, stored, start
        self.last_s = time.monotonic()
        self.writing = False
        """True while a batch is being written: a Ctrl-C there leaves the storage mid-transaction, so
        the final flush is skipped (the batches stored before it are kept) rather than wait on a lock."""

    def __call__(self, study=None, trial=None) -> None:  # an Optuna callback, after every trial
        if len(self.study.trials) - self.done >= STORE_EVERY_TRIALS or time.monotonic() - self.last_s >= STORE_EVERY_S:
            self.flush()

    def flush(self) -> None:
        if self.stored is None or self.writing:
            return
        finished = [t for t in self.study.trials[self.done:] if t.state.is_finished()]
        if finished:
            self.writing = True
            self.stored.add_trials(finished)
            self.writing = False
        self.done += len(finished)
        self.last_s = time.monotonic()


def optuna_search(space: SearchSpace, scorer: PlanScorer, sampler: str = "tpe", num_trials: int | None = None,
                  seed: int = 0, storage: str | None = None, study_name: str | None = None,
                  polish: bool = True, log=None, polish_starts: int = POLISH_STARTS,
                  first_knobs: tuple = ()) -> SearchResult:
    """Let an Optuna sampler pick the knobs; stored studies resume (their trials count too).
    `log(line)` hears how many trials a resumed study held; `polish_starts` is how many of the best
    layouts the local search starts from (fewer: faster, for a search of many cluster sizes);
    `first_knobs` are knob choices scored first, e.g. a plan known to fit where few do, which a
    short search could otherwise miss."""
    optuna = _import_optuna()
    started = time.perf_counter()
    num_trials = num_trials if num_trials is not None else DEFAULT_TRIALS[sampler]
    directions = ["minimize", "minimize"] if sampler == "nsga2" else ["minimize"]
    study = _make_study(optuna, sampler, seed, directions)
    key = space_key(space, getattr(scorer.estimator, "memory_headroom_bytes", 0))
    # Without a name, the same problem resumes the same study.
    study_name = study_name or f"autoplan-{hashlib.sha256(key.encode()).hexdigest()[:10]}"
    stored = _open_stored_study(optuna, storage, study_name, directions, key) if storage else None
    if stored is not None:
        study.add_trials([t for t in stored.trials if t.state.name == "COMPLETE"])
        if log is not None and study.trials:
            log(f"resuming study {study_name!r} in {storage}: {len(study.trials)} scored trials found")
    num_resumed = len(study.trials)
    domains = {k: list(v) for k, v in space.domains.items()}
    multi = sampler == "nsga2"

    def objective(trial):
        s = _score_knobs(space, scorer, {k: trial.suggest_categorical(k, domains[k]) for k in KNOBS})
        trial.set_user_attr("tag", s.tag)
        values, constraints = _outcome(s, multi)
        for key, value in constraints.items():
            trial.set_constraint(key, value)
        return values

    for knobs in first_knobs:
        study.enqueue_trial(knobs)
    store = TrialStore(study, stored, num_resumed)
    num_moves = 0
    try:
        study.optimize(objective, n_trials=num_trials, gc_after_trial=False, callbacks=[store])
        if polish and not multi:
            for start in _polish_starts(study, space, scorer, polish_starts):
                num_moves += _polish(optuna, study, space, scorer, start, POLISH_ROUNDS)
                store()
    finally:
        store.flush()
    rules, seen = {}, set()
    for t in study.trials:  # a resumed study's earlier trials count too
        if t.state.name != "COMPLETE" or set(t.params) != set(KNOBS):
            continue
        combination = tuple(sorted(t.params.items()))
        if combination in seen:  # a sampler repeats combinations: each is counted once, like scored plans
            continue
        seen.add(combination)
        try:
            scorer.score(space.plan(t.params))
        except InfeasiblePlan as exc:
            count, first = rules.get(exc.reason, (0, str(exc)))
            rules[exc.reason] = (count + 1, first)
    if multi:
        # The default search (TPE + polish) finds the fastest plans, which NSGA-II's population
        # may miss; scoring them with the same scorer puts them on the front too, so no plan the
        # user sees from `search` beats a printed "Pareto front" on both axes.
        num_moves = optuna_search(space, scorer, "tpe", None, seed).num_polish_moves
    scored = scorer.scored()
    result = _collect(scored, sampler, num_trials, seed, started, scorer.num_evaluated, rules)
    result.num_polish_moves, result.num_resumed_trials = num_moves, num_resumed
    if multi:
        result.pareto = pareto_front(result.ranked)  # over every plan scored, the TPE seed included
    return result


def pareto_front(scored: list) -> list:
    """Plans no other plan beats on both step time and memory (ties kept once), fastest first."""
    front, best_memory = [], math.inf
    for s in sorted(scored, key=lambda s: (s.step_time_s, s.peak_memory_bytes)):
        if s.peak_memory_bytes < best_memory:
            front.append(s)
            best_memory = s.peak_memory_bytes
    return front


def space_key(space: SearchSpace, memory_headroom_bytes: int = 0) -> str:
    """What a stored study was searched for; resuming it for another problem would mix trials (a
    --memory-headroom changes which trials fit: named only when set, so older studies still resume)."""
    m, t, c = space.model, space.training, space.cluster
    pins = space.pins.describe() or "no pins"
    headroom = f" headroom={memory_headroom_bytes}B" if memory_headroom_bytes else ""
    # another framework scores every plan differently (named unless the default: older studies resume)
    name = getattr(space.framework, "name", None)
    framework = f" framework={name}" if name and name != DEFAULT_FRAMEWORK else ""
    return (f"{m.name} gb={t.global_batch_size} seq={t.seq_len} {t.dtype} {c.num_gpus}x{c.name}"
            f"/{c.gpus_per_node} ({c.profile}) {pins}{headroom}{framework}")


def search(space: SearchSpace, scorer: PlanScorer, sampler: str = "tpe", num_trials: int | None = None,
           seed: int = 0, exhaustive: bool = False, storage: str | None = None,
           study_name: str | None = None, log=None, polish_starts: int = POLISH_STARTS,
           first_knobs: tuple = ()) -> SearchResult:
    """The search the user asked for. `auto` (the default) is exact: branch and bound over the whole
    space (autoplan.planning.bounded) for the analytical cost model without a stored study, else TPE. A
    space with no more knob combinations than the trial budget (heavily pinned) is enumerated
    instead: exact, and cheaper than sampling it with repeats. `exhaustive` scores every plan."""
    if sampler == AUTO:
        from autoplan.planning.bounded import supports_bounds

        if storage is None and num_trials is None and not exhaustive and supports_bounds(scorer.estimator):
            return bounded_search(space, scorer)
        sampler = "tpe"
    budget = num_trials if num_trials is not None else DEFAULT_TRIALS.get(sampler, 0)
    if exhaustive or (storage is None and space.size <= budget):
        result = exhaustive_search(space, scorer)
        if sampler == "nsga2":
            result.pareto = pareto_front(result.ranked)
        return result
    return optuna_search(space, scorer, sampler, num_trials, seed, storage, study_name, log=log,
                         polish_starts=polish_starts, first_knobs=first_knobs)
