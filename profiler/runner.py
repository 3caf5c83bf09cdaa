"""One profiling process: measure this device, join the collectives, and (rank 0) write the profile.

Every rank measures its own device and takes part in every collective; the raw samples of all
ranks are gathered on rank 0, which builds the HardwareProfile and writes it once, at the end.
"""
from __future__ import annotations

import dataclasses
import os
import socket
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import torch
import torch.distributed as dist

from autoplan.specs import COLLECTIVE_OPS, HardwareProfile
from autoplan.specs.host_process import cpu_wait_s, wait_share
from profiler.build import RunFacts, build_profile, samples_path, write_profile
from profiler.collectives import group_layouts, measure_collectives, num_collective_steps
from profiler.compute import Bench, measure_capacity_bytes, measure_device, runnable_dtypes, soak
from profiler.device_state import device_state
from autoplan.specs.gpus import lookup_gpu
from profiler.environment import environment_stamp, process_stamp
from profiler.report import format_report
from profiler.runtime_memory import measure_cpu_runtime_bytes, runtime_source
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
    # First, before the sweeps grow the heap: what a CPU training process holds beyond its tensors.
    runtime = measure_cpu_runtime_bytes(info.distributed) if device.type == "cpu" else None
    recorder = Recorder(info.rank, socket.gethostname())
    capacity_bytes, capacity_source = measure_capacity_bytes(device, info.local_world_size)
    recorder.rows.append({"rank": info.rank, "host": recorder.host, "kind": "capacity", "num_bytes": capacity_bytes})

    sweep = sweep_for(device.type, request.quick)
    matmul_dtypes = runnable_dtypes(device, sweep.matmul_dtypes)
    attention_dtypes = runnable_dtypes(device, sweep.attention_dtypes)
    layouts = group_layouts(info.world_size, info.local_world_size) if info.distributed else []
    per_pass = (len(sweep.matmul_shapes) * len(matmul_dtypes) + 2 * len(sweep.attention_shapes) * len(attention_dtypes)
                + len(sweep.memory_op_bytes) * len(MEMORY_OPS))
    total = sweep.num_passes * per_pass + num_collective_steps(sweep, layouts, COLLECTIVE_OPS)
    # The device's state before anything runs, after the soak, and after the last measurement.
    states = {"before": device_state(device.type)}
    wait0_s, start_s = cpu_wait_s(), time.perf_counter()  # how long other processes held the CPU
    with _progress(total, enabled=info.rank == 0) as bar:
        bench = Bench(device=device, clock=Clock(device.type), recorder=recorder, tick=lambda: bar.update(1),
                      memory_limit_bytes=int(MEMORY_HEADROOM * capacity_bytes))
        if sweep.soak_s > 0:
            bar.set_description(f"soak {sweep.soak_s:g} s")
            soak(device, sweep.soak_s)
            states["after_soak"] = device_state(device.type)
        bar.set_description(f"compute, {sweep.num_passes} passes")
        measure_device(bench, sweep, matmul_dtypes, attention_dtypes, MEMORY_OPS)
        bar.set_description("collectives")
        measure_collectives(bench, sweep, layouts, COLLECTIVE_OPS)
    states["after"] = device_state(device.type)
    wall_s = time.perf_counter() - start_s
    contention = wait_share([None if wait0_s is None else cpu_wait_s() - wait0_s], [wall_s])

    stamps = _gather({**process_stamp(device), "device_state": states}, info)
    all_rows = _gather(recorder.rows, info)
    skipped = _gather(bench.skipped, info)
    runtimes = _gather(runtime, info)
    contentions = _gather(contention, info)
    if info.rank != 0:
        return None
    frame = pd.DataFrame([row for rows in all_rows for row in rows])
    num_nodes = info.world_size // info.local_world_size
    environment = environment_stamp(device, dist.get_backend() if info.distributed else "none",
                                    info.world_size, num_nodes, request.quick, stamps)
    environment["skipped_shapes"] = sorted({s for per_rank in skipped for s in per_rank})
    # One state record per host (nvidia-smi lists every GPU of its host; the CPU is the host's).
    environment["device_state"] = {p["hostname"]: p["device_state"] for p in reversed(stamps)}
    environment["sweep"] = {"num_passes": sweep.num_passes, "soak_s": sweep.soak_s,
                            "compute_policy": dataclasses.asdict(sweep.compute_policy),
                            "matmul_drift": pass_drift(frame)}
    environment["matmul_dtypes"] = matmul_dtypes
    if device.type == "cpu" and None not in contentions:
        # The most contended process: its timings are the ones a shared CPU slowed most.
        environment["cpu_wait_share"] = max(contentions)
    name_of_device = stamps[0]["device_name"]
    facts = RunFacts(
        name=request.name or f"{stamps[0]['hostname']}-{device.type}x{info.world_size}",
        device_name=name_of_device, device_kind="gpu" if device.type == "cuda" else "cpu",
        gpus_per_node=info.local_world_size, num_nodes=num_nodes, capacity_source=capacity_source,
        datasheet=lookup_gpu(name_of_device) if device.type == "cuda" else None,
        environment=environment,
        runtime_memory_bytes=max(r[0] for r in runtimes) if runtime is not None else 0,
        runtime_source=runtime_source(runtimes) if runtime is not None else "",
    )
    profile = build_profile(frame, facts, samples_path(request.out).name)
    write_profile(profile, frame, request.out)
    print(format_report(profile, frame, request.out), flush=True)
    return profile


def pass_drift(frame: pd.DataFrame) -> float | None:
    """Median over matmul shapes of (median throughput in the last pass) / (in the first pass) - 1:
    how much slower (negative) the device ran late in the sweep than early. None without passes."""
    part = frame[frame["kind"] == "matmul"] if "sweep_pass" in frame else frame.iloc[0:0]
    if part.empty or part["sweep_pass"].nunique() < 2:
        return None
    first, last = part["sweep_pass"].min(), part["sweep_pass"].max()
    by_pass = part.groupby(["rank", "m", "n", "k", "dtype", "sweep_pass"])["flops_per_s"].median().unstack()
    return float((by_pass[last] / by_pass[first]).median() - 1.0)
