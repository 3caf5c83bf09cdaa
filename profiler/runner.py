"""One profiling process: measure this device, join the collectives, and (rank 0) write the profile.

Every rank measures its own device and takes part in every collective; the raw samples of all
ranks are gathered on rank 0, which builds the HardwareProfile and writes it once, at the end.
"""
from __future__ import annotations

import os
import socket
import sys
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import torch
import torch.distributed as dist

from autoplan.specs import COLLECTIVE_OPS, HardwareProfile
from profiler.build import RunFacts, build_profile, samples_path, write_profile
from profiler.collectives import group_layouts, measure_collectives, num_collective_steps
from profiler.compute import (
    Bench, measure_attention, measure_capacity_bytes, measure_matmuls, measure_memory_ops, runnable_dtypes,
)
from autoplan.specs.gpus import lookup_gpu
from profiler.environment import environment_stamp, process_stamp
from profiler.report import format_report
from profiler.sweeps import MEMORY_OPS, sweep_for
from profiler.timing import Clock, Recorder

MEMORY_HEADROOM = 0.85
"""Shapes must fit in this share of the allocatable memory (the allocator needs slack)."""


@dataclass(frozen=True)
class ProfileRequest:
    out: Path
    device_type: str
    """"cuda" or "cpu" (resolved from --device auto before launch)."""
    quick: bool = False
    name: str = ""


@dataclass(frozen=True)
class RankInfo:
    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    distributed: bool
    """Whether a process group is up (False for a single in-process run)."""


def _device(request: ProfileRequest, info: RankInfo) -> torch.device:
    if request.device_type == "cuda":
        torch.cuda.set_device(info.local_rank)
        return torch.device("cuda", info.local_rank)
    # One CPU "device" per process: an equal share of the cores, so processes do not contend.
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // info.local_world_size))
    return torch.device("cpu")


def _progress(total: int, enabled: bool):
    from tqdm import tqdm

    return tqdm(total=total, file=sys.stderr, disable=not enabled, unit="shape", desc="profile",
                dynamic_ncols=True, leave=False)


def _gather(obj, info: RankInfo) -> list:
    if not info.distributed:
        return [obj]
    gathered = [None] * info.world_size if info.rank == 0 else None
    dist.gather_object(obj, gathered, dst=0)
    return gathered


def run_rank(request: ProfileRequest, info: RankInfo) -> HardwareProfile | None:
    """Measure on this process; rank 0 returns the written profile, the others None."""
    device = _device(request, info)
    recorder = Recorder(info.rank, socket.gethostname())
    capacity_bytes, capacity_source = measure_capacity_bytes(device, info.local_world_size)
    recorder.rows.append({"rank": info.rank, "host": recorder.host, "kind": "capacity", "num_bytes": capacity_bytes})

    sweep = sweep_for(device.type, request.quick)
    matmul_dtypes = runnable_dtypes(device, sweep.matmul_dtypes)
    attention_dtypes = runnable_dtypes(device, sweep.attention_dtypes)
    layouts = group_layouts(info.world_size, info.local_world_size) if info.distributed else []
    total = (len(sweep.matmul_shapes) * len(matmul_dtypes) + 2 * len(sweep.attention_shapes) * len(attention_dtypes)
             + len(sweep.memory_op_bytes) * len(MEMORY_OPS) + num_collective_steps(sweep, layouts, COLLECTIVE_OPS))
    with _progress(total, enabled=info.rank == 0) as bar:
        bench = Bench(device=device, clock=Clock(device.type), recorder=recorder, tick=lambda: bar.update(1),
                      memory_limit_bytes=int(MEMORY_HEADROOM * capacity_bytes))
        bar.set_description("matmul")
        measure_matmuls(bench, sweep, matmul_dtypes)
        bar.set_description("attention")
        measure_attention(bench, sweep, attention_dtypes)
        bar.set_description("memory ops")
        measure_memory_ops(bench, sweep, MEMORY_OPS)
        bar.set_description("collectives")
        measure_collectives(bench, sweep, layouts, COLLECTIVE_OPS)

    stamps = _gather(process_stamp(device), info)
    all_rows = _gather(recorder.rows, info)
    skipped = _gather(bench.skipped, info)
    if info.rank != 0:
        return None
    frame = pd.DataFrame([row for rows in all_rows for row in rows])
    num_nodes = info.world_size // info.local_world_size
    environment = environment_stamp(device, dist.get_backend() if info.distributed else "none",
                                    info.world_size, num_nodes, request.quick, stamps)
    environment["skipped_shapes"] = sorted({s for per_rank in skipped for s in per_rank})
    environment["matmul_dtypes"] = matmul_dtypes
    name_of_device = stamps[0]["device_name"]
    facts = RunFacts(
        name=request.name or f"{stamps[0]['hostname']}-{device.type}x{info.world_size}",
        device_name=name_of_device, device_kind="gpu" if device.type == "cuda" else "cpu",
        gpus_per_node=info.local_world_size, num_nodes=num_nodes, capacity_source=capacity_source,
        datasheet=lookup_gpu(name_of_device) if device.type == "cuda" else None,
        environment=environment,
    )
    profile = build_profile(frame, facts, samples_path(request.out).name)
    write_profile(profile, frame, request.out)
    print(format_report(profile, frame, request.out), flush=True)
    return profile
