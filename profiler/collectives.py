"""Collective bandwidth: all-reduce, all-gather, reduce-scatter, all-to-all, send/recv.

Conventions follow nccl-tests (NVIDIA/nccl-tests, doc/PERFORMANCE.md):

- `message_bytes` S is the per-rank buffer nccl-tests sizes a run by: the tensor reduced
  (all-reduce), the gathered output (all-gather), the input before scattering (reduce-scatter),
  the send buffer (all-to-all) and the message sent to the next rank (send/recv).
- Algorithm bandwidth = S / t.
- Bus bandwidth = algorithm bandwidth x a factor that makes it comparable with the link speed,
  independent of the group size n: all-reduce 2(n-1)/n (a ring sends every byte twice, reduce-scatter
  then all-gather, each moving (n-1)/n of it), all-gather and reduce-scatter (n-1)/n, all-to-all
  (n-1)/n (each rank keeps 1/n of its data), send/recv 1.

Groups: inside a node, blocks of 2, 4, 8 consecutive local ranks (a TP group), all blocks running
at once as they do in training; across nodes, one rank per node (the local ranks of equal index form
concurrent groups, like DP replicas: each rank drives its own NIC share) and all ranks together
(a group that fills its nodes: a ring's bus bandwidth there is the node's whole NIC bandwidth; an
all-to-all's is one NIC share's, scaled by the off-node bytes, see build.py). Every sample records
its group's ranks_per_node, so the table says which bytes crossed a NIC.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist

from profiler.compute import TORCH_DTYPES, Bench
from profiler.sweeps import Sweep
from profiler.timing import sample_times_s

INTRA_NODE_GROUP_SIZES = (2, 4, 8)


def bus_bandwidth_factor(op: str, group_size: int) -> float:
    """nccl-tests' bus bandwidth / algorithm bandwidth for `op` over `group_size` ranks."""
    n = group_size
    if n < 1:
        raise ValueError(f"group size must be positive, got {n}")
    if op == "all_reduce":
        return 2.0 * (n - 1) / n
    if op in ("all_gather", "reduce_scatter", "all_to_all"):
        return (n - 1) / n
    if op == "send_recv":
        return 1.0
    raise ValueError(f"unknown collective {op!r}")


def algorithm_bandwidth_bytes_per_s(message_bytes: int, time_s: float) -> float:
    return message_bytes / time_s


@dataclass(frozen=True)
class GroupLayout:
    scope: str
    """"intra_node" or "inter_node" (the CollectiveSample scopes)."""
    group_size: int
    rank_lists: tuple
    """Global ranks of each concurrent group; every rank is in exactly one."""
    ranks_per_node: int
    """How many of a group's ranks share a node: the group fills its nodes when this is the node size."""


def group_layouts(world_size: int, local_world_size: int) -> list[GroupLayout]:
    """The groups measured, in an order every rank computes identically."""
    if world_size % local_world_size:
        raise ValueError(f"world size {world_size} is not a multiple of {local_world_size} ranks per node")
    num_nodes = world_size // local_world_size
    layouts = []
    sizes = [g for g in INTRA_NODE_GROUP_SIZES if g <= local_world_size and local_world_size % g == 0]
    if local_world_size > 1 and local_world_size not in sizes:
        sizes.append(local_world_size)
    for g in sizes:
        rank_lists = tuple(tuple(range(start, start + g)) for start in range(0, world_size, g))
        layouts.append(GroupLayout("intra_node", g, rank_lists, ranks_per_node=g))
    if num_nodes > 1:
        one_per_node = tuple(tuple(node * local_world_size + local for node in range(num_nodes))
                             for local in range(local_world_size))
        layouts.append(GroupLayout("inter_node", num_nodes, one_per_node, ranks_per_node=1))
        if local_world_size > 1:
            layouts.append(GroupLayout("inter_node", world_size, (tuple(range(world_size)),),
                                       ranks_per_node=local_world_size))
    return layouts


def _collective_fn(op: str, numel: int, dtype: torch.dtype, device: torch.device, group, ranks: tuple, rank: int):
    """A closure running one `op` on this rank's buffers; numel is divisible by the group size."""
    g = len(ranks)
    full = torch.zeros(numel, dtype=dtype, device=device)
    if op == "all_reduce":
        return lambda: dist.all_reduce(full, group=group)
    if op == "all_gather":
        shard = torch.zeros(numel // g, dtype=dtype, device=device)
        return lambda: dist.all_gather_into_tensor(full, shard, group=group)
    if op == "reduce_scatter":
        shard = torch.zeros(numel // g, dtype=dtype, device=device)
        return lambda: dist.reduce_scatter_tensor(shard, full, group=group)
    if op == "all_to_all":
        received = torch.zeros_like(full)
        return lambda: dist.all_to_all_single(received, full, group=group)
    if op == "send_recv":
        # A ring, as nccl-tests' sendrecv: send to the next rank, receive from the previous one.
        me = ranks.index(rank)
        received = torch.zeros_like(full)
        ops = [dist.P2POp(dist.isend, full, ranks[(me + 1) % g], group),
               dist.P2POp(dist.irecv, received, ranks[(me - 1) % g], group)]

        def send_recv():
            for request in dist.batch_isend_irecv(ops):
                request.wait()
        return send_recv
    raise ValueError(f"unknown collective {op!r}")


def measure_collectives(bench: Bench, sweep: Sweep, layouts: list[GroupLayout], ops: tuple) -> None:
    """Every rank runs every layout (its own group of each), op and message size."""
    if not layouts:
        return
    rank = dist.get_rank()
    dtype = TORCH_DTYPES[sweep.collective_dtype]
    for layout in layouts:
        group, _ = dist.new_subgroups_by_enumeration([list(r) for r in layout.rank_lists])
        ranks = next(r for r in layout.rank_lists if rank in r)
        flag = torch.zeros(1, dtype=torch.float64, device=bench.device)

        def agree(estimate_s: float) -> float:
            # The slowest rank's warm-up sets everyone's sample plan, so counts match.
            flag.fill_(estimate_s)
            dist.all_reduce(flag, op=dist.ReduceOp.MAX, group=group)
            return float(flag.item())

        def line_up() -> None:
            # A tiny all-reduce lines the ranks up before each timed sample (nccl-tests does too).
            dist.all_reduce(flag, group=group)

        for op in ops:
            for message_bytes in sweep.message_bytes:
                g = layout.group_size
                numel = max(g, message_bytes // dtype.itemsize // g * g)
                fn = _collective_fn(op, numel, dtype, bench.device, group, ranks, rank)
                samples, inner = sample_times_s(fn, bench.clock, sweep.collective_policy,
                                                before_sample=line_up, agree=agree)
                bench.recorder.add("collective", samples, inner, bytes_moved=numel * dtype.itemsize,
                                   bus_factor=bus_bandwidth_factor(op, g), op=op, scope=layout.scope,
                                   group_size=g, ranks_per_node=layout.ranks_per_node,
                                   message_bytes=numel * dtype.itemsize,
                                   dtype=sweep.collective_dtype)
                del fn
                bench.tick()


def num_collective_steps(sweep: Sweep, layouts: list[GroupLayout], ops: tuple) -> int:
    return len(layouts) * len(ops) * len(sweep.message_bytes)
