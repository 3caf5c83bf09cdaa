"""`autoplan calibrate` learns memory: measured peaks fit a factor, out-of-memory runs bound it,
and both time and memory are scored out of sample (leave-one-run-out with fewer than 3 groups)."""
import json
from pathlib import Path

import pytest

from autoplan.cli.main import main
from autoplan.specs import PlanDocument
from cost_model import builtin_profile
from cost_model.learned.calibration import CalibratedEstimator, load_calibration
from cost_model.learned.memory_correction import MemoryCorrection, MemoryRow, evaluate_memory

H100_RUNS = Path(__file__).resolve().parents[1] / "cost_model" / "data" / "h100_runs" / "runs.jsonl"
GIB = 2 ** 30


def _row(predicted_gib, measured_gib=0.0, oom=False, group="g", capacity_gib=80.0, device_gib=2.0):
    return MemoryRow(predicted_gib * GIB, device_gib * GIB, capacity_gib * GIB, measured_gib * GIB, oom, group)


def test_factor_is_the_geometric_mean_of_measured_over_predicted():
    mc = MemoryCorrection().fit([_row(10, 12), _row(20, 24), _row(40, 48)])
    assert mc.factor_ == pytest.approx(1.2) and mc.oom_floor_ == 0.0


def test_an_out_of_memory_run_raises_the_factor_until_it_does_not_fit():
    # Trained runs say 1.0; a run predicted at 70 GiB (+2 device) ran out of 80 GiB: f >= 78/70.
    rows = [_row(10, 10), _row(20, 20), _row(70, oom=True)]
    assert rows[2].fits(1.0)
    mc = MemoryCorrection().fit(rows)
    assert mc.fitted_factor_ == pytest.approx(1.0)
    assert mc.factor_ == pytest.approx(78 / 70, rel=1e-5) and not rows[2].fits(mc.factor_)


def test_leave_one_run_out_scores_each_run_without_it():
    rows = [_row(10, 11), _row(20, 22), _row(30, 36)]
    result = evaluate_memory(rows, by_group=False)
    assert result["scheme"] == "leave-one-run-out"
    assert result["analytical"]["mape"] == pytest.approx((1 / 11 + 2 / 22 + 6 / 36) / 3)   # |p/m - 1|
    # Held-out: run 3 gets the factor of runs 1-2 (1.1), so its error is |1.1*30/36 - 1|, not 0.
    assert result["calibrated"]["max"] == pytest.approx(abs(1.1 * 30 / 36 - 1), rel=1e-6)
    assert result["calibrated"]["mape"] > 0


def test_json_round_trip_and_refusal():
    mc = MemoryCorrection().fit([_row(10, 12), _row(50, oom=True)])
    back = MemoryCorrection.from_json(json.loads(json.dumps(mc.to_json())))
    assert (back.factor_, back.n_trained_, back.n_oom_) == (mc.factor_, 1, 1)
    with pytest.raises(ValueError):
        MemoryCorrection.from_json({**mc.to_json(), "kind": "other"})


@pytest.fixture(scope="module")
def h100_calibration(tmp_path_factory):
    """The shipped H100 runs with every measured peak scaled by 1.25: an executor that saves more
    than the cost model counts. The calibration must learn it back."""
    folder = tmp_path_factory.mktemp("h100")
    lines = []
    for line in H100_RUNS.read_text().splitlines():
        record = json.loads(line)
        record["peak_memory_bytes"] = int(record["peak_memory_bytes"] * 1.25)
        lines.append(json.dumps(record))
    runs = folder / "runs.jsonl"
    runs.write_text("\n".join(lines) + "\n")
    out = folder / "calibration.json"
    return runs, out


def test_calibrate_learns_memory_from_h100_runs(h100_calibration, capsys):
    runs, out = h100_calibration
    assert main(["calibrate", str(runs), "-o", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "only 2 group(s)" in printed and "leave-one-run-out over 10 runs" in printed
    assert "memory correction: factor 1.2" in printed and "4 out-of-memory run(s)" in printed
    assert "memory correction" in printed.splitlines()[-1]
    training = json.loads(out.read_text())["training"]
    assert training["num_oom"] == 4 and training["num_memory_rows"] == 14
    memory = training["memory_evaluation"]
    assert memory["analytical"]["mape"] == pytest.approx(0.2, abs=0.01)     # 1/1.25 - 1
    assert memory["calibrated"]["mape"] < 0.01
    assert memory["calibrated"]["oom_predicted_to_fit"] == 0
    # The time figure is held out too: not the in-sample 0.0%.
    assert training["evaluation"]["cv"]["scheme"] == "leave-one-run-out"
    assert training["evaluation"]["calibrated"]["mape"] > 0.001

    calibration = load_calibration(out)
    assert calibration.memory_correction.factor_ == pytest.approx(1.25, rel=0.01)
    doc = PlanDocument.from_dict(json.loads(runs.read_text().splitlines()[0])["plan"])
    est = CalibratedEstimator(doc.model, doc.training, doc.cluster, builtin_profile("h100-80gb"), calibration)
    e, a = est.estimate(doc.parallel), est.analytical.estimate(doc.parallel)
    assert e.details["memory_allocated_peak_bytes"] == pytest.approx(
        a.details["memory_allocated_peak_bytes"] * calibration.memory_correction.factor_)
    assert e.memory_breakdown_bytes["cuda_context"] == a.memory_breakdown_bytes["cuda_context"]
    assert sum(est.memory(doc.parallel).values()) == pytest.approx(e.peak_memory_bytes, abs=2)
