"""`autoplan report`: the files it writes, bad inputs, and a failure that leaves the folder alone."""
import json
import shutil
from pathlib import Path

import pytest

from autoplan.cli.main import main
from autoplan.report.plots import pareto_front

DATA = Path(__file__).resolve().parents[1] / "notebooks" / "data"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture()
def runs(tmp_path):
    for name in ("runs.jsonl", "cpu-profile.json", "cpu-profile.json.samples.csv"):
        shutil.copy(DATA / name, tmp_path / name)
    return tmp_path / "runs.jsonl"


def test_report_of_measurements_writes_pngs_and_an_index_that_shows_them(runs, tmp_path, capsys):
    out = tmp_path / "report"
    assert main(["report", str(runs), "-o", str(out)]) == 0
    pngs = {"predicted_vs_measured.png", "error_by_group.png", "breakdown.png", "pareto.png", "scaling.png"}
    assert {p.name for p in out.iterdir()} == pngs | {"index.html"}
    for name in pngs:
        data = (out / name).read_bytes()
        assert data.startswith(PNG_MAGIC) and len(data) > 10_000
    index = (out / "index.html").read_text()
    assert all(f"src='{name}'" in index for name in pngs)
    assert "analytical" in index and "calibrated (grouped CV)" in index and "MAPE" in index
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".report.")]  # scratch folder removed


def test_a_failing_report_leaves_the_output_folder_as_it_was(runs, tmp_path, capsys):
    out = tmp_path / "report"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    plan = json.loads(runs.read_text().splitlines()[0])["plan"]
    plan["cluster"]["profile"] = "no-such-profile.json"
    plan_path = tmp_path / "plan.json"
    plan_path.write_text(json.dumps(plan))
    assert main(["report", str(runs), str(plan_path), "-o", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert "no-such-profile.json" in err and len(err.splitlines()) == 1
    assert [p.name for p in out.iterdir()] == ["keep.txt"]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".report.")]


@pytest.mark.parametrize("argv,message", [
    ([], "nothing to report"),
    (["a.json", "b.json"], "at most one plan file"),
    (["missing.jsonl"], "does not exist"),
])
def test_bad_report_inputs_are_one_line(tmp_path, capsys, argv, message):
    assert main(["report", *argv, "-o", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1
    assert not (tmp_path / "r").exists()


def test_report_into_a_file_is_refused(tmp_path, runs, capsys):
    target = tmp_path / "file.txt"
    target.write_text("x")
    assert main(["report", str(runs), "-o", str(target)]) == 2
    assert "is a file" in capsys.readouterr().err and target.read_text() == "x"


def test_pareto_front_keeps_fitting_undominated_plans():
    points = [
        {"tokens_per_s": 100, "peak_memory_bytes": 10, "fits": True},
        {"tokens_per_s": 90, "peak_memory_bytes": 20, "fits": True},    # dominated by the first
        {"tokens_per_s": 150, "peak_memory_bytes": 30, "fits": True},
        {"tokens_per_s": 500, "peak_memory_bytes": 40, "fits": False},  # fastest, but does not fit
        {"tokens_per_s": 150, "peak_memory_bytes": 35, "fits": True},   # same speed, more memory
    ]
    assert [(p["tokens_per_s"], p["peak_memory_bytes"]) for p in pareto_front(points)] == [(100, 10), (150, 30)]
