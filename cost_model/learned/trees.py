"""Gradient-boosted regression trees as plain arrays: fit with scikit-learn, export node by node,
predict with numpy. Nothing is pickled, and predictions come from the exported arrays both right
after fitting and after a JSON round trip, so a reloaded model predicts bit for bit the same.

Each tree is five arrays over its nodes (scikit-learn's `tree_` layout): left and right child
(-1 at a leaf), split feature, threshold, and the leaf value. A row goes left when its feature,
rounded to float32 as scikit-learn's trees compare it, is <= the threshold.
"""
from __future__ import annotations

import numpy as np
from sklearn.ensemble import GradientBoostingRegressor

_FIELDS = ("left", "right", "feature", "threshold", "value")


def fit_boosted_trees(X: np.ndarray, y: np.ndarray, n_estimators: int, max_depth: int, learning_rate: float,
                      subsample: float = 0.8, seed: int = 0) -> dict:
    """Fit squared-error gradient boosting and export it: {"init", "learning_rate", "trees"}."""
    gbm = GradientBoostingRegressor(n_estimators=n_estimators, max_depth=max_depth, learning_rate=learning_rate,
                                    subsample=subsample, random_state=seed).fit(X, y)
    trees = []
    for (estimator,) in gbm.estimators_:
        t = estimator.tree_
        trees.append({"left": t.children_left.astype(np.int64), "right": t.children_right.astype(np.int64),
                      "feature": t.feature.astype(np.int64), "threshold": t.threshold.astype(float),
                      "value": t.value[:, 0, 0].astype(float)})
    # Squared-error boosting starts from the mean of y (its DummyRegressor init).
    return {"init": float(gbm.init_.constant_.ravel()[0]), "learning_rate": float(learning_rate), "trees": trees}


def predict_boosted_trees(model: dict, X: np.ndarray) -> np.ndarray:
    X32 = np.asarray(X, dtype=np.float32).astype(float)
    rows = np.arange(X32.shape[0])
    out = np.full(X32.shape[0], model["init"], dtype=float)
    for tree in model["trees"]:
        node = np.zeros(X32.shape[0], dtype=np.int64)
        while True:
            inner = tree["left"][node] != -1
            if not inner.any():
                break
            go_left = X32[rows, np.maximum(tree["feature"][node], 0)] <= tree["threshold"][node]
            node = np.where(inner, np.where(go_left, tree["left"][node], tree["right"][node]), node)
        out += model["learning_rate"] * tree["value"][node]
    return out


def trees_to_json(model: dict) -> dict:
    return {"init": model["init"], "learning_rate": model["learning_rate"],
            "trees": [{k: np.asarray(t[k]).tolist() for k in _FIELDS} for t in model["trees"]]}


def trees_from_json(data: dict) -> dict:
    trees = []
    for t in data["trees"]:
        tree = {k: np.asarray(t[k], dtype=np.int64 if k in ("left", "right", "feature") else float) for k in _FIELDS}
        if len({len(v) for v in tree.values()}) != 1:
            raise ValueError("an exported tree has node arrays of different lengths")
        trees.append(tree)
    return {"init": float(data["init"]), "learning_rate": float(data["learning_rate"]), "trees": trees}
