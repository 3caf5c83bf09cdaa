"""What every backend shares: refusing a plan made for another framework, and the interrupt that
carries the runs finished before it. Kept apart from the registry (executor.backends), which imports
the backends: a backend imports this module, never the registry.
"""
from __future__ import annotations

from autoplan.specs import AutoplanError, PlanDocument
from autoplan.specs.frameworks import base_framework_name


def check_framework(doc: PlanDocument, accepted: tuple) -> None:
    """A plan made for another framework was costed and bounded by that framework's facts and rules:
    refuse it in one line naming both (re-planning or re-scoring it is the user's call)."""
    if base_framework_name(doc.framework) not in accepted:  # options ("+fp8-rowwise") are run switches
        raise AutoplanError(
            f"plan {doc.plan_id} was made for framework {doc.framework!r}; this backend runs plans made for "
            f"{' or '.join(map(repr, accepted))}: re-plan with --framework {accepted[0]} or re-score it with "
            f"`autoplan estimate PLAN --framework {accepted[0]}`")


class RunInterrupted(KeyboardInterrupt):
    """Ctrl-C during a run of several plans: still a KeyboardInterrupt (the CLI ends with exit 130),
    carrying the Measurements of the plans that finished before it, so the caller can keep them."""

    def __init__(self, records: list):
        super().__init__(f"interrupted after {len(records)} finished plan(s)")
        self.records = list(records)
