"""Issue 53: however `autoplan run` ends, its ranks end with it and its temporary folder goes.

SIGTERM (a scheduler, `kill`) unwinds the command like Ctrl-C (cli/main.py Terminated): the launcher
stops its ranks and removes its folder, exit 143 and one line. SIGKILL runs no cleanup at all: each rank
asked the kernel for SIGTERM when its launcher dies (executor/parent_link.py), so none trains on alone.
Two gloo ranks of the tune tests' tiny model on this CPU."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from autoplan.cli.main import main

ROOT = Path(__file__).resolve().parents[1]
TINY = ["--model", str(ROOT / "notebooks/data/tiny-96x4"), "--gpus", "2", "--profile",
        str(ROOT / "profiler/data/cpu2-quick.json"), "--global-batch", "8", "--seq-len", "128", "--recompute", "none",
        "--dp", "2", "--tp", "1", "--pp", "1", "--zero", "1", "--micro-batch", "4", "--no-sequence-parallel"]


def ranks_of(pid: int) -> list:
    """The worker processes whose launcher (AUTOPLAN_LAUNCHER_PID in their environment) is `pid`."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes().split(b"\0")
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if b"executor.torch_backend.worker" in cmdline and f"AUTOPLAN_LAUNCHER_PID={pid}".encode() in environ:
            found.append(int(entry.name))
    return found


def start_run(tmp_path: Path):
    plan = tmp_path / "plan.json"
    assert main(["estimate", *TINY, "-o", str(plan)]) == 0
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1", "TMPDIR": str(tmp_path)}
    # no step lines: a rank that writes none would not notice its launcher's closed pipe either
    proc = subprocess.Popen([sys.executable, "-m", "autoplan", "run", str(plan), "--steps", "100000", "--log-every", "1000000",
                             "--warmup-steps", "1", "--out", str(tmp_path / "runs.jsonl")],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    deadline = time.monotonic() + 180
    while len(ranks_of(proc.pid)) < 2:
        assert proc.poll() is None, proc.stderr.read()
        assert time.monotonic() < deadline, "the ranks never started"
        time.sleep(0.1)
    time.sleep(3)  # into training: the ranks have set up their process group
    return proc


def wait_gone(pid: int, seconds: float) -> list:
    deadline = time.monotonic() + seconds
    while ranks_of(pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    return ranks_of(pid)


@pytest.fixture
def running(tmp_path):
    """A run in training; whatever a test does to it, no rank of it is left afterwards."""
    proc = start_run(tmp_path)
    yield proc
    for rank in ranks_of(proc.pid):
        os.kill(rank, signal.SIGKILL)


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG and /proc are Linux's")
def test_ranks_end_when_their_launcher_is_killed(running):
    running.kill()  # SIGKILL: the launcher runs no cleanup
    running.wait(timeout=30)
    left = wait_gone(running.pid, 30)
    assert left == [], f"ranks {left} outlived their launcher"


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc is Linux's")
def test_sigterm_ends_the_run_through_its_cleanup(running, tmp_path):
    running.send_signal(signal.SIGTERM)
    err = running.communicate(timeout=120)[1]
    assert running.returncode == 128 + signal.SIGTERM, err[-2000:]
    assert err.strip().splitlines()[-1] == "autoplan run: terminated (SIGTERM)" and "Traceback" not in err, err[-2000:]
    assert wait_gone(running.pid, 30) == []
    assert not list(tmp_path.glob("autoplan-run-*")), "the run's temporary folder was left behind"


@pytest.mark.slow
def test_a_checkpoint_that_cannot_be_written_is_one_line_and_leaves_no_half_folder(tmp_path):
    """Issue 53: a full disk or a file-size limit under --checkpoint-dir ended in every rank's traceback
    (DCP's CheckpointException passes `except Exception`), recorded nothing and left `.tmp-step-*`."""
    import resource

    plan = tmp_path / "plan.json"
    assert main(["estimate", *TINY, "-o", str(plan)]) == 0
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    limit = 40 * 1024  # the shards of the tiny model are larger; the records and plan are not

    def small_files():
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    done = subprocess.run([sys.executable, "-m", "autoplan", "run", str(plan), "--steps", "3", "--warmup-steps", "1",
                           "--checkpoint-dir", str(tmp_path / "ck"), "--checkpoint-every", "1",
                           "--out", str(tmp_path / "runs.jsonl")], env=env, capture_output=True, text=True,
                          timeout=300, preexec_fn=small_files)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr[-3000:]
    assert "--checkpoint-dir" in done.stderr and "saving step 1 failed" in done.stderr, done.stderr[-2000:]
    assert not list((tmp_path / "ck").iterdir()), "the half-written checkpoint folder was left"
    record = json.loads((tmp_path / "runs.jsonl").read_text().splitlines()[-1])
    assert record["status"] == "error" and "--checkpoint-dir" in record["error"]


@pytest.mark.slow
def test_sigterm_to_profile_stops_its_ranks_before_they_write(tmp_path):
    """Issue 53's fuzz: `autoplan profile --nproc 2` exited 143 on SIGTERM while its ranks kept measuring
    and replaced the output 7-11 s later. The command now unwinds (cli/main.py Terminated) through the
    launcher's stop of its ranks: nothing is written after it has said it was terminated."""
    out = tmp_path / "profile.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "autoplan", "profile", "--device", "cpu", "--nproc", "2",
                             "--quick", "--out", str(out)], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        time.sleep(4)  # the ranks are spawned and measuring (a quick 2-rank profile takes ~15 s here)
        assert proc.poll() is None, "the profile ended before the signal"
        proc.send_signal(signal.SIGTERM)
        err = proc.communicate(timeout=120)[1]
        assert proc.returncode == 128 + signal.SIGTERM, err[-2000:]
        assert err.strip().splitlines()[-1] == "autoplan profile: terminated (SIGTERM)", err[-2000:]
        time.sleep(15)  # past when a rank left running would have finished and written
        assert not out.exists(), "a rank went on measuring and wrote the profile"
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
