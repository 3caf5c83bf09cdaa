"""Learned parts of the cost model: op-level regressors baked into a learned HardwareProfile, and a
plan-level correction of the analytical step time, with grouped-CV evaluation and JSON persistence
(docs/learned.md); `calibration` applies a calibration file when planning (CalibratedEstimator).
Imports scikit-learn; the analytical `cost_model` does not import this package."""
from cost_model.learned.calibrate import build_calibration, calibrated_validation, load_measured_profile
from cost_model.learned.correction import (
    LogRatioRegressor, correction_in_distribution, make_correction, out_of_range_features,
)
from cost_model.learned.dataset import CalibrationData, measurement_data, published_data
from cost_model.learned.evaluate import error_metrics, evaluate_calibration, grouped_predictions, throughput_ape
from cost_model.learned.features import FEATURE_NAMES, FEATURE_SCHEMA, PlanFeaturizer, plan_record
from cost_model.learned.ops import OpFit, fit_op_models, learned_profile
from cost_model.learned.store import CALIBRATION_SCHEMA, CalibrationFile

__all__ = [
    "CALIBRATION_SCHEMA", "CalibrationData", "CalibrationFile", "FEATURE_NAMES", "FEATURE_SCHEMA",
    "LogRatioRegressor", "OpFit", "PlanFeaturizer", "build_calibration", "calibrated_validation",
    "correction_in_distribution", "error_metrics", "evaluate_calibration", "fit_op_models",
    "grouped_predictions", "learned_profile", "load_measured_profile", "make_correction",
    "measurement_data", "out_of_range_features", "plan_record", "published_data", "throughput_ape",
]
