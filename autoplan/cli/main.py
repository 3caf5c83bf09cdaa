"""Entry point of the `autoplan` command.

Each subcommand lives in its own module `autoplan/cli/<name>_cmd.py` exposing
`register(subparsers)`, which adds its parser and sets `func(args) -> int`. Those modules import
nothing heavy at module level (no optuna, torch or pandas): `autoplan search` must start fast,
and planning never needs torch. Bad input anywhere is an `AutoplanError`, caught here once and
printed as one line with exit code 2.
"""
from __future__ import annotations

import _thread
import argparse
import importlib
import os
import signal
import sys
import threading

from autoplan.cli import streams
from autoplan.specs import AutoplanError

# Order is the order `autoplan --help` lists them in.
COMMANDS = [
    "search", "cluster", "estimate", "memory", "compare", "models", "frameworks", "validate", "run", "tune", "export",
    "profile", "calibrate", "report",
]


def one_line(text: str) -> str:
    """The message with every unprintable character (newlines, NEL, NUL, ...) escaped: an error stays
    one line whatever the user typed into a value it quotes."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line and exit code 2 (argparse prints two)."""

    def error(self, message: str):  # noqa: D401 - argparse's hook
        if message.startswith("argument -") and message.endswith("expected one argument"):
            # argparse reads a value such as -1GiB or -$5 as a flag; the value's own check says why it is bad
            flag = message.removeprefix("argument ").split(":")[0].split("/")[-1]
            message += f" (a value that starts with '-' is read as a flag: write {flag}=VALUE)"
        sys.stderr.write(one_line(f"{self.prog}: error: {message} (see {self.prog} --help)") + "\n")
        sys.exit(2)


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The `autoplan` parser with every subcommand, or with `only` that one (what running a command
    needs: the other commands' modules are not imported, which is most of a quick command's start)."""
    parser = _Parser(prog="autoplan", description="Plan, predict and run the parallel training of LLMs.")
    from autoplan import __version__
    parser.add_argument("--version", action="version", version=f"autoplan {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name in ([only] if only in COMMANDS else COMMANDS):
        importlib.import_module(f"autoplan.cli.{name}_cmd").register(sub)
    parser.set_defaults(subparsers=sub.choices)
    return parser


class _Interrupt:
    """Ctrl-C: the first SIGINT raises KeyboardInterrupt (so atomic writes and launchers clean up on
    the way out) and is remembered, so that whatever that interruption turned into (an ImportError of
    a half-imported module, a library's wrapper exception) still ends as `interrupted`, exit 130."""

    seen = False
    previous_unraisable = staticmethod(sys.__unraisablehook__)

    @classmethod
    def handler(cls, signum, frame):
        if cls.seen:  # already on the way out: a second Ctrl-C must not cut the cleanup short
            return
        cls.seen = True
        raise KeyboardInterrupt

    @classmethod
    def unraisable(cls, info) -> None:
        """sys.unraisablehook while a command runs: a Ctrl-C that landed in code whose exceptions Python
        cannot raise (a weakref callback or __del__ run by the garbage collector, e.g. SQLAlchemy's
        class registry under Optuna) would be printed as "Exception ignored ... Traceback" and lost.
        Deliver it again instead, a moment later, from another thread: raised here or at once it would
        land in this hook or that callback again, where it is dropped the same way."""
        if issubclass(info.exc_type, KeyboardInterrupt) and cls.seen:
            cls.seen = False
            threading.Timer(0.01, _thread.interrupt_main).start()
            return
        cls.previous_unraisable(info)


def _interrupted(command: str) -> int:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not interrupt the exit itself
    try:
        sys.stderr.write(f"autoplan{' ' + command if command else ''}: interrupted\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass
    return 130


class Terminated(SystemExit):
    """SIGTERM or SIGHUP (a scheduler stopping the job, `kill`, a closed terminal) raised where the
    command is, so it ends through its cleanup like Ctrl-C: temporary files and folders removed, the
    executor's ranks stopped, outputs left as they were. The default action would end the process on
    the spot and leave them behind (issue 53)."""

    def __init__(self, signum: int):
        super().__init__(128 + signum)
        self.signum = signum

    @staticmethod
    def handler(signum, frame):
        signal.signal(signum, signal.SIG_IGN)  # a second one must not cut the cleanup short
        raise Terminated(signum)


_TERMINATING = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGHUP") if hasattr(signal, name))


def _terminated(command: str, signum: int) -> int:
    try:
        sys.stderr.write(f"autoplan{' ' + command if command else ''}: terminated ({signal.Signals(signum).name})\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass
    return 128 + signum


def _drop_plan_notes() -> None:
    """A refusal is one line: the notes of the plan files it read go unsaid."""
    planfiles = sys.modules.get("autoplan.planning.planfiles")
    if planfiles is not None:
        planfiles.flush_notes(write=False)


def main(argv: list[str] | None = None, _exiting: bool = False) -> int:
    """Run one command; returns its exit code (0, 1 for a failed run, 2 for bad input, 130 for Ctrl-C).

    `_exiting` (the `autoplan` entry point): the process ends right after, so SIGINT stays ignored
    from the moment the command is done; in-process callers get their previous handler back."""
    in_main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.getsignal(signal.SIGINT) if in_main_thread else None
    previous_terminating = {s: signal.getsignal(s) for s in _TERMINATING} if in_main_thread else {}
    previous_unraisable = _Interrupt.previous_unraisable = sys.unraisablehook
    command = ""
    if in_main_thread:
        _Interrupt.seen = False
        signal.signal(signal.SIGINT, _Interrupt.handler)
        for signum in _TERMINATING:
            signal.signal(signum, Terminated.handler)
        sys.unraisablehook = _Interrupt.unraisable
    try:
        streams.prepare()
        words = sys.argv[1:] if argv is None else argv
        parser = build_parser(words[0] if words else None)  # a command's own parser, or all of them
        args, extra = parser.parse_known_args(argv)
        command = getattr(args, "command", None) or ""
        if extra:  # said by the command's own parser: `autoplan <command>: error: ...`
            args.subparsers.get(command, parser).error(f"unrecognized arguments: {' '.join(extra)}")
        if not getattr(args, "func", None):
            parser.print_help()
            return 2
        from autoplan.cli.argtypes import check_command_paths
        from autoplan.planning.planfiles import flush_notes

        flush_notes(write=False)  # an earlier in-process call's
        check_command_paths(args)  # outputs refused before any work: devices, folders, inputs
        code = int(args.func(args) or 0)
        flush_notes()  # what reading its plan files assumed or re-scored, now that it has answered
        return code
    except KeyboardInterrupt:
        return _interrupted(command)
    except Terminated as exc:
        _drop_plan_notes()
        return _terminated(command, exc.signum)
    except AutoplanError as exc:
        if _Interrupt.seen:
            return _interrupted(command)
        _drop_plan_notes()
        sys.stderr.write(one_line(f"autoplan {command}: error: {exc}") + "\n")
        return 2
    except BrokenPipeError:
        return 0
    except OSError as exc:
        # Not a file's (the one writer says those as AutoplanError): standard output closed or full.
        _drop_plan_notes()
        streams.say(one_line(f"autoplan {command}: error: cannot write the output: {exc.strerror or exc}"))
        return 2
    except BaseException:
        if _Interrupt.seen:
            return _interrupted(command)
        raise
    finally:
        if in_main_thread:
            signal.signal(signal.SIGINT, signal.SIG_IGN if _exiting else previous)
            for signum, handler in previous_terminating.items():
                signal.signal(signum, signal.SIG_IGN if _exiting else handler)
            sys.unraisablehook = previous_unraisable


def _command_word() -> str:
    words = sys.argv[1:]
    return words[0] if words and words[0] in COMMANDS else ""


def entry() -> None:
    """Run the command of sys.argv and exit; called by autoplan.cli.start.entry (the `autoplan`
    executable and `python -m autoplan`) once Ctrl-C is handled."""
    code = main(_exiting=True)
    if code != 130:
        code = streams.flush_at_exit(_command_word()) or code
    if code == 130:
        # Interrupted: everything written was written atomically and cleaned up while unwinding.
        # Leave now, without interpreter finalization, which would turn a KeyboardInterrupt that a
        # C extension saw while importing into death by SIGINT (exit -2) after the line was printed.
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(130)
    sys.exit(code)


if __name__ == "__main__":
    entry()
