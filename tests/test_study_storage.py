"""Issue 53: a shared or reused Optuna --storage / --study-name. What the storage layer
(autoplan.planning.search._open_stored_study) cannot resume is one line that says what to change;
two searches starting together on one new database both run; `~` in a SQLite URL is the home folder."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli_run import run_cli

ROOT = Path(__file__).resolve().parents[1]
SMALL = ["--model", "llama-2-7b", "--gpus", "8", "--global-batch", "32", "--seq-len", "2048", "--trials", "5"]


def refusal(code, err) -> str:
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def test_a_study_resumed_with_another_sampler_or_framework_is_one_line(capsys, tmp_path):
    url = f"sqlite:///{tmp_path / 's.db'}"
    code, _, err = run_cli(capsys, "search", *SMALL, "--storage", url, "--study-name", "x")
    assert code == 0, err
    line = refusal(*run_cli(capsys, "search", *SMALL, "--sampler", "nsga2", "--storage", url, "--study-name", "x")[::2])
    assert "one objective" in line and "--study-name" in line, line
    line = refusal(*run_cli(capsys, "search", *SMALL, "--framework", "deepspeed", "--storage", url,
                            "--study-name", "x")[::2])
    assert "different problem" in line and "--study-name" in line, line  # deepspeed scores every plan otherwise


@pytest.mark.slow  # two processes
def test_two_searches_starting_on_one_new_database_both_run(tmp_path):
    """Before: one of the two failed creating the tables the other was creating (measured 4 of 4)."""
    url = f"sqlite:///{tmp_path / 'new.db'}"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs = [subprocess.Popen([sys.executable, "-m", "autoplan", "search", *SMALL, "--storage", url, "--study-name",
                               name], cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                              text=True) for name in ("a", "b")]
    errors = [p.communicate(timeout=300)[1] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], errors


def test_a_tilde_in_a_sqlite_url_is_the_home_folder(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    code, _, err = run_cli(capsys, "search", *SMALL, "--storage", "sqlite:///~/plans.db")
    assert code == 0, err
    assert (tmp_path / "plans.db").is_file()
