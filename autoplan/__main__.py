import signal
import sys


def _interrupted_while_starting(signum, frame):
    # Ctrl-C before the command has started: nothing written yet, so leave at once (no traceback).
    sys.stderr.write("autoplan: interrupted\n")
    raise SystemExit(130)


signal.signal(signal.SIGINT, _interrupted_while_starting)

from autoplan.cli.main import entry  # noqa: E402 - after the handler, so importing is interruptible too

entry()
