"""Standard output and error at the command line's edge (issue 53): handled once here, not in every
command. A closed stream (`>&-`), a full one (`> /dev/full`) or a locale whose encoding cannot write
a name (latin-1, ASCII) ends as one line and exit 2, never a traceback; a character the locale's
encoding lacks is written as a backslash escape (`\\u4e2d`, which JSON reads back as the character)."""
from __future__ import annotations

import codecs
import errno
import os
import sys


class _Closed:
    """Stands in for a stream the shell closed: every write fails as writing to a closed descriptor does."""

    encoding = "utf-8"

    def write(self, text: str) -> int:
        raise OSError(errno.EBADF, "the stream is closed (was it redirected with >&- ?)")

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return False


def _escape(error: UnicodeEncodeError):
    """A path's undecodable bytes (argv under a C locale: surrogateescape) back as those bytes, any
    other character the encoding lacks as a backslash escape."""
    text = error.object[error.start:error.end]
    if all(0xDC80 <= ord(c) <= 0xDCFF for c in text):
        return codecs.lookup_error("surrogateescape")(error)
    return codecs.lookup_error("backslashreplace")(error)


codecs.register_error("autoplan-escape", _escape)


def prepare() -> None:
    """Before a command runs: closed streams stood in for, unencodable characters escaped."""
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if stream is None:
            setattr(sys, name, _Closed())
        elif hasattr(stream, "reconfigure") and (stream.encoding or "").lower().replace("-", "") != "utf8":
            stream.reconfigure(errors="autoplan-escape")


def say(line: str) -> None:
    """One line on stderr, if stderr can take it (it may be the closed or full one)."""
    try:
        sys.stderr.write(line + "\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass


def flush_at_exit(command: str) -> int:
    """Flush stdout before the interpreter does (whose failure would be an 'Exception ignored' trace):
    0, or 2 after one line saying what failed."""
    try:
        sys.stdout.flush()
        return 0
    except BrokenPipeError:  # the reader left (`| head`): nothing more to say to it
        code = 0
    except (OSError, ValueError) as exc:
        say(f"autoplan{' ' + command if command else ''}: error: cannot write the output: "
            f"{getattr(exc, 'strerror', None) or exc}")
        code = 2
    try:
        sys.stdout = open(os.devnull, "w")  # the interpreter's own flush at exit then has nothing left
    except OSError:
        pass
    return code
