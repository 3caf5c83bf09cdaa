"""autoplan: plan, predict and run the parallel training of large language models.

The public names are loaded lazily so `import autoplan` stays light (no optuna until a search runs):

    from autoplan import PlanRequest, plan_search, resolve_model
"""
from importlib import import_module

from autoplan.specs import AUTOPLAN_VERSION as __version__  # noqa: F401

_LAZY = {
    "PlanRequest": "autoplan.planner", "PlanOutcome": "autoplan.planner", "plan_search": "autoplan.planner",
    "estimate_document": "autoplan.planner", "resolve_model": "autoplan.catalog",
    "catalog_model": "autoplan.catalog", "model_names": "autoplan.catalog",
    "resolve_cluster": "autoplan.clusters", "Pins": "autoplan.space",
}

__all__ = ["__version__", *_LAZY]


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'autoplan' has no attribute {name!r}")
