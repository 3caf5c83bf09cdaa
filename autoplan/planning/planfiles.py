"""Reading a plan file for a command: the one reader every command uses, which says what reading an
older file assumed and gives a plan without a prediction one (so `compare`, `tune`, `export` and
`run` see the same figures `estimate` would print, never a missing key or an infinite step time)."""
from __future__ import annotations

import sys
from pathlib import Path

_pending_notes: list = []
"""The `note:` lines of the plan files read so far: written when the command succeeds (main calls
flush_notes), dropped when it refuses, so a refusal stays the one line it is."""


def flush_notes(write: bool = True) -> None:
    """Write the pending notes on stderr (or drop them) and start afresh."""
    if write:
        sys.stderr.write("".join(f"note: {line}\n" for line in _pending_notes))
    _pending_notes.clear()


def load_plan(path, score_missing: bool = True, own_profile: bool = True, framework_rules: bool = True,
              rescore_stale: bool = True):
    """PlanDocument.load (every field and cross-section rule checked), with a `note:` line (pending
    until the command succeeds: flush_notes) for each assumption (e.g. a v1 file's framework) and,
    unless `score_missing` is False (estimate re-scores anyway), the prediction of a plan file that
    carries none made with today's cost model; a stored prediction not made for the file's plan
    (prediction_current) is re-scored whenever the file's own profile is at hand.
    The profile the file names must be there unless `own_profile` is False (estimate --gpu/--profile
    re-scores on another one). `framework_rules` False leaves the framework's rules to the caller:
    `run` checks them against the framework its backend runs (autoplan-xla's for --backend xla)."""
    from autoplan.inputs.clusters import cluster_for_plan_file
    from autoplan.specs import InfeasiblePlan, PlanDocument, get_framework

    doc = PlanDocument.load(path)
    # The rules across sections and the profile it names, here rather than only where a command
    # re-scores: `compare` and `run --print-launch` then refuse what `estimate` refuses, in its words.
    try:
        doc.parallel.check(doc.model, doc.training, doc.cluster, allow_tp_across_nodes=True)
        if framework_rules:
            get_framework(doc.framework).check(doc.model, doc.training, doc.parallel)
    except InfeasiblePlan as exc:
        raise InfeasiblePlan(f"plan file {str(path)!r}: {exc}", exc.reason) from None
    if own_profile:
        cluster_for_plan_file(doc.cluster, Path(path).parent)
    _pending_notes.extend(doc.assumed)
    # A stored prediction made for another plan is re-scored even where a missing one is not (`run`
    # records it): no command may show, compare or record it as this plan's. `estimate` re-scores
    # on its own (on another GPU too) and leaves it out of its before/after comparison.
    stale = bool(doc.prediction) and not doc.prediction_current
    if (score_missing and not doc.prediction) or (stale and rescore_stale and own_profile):
        from autoplan.planning.planner import estimate_document

        why = _why_rescored(doc, path)
        doc, _ = estimate_document(doc, base_dir=Path(path).parent)
        _pending_notes.append(f"plan file {str(path)!r} {why}: scored with today's cost model "
                              f"(`autoplan estimate {path} -o FILE` writes it down)")
    elif stale:
        _pending_notes.append(f"plan file {str(path)!r} {_why_rescored(doc, path)}: not used as its prediction")
    if score_missing:
        _rescore_alternatives(doc, path)
    return doc


def _why_rescored(doc, path) -> str:
    """Why the file's own prediction is not used: none, none known to belong, or made for another plan."""
    if not doc.prediction:
        return "carries no prediction"
    if not doc.prediction_for:
        return "carries a prediction without the hash of the plan it was made for (written before autoplan checked it)"
    return ("carries a prediction made for another plan (its model, training, cluster, parallel or framework "
            "section was changed after it was predicted)")


def _rescore_alternatives(doc, path) -> None:
    """The alternatives whose stored prediction is not theirs, re-scored the way the chosen plan is; one
    that today's rules refuse keeps no prediction (a command that picks it scores or refuses it)."""
    from dataclasses import replace

    from autoplan.planning.planner import estimate_document
    from autoplan.specs import AutoplanError, ParallelPlan

    stale = [i for i, alt in enumerate(doc.alternatives) if isinstance(alt, dict) and not doc.alternative_current(alt)]
    for i in stale:
        alt = doc.alternatives[i]
        try:
            parallel = ParallelPlan.from_dict(alt.get("parallel"), f"alternative {i + 1} parallel")
            scored, _ = estimate_document(replace(doc, parallel=parallel, alternatives=[]),
                                          base_dir=Path(path).parent)
            prediction = scored.prediction
        except AutoplanError:
            prediction = {}
        doc.alternatives[i] = {k: v for k, v in alt.items() if k != "prediction_for"} | {"prediction": prediction}
    if stale:
        _pending_notes.append(f"plan file {str(path)!r}: {len(stale)} alternative(s) carry a prediction not known "
                              f"to be theirs: re-scored with today's cost model")
