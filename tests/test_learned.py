"""The learned correction: scikit-learn contract, fallback, JSON round trip, grouped CV, op models."""
import json

import numpy as np
import pytest
from sklearn.base import BaseEstimator, RegressorMixin, clone
from sklearn.model_selection import GroupKFold, cross_val_score
from sklearn.utils.estimator_checks import check_estimator

from autoplan.specs import AutoplanError, CollectiveSample, HardwareProfile, MatmulSample
from cost_model.learned.correction import (
    LogRatioRegressor, correction_from_json, correction_in_distribution, correction_to_json, make_correction,
)
from cost_model.learned.evaluate import error_metrics, evaluate_calibration, grouped_predictions
from cost_model.learned.features import FEATURE_NAMES, PlanFeaturizer
from cost_model.learned.ops import fit_op_models, learned_profile
from cost_model.learned.store import CalibrationFile


def synthetic_records(n=80, seed=0):
    """Plan records with a known residual: measured = analytical * exp(0.25*log2(tp) - 0.05*pp)."""
    rng = np.random.default_rng(seed)
    records = []
    for _ in range(n):
        tp, pp = int(rng.choice([1, 2, 4, 8])), int(rng.choice([1, 2, 4]))
        m = int(rng.choice([8, 16, 32]))
        records.append(dict(
            num_params=int(10 ** rng.uniform(9, 11)), num_layers=48, seq_len=2048, global_batch_size=1024,
            num_gpus=256, gpus_per_node=8, dp=256 // (tp * pp), tp=tp, pp=pp, cp=1, vpp=1,
            sequence_parallel=bool(tp > 1), zero_stage=1, micro_batch_size=1, num_microbatches=m,
            recompute=str(rng.choice(["none", "selective", "full"])), recompute_num_layers=0, dtype="bf16",
            peak_flops_per_s=312e12, memory_bandwidth_bytes_per_s=1.8e12,
            analytical_step_time_s=float(rng.uniform(1, 10)), analytical_comm_time_s=float(rng.uniform(0, 0.5)),
            analytical_mfu=float(rng.uniform(0.3, 0.6)), software="megatron-core", flash_attention=True))
        if records[-1]["recompute"] == "full":
            records[-1]["recompute_num_layers"] = 48 // pp
    truth = np.array([0.25 * np.log2(r["tp"]) - 0.05 * r["pp"] for r in records])
    return records, truth + rng.normal(0, 0.01, n)


SMALL_TREES = dict(kind="trees", n_estimators=60, learning_rate=0.15)


@pytest.mark.parametrize("params", [dict(kind="ridge"), SMALL_TREES], ids=["ridge", "trees"])
def test_regressor_passes_the_scikit_learn_estimator_checks(params):
    checks = check_estimator(LogRatioRegressor(**params), on_fail=None)
    assert [c["check_name"] for c in checks if c["status"] == "failed"] == []


@pytest.mark.parametrize("params,state", [(dict(kind="ridge", alpha=0.5), {"coef_", "mean_", "scale_", "intercept_"}),
                                          (SMALL_TREES, {"trees_"})], ids=["ridge", "trees"])
def test_pipeline_contract_fit_returns_self_clone_and_cross_validation(params, state):
    records, y = synthetic_records()
    pipe = make_correction(**params)
    assert pipe.fit(records, y) is pipe
    model = pipe[-1]
    fitted = {k for k in vars(model) if k.endswith("_") and not k.startswith("_")}
    assert state | {"lower_", "upper_", "y_min_", "y_max_", "n_features_in_"} <= fitted
    assert set(vars(LogRatioRegressor(**params))) == set(LogRatioRegressor().get_params())  # __init__ stores params only
    fresh = clone(pipe)
    assert not any(k.endswith("_") for k in vars(fresh[-1])) and fresh[-1].get_params() == model.get_params()
    scores = cross_val_score(fresh, records, y, cv=GroupKFold(4), groups=np.arange(len(y)) % 8)
    # The known residual is a function of tp and pp: R^2 near 1 (a fold may hold a few OOD rows).
    assert np.median(scores) > 0.9 and scores.min() > 0.5
    assert list(pipe[0].get_feature_names_out()) == list(FEATURE_NAMES)


def test_out_of_distribution_rows_fall_back_to_factor_one():
    records, y = synthetic_records()
    pipe = make_correction(**SMALL_TREES).fit(records, y)
    inside = dict(records[0])
    far = dict(records[0], num_gpus=65536, dp=65536 // (records[0]["tp"] * records[0]["pp"]))
    fp8 = dict(records[0], dtype="fp8")  # a dtype never seen in training
    assert correction_in_distribution(pipe, [inside, far, fp8]).tolist() == [True, False, False]
    pred = pipe.predict([inside, far, fp8])
    assert pred[0] != 0.0 and pred[1] == 0.0 and pred[2] == 0.0
    # A plan knob beyond its training range (tp 16 or 64, trained up to 8) is clamped, not a fallback:
    # every plan of one search shares the guard features, so all are corrected on one basis.
    tp16, tp64 = dict(records[0], tp=16), dict(records[0], tp=64)
    assert correction_in_distribution(pipe, [tp16, tp64]).all()
    assert pipe.predict([tp16])[0] == pipe.predict([tp64])[0] != 0.0
    # In-distribution predictions never exceed the largest log-ratio seen in training.
    assert pipe.predict(records).max() <= y.max() + 1e-12


@pytest.mark.parametrize("params", [dict(kind="ridge"), SMALL_TREES], ids=["ridge", "trees"])
def test_json_round_trip_predicts_identically_and_refuses_other_features(params):
    records, y = synthetic_records()
    pipe = make_correction(**params).fit(records, y)
    data = json.loads(json.dumps(correction_to_json(pipe)))
    again = correction_from_json(data)
    assert np.array_equal(again.predict(records), pipe.predict(records))
    data["features"] = data["features"][:-1]
    with pytest.raises(ValueError, match="feature schema"):
        correction_from_json(data)


def test_calibration_file_refuses_version_and_schema_mismatch(tmp_path):
    records, y = synthetic_records()
    path = tmp_path / "calibration.json"
    CalibrationFile(correction=make_correction(**SMALL_TREES).fit(records, y)).save(path)
    loaded = CalibrationFile.load(path)
    assert np.array_equal(loaded.correction.predict(records), make_correction(**SMALL_TREES).fit(records, y).predict(records))
    data = json.loads(path.read_text())
    data["versions"]["scikit-learn"] = "0.24.2"
    with pytest.raises(AutoplanError, match=r"scikit-learn 0\.24\.2.*regenerate") as info:
        CalibrationFile.from_dict(data)
    assert "\n" not in str(info.value)
    data = json.loads(path.read_text())
    data["feature_schema"]["name"] = "autoplan.plan-features/0"
    with pytest.raises(AutoplanError, match="plan features"):
        CalibrationFile.from_dict(data)


class _GroupSpy(RegressorMixin, BaseEstimator):
    """Remembers the groups it was trained on and refuses to predict a row of one of them."""

    def fit(self, X, y):
        self.seen_ = {r["model_name"] for r in X}
        return self

    def predict(self, X):
        leaked = {r["model_name"] for r in X} & self.seen_
        if leaked:
            raise AssertionError(f"predicted rows of groups it trained on: {leaked}")
        return np.zeros(len(X))


@pytest.mark.parametrize("n_splits", [None, 3])
def test_grouped_cv_never_predicts_a_row_with_a_model_that_saw_its_group(n_splits):
    records, y = synthetic_records(40)
    groups = np.array([f"g{i % 6}" for i in range(40)])
    for r, g in zip(records, groups):
        r["model_name"] = g
    measured = [r["analytical_step_time_s"] * np.exp(v) for r, v in zip(records, y)]
    calibrated, _, folds = grouped_predictions(records, measured, groups, _GroupSpy(), n_splits)
    assert (folds >= 0).all()
    for g in set(groups):
        assert len(set(folds[groups == g])) == 1  # a whole group is always in one test fold


def test_evaluation_reports_both_models_and_improves_on_a_learnable_residual():
    records, y = synthetic_records(90)
    groups = [f"g{i % 9}" for i in range(90)]
    measured = [r["analytical_step_time_s"] * np.exp(v) for r, v in zip(records, y)]
    result = evaluate_calibration(records, measured, groups, make_correction(**SMALL_TREES))
    assert set(result["analytical"]) >= {"mape", "median", "max", "spearman_within_sweeps"}
    assert result["calibrated"]["mape"] < 0.05 < result["analytical"]["mape"]
    assert result["cv"]["num_groups"] == 9


def test_error_metrics_by_hand():
    # Errors are on throughput (tokens/s = tokens / step time), as `autoplan validate` reports them.
    m = error_metrics([1.1, 2.0, 2.7], [1.0, 2.0, 3.0], sweeps=["a", "a", "a"])
    assert m["mape"] == pytest.approx((1 - 1 / 1.1 + 0 + 3 / 2.7 - 1) / 3)
    assert m["median"] == pytest.approx(1 - 1 / 1.1) and m["max"] == pytest.approx(3 / 2.7 - 1)
    assert m["spearman_within_sweeps"] == pytest.approx(1.0)


def _measured_profile():
    """A profile whose matmul efficiency follows a known saturating curve in the smallest dimension."""
    matmul = []
    for m in (512, 1024, 2048, 4096, 8192, 16384):
        for n in (1024, 4096, 16384):
            for k in (1024, 8192):
                eff = 0.8 * min(m, n, k) / (min(m, n, k) + 600)
                matmul.append(MatmulSample(m, n, k, "bf16", eff * 1e14))
    collectives = [CollectiveSample("all_reduce", "intra_node", g, 2 ** e, 2e11 * 2 ** e / (2 ** e + 2 ** 22))
                   for g in (2, 4, 8) for e in range(16, 31, 2)]
    return HardwareProfile(name="cpu-test", device_name="test", gpus_per_node=8, memory_capacity_bytes=2 ** 34,
                           memory_bandwidth_bytes_per_s=1e12, peak_flops_per_s={"bf16": 1e14},
                           intra_node_bandwidth_bytes_per_s=3e11, inter_node_bandwidth_bytes_per_s=2.5e10,
                           measured=True, matmul=tuple(matmul), collectives=tuple(collectives))


def test_learned_profile_replaces_tables_with_grid_predictions_and_says_so():
    profile = _measured_profile()
    fits = fit_op_models(profile)
    assert sorted(f.table for f in fits) == ["collectives", "matmul"]
    assert all(f.cv_mape < 0.15 for f in fits)
    learned = learned_profile(profile, fits)
    assert len(learned.matmul) > len(profile.matmul)
    assert max(s.flops_per_s for s in learned.matmul) <= 1e14  # never above the datasheet peak
    assert "learned" in learned.sources["matmul[bf16]"] and "CV MAPE" in learned.sources["matmul[bf16]"]
    assert HardwareProfile.from_dict(json.loads(json.dumps(learned.to_dict()))) == learned
    # A grid point between measured shapes follows the curve, not a constant.
    small = min(s.flops_per_s for s in learned.matmul if s.m == 512)
    large = max(s.flops_per_s for s in learned.matmul if s.m == 16384 and s.k == 8192)
    assert large > 2 * small
