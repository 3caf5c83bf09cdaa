"""HardwareProfile: what one GPU type (or a measured cluster) can do, as tables the cost model reads.

A profile is either built in (datasheet peaks with cited achievable efficiencies) or measured by
`profiler/`. Both use the same tables, so the cost model has one path: interpolate the tables.
Sizes are base-2 where they are capacities (GiB), bandwidths base-10 (GB/s) in every report.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

from autoplan.specs.choices import COLLECTIVE_OPS, MEMORY_OPS, SCOPES
from autoplan.specs.errors import SchemaError
from autoplan.specs.jsonio import check_schema, read_json, require
from autoplan.specs.schemas import validate_profile
from autoplan.specs.validation import Issues

PROFILE_SCHEMA = "autoplan.profile/v1"


@dataclass(frozen=True)
class MatmulSample:
    """Achieved throughput of C[m,n] = A[m,k] @ B[k,n] (2*m*n*k FLOPs) at one shape and dtype."""
    m: int
    n: int
    k: int
    dtype: str
    flops_per_s: float


@dataclass(frozen=True)
class AttentionSample:
    """Achieved throughput of causal scaled-dot-product attention.

    FLOPs counted as the forward's 4*b*s*s*heads*head_dim (QK^T and AV), halved for causal;
    backward is measured separately (`pass_` = "bwd", 2.5x the forward FLOPs).
    """
    batch: int
    seq_len: int
    num_heads: int
    head_dim: int
    dtype: str
    pass_: str
    flops_per_s: float
    kernel: str = "sdpa"
    """Which kernel ran (autoplan.specs.choices.ATTENTION_KERNELS); a measured profile's is "sdpa"."""


@dataclass(frozen=True)
class MemoryOpSample:
    """Achieved bandwidth of a memory-bound op (bytes read + written per second)."""
    op: str
    num_bytes: int
    bytes_per_s: float


@dataclass(frozen=True)
class CollectiveSample:
    """Median bus bandwidth of one collective at one message size, group size and scope.

    Bus bandwidth follows nccl-tests: all-reduce alg*2(n-1)/n, all-gather/reduce-scatter
    alg*(n-1)/n, all-to-all alg*(n-1)/n, send/recv alg.
    """
    op: str
    scope: str
    group_size: int
    message_bytes: int
    bus_bandwidth_bytes_per_s: float
    time_s: float = 0.0
    ranks_per_node: int = 0
    """How many of the group's ranks shared a node: the group size inside a node; across nodes, the
    node size for a group that fills its nodes, 1 for one rank per node. It says which bytes crossed a
    NIC: an all-to-all sends (n - ranks_per_node)/n of its buffer off the node. 0: not recorded (profiles
    written before the field), read as a group that fills its nodes, the only inter-node rows they kept."""


@dataclass(frozen=True)
class HardwareProfile:
    name: str
    device_name: str
    gpus_per_node: int
    memory_capacity_bytes: int
    """Allocatable device memory per GPU."""
    memory_bandwidth_bytes_per_s: float
    """Achievable HBM bandwidth per GPU (the memory-bound ops' ceiling)."""
    peak_flops_per_s: dict
    """Dense datasheet peak per dtype ("bf16", "fp16", "fp8", "fp32"); the MFU denominator."""
    intra_node_bandwidth_bytes_per_s: float
    """Per-GPU unidirectional link bandwidth inside a node (NVLink), nominal."""
    inter_node_bandwidth_bytes_per_s: float
    """Per-GPU unidirectional bandwidth across nodes (NIC share), nominal."""
    intra_node_latency_s: float = 5e-6
    inter_node_latency_s: float = 10e-6
    num_nodes: int = 1
    device_kind: str = "gpu"
    measured: bool = False
    runtime_memory_bytes: int = 0
    """CPU profiles: what a training process holds beyond its tensors after its first step (lazily
    imported modules, gloo and allocator buffers), measured by profiler/runtime_memory.py; 0 where
    not measured (GPU profiles: the framework's `runtime_bytes` stands for it)."""
    matmul: tuple = ()
    attention: tuple = ()
    memory_ops: tuple = ()
    collectives: tuple = ()
    environment: dict = field(default_factory=dict)
    sources: dict = field(default_factory=dict)
    """What each number rests on: field name -> citation or measurement note."""
    raw_samples: str = ""
    """Path of the raw samples CSV written next to a measured profile (relative to the JSON)."""
    schema: str = PROFILE_SCHEMA

    def peak(self, dtype: str) -> float:
        if dtype in self.peak_flops_per_s:
            return float(self.peak_flops_per_s[dtype])
        if dtype == "fp8" and "bf16" in self.peak_flops_per_s:
            return float(self.peak_flops_per_s["bf16"])
        raise SchemaError(f"profile {self.name!r} has no peak for dtype {dtype!r}; it knows {sorted(self.peak_flops_per_s)}")

    def to_dict(self) -> dict:
        d = asdict(self)
        d["attention"] = [{**{k: v for k, v in a.items() if k != "pass_"}, "pass": a["pass_"]}
                          for a in d["attention"]]
        return d

    @classmethod
    def load(cls, path) -> "HardwareProfile":
        """The one reader of a profile file: every command that takes one gets the same answer."""
        return cls.from_dict(read_json(path, "hardware profile"), f"hardware profile {str(path)!r}")

    @classmethod
    def from_dict(cls, data: dict, what: str = "hardware profile") -> "HardwareProfile":
        check_schema(data, PROFILE_SCHEMA, what)
        issues = Issues(what)
        validate_profile(data, issues)  # every figure positive and finite, tables well formed
        issues.raise_if_any()
        peaks = require(data, "peak_flops_per_s", dict, what)
        try:
            matmul = tuple(MatmulSample(**s) for s in data.get("matmul", []))
            attention = tuple(AttentionSample(pass_=s["pass"], **{k: v for k, v in s.items() if k != "pass"})
                              for s in data.get("attention", []))
            memory_ops = tuple(MemoryOpSample(**s) for s in data.get("memory_ops", []))
            collectives = tuple(CollectiveSample(**s) for s in data.get("collectives", []))
        except (TypeError, KeyError) as exc:
            raise SchemaError(f"{what} has a malformed sample table: {exc}") from None
        for c in collectives:
            if c.op not in COLLECTIVE_OPS or c.scope not in SCOPES:
                raise SchemaError(f"{what} has a collective sample with op={c.op!r} scope={c.scope!r}; "
                                  f"ops are {COLLECTIVE_OPS}, scopes {SCOPES}")
        profile = cls(
            name=require(data, "name", str, what),
            device_name=require(data, "device_name", str, what),
            gpus_per_node=require(data, "gpus_per_node", int, what),
            memory_capacity_bytes=require(data, "memory_capacity_bytes", int, what),
            memory_bandwidth_bytes_per_s=require(data, "memory_bandwidth_bytes_per_s", float, what),
            peak_flops_per_s={str(k): float(v) for k, v in peaks.items()},
            intra_node_bandwidth_bytes_per_s=require(data, "intra_node_bandwidth_bytes_per_s", float, what),
            inter_node_bandwidth_bytes_per_s=require(data, "inter_node_bandwidth_bytes_per_s", float, what),
            intra_node_latency_s=float(data.get("intra_node_latency_s", 5e-6)),
            inter_node_latency_s=float(data.get("inter_node_latency_s", 10e-6)),
            num_nodes=int(data.get("num_nodes", 1)),
            device_kind=str(data.get("device_kind", "gpu")),
            measured=bool(data.get("measured", False)),
            runtime_memory_bytes=int(data.get("runtime_memory_bytes", 0)),
            matmul=matmul, attention=attention, memory_ops=memory_ops, collectives=collectives,
            environment=dict(data.get("environment", {})),
            sources=dict(data.get("sources", {})),
            raw_samples=str(data.get("raw_samples", "")),
        )
        if profile.memory_capacity_bytes <= 0 or profile.memory_bandwidth_bytes_per_s <= 0:
            raise SchemaError(f"{what} {profile.name!r}: memory capacity and bandwidth must be positive")
        return profile
