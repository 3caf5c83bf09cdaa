"""The library entry point: a planning request in, a PlanDocument (schema autoplan.plan/v1) out.

`plan_search` resolves the model and the cluster, fills in the training shape it was not given
(and says which defaults it chose), searches, and ranks the runners-up with why each lost.
`estimate_document` re-scores a plan file; `score_one` scores one given plan.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable

from autoplan.inputs.catalog import resolve_model
from autoplan.inputs.clusters import check_dtype, cluster_for_plan_file, resolve_cluster
from autoplan.planning.prediction import prediction_block
from autoplan.planning.search import GIB, PlanScorer, Scored, SearchResult, out_of_memory_message, search
from autoplan.planning.estimators import make_estimator, resolve_framework
from autoplan.planning.no_plan import no_plan_error
from autoplan.planning.space import Pins, SearchSpace
from autoplan.planning.training_shape import training_shape
from autoplan.specs import (
    AUTOPLAN_VERSION, DEFAULT_FRAMEWORK, AutoplanError, Framework, MemoryHeadroom, PlanDocument, resolve_headroom,
)
from autoplan.specs.framework_rules import check_tp_comm_overlap_offered
from autoplan.specs.headroom import headroom_default_line

NUM_ALTERNATIVES = 4


@dataclass
class PlanRequest:
    """What the user asked for; None means "choose for me"."""
    model: str
    num_gpus: int
    gpu: str | None = None
    gpus_per_node: int | None = None
    profile_path: str | None = None
    global_batch_size: int | None = None
    seq_len: int | None = None
    dtype: str = "bf16"
    moe_load_imbalance: float = 0.0
    """MoE: the busiest expert-parallel rank's routed tokens over the mean, measured (0: the framework's)."""
    pins: Pins = field(default_factory=Pins)
    allow_tp_across_nodes: bool = False
    sampler: str = "auto"
    """auto: exact (branch and bound) where the cost model allows, else TPE; tpe; nsga2."""
    num_trials: int | None = None
    seed: int = 0
    exhaustive: bool = False
    storage: str | None = None
    study_name: str | None = None
    calibration_path: str | None = None
    """A calibration file from `autoplan calibrate`: learned profile and/or step-time correction."""
    framework: str = DEFAULT_FRAMEWORK
    """The framework the plan is made for: its facts are costed, its rules bound the search."""
    memory_headroom: MemoryHeadroom | None = None
    """GPU memory to keep free (`--memory-headroom`); None: the default margin (autoplan.specs.headroom)."""
    recompute_layers: int | None = None
    """`--recompute-layers N`: full recompute of N layers per pipeline stage (capped at the stage's
    layers, so a Megatron user's "every layer" is any N at least that); None: the fewest that fit."""
    log: Callable[[str], None] | None = None
    """Where to say what a resumed --storage study held (the CLI passes stderr); None: quiet."""


@dataclass
class PlanOutcome:
    document: PlanDocument
    result: SearchResult | None
    defaults: list
    """Lines saying which training-shape values were chosen for the user, and why."""
    best: Scored


def why_lost(alt: Scored, best: Scored, num_terms: int = 2) -> str:
    """The breakdown terms that differ most from the winner, e.g. '+0.41 s pp_bubble, -0.10 s tp_comm'."""
    if not alt.feasible:
        return alt.reason
    a, b = alt.estimate.time_breakdown_s, best.estimate.time_breakdown_s
    deltas = sorted(((a.get(k, 0.0) - b.get(k, 0.0), k) for k in set(a) | set(b)), key=lambda d: -abs(d[0]))
    slower = alt.step_time_s / best.step_time_s - 1.0
    terms = ", ".join(f"{d:+.3f} s {k}" for d, k in deltas[:num_terms] if d != 0.0)
    return f"{slower * 100:+.1f}% step time: {terms or 'same terms'}"


def _layout(plan) -> tuple:
    return (plan.dp, plan.tp, plan.pp, plan.cp, plan.ep)


def pick_alternatives(result: SearchResult, best: Scored, count: int = NUM_ALTERNATIVES) -> list:
    """Runners-up worth reading: the best plan of each other parallel layout (dp, tp, pp, cp, ep),
    then same-layout variants if layouts run out, the best plan of each other capacity factor searched,
    and the faster plan that came closest to fitting."""
    chosen, layouts = [], {_layout(best.plan)}
    for s in result.ranked[1:]:
        if len(chosen) < count and _layout(s.plan) not in layouts:
            layouts.add(_layout(s.plan))
            chosen.append(s)
    for s in result.ranked[1:]:
        if len(chosen) < count and s not in chosen:
            chosen.append(s)
    chosen += [s for s in result.capacity_bests if s not in chosen]
    faster_unfit = [s for s in result.unfit if s.step_time_s < best.step_time_s]
    if faster_unfit:  # the faster plan that comes closest to fitting: what memory costs this cluster
        chosen.append(min(faster_unfit, key=lambda s: s.peak_memory_bytes))
    return chosen


def alternative_entry(alt: Scored, best: Scored, predict=None) -> dict:
    """A runner-up of the plan file: its plan, why it lost, its prediction (`predict(estimate)`, by default
    the estimate's own block)."""
    entry = {"parallel": alt.plan.to_dict(), "why_not": why_lost(alt, best)}
    entry["prediction"] = (predict or (lambda e: e.to_prediction()))(alt.estimate) if alt.estimate else {}
    return entry


def plan_search(request: PlanRequest) -> PlanOutcome:
    """Search the best plan for the request; raises AutoplanError with one line when there is none."""
    model = resolve_model(request.model)
    cluster, profile = resolve_cluster(request.num_gpus, request.gpu, request.gpus_per_node, request.profile_path)
    check_dtype(profile, request.dtype)
    training, defaults = training_shape(model, cluster, request.seq_len, request.global_batch_size, request.dtype,
                                        request.moe_load_imbalance)
    framework = resolve_framework(request.framework, training.dtype)
    space = SearchSpace(model, training, cluster, request.pins, request.allow_tp_across_nodes, framework=framework)
    calibration = None
    if request.calibration_path:
        from cost_model.learned.calibration import load_calibration

        calibration = load_calibration(request.calibration_path)
    # An architecture, dtype or seq_len the framework cannot take rejects every plan: name it before the
    # search, not whichever plan rule each candidate happened to break first.
    framework.check_problem(model, training)
    if request.pins.tp_comm_overlap:
        # Pinned on: the framework's own rule, not whichever tp rule each candidate broke first.
        check_tp_comm_overlap_offered(framework)
    headroom = resolve_headroom(request.memory_headroom, profile.memory_capacity_bytes, cluster.name)
    defaults += headroom_default_line(request.memory_headroom, profile.memory_capacity_bytes)
    scorer = PlanScorer(make_estimator(model, training, cluster, profile, request.allow_tp_across_nodes, calibration,
                                       framework, headroom),
                        keep_full_recompute=request.pins.recompute == "full",
                        recompute_layers=request.recompute_layers)
    result = search(space, scorer, request.sampler, request.num_trials, request.seed, request.exhaustive,
                    request.storage, request.study_name, log=request.log)
    if result.best is None and (result.sampler != "exhaustive" or space.pins.pinned()):
        # The sampler found nothing that runs; only the full enumeration can say that nothing does. The
        # exact search (bounded) has said so, and counted what did not fit; under pins the message names
        # the leanest pinned plan that does not fit, which only scoring every plan finds.
        result = search(space, scorer, exhaustive=True)
    if result.best is None:
        raise no_plan_error(space, result, profile, lambda c: training_shape(
            model, c, request.seq_len, request.global_batch_size, request.dtype, request.moe_load_imbalance)[0], headroom)
    result.capacity_bests = _capacity_bests(space, scorer, result.best, request)
    doc = plan_document(model, training, cluster, framework.name, result, defaults,
                        request.calibration_path if calibration is not None else None)
    return PlanOutcome(doc, result, defaults, result.best)


def _capacity_bests(space: SearchSpace, scorer: PlanScorer, best: Scored, request: PlanRequest) -> list:
    """The best plan under each capacity factor searched other than the best plan's: each from the
    request's search pinned to it (the joint search keeps the best few layouts, not the best of each
    factor). A sampler's result ranks every plan its scorer has cached, so each is picked by its factor."""
    bests = []
    for factor in space.domains["moe_capacity_factor"]:
        if factor == best.plan.moe_capacity_factor:
            continue
        pinned = SearchSpace(space.model, space.training, space.cluster,
                             replace(space.pins, moe_capacity_factor=factor), space.allow_tp_across_nodes,
                             framework=space.framework)
        found = search(pinned, scorer, request.sampler, request.num_trials, request.seed, request.exhaustive)
        of_factor = [s for s in found.ranked if s.plan.moe_capacity_factor == factor]  # fastest first
        if of_factor:
            bests.append(of_factor[0])
    return bests


def plan_document(model, training, cluster, framework: str, result: SearchResult, defaults: list,
                  calibration_path: str | None = None) -> PlanDocument:
    """The plan file of a search's best plan, with its runners-up and how the search went."""
    best = result.best

    def predict(estimate) -> dict:
        return prediction_block(estimate, model, training, cluster, framework, calibrated=bool(calibration_path))

    doc = PlanDocument(
        model=model, training=training, cluster=cluster, parallel=best.plan,
        prediction=predict(best.estimate),
        alternatives=[alternative_entry(a, best, predict) for a in pick_alternatives(result, best)],
        search={**result.summary(), "defaults": defaults},
        provenance={"autoplan_version": AUTOPLAN_VERSION, "cost_model": best.estimate.cost_model,
                    **({"calibration": calibration_path} if calibration_path else {})},
        framework=framework,
    )
    if result.pareto:
        doc.extra["pareto_front"] = [{"parallel": s.plan.to_dict(), "step_time_s": s.step_time_s,
                                      "peak_memory_bytes": s.peak_memory_bytes} for s in result.pareto]
    return doc


def score_one(model, training, cluster, profile, plan, allow_tp_across_nodes: bool = False,
              framework: str | Framework = DEFAULT_FRAMEWORK, calibration=None,
              memory_headroom_bytes: int = 0) -> Scored:
    """Score one given plan for `framework` (a name or a resolved Framework); a broken rule raises InfeasiblePlan, a plan that does
    not fit (in the capacity less the headroom) comes back with its reason."""
    plan.check(model, training, cluster, allow_tp_across_nodes=allow_tp_across_nodes)
    estimate = make_estimator(model, training, cluster, profile, allow_tp_across_nodes, calibration,
                              framework, memory_headroom_bytes).estimate(plan)
    return Scored(plan, estimate, "" if estimate.fits else out_of_memory_message(estimate),
                  "" if estimate.fits else "out_of_memory")


def estimate_document(doc: PlanDocument, base_dir=None, framework: str | None = None, gpu: str | None = None,
                      profile_path: str | None = None, calibration_path: str | None = None,
                      memory_headroom: MemoryHeadroom | None = None) -> tuple[PlanDocument, Scored]:
    """Re-score a plan file's plan with today's cost model: on the profile the file names, or on
    another GPU type (`gpu`) or measured profile (`profile_path`); for the file's framework or
    another one; with a calibration or not. The document's framework, cluster and prediction are
    replaced by what was scored (the caller keeps the old prediction to compare). The headroom is
    `memory_headroom` when given, else the file's (none in files written before it existed)."""
    if gpu is not None or profile_path is not None:
        cluster, profile = resolve_cluster(doc.cluster.num_gpus, gpu, doc.cluster.gpus_per_node, profile_path)
        check_dtype(profile, doc.training.dtype)
    else:
        cluster, profile = doc.cluster, cluster_for_plan_file(doc.cluster, base_dir)
    calibration = None
    if calibration_path:
        from cost_model.learned.calibration import load_calibration

        calibration = load_calibration(calibration_path)
    facts = resolve_framework(framework or doc.framework, doc.training.dtype)
    headroom = resolve_headroom(memory_headroom, profile.memory_capacity_bytes, cluster.name,
                                doc.prediction.get("memory_headroom_bytes"))
    if headroom >= profile.memory_capacity_bytes:  # the file's margin on another, smaller GPU
        raise AutoplanError(f"the plan file keeps {headroom / GIB:.1f} GiB free, not less than the "
                            f"{profile.memory_capacity_bytes / GIB:.1f} GiB of each {cluster.name} GPU; "
                            f"pass --memory-headroom with a smaller margin")
    scored = score_one(doc.model, doc.training, cluster, profile, doc.parallel, allow_tp_across_nodes=True,
                       framework=facts, calibration=calibration, memory_headroom_bytes=headroom)
    doc.cluster, doc.framework = cluster, facts.name
    doc.prediction = prediction_block(scored.estimate, doc.model, doc.training, cluster, facts.name,
                                      calibrated=calibration is not None)
    doc.prediction_for = None  # made now, for this plan
    doc.provenance = {**doc.provenance, "cost_model": scored.estimate.cost_model,
                      **({"calibration": calibration_path} if calibration is not None else {})}
    return doc, scored
