# `python -m autoplan`: the same start as the console script (Ctrl-C handled before any import).
from autoplan.cli.start import entry

entry()
