"""Reading a plan file for a command: one place that says what reading an older file assumed."""
from __future__ import annotations

import sys


def load_plan(path):
    """PlanDocument.load, with a `note:` line on stderr for each assumption (e.g. a v1 file's framework)."""
    from autoplan.specs import PlanDocument

    doc = PlanDocument.load(path)
    for line in doc.assumed:
        sys.stderr.write(f"note: {line}\n")
    return doc
