"""The few efficiency constants the analytical model does not derive.

Physics gives the shape of every term; these constants scale what physics cannot know: how close
a training framework gets to the profile's best GEMM, how much communication it hides behind
compute. They are fitted on published runs by `benchmarks/fit_constants.py`, which writes
`cost_model/data/constants.json` with its provenance (date, rows, resulting error). Missing file
or keys fall back to the neutral values below (scale 1, no overlap).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from autoplan.specs import AutoplanError, Framework, get_framework

CONSTANTS_PATH = Path(__file__).parent / "data" / "constants.json"


@dataclass(frozen=True)
class Constants:
    matmul_scale: dict = field(default_factory=dict)
    """Per built-in profile: achieved-in-training over best-benchmark GEMM throughput."""
    fp8_matmul_scale: float = 1.0
    """fp8 GEMMs' achieved fraction relative to the bf16 fraction of their own peak."""
    fp8_rowwise_scale: float = 1.0
    """Extra factor for row-wise scaled fp8 GEMMs (their scaling epilogue costs more)."""
    attention_scale: float = 1.0
    elementwise_scale: float = 1.0
    compile_elementwise_factor: float = 1.0
    """Memory-bound bytes left after torch.compile fuses elementwise ops (1 = no fusion)."""
    async_tp_overlap: float = 0.0
    """Fraction of TP collective time async TP hides behind the GEMMs."""
    overlap_contention: float = 0.0
    """Fraction of overlapped DP/FSDP collective time that still slows the step (SM and HBM
    contention between NCCL kernels and GEMMs)."""
    sharded_layer_overhead_s: float = 0.0
    """Extra time per layer and micro-batch when gradients/weights are sharded per layer (ZeRO-2/3,
    FSDP): the hooks that gather, free and reduce around every layer, and their stream waits."""
    frameworks: dict = field(default_factory=dict)
    """Framework name -> fitted Framework field overrides (efficiency facts only)."""
    provenance: dict = field(default_factory=dict)

    def framework(self, name: str, **overrides) -> Framework:
        """The named framework (autoplan.specs.frameworks) with its fitted efficiency values and
        per-run overrides (e.g. torch.compile on) merged over its documented facts."""
        return get_framework(name).with_overrides(**{**self.frameworks.get(name, {}), **overrides})

    def to_dict(self) -> dict:
        return {"matmul_scale": dict(self.matmul_scale), "fp8_matmul_scale": self.fp8_matmul_scale,
                "fp8_rowwise_scale": self.fp8_rowwise_scale,
                "attention_scale": self.attention_scale, "elementwise_scale": self.elementwise_scale,
                "compile_elementwise_factor": self.compile_elementwise_factor,
                "async_tp_overlap": self.async_tp_overlap,
                "sharded_layer_overhead_s": self.sharded_layer_overhead_s,
                "overlap_contention": self.overlap_contention,
                "frameworks": {k: dict(v) for k, v in self.frameworks.items()},
                "provenance": dict(self.provenance)}

    @classmethod
    def from_dict(cls, data: dict) -> "Constants":
        return cls(matmul_scale=dict(data.get("matmul_scale", {})),
                   fp8_matmul_scale=float(data.get("fp8_matmul_scale", 1.0)),
                   fp8_rowwise_scale=float(data.get("fp8_rowwise_scale", 1.0)),
                   attention_scale=float(data.get("attention_scale", 1.0)),
                   elementwise_scale=float(data.get("elementwise_scale", 1.0)),
                   compile_elementwise_factor=float(data.get("compile_elementwise_factor", 1.0)),
                   async_tp_overlap=float(data.get("async_tp_overlap", 0.0)),
                   sharded_layer_overhead_s=float(data.get("sharded_layer_overhead_s", 0.0)),
                   overlap_contention=float(data.get("overlap_contention", 0.0)),
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
