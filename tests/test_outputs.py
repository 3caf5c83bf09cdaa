"""Issue 27, the one writer: every command's output goes through autoplan.specs.output. Stdout for - and
/dev/stdout; a FIFO, a device, a folder, an unwritable folder or one of the command's own inputs is
refused in one line (exit 2) before any work, and nothing the user had is changed; a symlink is
written through. Real CLI calls through autoplan.cli.main.main."""
import hashlib
import json
import os

import pytest

from autoplan.cli.main import main
from tests.cli_run import run_cli

SMALL = ["--model", "llama-2-7b", "--gpus", "8", "--global-batch", "32", "--seq-len", "2048"]


def run(capsys, *argv):
    return run_cli(capsys, *argv)


def refused(code, err, *words):
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, err
    for word in words:
        assert word in lines[0], lines[0]


def digest(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def plan(tmp_path_factory):
    folder = tmp_path_factory.mktemp("outputs")
    path = folder / "plan.json"
    assert main(["estimate", *SMALL, "--tp", "2", "-o", str(path)]) == 0
    return path


def writers(plan, out):
    """One command line per command that writes a file, each writing `out`."""
    return {
        "search": ["search", *SMALL, "--trials", "5", "-o", out],
        "estimate": ["estimate", plan, "-o", out],
        "memory": ["memory", *SMALL, "--tp", "2", "--zero", "1", "-o", out],
        "export": ["export", plan, "--to", "megatron", "-o", out],
        "export launch": ["export", plan, "--to", "deepspeed", "--launch", "torchrun", "-o", out],
        "calibrate": ["calibrate", "--published", "--kind", "ridge", "-o", out],
        "tune": ["tune", plan, "--device", "cpu", "-o", out],
        "tune calibration": ["tune", plan, "--device", "cpu", "--calibration-out", out],
        "tune records": ["tune", plan, "--device", "cpu", "--records", out],
        "run": ["run", plan, "--device", "cpu", "-o", out],
        "profile": ["profile", "--device", "cpu", "--quick", "-o", out],
        "cluster": ["cluster", "--model", "llama-2-7b", "--train-tokens", "2T", "--deadline-days", "60", "-o", out],
    }


@pytest.mark.parametrize("kind", ["fifo", "folder", "device"])
@pytest.mark.parametrize("command", list(writers("p", "o")))
def test_a_target_that_is_not_a_regular_file_is_refused_before_any_work(capsys, tmp_path, plan, kind, command):
    target = {"fifo": tmp_path / "pipe", "folder": tmp_path, "device": "/dev/null"}[kind]
    if kind == "fifo":
        os.mkfifo(target)
    if command == "memory" and kind != "folder":
        target = tmp_path / "pipe.md" if kind == "fifo" else target
        if kind == "fifo":
            os.mkfifo(target)
    before = digest(plan)
    code, out, err = run(capsys, *writers(plan, target)[command])
    refused(code, err, "cannot write", {"fifo": "FIFO", "folder": "folder", "device": "device"}[kind])
    assert out == ""
    assert digest(plan) == before
    if kind == "fifo":
        assert os.path.exists(target) and not os.path.isfile(target)  # still the FIFO
    assert os.path.exists("/dev/null") and not os.path.isfile("/dev/null")


@pytest.mark.parametrize("command", ["estimate", "export", "export launch", "tune", "tune records", "run"])
def test_an_output_that_is_an_input_is_refused_and_the_input_kept(capsys, tmp_path, plan, command):
    copy = tmp_path / "plan.json"
    copy.write_bytes(plan.read_bytes())
    link = tmp_path / "link.json"
    link.symlink_to(copy)
    for out in (copy, link, tmp_path / "." / "plan.json"):
        code, _, err = run(capsys, *writers(copy, out)[command])
        refused(code, err, "also an input")
        assert copy.read_bytes() == plan.read_bytes()


def test_calibrate_and_search_keep_their_inputs(capsys, tmp_path):
    runs = tmp_path / "runs.jsonl"
    runs.write_text('{"schema": "autoplan.measurement/v1"}\n')
    before = digest(runs)
    refused(*run(capsys, "calibrate", runs, "-o", runs)[::2], "also an input")
    assert digest(runs) == before
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64,
                                  "num_attention_heads": 4, "intermediate_size": 128, "vocab_size": 256}))
    before = digest(config)
    refused(*run(capsys, "search", "--model", config, "--gpus", "8", "-o", config)[::2], "also an input")
    assert digest(config) == before


def test_two_outputs_of_one_command_must_differ(capsys, tmp_path, plan):
    out = tmp_path / "best.json"
    code, _, err = run(capsys, "tune", plan, "--device", "cpu", "-o", out, "--calibration-out", out)
    refused(code, err, "same file")


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a read-only folder")
def test_an_unwritable_folder_is_refused(capsys, tmp_path, plan):
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o555)
    try:
        for argv in writers(plan, folder / "x.json").values():
            refused(*run(capsys, *argv)[::2], "not writable")
    finally:
        folder.chmod(0o755)


@pytest.mark.parametrize("name", ["-", "/dev/stdout"])
def test_dash_and_dev_stdout_are_standard_output(capsys, plan, name):
    code, out, err = run(capsys, "estimate", plan, "-o", name)
    assert code == 0, err
    assert json.loads(out)["schema"] == "autoplan.plan/v2"  # the plan file alone on stdout
    code, out, err = run(capsys, "export", plan, "--to", "megatron", "-o", name)
    assert code == 0 and out.startswith("# Megatron-LM"), err
    code, out, err = run(capsys, "memory", *SMALL, "--tp", "2", "--zero", "1", "-o", name)
    assert code == 0 and out.startswith("| "), err
    assert not os.path.exists("-")


def test_a_symlink_is_written_through(capsys, tmp_path, plan):
    target = tmp_path / "target.sh"
    target.write_text("old\n")
    link = tmp_path / "link.sh"
    link.symlink_to(target)
    code, _, err = run(capsys, "export", plan, "--to", "megatron", "-o", link)
    assert code == 0, err
    assert link.is_symlink() and target.read_text().startswith("# Megatron-LM")


def test_a_failed_write_is_one_line_and_leaves_no_temporary_file(capsys, tmp_path, plan, monkeypatch):
    import autoplan.specs.output as output

    out = tmp_path / "out.json"
    out.write_text("previous\n")

    def full_disk(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(output.os, "fsync", full_disk)
    code, _, err = run(capsys, "estimate", plan, "-o", out)
    refused(code, err, "No space left on device")
    assert out.read_text() == "previous\n"
    assert [p.name for p in tmp_path.iterdir()] == ["out.json"]


APPEND_UNDER_A_SIZE_LIMIT = r"""
import resource, signal, sys
from pathlib import Path
from autoplan.specs import AutoplanError, append_output
path, limit = Path(sys.argv[1]), int(sys.argv[2])
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # the limit then fails the write (EFBIG) instead of killing
resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
try:
    append_output(path, '{"line": "' + "x" * 1000 + '"}\n')
except AutoplanError as exc:
    print(exc)
"""


def test_an_append_past_a_file_size_limit_is_all_or_nothing(tmp_path):
    """Issue 53: a records file at its size limit (a full disk writes short the same way) keeps whole
    lines only: the first 100 bytes of a 1,000-byte line fit and are cut back off, and the command
    says so in one line."""
    import subprocess
    import sys

    records = tmp_path / "runs.jsonl"
    records.write_text('{"line": 1}\n')
    before = records.read_bytes()
    done = subprocess.run([sys.executable, "-c", APPEND_UNDER_A_SIZE_LIMIT, str(records), str(len(before) + 100)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "nothing was appended" in done.stdout, done.stdout + done.stderr
    assert records.read_bytes() == before
    fresh = tmp_path / "new.jsonl"  # a file the append created: not left behind empty
    done = subprocess.run([sys.executable, "-c", APPEND_UNDER_A_SIZE_LIMIT, str(fresh), "0"],
                          capture_output=True, text=True, timeout=60)
    assert "nothing was appended" in done.stdout and not fresh.exists(), done.stdout + done.stderr
