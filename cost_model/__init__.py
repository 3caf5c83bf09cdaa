"""The analytical cost model: step time and per-GPU memory of a parallel plan, as breakdowns.

Imports only `autoplan.specs` and the standard library, so planning runs without torch.
"""
from cost_model.constants import Constants, load_constants
from cost_model.contract import PlanEstimator
from cost_model.estimator import Estimator, estimate
from cost_model.flops import narayanan_flops_per_step
from cost_model.intervals import Interval
from cost_model.memory import activation_bytes_per_layer
from cost_model.profiles import BUILTIN_PROFILE_NAMES, DEFAULT_PROFILE_NAME, builtin_profile
from cost_model.shipped_intervals import prediction_interval
from cost_model.stages import StageSplit, stage_split
from cost_model.tables import ProfileTables

__all__ = [
    "BUILTIN_PROFILE_NAMES", "Constants", "PlanEstimator", "DEFAULT_PROFILE_NAME", "Estimator", "Interval", "ProfileTables",
    "StageSplit", "activation_bytes_per_layer", "builtin_profile", "estimate", "load_constants",
    "narayanan_flops_per_step", "prediction_interval", "stage_split",
]
