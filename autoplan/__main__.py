# `python -m autoplan`: the same start as the console script. Ctrl-C is held (blocked) from this
# first line until autoplan.cli.start has its handler in place, so one landing while that module is
# still being imported is answered by it (one line, exit 130), not by a traceback from the import.
import signal

_held = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT}) if hasattr(signal, "pthread_sigmask") else None

from autoplan.cli.start import entry  # noqa: E402

entry(restore_mask=_held)
