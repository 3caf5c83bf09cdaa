"""A progress line for commands that can take more than a couple of seconds.

`Progress("report")` is a context manager; `.stage("scoring the plan space")` names what is being
done. Nothing is printed for work that ends within `delay_s` (a fast command stays quiet); past it,
the current stage is printed on stderr with the time so far, and every later stage as it starts.
On a terminal (stderr a TTY) the line is rewritten in place every TICK_S, so the time keeps counting
through a long stage, and erased at the end; elsewhere (a pipe, a log) nothing is printed unless
AUTOPLAN_PROGRESS=1 forces it, one line per stage (CI logs); AUTOPLAN_PROGRESS=0 silences it.
Standard library only (the planner runs without torch, tqdm or rich).
"""
from __future__ import annotations

import os
import sys
import threading
import time


DELAY_S = 1.0
"""Work shorter than this prints nothing (issue 53: anything over a second says what it is doing)."""
TICK_S = 0.5
"""How often a terminal's line is rewritten with the time so far."""


class Progress:
    def __init__(self, command: str, delay_s: float | None = None, stream=None):
        self.command, self.delay_s = command, DELAY_S if delay_s is None else delay_s
        self.stream = stream or sys.stderr
        setting = os.environ.get("AUTOPLAN_PROGRESS", "")
        self.enabled = setting == "1" or (setting != "0" and _is_tty(self.stream))
        self.in_place = _is_tty(self.stream)
        self._stage, self._shown, self._done, self._started = "", False, False, time.perf_counter()
        self._lock = threading.Lock()
        self._timer: threading.Timer | None = None

    def __enter__(self) -> "Progress":
        self._started = time.perf_counter()
        if self.enabled:
            self._arm(self.delay_s)
        return self

    def _arm(self, after_s: float) -> None:
        self._timer = threading.Timer(after_s, self._tick)
        self._timer.daemon = True
        self._timer.start()

    def _tick(self) -> None:
        """Show the stage; on a terminal, again every TICK_S until the work ends."""
        self._show()
        if self.in_place and not self._done:
            self._arm(TICK_S)

    def stage(self, text: str) -> None:
        with self._lock:
            self._stage = text
        if self._shown or (self.enabled and time.perf_counter() - self._started >= self.delay_s):
            self._show()

    def _show(self) -> None:
        with self._lock:
            if not self._stage or self._done:
                return
            self._shown = True
            line = f"autoplan {self.command}: {self._stage} ({time.perf_counter() - self._started:.1f} s)"
            self.stream.write(f"\r\033[K{line}" if self.in_place else f"{line}\n")
            self.stream.flush()

    def __exit__(self, *exc) -> None:
        with self._lock:
            self._done = True
            if self._timer is not None:
                self._timer.cancel()
            if self._shown and self.in_place:
                self.stream.write("\r\033[K")
                self.stream.flush()
            self._stage = ""


def _is_tty(stream) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False
