"""CostEstimate: the predicted step time and per-GPU memory of one plan, as breakdowns.

The totals are sums of the parts: `step_time_s == sum(time_breakdown_s.values())` and
`peak_memory_bytes == sum(memory_breakdown_bytes.values())`. The constructor checks it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field


@dataclass(frozen=True)
class CostEstimate:
    time_breakdown_s: dict
    """Exposed (non-overlapped) time per named term: compute, recompute, tp_comm, cp_comm, pp_comm,
    pp_bubble, dp_comm, optimizer, ... Each term says what it is in the cost model's docs."""
    memory_breakdown_bytes: dict
    """Bytes per GPU on the worst pipeline stage: params, grads, optimizer, activations, logits,
    comm_buffers, allocator_overhead, ..."""
    memory_capacity_bytes: int
    tokens_per_step: int
    num_gpus: int
    model_flops_per_step: float
    """Model FLOPs (no recompute): 6·N_active per token for the dense parts + attention scores/values."""
    hardware_flops_per_step: float
    """FLOPs actually executed, recompute included."""
    peak_flops_per_s: float
    """Dense peak per GPU for the dtype (the MFU denominator)."""
    cost_model: str = "analytical/1"
    notes: tuple = ()
    details: dict = field(default_factory=dict)
    """Free-form intermediate figures (e.g. bubble fraction, per-layer times) for reports and learning."""
    memory_headroom_bytes: int = 0
    """A safety margin the user keeps free (`--memory-headroom`): the plan fits when its peak is at
    most capacity - headroom. 0 by default: the peak already holds the CUDA context and allocator terms."""

    def __post_init__(self) -> None:
        for name, table in (("time_breakdown_s", self.time_breakdown_s), ("memory_breakdown_bytes", self.memory_breakdown_bytes)):
            for key, value in table.items():
                if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
                    raise ValueError(f"{name}[{key!r}] must be a finite non-negative number, got {value!r}")

    @property
    def step_time_s(self) -> float:
        return float(sum(self.time_breakdown_s.values()))

    @property
    def peak_memory_bytes(self) -> int:
        return int(sum(self.memory_breakdown_bytes.values()))

    @property
    def usable_memory_bytes(self) -> int:
        """What a plan may use: the capacity less the user's headroom."""
        return self.memory_capacity_bytes - self.memory_headroom_bytes

    @property
    def fits(self) -> bool:
        return self.peak_memory_bytes <= self.usable_memory_bytes

    @property
    def tokens_per_s(self) -> float:
        return self.tokens_per_step / self.step_time_s

    @property
    def tokens_per_s_per_gpu(self) -> float:
        return self.tokens_per_s / self.num_gpus

    @property
    def mfu(self) -> float:
        return self.model_flops_per_step / (self.step_time_s * self.num_gpus * self.peak_flops_per_s)

    @property
    def hfu(self) -> float:
        return self.hardware_flops_per_step / (self.step_time_s * self.num_gpus * self.peak_flops_per_s)

    def scaled_time(self, factor: float, cost_model: str) -> "CostEstimate":
        """The same estimate with every time term multiplied by `factor` (a learned correction)."""
        return CostEstimate(
            time_breakdown_s={k: v * factor for k, v in self.time_breakdown_s.items()},
            memory_breakdown_bytes=dict(self.memory_breakdown_bytes),
            memory_capacity_bytes=self.memory_capacity_bytes, tokens_per_step=self.tokens_per_step,
            num_gpus=self.num_gpus, model_flops_per_step=self.model_flops_per_step,
            hardware_flops_per_step=self.hardware_flops_per_step, peak_flops_per_s=self.peak_flops_per_s,
            cost_model=cost_model, notes=self.notes, details={**self.details, "correction_factor": factor},
            memory_headroom_bytes=self.memory_headroom_bytes)

    def scaled_memory(self, factor: float, keep: tuple, cost_model: str) -> "CostEstimate":
        """The same estimate with every memory term but those in `keep` multiplied by `factor` (a
        learned correction of the allocated peak); `details` gains the factor and the new allocated peak."""
        memory = {k: v if k in keep else v * factor for k, v in self.memory_breakdown_bytes.items()}
        allocated = sum(v for k, v in memory.items() if k not in keep)
        return CostEstimate(
            time_breakdown_s=dict(self.time_breakdown_s), memory_breakdown_bytes=memory,
            memory_capacity_bytes=self.memory_capacity_bytes, tokens_per_step=self.tokens_per_step,
            num_gpus=self.num_gpus, model_flops_per_step=self.model_flops_per_step,
            hardware_flops_per_step=self.hardware_flops_per_step, peak_flops_per_s=self.peak_flops_per_s,
            cost_model=cost_model, notes=self.notes,
            details={**self.details, "memory_correction_factor": factor, "memory_allocated_peak_bytes": allocated},
            memory_headroom_bytes=self.memory_headroom_bytes)

    def to_prediction(self) -> dict:
        """The plan file's `prediction` block."""
        return {
            "step_time_s": self.step_time_s,
            "tokens_per_s": self.tokens_per_s,
            "tokens_per_s_per_gpu": self.tokens_per_s_per_gpu,
            "mfu": self.mfu,
            "hfu": self.hfu,
            "peak_memory_bytes": self.peak_memory_bytes,
            "memory_capacity_bytes": self.memory_capacity_bytes,
            "memory_headroom_bytes": self.memory_headroom_bytes,
            "fits": self.fits,
            "time_breakdown_s": dict(self.time_breakdown_s),
            "memory_breakdown_bytes": {k: int(v) for k, v in self.memory_breakdown_bytes.items()},
            "cost_model": self.cost_model,
        }
