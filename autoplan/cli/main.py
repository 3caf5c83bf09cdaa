"""Entry point of the `autoplan` command.

Each subcommand lives in its own module `autoplan/cli/<name>_cmd.py` exposing
`register(subparsers)`, which adds its parser and sets `func(args) -> int`. Those modules import
nothing heavy at module level (no optuna, torch or pandas): `autoplan search` must start fast,
and planning never needs torch. Bad input anywhere is an `AutoplanError`, caught here once and
printed as one line with exit code 2.
"""
from __future__ import annotations

import argparse
import importlib
import sys

from autoplan.specs import AutoplanError

# Order is the order `autoplan --help` lists them in.
COMMANDS = [
    "search", "estimate", "compare", "models", "frameworks", "validate", "run", "export", "profile", "calibrate",
    "report",
]


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line and exit code 2 (argparse prints two)."""

    def error(self, message: str):  # noqa: D401 - argparse's hook
        sys.stderr.write(f"{self.prog}: error: {message} (see {self.prog} --help)\n")
        sys.exit(2)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="autoplan", description="Plan, predict and run the parallel training of LLMs.")
    from autoplan import __version__
    parser.add_argument("--version", action="version", version=f"autoplan {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name in COMMANDS:
        importlib.import_module(f"autoplan.cli.{name}_cmd").register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except AutoplanError as exc:
        sys.stderr.write(f"autoplan {args.command}: error: {exc}\n")
        return 2
    except KeyboardInterrupt:
        sys.stderr.write(f"autoplan {args.command}: interrupted\n")
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
