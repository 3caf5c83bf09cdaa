"""From raw samples to a HardwareProfile: medians per shape, headline figures, their sources.

The profile's tables hold the median of every sample of a shape over all processes; the raw
samples (every one, with rank and host) go to `<out>.samples.csv` next to the JSON. Both files are
written atomically and only once everything is measured, JSON last: an interrupted run leaves
nothing at the output path.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from autoplan.specs import (
    NIC_SHARE_OPS, AutoplanError, AttentionSample, CollectiveSample, HardwareProfile, MatmulSample, MemoryOpSample,
    write_json_atomic, write_text_atomic,
)
from autoplan.specs.gpus import GpuSheet

MATMUL_KEYS = ["m", "n", "k", "dtype"]
ATTENTION_KEYS = ["batch", "seq_len", "num_heads", "head_dim", "dtype", "pass"]
MEMORY_OP_KEYS = ["op", "num_bytes"]
COLLECTIVE_KEYS = ["op", "scope", "group_size", "message_bytes"]
DEFAULT_INTRA_LATENCY_S, DEFAULT_INTER_LATENCY_S = 5e-6, 10e-6


@dataclass(frozen=True)
class RunFacts:
    """What the run knows besides the samples."""
    name: str
    device_name: str
    device_kind: str
    """"gpu" or "cpu"."""
    gpus_per_node: int
    num_nodes: int
    capacity_source: str
    datasheet: GpuSheet | None
    environment: dict
    runtime_memory_bytes: int = 0
    """CPU: measured by profiler/runtime_memory.py (0 on GPUs, where it is not measured)."""
    runtime_source: str = ""


def samples_path(out: Path) -> Path:
    return out.with_name(out.name + ".samples.csv")


def medians(frame: pd.DataFrame, kind: str, keys: list[str], value: str) -> pd.DataFrame:
    """Median, p10 and p90 of `value` per shape over every sample of every process."""
    part = frame[frame["kind"] == kind]
    if part.empty:
        return pd.DataFrame(columns=[*keys, "median", "p10", "p90", "num_samples"])
    grouped = part.groupby(keys, sort=True)[value]
    table = pd.DataFrame({"median": grouped.median(), "p10": grouped.quantile(0.1),
                          "p90": grouped.quantile(0.9), "num_samples": grouped.size()})
    return table.reset_index()


def _ints(row, keys) -> dict:
    return {k: int(row[k]) for k in keys}


def _matmuls(frame):
    table = medians(frame, "matmul", MATMUL_KEYS, "flops_per_s")
    return tuple(MatmulSample(**_ints(r, ["m", "n", "k"]), dtype=r["dtype"], flops_per_s=float(r["median"]))
                 for _, r in table.iterrows())


def _attention(frame):
    table = medians(frame, "attention", ATTENTION_KEYS, "flops_per_s")
    return tuple(AttentionSample(**_ints(r, ATTENTION_KEYS[:4]), dtype=r["dtype"], pass_=r["pass"],
                                 flops_per_s=float(r["median"])) for _, r in table.iterrows())


def _memory_ops(frame):
    table = medians(frame, "memory_op", MEMORY_OP_KEYS, "bytes_per_s")
    return tuple(MemoryOpSample(op=r["op"], num_bytes=int(r["num_bytes"]), bytes_per_s=float(r["median"]))
                 for _, r in table.iterrows())


def _collectives(frame):
    """The median of each collective shape, with how many of the group's ranks shared a node where the
    samples say (every run since they did): the cost model reads an inter-node all-to-all's NIC bytes by it."""
    part = frame[frame["kind"] == "collective"] if "kind" in frame else frame
    keys = COLLECTIVE_KEYS + (["ranks_per_node"] if "ranks_per_node" in part and part["ranks_per_node"].notna().all()
                              else [])
    bus = medians(frame, "collective", keys, "bus_bandwidth_bytes_per_s")
    times = medians(frame, "collective", keys, "time_s")
    return tuple(CollectiveSample(op=r["op"], scope=r["scope"], group_size=int(r["group_size"]),
                                  message_bytes=int(r["message_bytes"]),
                                  bus_bandwidth_bytes_per_s=float(r["median"]), time_s=float(t["median"]),
                                  ranks_per_node=int(r.get("ranks_per_node", 0) or 0))
                 for (_, r), (_, t) in zip(bus.iterrows(), times.iterrows()))


def _split_inter_node(frame: pd.DataFrame, gpus_per_node: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(samples for the profile's tables, one-rank-per-node inter-node samples).

    A ring's inter-node rows stay in the table only for groups that fill their nodes, whose bus
    bandwidth is the node's whole NIC bandwidth: the convention the cost model reads rings by (a group
    with fewer ranks per node gets that fraction). An all-to-all's or a send's rows stay at every
    ranks_per_node, which each row records: the cost model reads them as the NIC share the off-node
    bytes crossed (cost_model/tables.py nic_share_bytes_per_s), the same for one rank per node as for
    a full node. One-rank-per-node groups also give `inter_node_bandwidth_bytes_per_s` (one GPU's NIC
    share), and every row stays in the samples CSV.
    """
    if "ranks_per_node" not in frame:
        return frame, frame.iloc[0:0]
    inter = (frame["kind"] == "collective") & (frame["scope"] == "inter_node")
    one_per_node = inter & (frame["ranks_per_node"] == 1)
    partial = inter & (frame["ranks_per_node"] != gpus_per_node) & ~frame["op"].isin(NIC_SHARE_OPS)
    return frame[~partial], frame[one_per_node]


def _best_link(collectives, scope: str, group_size_pick) -> tuple[float, float, str] | None:
    """(bus bandwidth, small-message latency, note) of a scope's measured collectives, or None.

    Bandwidth: the best all-reduce bus bandwidth over message sizes (the link-bound regime, nccl-tests'
    headline). Latency: the fastest op's median time at the smallest message, where nothing is left
    to move; an upper bound on one hop (gloo's send/recv is far slower there than its all-reduce).
    """
    rows = [c for c in collectives if c.scope == scope]
    if not rows:
        return None
    group_size = group_size_pick({c.group_size for c in rows})
    rows = [c for c in rows if c.group_size == group_size]
    best = max((c for c in rows if c.op == "all_reduce"), key=lambda c: c.bus_bandwidth_bytes_per_s)
    smallest_bytes = min(c.message_bytes for c in rows)
    fastest = min((c for c in rows if c.message_bytes == smallest_bytes), key=lambda c: c.time_s)
    note = (f"measured: best all_reduce bus bandwidth over {group_size} ranks ({scope}, at {best.message_bytes} B); "
            f"latency = median time of {fastest.op} at {smallest_bytes} B, the fastest op at the smallest size")
    return best.bus_bandwidth_bytes_per_s, fastest.time_s, note


def build_profile(frame: pd.DataFrame, facts: RunFacts, raw_samples_name: str) -> HardwareProfile:
    matmul, attention = _matmuls(frame), _attention(frame)
    table_frame, one_per_node_frame = _split_inter_node(frame, facts.gpus_per_node)
    memory_ops, collectives = _memory_ops(frame), _collectives(table_frame)
    sheet = facts.datasheet
    sources = {"memory_capacity_bytes": facts.capacity_source + "; the smallest over all processes"}
    if sheet is not None:
        peaks = dict(sheet.peak_flops_per_s)
        sources["peak_flops_per_s"] = f"datasheet ({sheet.key}): {sheet.source}"
    else:
        peaks = {}
        for s in matmul:
            peaks[s.dtype] = max(peaks.get(s.dtype, 0.0), s.flops_per_s)
        sources["peak_flops_per_s"] = ("measured: best median matmul throughput per dtype (device not in "
                                       "the datasheet table, so MFU against it reads high)")
    if not memory_ops or not matmul:
        skipped = facts.environment.get("skipped_shapes", [])
        raise AutoplanError(f"no {'matmul' if not matmul else 'memory-bound op'} shape could run on "
                            f"{facts.device_name!r} ({len(skipped)} skipped, first: {skipped[:1]}); "
                            f"free device memory and profile again")
    largest = max(s.num_bytes for s in memory_ops)
    memory_bandwidth = max(s.bytes_per_s for s in memory_ops if s.num_bytes == largest)
    sources["memory_bandwidth_bytes_per_s"] = (f"measured: best median of the memory-bound ops "
                                               f"(bytes read + written) at {largest} B per operand")
    capacity = int(frame.loc[frame["kind"] == "capacity", "num_bytes"].min())

    intra = _best_link(collectives, "intra_node", max)
    inter = _best_link(_collectives(one_per_node_frame), "inter_node", min)
    if intra is not None:
        intra_bw, intra_latency, sources["intra_node_bandwidth_bytes_per_s"] = intra
    elif sheet is not None:
        intra_bw, intra_latency = sheet.nvlink_bytes_per_s, None
        sources["intra_node_bandwidth_bytes_per_s"] = f"datasheet ({sheet.key}), one process: not measured"
    else:
        intra_bw, intra_latency = memory_bandwidth, None
        sources["intra_node_bandwidth_bytes_per_s"] = ("one process, no link measured: set to the measured "
                                                       "memory bandwidth (a copy inside one device)")
    if inter is not None:
        inter_bw, inter_latency, sources["inter_node_bandwidth_bytes_per_s"] = inter
    elif sheet is not None:
        inter_bw, inter_latency = sheet.nic_bytes_per_s, None
        sources["inter_node_bandwidth_bytes_per_s"] = (f"datasheet ({sheet.key}) NIC share of the reference "
                                                       "node; one node, not measured")
    else:
        inter_bw, inter_latency = intra_bw, None
        sources["inter_node_bandwidth_bytes_per_s"] = ("one node, not measured: set to the intra-node figure "
                                                       "(optimistic; profile across nodes with torchrun)")
    if facts.runtime_source:
        sources["runtime_memory_bytes"] = facts.runtime_source
    if intra_latency is None:
        sources["intra_node_latency_s"] = "default, not measured"
    if inter_latency is None:
        sources["inter_node_latency_s"] = "default, not measured"
    return HardwareProfile(
        name=facts.name, device_name=facts.device_name, gpus_per_node=facts.gpus_per_node,
        memory_capacity_bytes=capacity, memory_bandwidth_bytes_per_s=float(memory_bandwidth),
        peak_flops_per_s=peaks, intra_node_bandwidth_bytes_per_s=float(intra_bw),
        inter_node_bandwidth_bytes_per_s=float(inter_bw),
        intra_node_latency_s=float(intra_latency or DEFAULT_INTRA_LATENCY_S),
        inter_node_latency_s=float(inter_latency or DEFAULT_INTER_LATENCY_S),
        num_nodes=facts.num_nodes, device_kind=facts.device_kind, measured=True,
        runtime_memory_bytes=int(facts.runtime_memory_bytes),
        matmul=matmul, attention=attention, memory_ops=memory_ops, collectives=collectives,
        environment=facts.environment, sources=sources, raw_samples=raw_samples_name,
    )


def write_profile(profile: HardwareProfile, frame: pd.DataFrame, out: Path) -> None:
    """Samples CSV first, then the JSON: the profile never names a CSV that is not there."""
    write_text_atomic(samples_path(out), frame.to_csv(index=False))
    write_json_atomic(out, profile.to_dict())
