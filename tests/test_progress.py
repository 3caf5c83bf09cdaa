"""Issue 53: every command that can take over a second says what it is doing, on stderr, and only
on a terminal: the real commands run twice with the progress delay at 0, once with stderr a pipe
(nothing may be printed) and once with stderr a terminal (the line must be there, then erased)."""
import io
import re
import shutil
import sys
from pathlib import Path

import pytest

from autoplan.cli import progress
from tests.cli_run import run_cli

ROOT = Path(__file__).resolve().parents[1]
PROGRESS_LINE = re.compile(r"autoplan (\w+): [^\n\r]* \(\d+\.\d s\)")


class Terminal(io.StringIO):
    """A stderr that says it is a TTY, as a user's terminal does."""

    def isatty(self) -> bool:
        return True


def _few_published_runs(folder: Path) -> Path:
    """The shipped published-runs CSV cut to its header and first 8 rows (validate in a second)."""
    lines = (ROOT / "cost_model/data/published_runs.csv").read_text().splitlines(keepends=True)
    path = folder / "runs.csv"
    path.write_text("".join(lines[:9]))
    return path


def _cpu_runs(folder: Path) -> Path:
    for name in ("runs.jsonl", "cpu-profile.json", "cpu-profile.json.samples.csv"):
        shutil.copy(ROOT / "notebooks/data" / name, folder / name)
    return folder / "runs.jsonl"


COMMANDS = {  # each as a user calls it; the slow part of each is what the progress line names
    "search": lambda d: ["search", "--model", "llama-2-7b", "--gpus", "8", "--global-batch", "32"],
    "cluster": lambda d: ["cluster", "--model", "llama-2-7b", "--train-tokens", "1T", "--deadline-days", "30",
                          "--gpu", "h100-80gb", "--gpus-max", "16", "--trials", "5"],
    "validate": lambda d: ["validate", "--runs", _few_published_runs(d)],
    "report": lambda d: ["report", _cpu_runs(d), "-o", d / "report"],
}


@pytest.mark.parametrize("command", COMMANDS)
def test_progress_only_on_a_terminal(capsys, monkeypatch, tmp_path, command):
    monkeypatch.delenv("AUTOPLAN_PROGRESS", raising=False)
    monkeypatch.setattr(progress, "DELAY_S", 0.0)  # every command shows it at once (or would)
    argv = COMMANDS[command](tmp_path)
    code, _, err = run_cli(capsys, *argv)
    assert code in (0, 1), err
    assert not PROGRESS_LINE.search(err), err  # a pipe or a log: no progress at all
    shutil.rmtree(tmp_path / "report", ignore_errors=True)
    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    code, _, _ = run_cli(capsys, *argv)
    shown = terminal.getvalue()
    assert code in (0, 1), shown
    assert [m.group(1) for m in PROGRESS_LINE.finditer(shown)][:1] == [command], shown
    assert "\r\033[K" in shown and shown.rstrip("\n").endswith("\r\033[K")  # rewritten in place, then erased
