"""The learned plan-level correction: log(measured / analytical step time) from plan features.

The analytical model stays the backbone; this only learns its residual (scikit-learn idiom for
learned cost models, STYLE.md): an untrained model, or a plan outside what the model has seen,
gets the factor 1.0, i.e. exactly the analytical answer.

`LogRatioRegressor` is, by default, gradient boosting of shallow trees (depth 3, 200 rounds,
shrinkage 0.05); a ridge regression on standardized features is the alternative (kind="ridge").
On the 200 bf16/fp16 published rows under leave-one-sweep-out CV the trees reached the lower error
(docs/learned.md has the figures and the command). Either way the fitted state is plain arrays
(tree nodes exported one by one, or ridge coefficients) that serialize to JSON exactly (no pickle),
and `predict` runs the same numpy code before and after a JSON round trip.

Out of distribution (OOD) is decided by the *guard* features (`guard_columns`; by default, in
`make_correction`, the features that describe the problem rather than the plan: model size, GPU count,
nodes, tokens per GPU, sequence length, GPU type, fp8, software stack). A row is in distribution when
every guard feature lies inside the training range widened by `ood_margin` times that range on each
side (a feature that was constant in training accepts only that value). OOD rows get log-ratio 0.
Plan features (degrees, micro-batch, recompute, bubble, ...) outside their training range are clamped
to it instead, as the trees do anyway beyond their last split: within one search every plan shares the
guard features, so either all plans are corrected or none, and plans are never ranked on two bases.
The predicted log-ratio is clipped to the range seen in training, so the correction never goes beyond
the largest error it has actually observed.
"""
from __future__ import annotations

import numpy as np
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.linear_model import Ridge
from sklearn.pipeline import Pipeline
from sklearn.utils.validation import check_is_fitted, validate_data

from cost_model.learned.features import FEATURE_NAMES, FEATURE_SCHEMA, GUARD_FEATURES, PlanFeaturizer
from cost_model.learned.trees import fit_boosted_trees, predict_boosted_trees, trees_from_json, trees_to_json

CORRECTION_KIND = "log-ratio/1"
KINDS = ("trees", "ridge")
_RANGE_ARRAYS = ("lower_", "upper_", "x_min_", "x_max_")
_RIDGE_ARRAYS = ("mean_", "scale_", "coef_")


class LogRatioRegressor(RegressorMixin, BaseEstimator):
    """Regression of log(measured/analytical) with an explicit training-range guard.

    Parameters
    ----------
    kind : "trees" (gradient-boosted shallow trees, exported node by node) or "ridge" (ridge on
        standardized features). Both serialize to JSON exactly.
    alpha : ridge L2 penalty (kind="ridge").
    n_estimators, max_depth, learning_rate : boosting size, depth and shrinkage (kind="trees").
    ood_margin : how far outside the training range (as a fraction of it) a guard feature may lie
        before the row counts as out of distribution and falls back to the analytical answer.
    guard_columns : indices of the features that decide OOD (None: all); the others are clamped
        to their training range.
    random_state : seed of the boosting's row subsampling.
    """

    def __init__(self, kind: str = "trees", alpha: float = 3.0, n_estimators: int = 200, max_depth: int = 3,
                 learning_rate: float = 0.05, ood_margin: float = 0.1, guard_columns=None, random_state: int = 0):
        self.kind = kind
        self.alpha = alpha
        self.n_estimators = n_estimators
        self.max_depth = max_depth
        self.learning_rate = learning_rate
        self.ood_margin = ood_margin
        self.guard_columns = guard_columns
        self.random_state = random_state

    def fit(self, X, y):
        X, y = validate_data(self, X, y, dtype=float, y_numeric=True)
        if self.kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, got {self.kind!r}")
        if X.shape[0] < 2:
            raise ValueError(f"LogRatioRegressor needs at least 2 training rows, got n_samples={X.shape[0]}")
        if self.kind == "ridge":
            self.mean_ = X.mean(axis=0)
            std = X.std(axis=0)
            self.scale_ = np.where(std > 0, std, 1.0)
            ridge = Ridge(alpha=self.alpha).fit((X - self.mean_) / self.scale_, y)
            self.coef_ = np.asarray(ridge.coef_, dtype=float)
            self.intercept_ = float(ridge.intercept_)
        else:
            self.trees_ = fit_boosted_trees(X, y, self.n_estimators, self.max_depth, self.learning_rate,
                                            seed=self.random_state)
        self.x_min_, self.x_max_ = X.min(axis=0), X.max(axis=0)
        span = self.x_max_ - self.x_min_
        self.lower_ = self.x_min_ - self.ood_margin * span
        self.upper_ = self.x_max_ + self.ood_margin * span
        self.y_min_, self.y_max_ = float(y.min()), float(y.max())
        self.n_train_ = int(X.shape[0])
        return self

    def _guarded(self) -> np.ndarray:
        columns = range(self.n_features_in_) if self.guard_columns is None else self.guard_columns
        return np.asarray(list(columns), dtype=int)

    def _inside(self, X: np.ndarray) -> np.ndarray:
        g = self._guarded()
        return np.all((X[:, g] >= self.lower_[g]) & (X[:, g] <= self.upper_[g]), axis=1)

    def in_distribution(self, X) -> np.ndarray:
        """Boolean mask: rows whose every guard feature lies inside the widened training range."""
        check_is_fitted(self)
        return self._inside(validate_data(self, X, dtype=float, reset=False))

    def _raw(self, X: np.ndarray) -> np.ndarray:
        if self.kind == "ridge":
            return ((X - self.mean_) / self.scale_) @ self.coef_ + self.intercept_
        return predict_boosted_trees(self.trees_, X)

    def predict(self, X) -> np.ndarray:
        """log(measured/analytical); 0.0 (factor 1) for out-of-distribution rows."""
        check_is_fitted(self)
        X = validate_data(self, X, dtype=float, reset=False)
        raw = self._raw(np.clip(X, self.x_min_, self.x_max_))
        return np.where(self._inside(X), np.clip(raw, self.y_min_, self.y_max_), 0.0)

    # -- JSON (no pickle) ---------------------------------------------------------------------
    def to_json(self) -> dict:
        check_is_fitted(self)
        names = _RANGE_ARRAYS + (_RIDGE_ARRAYS if self.kind == "ridge" else ())
        out = {"kind": CORRECTION_KIND, "params": self.get_params(),
               **{name: getattr(self, name).tolist() for name in names},
               "y_min_": self.y_min_, "y_max_": self.y_max_, "n_train_": self.n_train_,
               "n_features_in_": int(self.n_features_in_)}
        if self.kind == "ridge":
            out["intercept_"] = self.intercept_
        else:
            out["trees_"] = trees_to_json(self.trees_)
        return out

    @classmethod
    def from_json(cls, data: dict) -> "LogRatioRegressor":
        if data.get("kind") != CORRECTION_KIND:
            raise ValueError(f"correction kind {data.get('kind')!r} is not {CORRECTION_KIND!r}")
        model = cls(**data["params"])
        names = _RANGE_ARRAYS + (_RIDGE_ARRAYS if model.kind == "ridge" else ())
        for name in names:
            setattr(model, name, np.asarray(data[name], dtype=float))
        if model.kind == "ridge":
            model.intercept_ = float(data["intercept_"])
        else:
            model.trees_ = trees_from_json(data["trees_"])
        model.y_min_, model.y_max_ = float(data["y_min_"]), float(data["y_max_"])
        model.n_train_ = int(data["n_train_"])
        model.n_features_in_ = int(data["n_features_in_"])
        if not all(getattr(model, n).shape == (model.n_features_in_,) for n in names):
            raise ValueError("correction arrays do not all have n_features_in_ entries")
        return model


def make_correction(**params) -> Pipeline:
    """Raw plan records -> log(measured/analytical): featurizer + LogRatioRegressor(**params), whose
    out-of-distribution guard is the problem's features (GUARD_FEATURES) unless given."""
    params.setdefault("guard_columns", tuple(FEATURE_NAMES.index(name) for name in GUARD_FEATURES))
    return Pipeline([("features", PlanFeaturizer()), ("model", LogRatioRegressor(**params))])


def correction_in_distribution(pipeline: Pipeline, records) -> np.ndarray:
    """Which records the fitted correction pipeline will correct (the others keep factor 1.0)."""
    return pipeline[-1].in_distribution(pipeline[:-1].transform(records))


def out_of_range_features(pipeline: Pipeline, record: dict) -> list[str]:
    """Why a record is out of distribution: "name=value outside [lo, hi]" per offending guard feature."""
    x = pipeline[:-1].transform([record])[0]
    model = pipeline[-1]
    names = pipeline[0].get_feature_names_out()
    return [f"{names[i]}={x[i]:.3g} outside [{model.lower_[i]:.3g}, {model.upper_[i]:.3g}]"
            for i in model._guarded() if not model.lower_[i] <= x[i] <= model.upper_[i]]


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
