"""Starting the profiling processes: in-process, spawned on this machine, or under torchrun.

- One process: measured in the calling process (no process group, no collectives).
- N processes on this machine: `torch.multiprocessing` spawns them, rendezvous on a free localhost
  port, NCCL on GPUs (one process per GPU) and gloo on the CPU.
- Across nodes: `torchrun ... -m profiler -o cluster.json` sets RANK/WORLD_SIZE/LOCAL_* and
  `profile_under_torchrun` joins that group. Rank 0 writes in every case.
"""
from __future__ import annotations

import os
import signal
import socket
import sys
from pathlib import Path

from autoplan.specs import AutoplanError
from profiler.runner import ProfileRequest, RankInfo

DEVICES = ("auto", "cuda", "cpu")


def resolve_device(device: str) -> str:
    import torch

    if device not in DEVICES:
        raise AutoplanError(f"--device must be one of {DEVICES}, got {device!r}")
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise AutoplanError("--device cuda was asked but torch sees no CUDA device here; use --device cpu")
    return device


def available_devices(device_type: str) -> int:
    import torch

    return torch.cuda.device_count() if device_type == "cuda" else (os.cpu_count() or 1)


def resolve_nproc(device_type: str, nproc: int | None) -> int:
    """Processes to start: default one per GPU, or two on the CPU (one pair for the collectives)."""
    available = available_devices(device_type)
    if nproc is None:
        return available if device_type == "cuda" else min(2, available)
    what = "GPUs" if device_type == "cuda" else "CPU cores"
    if nproc < 1 or nproc > available:
        raise AutoplanError(f"--nproc must be between 1 and the {available} {what} of this machine, got {nproc}; "
                            f"use --nproc {available} or fewer")
    return nproc


def check_output_path(out: str | os.PathLike) -> Path:
    """Fail before measuring, not after minutes of it, when the profile could not be written."""
    from autoplan.specs import check_output, is_stdout

    if is_stdout(out):  # the samples CSV is written beside the profile: a file is needed
        raise AutoplanError(f"-o {out}: the profile is written with its samples (OUT.samples.csv) beside it; "
                            f"give a file name such as cluster.json")
    check_output(out)
    check_output(f"{out}.samples.csv")  # profiler.build.samples_path
    return Path(out)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _backend(device_type: str) -> str:
    return "nccl" if device_type == "cuda" else "gloo"


def _device_binding(device_type: str, local_rank: int) -> dict:
    """NCCL: bind the process to its GPU before the group forms (barriers and object gathers then use
    that GPU, not GPU 0). gloo needs nothing."""
    if device_type != "cuda":
        return {}
    import torch

    torch.cuda.set_device(local_rank)
    return {"device_id": torch.device("cuda", local_rank)}


def exit_on_sigterm() -> None:
    """In a profiling rank: SIGTERM (the launcher stopping its ranks after a Ctrl-C, torchrun tearing a
    failed group down, a `kill`) unwinds the rank as SystemExit(143) instead of killing it where it
    stands, so a profile being written loses its temporary file (write_text_atomic's cleanup)."""
    signal.signal(signal.SIGTERM, _terminated)


def _terminated(signum, frame):
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second SIGTERM must not cut the cleanup short
    raise SystemExit(128 + signum)


def _spawned(local_rank: int, request: ProfileRequest, nproc: int, port: int) -> None:
    import torch.distributed as dist

    from profiler.runner import run_rank

    exit_on_sigterm()
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    dist.init_process_group(_backend(request.device_type), rank=local_rank, world_size=nproc,
                            **_device_binding(request.device_type, local_rank))
    try:
        run_rank(request, RankInfo(local_rank, nproc, local_rank, nproc, distributed=True))
    finally:
        dist.destroy_process_group()


def _child_error_line(exc: Exception) -> str:
    lines = [line for line in str(exc).strip().splitlines() if line.strip()]
    return lines[-1].strip() if lines else type(exc).__name__


def profile_local(request: ProfileRequest, nproc: int) -> None:
    """Profile this machine with `nproc` processes; rank 0 writes request.out and prints a report."""
    from profiler.runner import run_rank

    if nproc == 1:
        run_rank(request, RankInfo(0, 1, 0, 1, distributed=False))
        return
    import torch.multiprocessing as mp

    # After a Ctrl-C this process stops its children (_stop); multiprocessing's resource tracker then
    # reclaims the semaphores of their error queues and warns about "leaked semaphore objects" at
    # shutdown -- noise after the one `interrupted` line. The tracker inherits this environment.
    os.environ.setdefault("PYTHONWARNINGS", "ignore:resource_tracker:UserWarning")
    # The children start with SIGINT ignored and blocked (both inherited through exec): a Ctrl-C in
    # the terminal reaches every process of the group, and only this one should answer it, by
    # stopping them. Here it is blocked, not lost: it is delivered as soon as the spawn is done.
    written_before = _file_identity(request.out)
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        context = mp.start_processes(_spawned, args=(request, nproc, _free_port()), nprocs=nproc,
                                     start_method="spawn", join=False)
    except BaseException:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        raise
    finally:
        signal.signal(signal.SIGINT, previous)
    try:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)  # a Ctrl-C of the spawn arrives here
        while not context.join(timeout=0.2):
            pass
    except BaseException as exc:
        _stop(context.processes)
        if isinstance(exc, KeyboardInterrupt) and _file_identity(request.out) != written_before:
            # Rank 0 had replaced the profile (atomically, its last act) when the Ctrl-C came: the
            # work is done and whole, only the ranks' teardown was cut short. Keep it and end as
            # finished rather than report an interruption over a file that changed.
            print(f"the profile was written to {request.out} before the interrupt", file=sys.stderr)
            return
        if not isinstance(exc, (mp.ProcessRaisedException, mp.ProcessExitedException)):
            raise
        _raise_child_error(exc, request)


def _file_identity(path) -> tuple | None:
    """(inode, modification time) of `path`, None when absent: an atomic replace changes it."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_ino, st.st_mtime_ns


def _stop(processes, grace_s: float = 5.0) -> None:
    """Terminate the profiling processes still alive; kill those that outlive `grace_s`."""
    for p in processes:
        if p.is_alive():
            p.terminate()
    for p in processes:
        p.join(grace_s)
        if p.is_alive():
            p.kill()
            p.join()


def _raise_child_error(exc: Exception, request: ProfileRequest) -> None:
    """A child's failure as one AutoplanError line when it is bad input or a stopped process."""
    import torch.multiprocessing as mp

    line = _child_error_line(exc)
    if isinstance(exc, mp.ProcessExitedException):
        raise AutoplanError(f"a profiling process stopped ({line}); nothing was written to {str(request.out)!r}") from None
    if "AutoplanError" in line or "SchemaError" in line:
        raise AutoplanError(f"{line.split(': ', 1)[-1]}; nothing was written to {str(request.out)!r}") from None
    raise exc


def profile_under_torchrun(out: str, device: str, quick: bool, name: str = "") -> None:
    """Entry for `torchrun ... -m profiler`: join the group torchrun describes in the environment."""
    import torch.distributed as dist

    from profiler.runner import run_rank

    missing = [v for v in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE") if v not in os.environ]
    if missing:
        raise AutoplanError(f"python -m profiler runs under torchrun (missing {', '.join(missing)}); "
                            f"on one machine use `autoplan profile -o {out}`")
    exit_on_sigterm()
    info = RankInfo(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), int(os.environ["LOCAL_RANK"]),
                    int(os.environ["LOCAL_WORLD_SIZE"]), distributed=True)
    device_type = resolve_device(device)
    path = check_output_path(out) if info.rank == 0 else Path(out)
    dist.init_process_group(_backend(device_type), **_device_binding(device_type, info.local_rank))
    try:
        run_rank(ProfileRequest(out=path, device_type=device_type, quick=quick, name=name), info)
    finally:
        dist.destroy_process_group()
    sys.stdout.flush()
