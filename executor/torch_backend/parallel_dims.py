"""ParallelDims: the one object that owns the degrees, checks them against the world and builds
the device mesh (torchtitan's pattern). Everyone else asks it for groups and ranks."""
from __future__ import annotations

from dataclasses import dataclass

from autoplan.specs import AutoplanError, ParallelPlan

MESH_DIMS = ("pp", "dp", "cp", "tp")
"""Outermost to innermost: TP ranks are neighbours (same node, NVLink), PP ranks furthest apart."""


@dataclass(frozen=True)
class ParallelDims:
    dp: int
    """Data-parallel replicas (FSDP shards over this dimension when zero_stage > 0)."""
    tp: int
    """Tensor-parallel degree."""
    pp: int
    """Pipeline stages (pipeline ranks; virtual stages are the schedule's business)."""
    cp: int
    """Context-parallel degree."""
    world_size: int

    def __post_init__(self) -> None:
        product = self.dp * self.tp * self.pp * self.cp
        if product != self.world_size:
            raise AutoplanError(
                f"dp*tp*pp*cp must equal the world size, got dp={self.dp} * tp={self.tp} * pp={self.pp} "
                f"* cp={self.cp} = {product}, world_size={self.world_size}; launch {product} processes "
                f"(--nproc {product} or torchrun --nproc-per-node) or use a plan for {self.world_size} GPUs")

    @classmethod
    def from_plan(cls, plan: ParallelPlan, world_size: int) -> "ParallelDims":
        return cls(dp=plan.dp, tp=plan.tp, pp=plan.pp, cp=plan.cp, world_size=world_size)

    def sizes(self) -> tuple[int, ...]:
        return tuple(getattr(self, name) for name in MESH_DIMS)

    def build_mesh(self, device_type: str):
        """A 4-D DeviceMesh named (pp, dp, cp, tp); dimensions of size 1 are kept so that code
        can always ask for mesh["tp"] and get a (possibly trivial) group."""
        from torch.distributed.device_mesh import init_device_mesh

        return init_device_mesh(device_type, self.sizes(), mesh_dim_names=MESH_DIMS)
