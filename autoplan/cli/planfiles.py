"""Reading a plan file for a command: the one reader every command uses, which says what reading an
older file assumed and gives a plan without a prediction one (so `compare`, `tune`, `export` and
`run` see the same figures `estimate` would print, never a missing key or an infinite step time)."""
from __future__ import annotations

import sys
from pathlib import Path


def load_plan(path, score_missing: bool = True):
    """PlanDocument.load (every field and cross-section rule checked), with a `note:` line on stderr
    for each assumption (e.g. a v1 file's framework) and, unless `score_missing` is False (estimate
    re-scores anyway), the prediction of a plan file that carries none made with today's cost model."""
    from autoplan.specs import PlanDocument

    doc = PlanDocument.load(path)
    for line in doc.assumed:
        sys.stderr.write(f"note: {line}\n")
    if score_missing and not doc.prediction:
        from autoplan.planner import estimate_document

        doc, _ = estimate_document(doc, base_dir=Path(path).parent)
        sys.stderr.write(f"note: plan file {str(path)!r} carries no prediction: scored with today's cost model "
                         f"(`autoplan estimate {path} -o FILE` writes it down)\n")
    return doc
