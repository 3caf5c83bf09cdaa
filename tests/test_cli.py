"""`autoplan search`, `estimate` and `models` as a user runs them: output, plan files, and one clear
line with exit code 2 for every kind of bad input (never a traceback)."""
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from autoplan.cli.main import main
from autoplan.specs import PLAN_SCHEMA, PlanDocument

SMALL = ["--model", "llama-2-7b", "--gpus", "8", "--global-batch", "32", "--seq-len", "2048"]


def run(capsys, *argv):
    """main() in-process; argparse usage errors exit through SystemExit, the rest return a code."""
    try:
        code = main(list(argv))
    except SystemExit as exc:
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


def assert_one_line_error(code, err, *words):
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err
    for word in words:
        assert word in lines[0], lines[0]


@pytest.fixture(scope="module")
def plan_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("plan") / "plan.json"
    assert main(["search", *SMALL, "-o", str(path), "--json"]) == 0
    return path


def test_search_prints_plan_breakdowns_alternatives_and_defaults(capsys):
    code, out, err = run(capsys, "search", "--model", "llama-2-7b", "--gpus", "8", "--trials", "60")
    assert code == 0 and not err
    for text in ("best plan: dp=", "step time", "tokens/s/GPU", "MFU", "time per step", "total (step time)",
                 "memory per GPU", "total (peak per GPU)", "runners-up (why each lost)", "% step time",
                 "default  seq_len 4096", "default  global batch 1024", "search   tpe, 60 trials"):
        assert text in out, text
    assert len([line for line in out.splitlines() if line.strip()[:2] in ("1 ", "2 ", "3 ")]) >= 3


def test_plan_file_is_the_json_and_loads(plan_file, capsys):
    data = json.loads(plan_file.read_text())
    assert data["schema"] == PLAN_SCHEMA
    doc = PlanDocument.load(plan_file)
    assert doc.to_dict() == data
    assert len(doc.alternatives) >= 3 and doc.search["sampler"] == "exhaustive"  # the default is exact
    assert doc.cluster.profile == "builtin:h100-80gb"


def test_estimate_rescores_a_plan_file_to_the_same_prediction(plan_file, capsys):
    code, out, err = run(capsys, "estimate", str(plan_file), "--json")
    assert code == 0, err
    rescored = json.loads(out)
    saved = json.loads(plan_file.read_text())
    assert rescored["prediction"]["step_time_s"] == pytest.approx(saved["prediction"]["step_time_s"], rel=1e-9)
    assert rescored["parallel"] == saved["parallel"]


def test_estimate_scores_one_pinned_plan(capsys):
    code, out, err = run(capsys, "estimate", *SMALL, "--tp", "2", "--pp", "2", "--zero", "1",
                         "--sequence-parallel", "--recompute", "selective", "--json")
    assert code == 0, err
    parallel = json.loads(out)["parallel"]
    assert (parallel["dp"], parallel["tp"], parallel["pp"], parallel["zero_stage"]) == (2, 2, 2, 1)
    assert parallel["num_microbatches"] == 16 and parallel["sequence_parallel"] is True
    code, out, err = run(capsys, "estimate", *SMALL, "--tp", "8")
    assert code == 0 and "plan: dp=1 tp=8" in out


def test_models_lists_the_catalog_with_params(capsys):
    code, out, _ = run(capsys, "models")
    assert code == 0
    assert "qwen-72b" in out and "72.3B" in out and "mixtral-8x7b" in out and "8x top-2" in out


def test_nsga2_prints_the_front(capsys):
    code, out, err = run(capsys, "search", *SMALL, "--sampler", "nsga2", "--trials", "80")
    assert code == 0, err
    assert "Pareto front, step time vs memory" in out


@pytest.mark.parametrize("argv, words", [
    (["search", "--model", "qwen72b", "--gpus", "8"], ["unknown model 'qwen72b'", "qwen-72b"]),
    (["search", "--model", "llama-2-7b", "--gpus", "0"], ["--gpus", "positive integer"]),
    (["search", "--model", "llama-2-7b", "--gpus", "two"], ["--gpus", "'two'"]),
    (["search", *SMALL[:4], "--global-batch", "-4"], ["--global-batch", "positive integer"]),
    (["search", *SMALL, "--tp", "3"], ["--tp 3 cannot work", "tp=3"]),
    (["search", *SMALL, "--pp", "5"], ["--pp 5 cannot work", "pp=5"]),
    (["search", *SMALL, "--gpu", "b300"], ["unknown GPU type 'b300'", "h100-80gb", "a100-80gb"]),
    (["search", "--model", "llama-2-70b", "--gpus", "8", "--global-batch", "64", "--seq-len", "2048",
      "--trials", "20"], ["does not fit", "smallest GPU count", "--gpus "]),
    (["search", *SMALL, "--gpus-per-node", "8", "--gpus", "12"], ["whole number of 8-GPU nodes"]),
    (["search", *SMALL, "--study-name", "x"], ["--study-name needs --storage"]),
    (["search", *SMALL, "--gpu", "a100-80gb", "--dtype", "fp8"], ["--dtype fp8", "a100-80gb", "bf16"]),
    (["estimate", *SMALL, "--tp", "2", "--pp", "4", "--vpp", "9"], ["pp*vpp <= num_layers", "vpp=9 = 36"]),
    (["estimate", *SMALL, "--tp", "2", "--pp", "3"], ["tp*pp*cp must divide --gpus", "pp=3"]),
])
def test_bad_input_is_one_line_and_exit_2(capsys, argv, words):
    code, out, err = run(capsys, *argv)
    assert_one_line_error(code, err, *words)


def test_bad_files_are_one_line_and_exit_2(capsys, tmp_path, plan_file):
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"model_type": "llama", "hidden_size": 64}))
    assert_one_line_error(*run(capsys, "search", "--model", str(config), "--gpus", "8")[::2],
                          str(config), "'num_attention_heads'")
    assert_one_line_error(*run(capsys, "search", "--model", str(tmp_path / "none"), "--gpus", "8")[::2],
                          "does not exist")
    not_a_plan = tmp_path / "other.json"
    not_a_plan.write_text(json.dumps({"schema": "something/v9", "x": 1}))
    assert_one_line_error(*run(capsys, "estimate", str(not_a_plan))[::2], "schema 'something/v9'")
    assert_one_line_error(*run(capsys, "estimate", str(tmp_path / "missing.json"))[::2], "does not exist")
    profile = tmp_path / "profile.json"
    profile.write_text(json.dumps({"schema": "autoplan.profile/v1", "name": "x"}))
    assert_one_line_error(*run(capsys, "search", *SMALL, "--profile", str(profile))[::2], str(profile))


def test_output_into_a_missing_folder_writes_nothing(capsys, tmp_path):
    target = tmp_path / "nope" / "plan.json"
    code, out, err = run(capsys, "search", *SMALL, "--trials", "20", "-o", str(target))
    assert_one_line_error(code, err, "does not exist")
    assert not out and not target.parent.exists()


def test_output_replaces_a_plan_file_atomically(capsys, tmp_path):
    target = tmp_path / "plan.json"
    target.write_text("old")
    assert run(capsys, "search", *SMALL, "--trials", "20", "-o", str(target))[0] == 0
    assert json.loads(target.read_text())["schema"] == PLAN_SCHEMA
    assert [p.name for p in tmp_path.iterdir()] == ["plan.json"]  # no temporary left behind


def test_console_script_runs_in_a_real_process(tmp_path):
    exe = Path(sys.executable).with_name("autoplan")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "autoplan"]
    proc = subprocess.run([*cmd, "search", *SMALL, "--trials", "30", "--json"], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PYTHONWARNINGS": "error::FutureWarning"})
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["schema"] == PLAN_SCHEMA
    assert proc.stderr == ""


_SLOW_START = """
import importlib.abc, sys, time
class SlowImport(importlib.abc.MetaPathFinder):  # the command line's import, made long enough to hit
    def find_spec(self, name, path, target=None):
        if name == "autoplan.cli.main":
            print("importing", flush=True)
            time.sleep(30)
        return None
sys.meta_path.insert(0, SlowImport())
sys.argv = ["autoplan", "models"]
from autoplan.cli.start import entry
entry()
"""


def test_ctrl_c_while_the_command_line_is_imported_is_one_line_and_130():
    """What the console script and `python -m autoplan` run first (autoplan.cli.start) answers a
    Ctrl-C that lands while the command line is still being imported: one line, exit 130."""
    proc = subprocess.Popen([sys.executable, "-c", _SLOW_START], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert proc.stdout.readline() == "importing\n"
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and err == "autoplan: interrupted\n", (proc.returncode, err)


def test_measured_profile_is_named_in_the_plan_and_used_again_by_estimate(capsys, tmp_path):
    from cost_model import builtin_profile

    from autoplan.specs import write_json_atomic

    measured = builtin_profile("a100-80gb").to_dict()
    measured["memory_capacity_bytes"] = 60 * 2**30  # differs from every built-in: proves which one was used
    write_json_atomic(tmp_path / "cluster.json", measured)
    plan = tmp_path / "plan.json"
    code, out, err = run(capsys, "search", *SMALL, "--trials", "20", "--profile", str(tmp_path / "cluster.json"),
                         "-o", str(plan))
    assert code == 0, err
    doc = PlanDocument.load(plan)
    assert doc.cluster.profile == str((tmp_path / "cluster.json").resolve())
    assert doc.prediction["memory_capacity_bytes"] == 60 * 2**30
    moved = tmp_path / "moved"
    moved.mkdir()
    (tmp_path / "cluster.json").rename(moved / "cluster.json")
    plan.rename(moved / "plan.json")
    code, out, err = run(capsys, "estimate", str(moved / "plan.json"), "--json")
    assert code == 0, err
    assert json.loads(out)["prediction"]["step_time_s"] == pytest.approx(doc.prediction["step_time_s"], rel=1e-9)


def test_a_measured_profile_whose_nodes_are_too_small_is_one_line(capsys):
    shipped = Path(__file__).resolve().parents[1] / "profiler" / "data" / "cpu2-quick.json"
    code, out, err = run(capsys, "search", "--model", "llama-2-7b", "--gpus", "8", "--gpus-per-node", "8",
                         "--profile", str(shipped))
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "measured on nodes of 2 device(s)" in err and "--gpus-per-node 2" in err


def test_estimate_interleaved_uneven_stages(capsys):
    """126 layers at pp=8, vpp=8 for Megatron-Core (its embedding/loss-accounted split) is estimated."""
    code, out, err = run(capsys, "estimate", "--model", "llama-3-405b", "--gpus", "512", "--global-batch", "256",
                         "--seq-len", "8192", "--dtype", "fp8", "--tp", "8", "--pp", "8", "--vpp", "8", "--zero", "1",
                         "--sequence-parallel", "--framework", "megatron-core")
    # It does not fit without recompute: exit 1, the answer, with the nearest plan that does.
    assert code == 1, err
    assert "vpp=8" in out and "pp_bubble" in out and "nearest plan that fits" in out and "--recompute full" in out
