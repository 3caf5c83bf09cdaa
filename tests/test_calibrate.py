"""`autoplan calibrate` on the shipped real CPU runs, bad inputs, and applying a calibration."""
import json
import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from autoplan.cli.main import main
from autoplan.specs import PlanDocument, read_measurements
from cost_model import Estimator
from cost_model.constants import load_constants
from cost_model.learned.calibrate import load_measured_profile
from cost_model.learned.calibration import CalibratedEstimator, apply, correction_factor, load_calibration
from cost_model.learned.store import CalibrationFile

DATA = Path(__file__).resolve().parents[1] / "notebooks" / "data"


@pytest.fixture()
def runs(tmp_path):
    """The shipped measurements with the profile their plans name, in a scratch folder."""
    for name in ("runs.jsonl", "cpu-profile.json", "cpu-profile.json.samples.csv"):
        shutil.copy(DATA / name, tmp_path / name)
    return tmp_path / "runs.jsonl"


@pytest.fixture(scope="module")
def calibration_path(tmp_path_factory):
    folder = tmp_path_factory.mktemp("cal")
    for name in ("runs.jsonl", "cpu-profile.json", "cpu-profile.json.samples.csv"):
        shutil.copy(DATA / name, folder / name)
    out = folder / "calibration.json"
    assert main(["calibrate", str(folder / "runs.jsonl"), "--profile", str(folder / "cpu-profile.json"),
                 "-o", str(out)]) == 0
    return out


def test_calibrate_writes_a_loadable_json_calibration(calibration_path, capsys):
    data = json.loads(calibration_path.read_text())
    assert data["schema"] == "autoplan.calibration/v1"
    assert set(data["versions"]) >= {"scikit-learn", "numpy"}
    assert data["training"]["num_rows"] == 15 and data["training"]["num_groups"] == 3
    evaluation = data["training"]["evaluation"]
    assert set(evaluation["analytical"]) >= {"mape", "median", "max"}
    calibration = load_calibration(calibration_path)
    assert calibration.correction is not None
    assert calibration.profile is not None and calibration.profile.name.endswith("+learned")
    assert b"\x80" not in calibration_path.read_bytes()  # JSON text, no pickle


def test_malformed_lines_are_skipped_counted_and_said(runs, tmp_path, capsys):
    with open(runs, "a") as f:
        f.write("{not json\n")
        f.write(json.dumps({"schema": "autoplan.measurement/v1", "status": "ok"}) + "\n")
    out = tmp_path / "c.json"
    assert main(["calibrate", str(runs), "-o", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "skipped 2 malformed measurement line(s)" in printed
    assert json.loads(out.read_text())["training"]["num_malformed_lines"] == 2


def test_empty_training_set_is_one_line_exit_2_and_keeps_the_old_file(tmp_path, capsys):
    bad = tmp_path / "bad.jsonl"
    bad.write_text("{oops\n\n[]\n")
    out = tmp_path / "calibration.json"
    out.write_text("previous calibration\n")
    assert main(["calibrate", str(bad), "-o", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "0 usable training row" in err and "2 malformed" in err
    assert out.read_text() == "previous calibration\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.jsonl", "calibration.json"]  # no temp files left


@pytest.mark.parametrize("argv,message", [
    ([], "nothing to calibrate from"),
    (["missing.jsonl"], "does not exist"),
])
def test_bad_calibrate_inputs_are_one_line(tmp_path, capsys, argv, message):
    assert main(["calibrate", *argv, "-o", str(tmp_path / "c.json")]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1


def _first_plan(runs_path):
    records, _ = read_measurements(runs_path)
    return PlanDocument.from_dict(records[0].plan)


def test_calibrated_estimator_corrects_inside_and_falls_back_outside(calibration_path):
    calibration = load_calibration(calibration_path)
    doc = _first_plan(calibration_path.parent / "runs.jsonl")
    profile = load_measured_profile(calibration_path.parent / "cpu-profile.json")
    # These runs predate the executor's speed-ups: they ran framework autoplan-91ee867's executor.
    framework = load_constants().framework("autoplan-91ee867")
    calibrated = CalibratedEstimator(doc.model, doc.training, doc.cluster, profile, calibration, framework=framework)
    assert calibrated.profile is calibration.profile  # same device: the learned profile scores
    analytical = Estimator(doc.model, doc.training, doc.cluster, calibrated.profile,
                           framework=framework).estimate(doc.parallel)
    corrected = calibrated.estimate(doc.parallel)
    assert corrected.cost_model == "analytical/1+learned/1"
    factor = corrected.details["correction_factor"]
    assert factor != 1.0 and corrected.step_time_s == pytest.approx(analytical.step_time_s * factor)
    assert corrected.peak_memory_bytes == analytical.peak_memory_bytes  # the correction is time only
    # 64x more GPUs than any training row: out of distribution, the analytical answer unchanged.
    far = doc.parallel.replace(dp=doc.parallel.dp * 64)
    far_training = replace(doc.training, global_batch_size=doc.training.global_batch_size * 64)
    far_cluster = replace(doc.cluster, num_gpus=doc.cluster.num_gpus * 64)
    outside = CalibratedEstimator(doc.model, far_training, far_cluster, profile, calibration,
                                  framework=framework).estimate(far)
    assert outside.cost_model == "analytical/1" and "correction_factor" not in outside.details
    assert any("log2_num_gpus=" in n and "outside" in n for n in outside.notes)


def test_untrained_calibration_is_factor_one(calibration_path):
    doc = _first_plan(calibration_path.parent / "runs.jsonl")
    profile = load_measured_profile(calibration_path.parent / "cpu-profile.json")
    estimate = Estimator(doc.model, doc.training, doc.cluster, profile).estimate(doc.parallel)
    empty = CalibrationFile()
    assert correction_factor(empty, {}) == 1.0 and correction_factor(None, {}) == 1.0
    assert apply(empty, estimate, {}) is estimate


def test_measured_profile_is_learned_from_every_raw_sample_not_only_medians():
    medians = json.loads((DATA / "cpu-profile.json").read_text())
    profile = load_measured_profile(DATA / "cpu-profile.json")
    assert len(profile.matmul) > len(medians["matmul"])  # repeats and ranks from the samples CSV
    assert {(s.m, s.n, s.k, s.dtype) for s in profile.matmul} == {
        (s["m"], s["n"], s["k"], s["dtype"]) for s in medians["matmul"]}


def test_search_with_a_calibration_file_is_scored_by_the_learned_model(tmp_path, capsys):
    cal = tmp_path / "published-cal.json"
    assert main(["calibrate", "--published", "-o", str(cal)]) == 0
    capsys.readouterr()
    args = ["search", "--model", "llama-3-70b", "--gpus", "64", "--trials", "40", "--json"]
    assert main(args) == 0
    plain = json.loads(capsys.readouterr().out)
    assert main(args + ["--calibration", str(cal)]) == 0
    calibrated = json.loads(capsys.readouterr().out)
    assert plain["provenance"]["cost_model"] == "analytical/1"
    assert calibrated["provenance"] == {**plain["provenance"], "cost_model": "analytical/1+learned/1",
                                        "calibration": str(cal)}
    assert calibrated["prediction"]["step_time_s"] != plain["prediction"]["step_time_s"]
    assert main(["search", "--model", "llama-3-70b", "--gpus", "64", "--calibration", str(tmp_path / "nope.json")]) == 2
