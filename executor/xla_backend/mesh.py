"""The device mesh of an SPMD run: one object owns the degrees, checks them, and builds the mesh.

Axes are ("dp", "cp", "tp") in that order, always all three (a degree of 1 is an axis of size 1,
which XLA treats as replication). tp is the innermost axis so a tensor-parallel group is made of
neighbouring devices, as Megatron places TP inside a node; dp is the outermost.
"""
from __future__ import annotations

from dataclasses import dataclass

from autoplan.specs import AutoplanError, ParallelPlan

AXES = ("dp", "cp", "tp")


@dataclass(frozen=True)
class MeshShape:
    dp: int
    """Data-parallel replicas: the batch dimension is split over this axis (and ZeRO shards over it)."""
    cp: int
    """Sequence split of the activations (context parallelism as a sharding, not ring attention)."""
    tp: int
    """Tensor-parallel degree: Megatron column/row splits of the weight matrices."""

    @classmethod
    def from_plan(cls, plan: ParallelPlan) -> "MeshShape":
        return cls(dp=plan.dp, cp=plan.cp, tp=plan.tp)

    @property
    def num_devices(self) -> int:
        return self.dp * self.cp * self.tp

    def build(self, num_devices: int):
        """The torch_xla `Mesh` over all `num_devices` runtime devices (SPMD needs all of them)."""
        if num_devices != self.num_devices:
            raise AutoplanError(
                f"the plan needs dp*cp*tp = {self.dp}*{self.cp}*{self.tp} = {self.num_devices} XLA devices, "
                f"the runtime has {num_devices}; on CPU the backend sets CPU_NUM_DEVICES to the plan's "
                f"GPU count, elsewhere run the plan on a slice of that size")
        import numpy as np
        import torch_xla.distributed.spmd as xs

        return xs.Mesh(np.arange(num_devices), (self.dp, self.cp, self.tp), AXES)
