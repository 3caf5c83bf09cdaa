"""The few efficiency constants the analytical model does not derive, and the software stack.

Physics gives the shape of every term; these constants scale what physics cannot know: how close
a training framework gets to the profile's best GEMM, how much communication it hides behind
compute. They are fitted on published runs by `benchmarks/fit_constants.py`, which writes
`cost_model/data/constants.json` with its provenance (date, rows, resulting error). Missing file
or keys fall back to the neutral values below (scale 1, no overlap).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path

from autoplan.specs import AutoplanError

CONSTANTS_PATH = Path(__file__).parent / "data" / "constants.json"


@dataclass(frozen=True)
class SoftwareStack:
    """What the training framework does that changes time or memory (not the plan itself)."""
    name: str = "megatron-core"
    flash_attention: bool = True
    """Fused attention that never stores the s x s scores (Dao et al. 2022, arXiv 2205.14135)."""
    tp_comm_overlap: float = 0.0
    """Fraction of TP/SP collective time hidden behind GEMMs (async TP / userbuffers)."""
    dp_comm_overlap: float = 0.8
    """Fraction of the overlappable compute window the DP/FSDP collectives can hide behind."""
    fused_elementwise: float = 1.0
    """Multiplier on the memory-bound ops' bytes (torch.compile / fused kernels lower it)."""
    step_overhead_fraction: float = 0.0
    """Per-step software time (kernel launches, Python, sync) as a fraction of the busy time."""


@dataclass(frozen=True)
class Constants:
    matmul_scale: dict = field(default_factory=dict)
    """Per built-in profile: achieved-in-training over best-benchmark GEMM throughput."""
    fp8_matmul_scale: float = 1.0
    """fp8 GEMMs' achieved fraction relative to the bf16 fraction of their own peak."""
    attention_scale: float = 1.0
    elementwise_scale: float = 1.0
    frameworks: dict = field(default_factory=dict)
    """Framework name -> SoftwareStack field overrides."""
    provenance: dict = field(default_factory=dict)

    def software(self, name: str = "megatron-core", **overrides) -> SoftwareStack:
        """The SoftwareStack of a named framework, with per-run overrides (e.g. compile on)."""
        known = self.frameworks.get(name)
        if known is None and name != "megatron-core":
            raise AutoplanError(f"unknown framework {name!r}; known: {', '.join(sorted({'megatron-core', *self.frameworks}))}")
        return replace(SoftwareStack(name=name), **{**(known or {}), **overrides})

    def to_dict(self) -> dict:
        return {"matmul_scale": dict(self.matmul_scale), "fp8_matmul_scale": self.fp8_matmul_scale,
                "attention_scale": self.attention_scale, "elementwise_scale": self.elementwise_scale,
                "frameworks": {k: dict(v) for k, v in self.frameworks.items()},
                "provenance": dict(self.provenance)}

    @classmethod
    def from_dict(cls, data: dict) -> "Constants":
        return cls(matmul_scale=dict(data.get("matmul_scale", {})),
                   fp8_matmul_scale=float(data.get("fp8_matmul_scale", 1.0)),
                   attention_scale=float(data.get("attention_scale", 1.0)),
                   elementwise_scale=float(data.get("elementwise_scale", 1.0)),
                   frameworks={k: dict(v) for k, v in data.get("frameworks", {}).items()},
                   provenance=dict(data.get("provenance", {})))


@lru_cache(maxsize=None)
def load_constants(path: str = str(CONSTANTS_PATH)) -> Constants:
    """The fitted constants (neutral defaults when the file is absent)."""
    p = Path(path)
    if not p.exists():
        return Constants()
    try:
        return Constants.from_dict(json.loads(p.read_text()))
    except (ValueError, TypeError, AttributeError) as exc:
        raise AutoplanError(f"cost-model constants {p} are malformed ({exc}); rerun benchmarks/fit_constants.py") from None
