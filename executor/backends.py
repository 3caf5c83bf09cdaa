"""The backend registry: name -> module exposing `check(doc, options)` and `run(doc, options)`.

`check` raises AutoplanError naming the plan feature this backend cannot run and which backend can;
it starts nothing. `run` trains and returns a Measurement (status ok/oom/error). Modules are imported
only when asked for, so `autoplan run --backend torch` never imports torch_xla.
"""
from __future__ import annotations

import importlib
from types import ModuleType

from autoplan.specs import AutoplanError, PlanDocument

BACKENDS = {
    "torch": "executor.torch_backend",
    "xla": "executor.xla_backend",
}


def get_backend(name: str) -> ModuleType:
    if name not in BACKENDS:
        raise AutoplanError(f"unknown backend {name!r}; choose one of {sorted(BACKENDS)}")
    try:
        module = importlib.import_module(BACKENDS[name])
    except ModuleNotFoundError as exc:
        raise AutoplanError(f"backend {name!r} cannot be loaded ({exc}); install autoplan[{name}]") from None
    for attr in ("check", "run"):
        if not callable(getattr(module, attr, None)):
            raise AutoplanError(f"backend {name!r} ({BACKENDS[name]}) has no {attr}() yet")
    return module


def check_framework(doc: PlanDocument, accepted: tuple) -> None:
    """A plan made for another framework was costed and bounded by that framework's facts and rules:
    refuse it in one line naming both (re-planning or re-scoring it is the user's call)."""
    if doc.framework not in accepted:
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
