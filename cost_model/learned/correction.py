"""The learned plan-level correction: log(measured / analytical step time) from plan features.

The analytical model stays the backbone; this only learns its residual (scikit-learn idiom for
learned cost models, STYLE.md): an untrained model, or a plan outside what the model has seen,
gets the factor 1.0, i.e. exactly the analytical answer.

`LogRatioRegressor` is a ridge regression on standardized features. It was chosen over tree
ensembles because ~200 published rows do not support more capacity under grouped cross-validation,
and because its fitted state is a handful of arrays that serialize to JSON exactly (no pickle), and
its `predict` is the same numpy expression before and after a JSON round trip.

Out of distribution (OOD) is defined per feature: a row is in distribution when every feature lies
inside the training range widened by `ood_margin` times that range on each side (a feature that was
constant in training accepts only that value). OOD rows get log-ratio 0, and the predicted log-ratio
of in-distribution rows is clipped to the range of log-ratios seen in training, so the correction
never extrapolates beyond the largest error it has actually observed.
"""
from __future__ import annotations

import numpy as np
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.linear_model import Ridge
from sklearn.pipeline import Pipeline
from sklearn.utils.validation import check_is_fitted, validate_data

from cost_model.learned.features import FEATURE_NAMES, FEATURE_SCHEMA, PlanFeaturizer

CORRECTION_KIND = "ridge-log-ratio/1"
_ARRAYS = ("mean_", "scale_", "coef_", "lower_", "upper_")


class LogRatioRegressor(RegressorMixin, BaseEstimator):
    """Ridge regression of log(measured/analytical) with an explicit training-range guard.

    Parameters
    ----------
    alpha : L2 penalty of the ridge on standardized features.
    ood_margin : how far outside the training range (as a fraction of it) a feature may lie
        before the row counts as out of distribution and falls back to the analytical answer.
    """

    def __init__(self, alpha: float = 3.0, ood_margin: float = 0.1):
        self.alpha = alpha
        self.ood_margin = ood_margin

    def fit(self, X, y):
        X, y = validate_data(self, X, y, dtype=float, y_numeric=True)
        if X.shape[0] < 2:
            raise ValueError(f"LogRatioRegressor needs at least 2 training rows, got n_samples={X.shape[0]}")
        self.mean_ = X.mean(axis=0)
        std = X.std(axis=0)
        self.scale_ = np.where(std > 0, std, 1.0)
        ridge = Ridge(alpha=self.alpha).fit((X - self.mean_) / self.scale_, y)
        self.coef_ = np.asarray(ridge.coef_, dtype=float)
        self.intercept_ = float(ridge.intercept_)
        span = X.max(axis=0) - X.min(axis=0)
        self.lower_ = X.min(axis=0) - self.ood_margin * span
        self.upper_ = X.max(axis=0) + self.ood_margin * span
        self.y_min_, self.y_max_ = float(y.min()), float(y.max())
        self.n_train_ = int(X.shape[0])
        return self

    def in_distribution(self, X) -> np.ndarray:
        """Boolean mask: rows whose every feature lies inside the widened training range."""
        check_is_fitted(self)
        X = validate_data(self, X, dtype=float, reset=False)
        return np.all((X >= self.lower_) & (X <= self.upper_), axis=1)

    def predict(self, X) -> np.ndarray:
        """log(measured/analytical); 0.0 (factor 1) for out-of-distribution rows."""
        check_is_fitted(self)
        X = validate_data(self, X, dtype=float, reset=False)
        raw = ((X - self.mean_) / self.scale_) @ self.coef_ + self.intercept_
        inside = np.all((X >= self.lower_) & (X <= self.upper_), axis=1)
        return np.where(inside, np.clip(raw, self.y_min_, self.y_max_), 0.0)

    # -- JSON (no pickle) ---------------------------------------------------------------------
    def to_json(self) -> dict:
        check_is_fitted(self)
        return {
            "kind": CORRECTION_KIND,
            "params": self.get_params(),
            **{name: getattr(self, name).tolist() for name in _ARRAYS},
            "intercept_": self.intercept_, "y_min_": self.y_min_, "y_max_": self.y_max_,
            "n_train_": self.n_train_, "n_features_in_": int(self.n_features_in_),
        }

    @classmethod
    def from_json(cls, data: dict) -> "LogRatioRegressor":
        if data.get("kind") != CORRECTION_KIND:
            raise ValueError(f"correction kind {data.get('kind')!r} is not {CORRECTION_KIND!r}")
        model = cls(**data["params"])
        for name in _ARRAYS:
            setattr(model, name, np.asarray(data[name], dtype=float))
        model.intercept_ = float(data["intercept_"])
        model.y_min_, model.y_max_ = float(data["y_min_"]), float(data["y_max_"])
        model.n_train_ = int(data["n_train_"])
        model.n_features_in_ = int(data["n_features_in_"])
        if not all(getattr(model, n).shape == (model.n_features_in_,) for n in _ARRAYS):
            raise ValueError("correction arrays do not all have n_features_in_ entries")
        return model


def make_correction(alpha: float = 3.0, ood_margin: float = 0.1) -> Pipeline:
    """Raw plan records -> log(measured/analytical): featurizer + LogRatioRegressor."""
    return Pipeline([("features", PlanFeaturizer()),
                     ("model", LogRatioRegressor(alpha=alpha, ood_margin=ood_margin))])


def correction_in_distribution(pipeline: Pipeline, records) -> np.ndarray:
    """Which records the fitted correction pipeline will correct (the others keep factor 1.0)."""
    return pipeline[-1].in_distribution(pipeline[:-1].transform(records))


def correction_to_json(pipeline: Pipeline) -> dict:
    return {"feature_schema": FEATURE_SCHEMA, "features": list(FEATURE_NAMES),
            "model": pipeline[-1].to_json()}


def correction_from_json(data: dict) -> Pipeline:
    """Rebuild a fitted pipeline from `correction_to_json`; refuses another feature schema."""
    if data.get("feature_schema") != FEATURE_SCHEMA or list(data.get("features", [])) != list(FEATURE_NAMES):
        raise ValueError(f"correction uses feature schema {data.get('feature_schema')!r}, this autoplan "
                         f"uses {FEATURE_SCHEMA!r}")
    pipeline = make_correction()
    pipeline.steps[-1] = ("model", LogRatioRegressor.from_json(data["model"]))
    pipeline[0].fit([])  # stateless; marks it fitted
    return pipeline
