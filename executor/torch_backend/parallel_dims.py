"""ParallelDims: the one object that owns the degrees, checks them against the world and builds
the device mesh (torchtitan's pattern). Everyone else asks it for groups and ranks."""
from __future__ import annotations

from dataclasses import dataclass

from autoplan.specs import AutoplanError, ParallelPlan

MESH_DIMS = ("pp", "dp_replicate", "dp_shard", "cp", "tp")
"""Outermost to innermost: TP ranks are neighbours (same node, NVLink), PP ranks furthest apart. The
data-parallel ranks are dp_replicate x dp_shard (hybrid sharding: FSDP2 shards over dp_shard x cp and
replicates across dp_replicate; dp_replicate = 1 without it), flattened back into "dp" for the rest."""


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
    dp_replicate: int = 1
    """Copies of the sharded states across the data-parallel ranks (ParallelPlan.zero_replicas); the
    other dp / dp_replicate ranks, with the cp ranks, form each shard group."""

    def __post_init__(self) -> None:
        product = self.dp * self.tp * self.pp * self.cp
        if product != self.world_size:
            raise AutoplanError(
                f"dp*tp*pp*cp must equal the world size, got dp={self.dp} * tp={self.tp} * pp={self.pp} "
                f"* cp={self.cp} = {product}, world_size={self.world_size}; launch {product} processes "
                f"(--nproc {product} or torchrun --nproc-per-node) or use a plan for {self.world_size} GPUs")

    @classmethod
    def from_plan(cls, plan: ParallelPlan, world_size: int) -> "ParallelDims":
        return cls(dp=plan.dp, tp=plan.tp, pp=plan.pp, cp=plan.cp, world_size=world_size,
                   dp_replicate=plan.zero_replicas)

    def sizes(self) -> tuple[int, ...]:
        sizes = {"dp_replicate": self.dp_replicate, "dp_shard": self.dp // self.dp_replicate}
        return tuple(sizes[name] if name in sizes else getattr(self, name) for name in MESH_DIMS)

    def build_mesh(self, device_type: str):
        """A DeviceMesh named (pp, dp_replicate, dp_shard, cp, tp) with "dp" (dp_replicate x dp_shard),
        "dp_cp" (all the replicas a gradient is averaged over) and "dp_shard_cp" (a shard group)
        flattened onto it; dimensions of size 1 are kept so that code can always ask for mesh["tp"] and
        get a (possibly trivial) group. The ranks are laid out as (pp, dp, cp, tp) whatever the split."""
        from torch.distributed.device_mesh import init_device_mesh

        mesh = init_device_mesh(device_type, self.sizes(), mesh_dim_names=MESH_DIMS)
        mesh["dp_replicate", "dp_shard"]._flatten("dp")
        mesh["dp_replicate", "dp_shard", "cp"]._flatten("dp_cp")
        mesh["dp_shard", "cp"]._flatten("dp_shard_cp")
        return mesh

    def fsdp_mesh(self, mesh):
        """Where FSDP2 shards (a mesh from build_mesh): over every dp*cp rank, or with hybrid sharding
        the 2-D (dp_replicate, dp_shard x cp), across whose first dimension it all-reduces each
        reduce-scattered shard (HSDP)."""
        return mesh["dp_replicate", "dp_shard_cp"] if self.dp_replicate > 1 else mesh["dp_cp"]
