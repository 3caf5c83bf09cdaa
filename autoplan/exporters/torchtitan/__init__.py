"""torchtitan's two export targets and what they share.

`torchtitan` (v03.py) writes torchtitan 0.3.0's Python config module; `torchtitan-0.2` (v02.py) the
TOML job config of 0.2.0, the last release that reads TOML. Both take the shapes torchtitan ships
from flavors.py, and the training section, the ZeRO -> FSDP2 degrees and the pipeline block from
shared.py. autoplan.exporters.dispatch imports a target's module by name (exporters/common.py)."""
