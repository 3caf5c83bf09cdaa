"""`autoplan tune`: candidates picked by prediction, run for real (2 gloo processes on this CPU, the
README tour's setting), ranked by measurement; the winner is a plan file `run` accepts."""
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from autoplan.cli.main import main
from autoplan.specs import PlanDocument, read_measurements

ROOT = Path(__file__).resolve().parents[1]
TINY = ["--model", str(ROOT / "notebooks/data/tiny-96x4"), "--gpus", "2", "--profile",
        str(ROOT / "profiler/data/cpu2-quick.json"), "--global-batch", "8", "--seq-len", "128", "--recompute", "none"]
LAYOUTS = [  # three layouts the executor runs, each a different parallelism
    ["--dp", "2", "--tp", "1", "--pp", "1", "--zero", "1", "--micro-batch", "4", "--no-sequence-parallel"],
    ["--dp", "1", "--tp", "2", "--pp", "1", "--zero", "0", "--micro-batch", "8", "--sequence-parallel"],
    ["--dp", "1", "--tp", "1", "--pp", "2", "--zero", "0", "--micro-batch", "2", "--no-sequence-parallel"],
]


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> Path:
    """A plan file whose chosen plan and alternatives are `estimate`'s predictions of LAYOUTS, plus
    an alternative marked as not fitting (it must be skipped, not run); made once per module."""
    tmp_path = tmp_path_factory.mktemp("tune")
    docs = []
    for i, layout in enumerate(LAYOUTS):
        assert main(["estimate", *TINY, *layout, "-o", str(tmp_path / f"layout{i}.json")]) == 0
        docs.append(json.loads((tmp_path / f"layout{i}.json").read_text()))
    plan = PlanDocument.load(tmp_path / "layout0.json")
    plan.alternatives = [{"parallel": d["parallel"], "prediction": d["prediction"], "why_not": "slower"}
                         for d in docs[1:]]
    # predicted fastest, but does not fit (consistently: the breakdown sums to the step time, and the
    # headroom leaves less than the peak, as a plan file scored with --memory-headroom would say)
    base = docs[1]["prediction"]
    unfit = dict(base, fits=False, step_time_s=1e-6, time_breakdown_s={"compute": 1e-6},
                 memory_headroom_bytes=base["memory_capacity_bytes"] - 1)
    plan.alternatives.append({"parallel": dict(docs[1]["parallel"], zero_stage=1), "prediction": unfit})
    path = tmp_path / "tiny.json"
    plan.save(path)  # the writer stamps each alternative's prediction as made for it
    return path


def tiny_plan_file(made: Path, tmp_path: Path) -> Path:
    """The module's plan file and its layouts, copied into this test's folder."""
    for source in made.parent.glob("*.json"):
        (tmp_path / source.name).write_bytes(source.read_bytes())
    return tmp_path / "tiny.json"


def test_tune_refuses_before_running(made, tmp_path, capsys):
    """Bad input and impossible requests are one line, exit 2, before any process starts."""
    plan = tiny_plan_file(made, tmp_path)
    capsys.readouterr()
    assert main(["tune", str(plan), "--top", "3", "--calibration-out", str(tmp_path / "cal.json")]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1, err  # the refusal alone: the skipped plans are counted in it
    assert "--calibration-out needs at least 5 timed runs" in err and "only 3 plan(s) can run" in err
    assert "1 skipped" in err
    assert main(["tune", str(plan), "--records", str(tmp_path / "no" / "runs.jsonl")]) == 2
    assert "--records" in capsys.readouterr().err
    # every plan refused (4 processes for a 2-GPU plan; one predicted not to fit): one line that counts
    # them by kind and gives the first reason, no run
    assert main(["tune", str(plan), "--nproc", "4", "--records", str(tmp_path / "runs.jsonl")]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "skipped" not in err, err
    assert "none of the 4 plans" in err and "3 refused, 1 predicted not to fit" in err and "--nproc 2" in err
    assert not (tmp_path / "runs.jsonl").exists() and not (tmp_path / "cal.json").exists()


@pytest.mark.slow
def test_tune_runs_ranks_by_measurement_and_writes_a_runnable_winner(made, tmp_path):
    plan = tiny_plan_file(made, tmp_path)
    doc = PlanDocument.load(plan)
    by_prediction = sorted([doc, *(PlanDocument.load(tmp_path / f"layout{i}.json") for i in (1, 2))],
                           key=lambda d: d.prediction["step_time_s"])
    # The candidate predicted slowest runs out of memory at its first step (the executor's test hook,
    # a real torch.OutOfMemoryError in the step): it must be a row of the table, not the end of the loop.
    oom_id = by_prediction[-1].plan_id
    records = tmp_path / "runs.jsonl"
    earlier = earlier_record_line()
    records.write_text(earlier)  # an earlier run: tune appends after it
    env = {**os.environ, "PYTHONPATH": str(ROOT), "AUTOPLAN_TEST_INJECT_OOM": f"{oom_id}:0"}
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "autoplan", "tune", plan.name, "--top", "3", "--steps", "3",
                           "--warmup-steps", "1", "--records", records.name, "-o", "best.json"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    wall_s = time.perf_counter() - started
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "skipped alt 3: predicted not to fit" in proc.stderr
    own = [line for line in proc.stdout.splitlines() if not line.startswith("[autoplan run]")]  # not the workers'
    assert max(len(line) for line in own) <= 120, proc.stdout
    rows = [line.split() for line in proc.stdout.splitlines() if re.match(r"^\s+(\d+|-)\s+dp=", line)]
    assert len(rows) == 3, proc.stdout
    statuses = [row[-1] for row in rows]
    assert statuses == ["ok", "ok", "OOM"], proc.stdout
    measured = [float(row[-5]) for row in rows[:2]]
    assert measured == sorted(measured) and [row[0] for row in rows] == ["1", "2", "-"]
    # the records: the earlier line kept, one per candidate appended, the OOM as data
    found, problems = read_measurements(records)
    assert not problems and len(found) == 4 and records.read_text().startswith(earlier)
    assert sorted(r.status for r in found[1:]) == ["ok", "ok", "oom"]
    assert {r.plan_id for r in found[1:] if r.status == "oom"} == {oom_id}
    medians = {r.plan_id: r.median_step_time_s for r in found[1:] if r.status == "ok"}
    # the winner: the fastest measured plan, a valid plan file that `run` accepts, saying how it was chosen
    best = PlanDocument.load(tmp_path / "best.json")
    assert best.plan_id == min(medians, key=medians.get)
    tuning = best.extra["tuning"]
    assert tuning["chosen_by"] == "measurement" and tuning["steps"] == 3 and tuning["warmup_steps"] == 1
    assert [c["status"] for c in tuning["candidates"]] == ["ok", "ok", "oom"]
    assert tuning["skipped"][0]["source"] == "alt 3"
    assert best.alternatives[0]["why_not"].startswith("measured +")
    assert main(["run", str(tmp_path / "best.json"), "--print-launch", "torchrun"]) == 0
    from executor.options import RunOptions
    from executor.torch_backend import check

    check(best, RunOptions(steps=3, warmup_steps=1))  # what `autoplan run best.json` checks before starting
    assert wall_s < 120, f"tune of 3 tiny plans took {wall_s:.0f} s"


@pytest.mark.slow
def test_tune_to_stdout_keeps_stdout_for_the_plan(made, tmp_path):
    """`tune -o -`: the winner's JSON alone on stdout; the table and the workers' step lines on stderr."""
    plan = tiny_plan_file(made, tmp_path)
    proc = subprocess.run([sys.executable, "-m", "autoplan", "tune", plan.name, "--top", "1", "--steps", "2",
                           "--warmup-steps", "1", "--records", "runs.jsonl", "-o", "-"],
                          cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert PlanDocument.from_dict(json.loads(proc.stdout)).extra["tuning"]["chosen_by"] == "measurement"
    assert "winner:" in proc.stderr and "[autoplan run] step 2/2" in proc.stderr


@pytest.mark.slow
def test_run_to_stdout_keeps_the_workers_step_lines_off_it(made, tmp_path):
    """`run -o -`: the measurement lines alone on stdout; the workers' step lines on stderr."""
    plan = tiny_plan_file(made, tmp_path)
    proc = subprocess.run([sys.executable, "-m", "autoplan", "run", plan.name, "--steps", "2", "--warmup-steps", "1",
                           "-o", "-"], cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    assert len(lines) == 1 and json.loads(lines[0])["schema"] == "autoplan.measurement/v1", proc.stdout[-2000:]
    assert "[autoplan run] step 2/2" in proc.stderr


def test_two_outputs_on_stdout_are_refused(made, tmp_path, capsys):
    plan = tiny_plan_file(made, tmp_path)
    capsys.readouterr()
    assert main(["tune", str(plan), "-o", "-", "--records", "/dev/stdout"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "both write to standard output" in err, err


def earlier_record_line() -> str:
    """One measurement line of an earlier run (a copy of a shipped CPU record), to be kept by tune."""
    shipped = sorted((ROOT / "notebooks" / "data").glob("*.jsonl"))
    assert shipped, "the notebooks ship CPU runs"
    return shipped[0].read_text().splitlines(keepends=True)[0]


@pytest.mark.slow
def test_tune_interrupted_keeps_the_finished_runs(made, tmp_path):
    """Ctrl-C while the second plan runs: exit 130, one line, the first plan's record kept."""
    plan = tiny_plan_file(made, tmp_path)
    records = tmp_path / "runs.jsonl"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "autoplan", "tune", str(plan), "--top", "2", "--steps", "8",
                             "--warmup-steps", "1", "--records", str(records), "-o", str(tmp_path / "best.json")],
                            cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines, deadline = [], time.monotonic() + 240
    try:
        for line in proc.stdout:  # the step counter starts again at 1 when the second plan runs
            lines.append(line)
            if line.startswith("[autoplan run] step 1/8 ") and sum(l.startswith("[autoplan run] step 1/")
                                                                    for l in lines) == 2:
                break
            assert time.monotonic() < deadline, "".join(lines[-20:])
        proc.send_signal(signal.SIGINT)
        rest = proc.communicate(timeout=90)[0]
    finally:
        if proc.poll() is None:
            proc.kill()
    out = "".join(lines) + rest
    assert proc.returncode == 130, out[-3000:]
    assert out.strip().splitlines()[-1] == "autoplan tune: interrupted" and "Traceback" not in out
    found, _ = read_measurements(records)
    assert len(found) == 1 and found[0].status == "ok" and len(found[0].step_times_s) == 7
    assert not (tmp_path / "best.json").exists()


def test_tuning_block_is_validated(made):
    """A winner file's `tuning` block is read through the plan-file validation: each problem, one line."""
    from autoplan.specs import SchemaError

    plan = json.loads(made.read_text())
    plan["tuning"] = {"chosen_by": "guess", "backend": "torch", "steps": 0, "warmup_steps": 1,
                      "candidates": [{"plan_id": "x", "status": "fine", "measured_step_time_s": -1}]}
    with pytest.raises(SchemaError) as info:
        PlanDocument.from_dict(plan)
    message = str(info.value)
    for field in ("tuning.chosen_by", "tuning.steps", "tuning.candidates[0].status",
                  "tuning.candidates[0].measured_step_time_s"):
        assert field in message, message


def test_calibration_from_tuned_runs(tmp_path):
    """tune's calibration is calibrate's fit on its runs alone (here: shipped real CPU runs), saved
    and loaded like any calibration file; below the minimum it is refused, not fitted from too little."""
    from cost_model.learned.calibration import load_calibration
    from autoplan.specs import AutoplanError
    from autoplan.planning.tune import fit_calibration, min_calibration_runs

    runs, _ = read_measurements(ROOT / "notebooks" / "data" / "runs.jsonl")
    ok = [r for r in runs if r.status == "ok"]
    minimum = min_calibration_runs()
    calibration, lines = fit_calibration(ok[:minimum], ROOT / "notebooks" / "data", "autoplan tune test")
    assert calibration.correction is not None and calibration.training["num_measured"] == minimum
    assert calibration.training["inputs"] == ["autoplan tune test"] and lines[0].startswith("trained the correction")
    calibration.save(tmp_path / "cal.json")
    assert load_calibration(tmp_path / "cal.json").correction is not None
    with pytest.raises(AutoplanError, match=f"at least {minimum} needed"):
        fit_calibration(ok[:minimum - 1], ROOT / "notebooks" / "data", "too few")
