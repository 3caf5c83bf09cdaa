"""The first code of the `autoplan` executable and of `python -m autoplan`.

Ctrl-C is answered before anything else is imported: importing the command line (autoplan.specs,
the parser, each command's module) takes 0.2-0.9 s on a busy machine, and a SIGINT in that window
was a KeyboardInterrupt traceback from the middle of an import. Standard library only (`signal`,
`sys`, both loaded by the interpreter already), so nothing runs before the handler but the
interpreter's own start-up: its `site` import, which processes the environment's .pth files and is
no code of ours (see docs/bad_input.md).
"""
import signal
import sys


def _interrupted_while_starting(signum, frame):
    # Nothing is written yet: leave at once, one line, no traceback. A second Ctrl-C while leaving
    # must not print a second line (or a traceback from the exit itself).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    sys.stderr.write("autoplan: interrupted\n")
    raise SystemExit(130)


def entry(restore_mask=None) -> None:
    """The `autoplan` console script (pyproject's [project.scripts]) and `python -m autoplan`.

    `restore_mask`: the signal mask from before `python -m autoplan` blocked SIGINT (autoplan/__main__.py),
    restored once the handler is in place, so a Ctrl-C held meanwhile is answered here."""
    signal.signal(signal.SIGINT, _interrupted_while_starting)
    if restore_mask is not None:
        signal.pthread_sigmask(signal.SIG_SETMASK, restore_mask)
    from autoplan.cli.main import entry as run_command  # installs the command's own SIGINT handling

    run_command()
