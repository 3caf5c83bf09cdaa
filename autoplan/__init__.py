"""autoplan: plan, predict and run the parallel training of large language models.

The public names are loaded lazily so `import autoplan` stays light (no optuna until a search runs):

    from autoplan import PlanRequest, plan_search, resolve_model
"""
from importlib import import_module

_LAZY = {
    "PlanRequest": "autoplan.planning.planner", "PlanOutcome": "autoplan.planning.planner",
    "plan_search": "autoplan.planning.planner", "estimate_document": "autoplan.planning.planner",
    "resolve_model": "autoplan.inputs.catalog",
    "catalog_model": "autoplan.inputs.catalog", "model_names": "autoplan.inputs.catalog",
    "resolve_cluster": "autoplan.inputs.clusters", "Pins": "autoplan.planning.space",
}

__all__ = ["__version__", *_LAZY]


def __getattr__(name: str):
    # Even the version is lazy: `python -m autoplan` imports this package before its Ctrl-C handler
    # is installed, so the less it does, the shorter that window.
    if name == "__version__":
        return import_module("autoplan.specs").AUTOPLAN_VERSION
    if name in _LAZY:
        return getattr(import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'autoplan' has no attribute {name!r}")
