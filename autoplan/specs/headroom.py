"""`--memory-headroom`: a safety margin of GPU memory the plan must leave free.

Given as a size (`2GiB`, `512MiB`, `3GB`; a bare number is GiB) or a share of the GPU's capacity
(`10%`). "Fits" then means peak <= capacity - headroom. Without the flag, search, estimate and
cluster keep DEFAULT_HEADROOM_FRACTION of each GPU free; `--memory-headroom 0` opts out. Sizes are
base-2 (GiB, MiB) or base-10 (GB, MB) as written.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass

from autoplan.specs.errors import AutoplanError

GIB = 2**30

DEFAULT_HEADROOM_FRACTION = 0.07
"""The default margin, a share of each GPU's capacity: what the caching allocator reserves beyond the
predicted peak. Measured: the GPU records with the reserved peak (cost_model/data/h100_runs/2026-11-27
and 2026-11-28, torch.cuda.max_memory_reserved, one GPU each) reserve 1.6-5.5 GiB more than the
predicted peak less the CUDA context; the worst, 5.49 GiB (plan d7e5affb730c: 50.5 GiB reserved,
44.3 GiB allocated), is 6.9 % of the 79.1 GiB the plan was made for, rounded up to 7 %. The allocator
returns cached free blocks and retries before it reports out-of-memory (PyTorch CUDA semantics,
"Memory management"), so what a job loses to fragmentation lies between the allocated and the reserved
peak: 7 % is the upper end. tests/test_memory_headroom.py re-predicts those records and checks that the
margin covers every one. Not covered: NCCL's buffers of multi-GPU jobs (no such record keeps them)."""
_UNITS = {"": GIB, "gib": GIB, "g": GIB, "mib": 2**20, "m": 2**20, "gb": 10**9, "mb": 10**6}
_SIZE = re.compile(r"^\s*([-+]?[0-9]*\.?[0-9]+(?:e[-+]?[0-9]+)?)\s*(%|gib|mib|gb|mb|g|m)?\s*$", re.IGNORECASE)


@dataclass(frozen=True)
class MemoryHeadroom:
    """A headroom as the user wrote it: a size in bytes or a share of the capacity (one of them)."""
    text: str
    size_bytes: int | None = None
    fraction: float | None = None

    def bytes_for(self, capacity_bytes: int, gpu: str) -> int:
        """The headroom in bytes on a GPU of `capacity_bytes`; it must leave some memory to use."""
        headroom = round(self.fraction * capacity_bytes) if self.fraction is not None else self.size_bytes
        if headroom >= capacity_bytes:
            raise AutoplanError(f"--memory-headroom {self.text} is {headroom / GIB:.1f} GiB, not less than the "
                                f"{capacity_bytes / GIB:.1f} GiB of each {gpu} GPU; give a smaller margin (e.g. 2GiB or 10%)")
        return headroom


def parse_headroom(text: str) -> MemoryHeadroom:
    """'2GiB', '512MiB', '3GB', '10%' or a bare number of GiB -> MemoryHeadroom; else one clear line."""
    match = _SIZE.match(text)
    hint = "give a size such as 2GiB, 512MiB or 3GB, or a share of the GPU's memory such as 10%"
    if not match:
        raise AutoplanError(f"--memory-headroom must be a size or a percentage, got {text!r}; {hint}")
    value, unit = float(match.group(1)), (match.group(2) or "").lower()
    if not math.isfinite(value) or value < 0:
        raise AutoplanError(f"--memory-headroom must be zero or more, got {text!r}; {hint}")
    if unit == "%":
        if value >= 100:
            raise AutoplanError(f"--memory-headroom must be less than 100% of the GPU's memory, got {text!r}")
        return MemoryHeadroom(text.strip(), fraction=value / 100)
    size = value * _UNITS[unit]
    if size > 2**50:
        raise AutoplanError(f"--memory-headroom {text.strip()} is larger than any GPU's memory; {hint}")
    return MemoryHeadroom(text.strip(), size_bytes=round(size))


def default_headroom_bytes(capacity_bytes: int) -> int:
    """The margin kept free when --memory-headroom is not given (DEFAULT_HEADROOM_FRACTION)."""
    return round(DEFAULT_HEADROOM_FRACTION * capacity_bytes)


def resolve_headroom(headroom: MemoryHeadroom | None, capacity_bytes: int, gpu: str,
                     default_bytes: int | None = None) -> int:
    """The headroom in bytes: the user's, else `default_bytes` (e.g. the plan file's), else the
    default margin (default_headroom_bytes)."""
    if headroom is None:
        return default_headroom_bytes(capacity_bytes) if default_bytes is None else default_bytes
    return headroom.bytes_for(capacity_bytes, gpu)


def headroom_default_line(headroom: MemoryHeadroom | None, capacity_bytes: int) -> list:
    """The `default` line a command prints when it keeps the default margin ([] when the user gave one)."""
    if headroom is not None:
        return []
    return [f"memory headroom {DEFAULT_HEADROOM_FRACTION:.0%} = {default_headroom_bytes(capacity_bytes) / GIB:.1f} GiB "
            f"per GPU kept free (default: the allocator's reserved peak over the predicted one on the GPU "
            f"records; set --memory-headroom, 0 for none)"]
