"""executor: turn a plan file into a sharded model and a training loop; record a Measurement.

Imports `autoplan.specs` and torch, never `cost_model`: execution does not depend on predictions.
Importing this package does not import torch (the CLI registers `autoplan run` from it); the model
names below load torch on first use.
"""
from executor.backends import BACKENDS, get_backend
from executor.options import RunOptions, add_run_arguments, options_from_args

_LAZY = {"Transformer": "executor.model", "build_model": "executor.model", "count_params": "executor.model",
         "model_notes": "executor.model", "MoEFeedForward": "executor.moe"}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'executor' has no attribute {name!r}")


__all__ = ["BACKENDS", "MoEFeedForward", "RunOptions", "Transformer", "add_run_arguments", "build_model",
           "count_params", "get_backend", "model_notes", "options_from_args"]
