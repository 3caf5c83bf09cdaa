"""What XLA compiled for a training step: its per-device memory and its matrix multiplications.

XLA:CPU reports no allocator statistics (`xm.get_memory_info` is unimplemented there), and the
process's RSS holds all virtual devices, Python and torch together. What is per device and exact is
the compiled step program's buffer assignment: an SPMD module is the program of one device, and its
memory-usage report gives the bytes of every buffer it needs at once (parameters, optimizer state,
gradients, activations and temporaries, after XLA's buffer reuse). Its optimized HLO shows what
survived the compiler, e.g. whether a recomputation was merged back into the forward pass. XLA
writes both only when dumping, so the launcher points XLA's dump at a temporary folder and the
worker reads the files of the programs each plan compiled.
"""
from __future__ import annotations

import re
from pathlib import Path

DUMP_DIR_ENV = "AUTOPLAN_XLA_DUMP_DIR"
_REPORT_GLOB = "*after_optimizations-memory-usage-report.txt"
_TOTAL = re.compile(r"^Total bytes used: (\d+)", re.MULTILINE)
_DOT = re.compile(r"= \S+ dot\(")


def dump_flags(dump_dir: str) -> str:
    """XLA_FLAGS that write the optimized modules' reports (no per-pass dumps) of torch_xla's graphs."""
    return f"--xla_dump_to={dump_dir} --xla_dump_hlo_pass_re=^$ --xla_dump_hlo_module_re=SyncTensorsGraph"


class CompiledStep:
    """Reads the memory reports of the programs compiled since the last `start()`."""

    def __init__(self, dump_dir: str | None):
        self.dump_dir = Path(dump_dir) if dump_dir else None
        self._seen: set = set()

    def start(self) -> None:
        self._seen = set(self._reports())

    def program_bytes_per_device(self) -> int | None:
        """Bytes of the largest program compiled since start(): the training step (the other is
        the materialization of weights and moments). None when nothing new was compiled (XLA's
        cache served an identical program) or no dump folder was set."""
        step = self._step_report()
        return step[0] if step else None

    def program_num_matmuls(self) -> int | None:
        """Matrix multiplications (HLO `dot`) in that step program, after XLA's optimizations.
        Recompute shows here: a recomputed layer's forward matmuls appear a second time unless XLA
        merged them away."""
        step = self._step_report()
        if not step:
            return None
        hlo = Path(str(step[1]).replace("-memory-usage-report.txt", ".txt"))
        return len(_DOT.findall(hlo.read_text(errors="replace"))) if hlo.is_file() else None

    def _step_report(self) -> tuple | None:
        totals = [(int(m.group(1)), path) for path in set(self._reports()) - self._seen
                  if (m := _TOTAL.search(path.read_text(errors="replace")))]
        return max(totals) if totals else None

    def _reports(self) -> list:
        return list(self.dump_dir.glob(_REPORT_GLOB)) if self.dump_dir and self.dump_dir.is_dir() else []
