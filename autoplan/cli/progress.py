"""A progress line for commands that can take more than a couple of seconds.

`Progress("report")` is a context manager; `.stage("scoring the plan space")` names what is being
done. Nothing is printed for work that ends within `delay_s` (a fast command stays quiet); past it,
the current stage is printed on stderr with the time so far, and every later stage as it starts.
On a terminal the line is rewritten in place and erased at the end; in a log (not a TTY) each
stage is one line. AUTOPLAN_PROGRESS=0 silences it, =1 forces it (tests, CI logs).
Standard library only.
"""
from __future__ import annotations

import os
import sys
import threading
import time


class Progress:
    def __init__(self, command: str, delay_s: float = 2.0, stream=None):
        self.command, self.delay_s = command, delay_s
        self.stream = stream or sys.stderr
        setting = os.environ.get("AUTOPLAN_PROGRESS", "")
        self.enabled = setting == "1" or (setting != "0" and _is_tty(self.stream))
        self.in_place = _is_tty(self.stream)
        self._stage, self._shown, self._started = "", False, time.perf_counter()
        self._lock = threading.Lock()
        self._timer: threading.Timer | None = None

    def __enter__(self) -> "Progress":
        self._started = time.perf_counter()
        if self.enabled:
            self._timer = threading.Timer(self.delay_s, self._show)
            self._timer.daemon = True
            self._timer.start()
        return self

    def stage(self, text: str) -> None:
        with self._lock:
            self._stage = text
        if self._shown or (self.enabled and time.perf_counter() - self._started >= self.delay_s):
            self._show()

    def _show(self) -> None:
        with self._lock:
            if not self._stage:
                return
            self._shown = True
            line = f"autoplan {self.command}: {self._stage} ({time.perf_counter() - self._started:.1f} s)"
            self.stream.write(f"\r\033[K{line}" if self.in_place else f"{line}\n")
            self.stream.flush()

    def __exit__(self, *exc) -> None:
        if self._timer is not None:
            self._timer.cancel()
        with self._lock:
            if self._shown and self.in_place:
                self.stream.write("\r\033[K")
                self.stream.flush()
            self._stage = ""


def _is_tty(stream) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False
