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
    pp_scatter_gather: bool = True
    """Pipeline sends split over the TP ranks (b*s*h/t each, Narayanan 2021 sec. 4.1), or each
    TP rank sends the whole b*s*h activation (DeepSpeed's pipeline engine)."""
    selective_recompute: str = "attention"
    """What `recompute="selective"` means: "attention" (Megatron: the attention core) or "ops"
    (torchtitan: save every other matmul output and the attention output, recompute the rest)."""
    fused_cross_entropy: bool = True
    """Megatron's vocab-parallel cross-entropy works in place on the fp32 logits; an unfused one
    (PyTorch F.cross_entropy) also materializes their fp32 gradient (10 B per logit, not 6)."""
    fp8_rowwise: bool = False
    """fp8 GEMMs with per-row scales (torchao "rowwise") instead of one scale per tensor."""
    layer_overhead_s: float = 0.0
    """Host-side time per layer and micro-batch (forward + backward) the GPU waits for: Python
    dispatch and kernel launches. Exposed when the layer's GPU work is short."""
    microbatch_overhead_s: float = 0.0
    """Host time per micro-batch of a pipeline engine (schedule dispatch, blocking sends)."""
    dp_bandwidth_scale: float = 1.0
    """Fraction of the profile's bus bandwidth the framework's DP/ZeRO collectives reach."""


# What each framework is known to do (facts, not fitted): whether attention is fused/flash, how
# the data-parallel gradients travel. Fitted overlap/overhead values are merged over these.
FRAMEWORK_FACTS = {
    "megatron-core": {},
    # Megatron-LM of 2021 (Narayanan et al.): unfused softmax attention, DP all-reduce after the
    # pipeline flush (no overlap with backward).
    "megatron-2021": {"flash_attention": False, "dp_comm_overlap": 0.0},
    # Megatron-DeepSpeed as BigScience ran it in 2022 (fused softmax, no flash attention).
    # Its pipeline engine sends whole activations from every TP rank (no scatter/gather).
    "megatron-deepspeed": {"flash_attention": False, "pp_scatter_gather": False},
    # DeepSpeed ZeRO-3 baseline of Narayanan 2021 Table 2 (no flash attention in 2021).
    "deepspeed": {"flash_attention": False},
    # MosaicML llm-foundry: FSDP (composer) + flash attention.
    "llm-foundry": {},
    # torchtitan: FSDP2 + SDPA flash attention, optional torch.compile and async TP; its
    # selective activation checkpointing is per op (torchtitan activation_checkpoint "op" mode).
    "torchtitan": {"selective_recompute": "ops", "fused_cross_entropy": False},
}


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
    """Framework name -> fitted SoftwareStack field overrides."""
    provenance: dict = field(default_factory=dict)

    def software(self, name: str = "megatron-core", **overrides) -> SoftwareStack:
        """The SoftwareStack of a named framework, with per-run overrides (e.g. compile on)."""
        if name not in FRAMEWORK_FACTS:
            raise AutoplanError(f"unknown framework {name!r}; known: {', '.join(FRAMEWORK_FACTS)}")
        fitted = self.frameworks.get(name, {})
        return replace(SoftwareStack(name=name), **{**FRAMEWORK_FACTS[name], **fitted, **overrides})

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
