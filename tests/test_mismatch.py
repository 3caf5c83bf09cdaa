"""A measurement compared with a prediction made for other hardware or another framework is said
in one line by `run`, `report` and `calibrate`; `calibrate` leaves such runs out unless told."""
import json
import shutil
from pathlib import Path

import pytest

from autoplan.cli.main import main
from autoplan.specs import Measurement
from autoplan.specs.compat import measurement_mismatch
from cost_model import builtin_profile

DATA = Path(__file__).resolve().parents[1] / "notebooks" / "data"
CPU_PROFILE = Path(__file__).resolve().parents[1] / "profiler" / "data" / "cpu2-quick.json"


def _record(device: str, device_name: str, backend: str = "torch") -> Measurement:
    return Measurement(plan_id="p1", plan={}, prediction={}, backend=backend, status="ok", step_times_s=[1.0],
                       environment={"device": device, "device_name": device_name})


def _cpu_profile():
    from autoplan.inputs.clusters import load_profile_file

    return load_profile_file(CPU_PROFILE)


@pytest.mark.parametrize("record,planned,framework,expected", [
    (_record("cpu", "x86_64"), "builtin:h100-80gb", "autoplan", "predicted for h100-80gb (gpu) but ran on x86_64 (cpu)"),
    (_record("cuda", "NVIDIA H100 80GB HBM3"), "cpu", "autoplan", "(cpu) but ran on NVIDIA H100 80GB HBM3 (gpu)"),
    (_record("cuda", "NVIDIA A100-SXM4-80GB"), "builtin:h100-80gb", "autoplan", "but ran on NVIDIA A100-SXM4-80GB"),
    (_record("cuda", "NVIDIA H100 80GB HBM3"), "builtin:h100-80gb", "megatron-core", "framework 'megatron-core'"),
    (_record("cpu", "x86_64", backend="xla"), "cpu", "autoplan-xla", None),
    (_record("cpu", "x86_64"), "cpu", "autoplan", None),
    (_record("cuda", "NVIDIA H100 80GB HBM3"), "builtin:h100-80gb", "autoplan", None),
])
def test_mismatch_names_both_sides_or_is_none(record, planned, framework, expected):
    profile = _cpu_profile() if planned == "cpu" else builtin_profile(planned.split(":")[1])
    found = measurement_mismatch(record, profile, framework)
    assert (found is None) if expected is None else (expected in found)


def _runs_planned_for_h100(folder: Path) -> Path:
    """The shipped CPU runs, as if their plans had been predicted for H100s (the old laptop tour)."""
    lines = []
    for line in (DATA / "runs.jsonl").read_text().splitlines():
        record = json.loads(line)
        record["plan"]["cluster"]["profile"] = "builtin:h100-80gb"
        lines.append(json.dumps(record))
    path = folder / "h100-planned.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_calibrate_leaves_mismatched_runs_out_unless_told(tmp_path, capsys):
    runs = _runs_planned_for_h100(tmp_path)
    out = tmp_path / "cal.json"
    assert main(["calibrate", str(runs), "-o", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "on mismatched hardware left out" in err and not out.exists()
    assert main(["calibrate", str(runs), "--include-mismatched", "-o", str(out)]) == 0
    err = capsys.readouterr().err
    assert "warning:" in err and "kept (--include-mismatched)" in err and "(gpu) but ran on" in err
    assert out.is_file()


def test_calibrate_on_matching_runs_says_nothing_about_hardware(tmp_path, capsys):
    for name in ("runs.jsonl", "cpu-profile.json", "cpu-profile.json.samples.csv"):
        shutil.copy(DATA / name, tmp_path / name)
    assert main(["calibrate", str(tmp_path / "runs.jsonl"), "-o", str(tmp_path / "cal.json")]) == 0
    assert "warning" not in capsys.readouterr().err


def test_run_warns_in_one_line_when_the_plan_was_predicted_for_other_hardware(tmp_path):
    from autoplan.cli.run_cmd import mismatch_warning
    from autoplan.specs import PlanDocument

    record = Measurement.from_dict(json.loads((DATA / "runs.jsonl").read_text().splitlines()[0]))
    doc = PlanDocument.from_dict(record.plan)
    assert mismatch_warning(record, doc, DATA) is None  # planned on the CPU profile, ran on the CPU
    h100 = PlanDocument.from_dict(json.loads(_runs_planned_for_h100(tmp_path).read_text().splitlines()[0])["plan"])
    warning = mismatch_warning(record, h100, DATA)
    assert "\n" not in warning and "h100-80gb (gpu) but ran on" in warning and "--profile" in warning


def test_the_shipped_cpu_profile_plans_the_tour_without_extra_flags(tmp_path, capsys):
    plan = tmp_path / "tiny.json"
    assert main(["search", "--model", str(DATA / "tiny-96x4"), "--gpus", "2", "--global-batch", "8",
                 "--seq-len", "128", "--profile", str(CPU_PROFILE), "-o", str(plan)]) == 0
    doc = json.loads(plan.read_text())
    assert doc["cluster"]["profile"] == str(CPU_PROFILE.resolve()) and doc["cluster"]["num_gpus"] == 2
