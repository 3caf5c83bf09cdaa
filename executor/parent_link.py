"""Worker processes that end with the `autoplan run` that started them.

The launchers start each rank in a session of its own (so a Ctrl-C in the terminal reaches the
launcher only, which stops the ranks itself). A launcher killed outright (SIGKILL, the OOM killer, a
scheduler's hard stop) runs no cleanup, and its ranks would go on training, holding their devices,
ports and memory. Each rank therefore asks the Linux kernel to send it SIGTERM when its parent dies
(prctl(2) PR_SET_PDEATHSIG), and checks once that the parent it was started by is still the one it has:
the parent may have died between the fork and that call. Under torchrun (no launcher of ours) nothing
is set: torchrun's elastic agent watches its own workers.
"""
from __future__ import annotations

import ctypes
import os
import signal
import sys

PARENT_PID_ENV = "AUTOPLAN_LAUNCHER_PID"
"""The pid of the `autoplan run` process that started this rank (set by the launchers)."""

_PR_SET_PDEATHSIG = 1  # linux/prctl.h


def launcher_env() -> dict:
    """What a launcher adds to a rank's environment so the rank can tie itself to it."""
    return {PARENT_PID_ENV: str(os.getpid())}


def die_with_launcher(environ=os.environ) -> bool:
    """In a rank: get SIGTERM when the launcher that started it dies; exit now if it already has.
    Returns whether the link was set (False off Linux or without a launcher of ours)."""
    expected = environ.get(PARENT_PID_ENV)
    if not expected or not sys.platform.startswith("linux"):
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0) != 0:
        return False
    if os.getppid() != int(expected):  # the launcher died before the link was made
        os._exit(128 + int(signal.SIGTERM))
    return True
