"""The library entry point: a planning request in, a PlanDocument (schema autoplan.plan/v1) out.

`plan_search` resolves the model and the cluster, fills in the training shape it was not given
(and says which defaults it chose), searches, and ranks the runners-up with why each lost.
`estimate_document` re-scores a plan file; `score_one` scores one given plan.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field, replace
from typing import Callable

from autoplan.inputs.catalog import resolve_model
from autoplan.inputs.clusters import check_dtype, cluster_for_plan_file, resolve_cluster
from autoplan.planning.blame import NOT_A_PLAN, rule_that_broke
from autoplan.planning.prediction import prediction_block
from autoplan.planning.search import GIB, PlanScorer, Scored, SearchResult, out_of_memory_message, search
from autoplan.planning.space import MIN_CP_CHUNK_TOKENS, Pins, SearchSpace
from autoplan.planning.training_shape import training_shape
from autoplan.specs import (
    AUTOPLAN_VERSION, DEFAULT_FRAMEWORK, AutoplanError, ClusterSpec, Framework, InfeasiblePlan, PlanDocument,
    MemoryHeadroom, get_framework, resolve_headroom,
)
from autoplan.specs.framework_rules import check_tp_comm_overlap_offered
from autoplan.specs.headroom import headroom_default_line

NUM_ALTERNATIVES = 4
MAX_NODES_TRIED = 4096


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


def resolve_framework(framework: str | Framework, dtype: str) -> Framework:
    """The one Framework a search or an estimate uses, from its name: the documented facts with the
    fitted efficiency values (cost_model/data/constants.json) merged in, as a run in `dtype` uses
    them. A Framework passes through (already resolved). The search space, the framework's rules and
    the estimator all read this object."""
    if isinstance(framework, Framework):
        return framework
    from cost_model import load_constants

    return load_constants().framework(get_framework(framework)).for_dtype(dtype)


def make_estimator(model, training, cluster, profile, allow_tp_across_nodes: bool = False, calibration=None,
                   framework: str | Framework = DEFAULT_FRAMEWORK, memory_headroom_bytes: int = 0):
    """The estimator for `framework` (a name, or the Framework `resolve_framework` gave), calibrated or
    not; "fits" is judged against the capacity less `memory_headroom_bytes`."""
    from cost_model import Estimator

    facts = resolve_framework(framework, training.dtype)
    if calibration is not None:
        from cost_model.learned.calibration import CalibratedEstimator

        return CalibratedEstimator(model, training, cluster, profile, calibration,
                                   allow_tp_across_nodes=allow_tp_across_nodes, framework=facts,
                                   memory_headroom_bytes=memory_headroom_bytes)
    return Estimator(model, training, cluster, profile, allow_tp_across_nodes=allow_tp_across_nodes, framework=facts,
                     memory_headroom_bytes=memory_headroom_bytes)


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


def leanest_fitting_knobs(model, training, cluster, profile, framework: str | Framework,
                          memory_headroom_bytes: int = 0) -> dict | None:
    """The knobs of a plan that fits in memory on this cluster, or None when no plan does. Asks only
    the leanest memory plan of each layout (ZeRO-3, sequence parallel, micro-batch 1, full recompute
    of the fewest layers that fit), smallest model-parallel degrees first."""
    framework = resolve_framework(framework, training.dtype)
    space = SearchSpace(model, training, cluster, framework=framework)
    est = make_estimator(model, training, cluster, profile, framework=framework,
                         memory_headroom_bytes=memory_headroom_bytes)
    for tp in space.domains["tp"]:
        for pp in space.domains["pp"]:
            for cp in space.domains["cp"]:
                # etp 1 lets ep reach past dp*cp (the leanest experts where ep is capped by the expert
                # count); a wider expert TP of its own holds no less than one of these two
                for ep, etp in itertools.product(space.domains["ep"], [e for e in space.domains["etp"] if e <= 1]):
                    knobs = dict(tp=tp, pp=pp, cp=cp, vpp=1, ep=ep, etp=etp, micro_batch_size=1, zero_stage=3,
                                 recompute="full", sequence_parallel=tp > 1)
                    try:
                        if est.min_full_recompute_layers(space.plan(knobs)) is not None:
                            return knobs
                    except InfeasiblePlan:
                        continue
    return None


def fits_somewhere(model, training, cluster, profile, framework: str | Framework,
                   memory_headroom_bytes: int = 0) -> bool:
    """Does any plan fit in memory on this cluster? (`leanest_fitting_knobs` finds one.)"""
    return leanest_fitting_knobs(model, training, cluster, profile, framework, memory_headroom_bytes) is not None


def smallest_fitting_gpus(model, training, cluster, profile, framework: str | Framework = DEFAULT_FRAMEWORK,
                          memory_headroom_bytes: int = 0) -> int | None:
    """The fewest GPUs (whole nodes, upwards from the current count) on which some plan fits."""
    per_node = cluster.gpus_per_node
    start = max(1, cluster.num_gpus // per_node + 1)
    # Beyond this many GPUs even the widest model parallelism leaves dp > global batch: no plan.
    widest = max(per_node, model.num_heads) * model.num_layers * max(1, training.seq_len // (2 * MIN_CP_CHUNK_TOKENS))
    last = min(start + MAX_NODES_TRIED, training.global_batch_size * widest // per_node + 1)
    for nodes in range(start, last + 1):
        bigger = ClusterSpec(cluster.name, nodes * per_node, per_node, cluster.profile)
        if fits_somewhere(model, training, bigger, profile, framework, memory_headroom_bytes):
            return bigger.num_gpus
    return None


def _no_plan_error(space: SearchSpace, result: SearchResult, model, training, cluster, profile,
                   framework: Framework, memory_headroom_bytes: int = 0) -> AutoplanError:
    pins = space.pins.describe()
    if pins and result.unfit:
        leanest = min(result.unfit, key=lambda s: s.peak_memory_bytes)
        return InfeasiblePlan(f"no plan with {pins} fits on {cluster.num_gpus} GPUs; the leanest "
                              f"{leanest.reason}; relax the pins", "out_of_memory")
    tag = rule_that_broke(result.rejections, set(space.pins.pinned()))
    if tag != "out_of_memory":
        count, first = result.rejections[tag]
        if pins:
            return InfeasiblePlan(f"{pins} cannot work: {first}", tag)
        plans = sum(c for t, (c, _) in result.rejections.items() if t not in NOT_A_PLAN)
        # Counted as rejected for memory: scored (result.unfit) or known without scoring (bounded search).
        num_unfit = result.rejections.get("out_of_memory", (0, ""))[0]
        unfit = f"; {num_unfit} others break no rule but do not fit in memory" if num_unfit else ""
        return InfeasiblePlan(f"no valid plan on {cluster.num_gpus} GPUs: {first} (this rule rejected {count} of "
                              f"the {plans} plans tried{unfit})", tag)
    needed = smallest_fitting_gpus(model, training, cluster, profile, framework, memory_headroom_bytes)
    gib = profile.memory_capacity_bytes / GIB
    margin = f", {memory_headroom_bytes / GIB:.1f} GiB kept free" if memory_headroom_bytes else ""
    head = (f"{model.name} does not fit on {cluster.num_gpus} x {cluster.name} ({gib:.1f} GiB each{margin}) "
            f"with any plan")
    if needed is None:
        return InfeasiblePlan(f"{head}, nor on up to {MAX_NODES_TRIED} more nodes", "out_of_memory")
    return InfeasiblePlan(f"{head}; the smallest GPU count that fits is {needed} (--gpus {needed})", "out_of_memory")


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
        raise _no_plan_error(space, result, model, training, cluster, profile, framework, headroom)
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
