"""executor: turn a plan file into a sharded model and a training loop; record a Measurement.

Imports `autoplan.specs` and torch, never `cost_model`: execution does not depend on predictions.
"""
from executor.backends import BACKENDS, get_backend
from executor.options import RunOptions

__all__ = ["BACKENDS", "RunOptions", "get_backend"]
