"""Read a HardwareProfile's sample tables: achieved throughput at any shape, size or group.

A built-in profile has dense grids; a measured one may have only a handful of points. Both go
through the same lookups here, so the estimator never asks where a number came from:

- 1-D tables (memory ops over bytes, collectives over message size): piecewise-linear in log(size),
  flat beyond the measured range (a bandwidth neither grows nor collapses past the last point).
- Matmul and attention: inverse-distance weighting in log-shape space over the nearest samples.
  It needs no grid, reproduces a sample exactly at its own shape, and stays inside the measured
  range of values (no wild extrapolation from two points).

Every lookup is cached per shape (`functools.lru_cache`): the search asks for the same few
shapes tens of thousands of times.
"""
from __future__ import annotations

import bisect
import math
from functools import lru_cache

from autoplan.specs import NIC_SHARE_OPS, AutoplanError, HardwareProfile
from autoplan.specs.choices import ATTENTION_KERNEL_STAND_IN
from cost_model.profiles import nccl_inter_node_latency_s

# Bus-bandwidth factor per collective (nccl-tests PERFORMANCE.md): bytes each rank moves per byte
# of buffer, as a function of the group size n.
BUS_FACTOR = {
    "all_reduce": lambda n: 2.0 * (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "all_to_all": lambda n: (n - 1) / n,
    "send_recv": lambda n: 1.0,
}
_IDW_NEIGHBOURS = 4


def nic_share_bytes_per_s(sample, gpus_per_node: int) -> float:
    """The bytes per second one GPU's traffic left its node at, in an inter-node all-to-all or send/recv
    sample: an all-to-all of n ranks, r on each node, sends (n - r)/n of the buffer off the node, and its
    bus bandwidth counts (n - 1)/n (nccl-tests); a send/recv's bus bandwidth is its pair's already."""
    if sample.op != "all_to_all":
        return sample.bus_bandwidth_bytes_per_s
    n, r = sample.group_size, min(sample.ranks_per_node or gpus_per_node, sample.group_size - 1)
    return sample.bus_bandwidth_bytes_per_s * (n - r) / (n - 1)


def _log_segment(xs: list, x: float) -> tuple:
    """(i, w): x lies between xs[i-1] and xs[i] at fraction w of the way in log(x); w is 0 or 1 at
    or beyond the ends (flat outside [xs[0], xs[-1]])."""
    if x <= xs[0]:
        return 1, 0.0
    if x >= xs[-1]:
        return len(xs) - 1, 1.0
    i = bisect.bisect_right(xs, x)
    x0, x1 = math.log(xs[i - 1]), math.log(xs[i])
    return i, (math.log(x) - x0) / (x1 - x0)


def _interp_log(xs: list, ys: list, x: float) -> float:
    """Piecewise-linear interpolation of ys over log(xs); flat outside [xs[0], xs[-1]]."""
    if len(xs) == 1:
        return ys[0]
    i, w = _log_segment(xs, x)
    return ys[i - 1] * (1.0 - w) + ys[i] * w


def _interp_loglog(xs: list, ys: list, x: float) -> float:
    """Piecewise-linear interpolation of log(ys) over log(xs) (positive ys); flat outside. A
    latency-bound collective's bus bandwidth grows in proportion to its size, a straight line here,
    so a size between two samples gets the time latency + bytes / bandwidth would give it."""
    if len(xs) == 1:
        return ys[0]
    i, w = _log_segment(xs, x)
    return ys[i - 1] ** (1.0 - w) * ys[i] ** w


def _idw(points: list, values: list, query: tuple) -> float:
    """Inverse-distance weighting (power 2) over the nearest samples, in log space."""
    dists = []
    for p, v in zip(points, values):
        d2 = sum((a - b) ** 2 for a, b in zip(p, query))
        if d2 < 1e-12:
            return v
        dists.append((d2, v))
    dists.sort(key=lambda t: t[0])
    near = dists[:_IDW_NEIGHBOURS]
    wsum = sum(1.0 / d2 for d2, _ in near)
    return sum(v / d2 for d2, v in near) / wsum


class _Grid3:
    """Trilinear interpolation in log space over a full Cartesian grid of samples (fast path).

    Built-in profiles and grid sweeps from the profiler take this path; any other sample set
    falls back to inverse-distance weighting.
    """

    def __init__(self, axes: tuple, values: dict):
        self.axes = axes                      # three sorted tuples of sizes
        self.logs = tuple(tuple(math.log(v) for v in axis) for axis in axes)
        self.values = values                  # (m, n, k) -> value

    @classmethod
    def build(cls, keys: list, values: list):
        axes = tuple(tuple(sorted({key[i] for key in keys})) for i in range(3))
        if len(axes[0]) < 2 or len(axes[1]) < 2 or len(axes[2]) < 2:
            return None
        table = dict(zip(keys, values))
        if len(table) != len(axes[0]) * len(axes[1]) * len(axes[2]):
            return None
        return cls(axes, table)

    def _bracket(self, i: int, x: float) -> tuple:
        axis, logs = self.axes[i], self.logs[i]
        if x <= axis[0]:
            return axis[0], axis[0], 0.0
        if x >= axis[-1]:
            return axis[-1], axis[-1], 0.0
        j = bisect.bisect_right(axis, x)
        return axis[j - 1], axis[j], (math.log(x) - logs[j - 1]) / (logs[j] - logs[j - 1])

    def __call__(self, m: int, n: int, k: int) -> float:
        (m0, m1, wm), (n0, n1, wn), (k0, k1, wk) = (self._bracket(0, m), self._bracket(1, n), self._bracket(2, k))
        v = self.values
        total = 0.0
        for mm, fm in ((m0, 1.0 - wm), (m1, wm)):
            if fm == 0.0:
                continue
            for nn, fn in ((n0, 1.0 - wn), (n1, wn)):
                if fn == 0.0:
                    continue
                for kk, fk in ((k0, 1.0 - wk), (k1, wk)):
                    if fk:
                        total += fm * fn * fk * v[(mm, nn, kk)]
        return total


class ProfileTables:
    """Cached lookups over one HardwareProfile's tables."""

    def __init__(self, profile: HardwareProfile):
        self.profile = profile
        self._matmul = {}
        self._matmul_grid = {}
        by_dtype = {}
        for s in profile.matmul:
            keys, vals = by_dtype.setdefault(s.dtype, ([], []))
            keys.append((s.m, s.n, s.k))
            vals.append(s.flops_per_s)
        for dtype, (keys, vals) in by_dtype.items():
            self._matmul[dtype] = ([tuple(math.log(x) for x in key) for key in keys], vals)
            self._matmul_grid[dtype] = _Grid3.build(keys, vals)
        self._attention = {}
        for s in profile.attention:
            pts, vals = self._attention.setdefault((s.kernel, s.dtype, s.pass_), ([], []))
            pts.append((math.log(s.seq_len), math.log(s.batch * s.num_heads), math.log(s.head_dim)))
            vals.append(s.flops_per_s)
        by_size = sorted((s.num_bytes, s.bytes_per_s) for s in profile.memory_ops)
        self._mem_x = [b for b, _ in by_size]
        self._mem_y = [bw for _, bw in by_size]
        coll = {}
        for s in profile.collectives:
            across = s.scope == "inter_node" and s.op in NIC_SHARE_OPS
            coll.setdefault((s.op, s.scope), {}).setdefault(s.group_size, []).append(
                (s.message_bytes, nic_share_bytes_per_s(s, profile.gpus_per_node) if across
                 else s.bus_bandwidth_bytes_per_s))
        self._coll = {key: {n: ([b for b, _ in sorted(v)], [bw for _, bw in sorted(v)])
                            for n, v in groups.items()} for key, groups in coll.items()}
        self.matmul_flops_per_s = lru_cache(maxsize=4096)(self._matmul_flops_per_s)
        self.gemm_times_memo: dict = {}  # cost_model.layer_time.gemms_time_s's
        # the fallback order when a framework's kernel has no samples: the profile's own SDPA first
        self._attention_kernels = sorted({k for k, _, _ in self._attention}, key=lambda k: (k != "sdpa", k))
        self.attention_flops_per_s = lru_cache(maxsize=1024)(self._attention_flops_per_s)
        self.memory_bytes_per_s = lru_cache(maxsize=4096)(self._memory_bytes_per_s)
        self.bus_bandwidth = lru_cache(maxsize=4096)(self._bus_bandwidth)

    # -- compute ---------------------------------------------------------------------------
    def _lookup_matmul(self, dtype: str, m: int, n: int, k: int) -> float:
        grid = self._matmul_grid.get(dtype)
        if grid is not None:
            return grid(m, n, k)
        pts, vals = self._matmul[dtype]
        return _idw(pts, vals, (math.log(m), math.log(n), math.log(k)))

    def _matmul_flops_per_s(self, m: int, n: int, k: int, dtype: str) -> float:
        if dtype == "fp16" and dtype not in self._matmul:
            dtype = "bf16"
        if dtype not in self._matmul:
            # No samples for this dtype: scale the bf16 table by the ratio of datasheet peaks.
            if "bf16" not in self._matmul:
                raise AutoplanError(f"profile {self.profile.name!r} has no matmul samples; "
                                    f"measure it with `autoplan profile` or use a built-in profile")
            ratio = self.profile.peak(dtype) / self.profile.peak("bf16")
            return ratio * self._lookup_matmul("bf16", m, n, k)
        return self._lookup_matmul(dtype, m, n, k)

    def _attention_flops_per_s(self, seq_len: int, batch_heads: int, head_dim: int, dtype: str,
                               pass_: str, kernel: str = "sdpa") -> float:
        """`kernel`: the framework's attention kernel. A profile without samples of it answers with its
        stand-in's (ATTENTION_KERNEL_STAND_IN), else with the samples it has (a measured profile times
        "sdpa" only; the built-in Ampere ones hold FlashAttention-2 only, which Transformer Engine also
        picks before Hopper)."""
        dtype = "bf16" if dtype in ("fp16", "fp8") else dtype  # attention runs in bf16 under fp8
        table = None
        kernels = (kernel, ATTENTION_KERNEL_STAND_IN.get(kernel, kernel), *self._attention_kernels)
        wanted = ((k, d) for k in kernels for d in (dtype, "bf16"))
        for key in wanted:
            table = self._attention.get((*key, pass_))
            if table is not None:
                break
        if table is None:
            # No attention samples: fall back to a large matmul's throughput at the same depth.
            return 0.5 * self._matmul_flops_per_s(seq_len, seq_len, head_dim, dtype)
        return _idw(table[0], table[1], (math.log(seq_len), math.log(batch_heads), math.log(head_dim)))

    # -- memory ----------------------------------------------------------------------------
    def _memory_bytes_per_s(self, num_bytes: int) -> float:
        if not self._mem_x:
            return self.profile.memory_bandwidth_bytes_per_s
        return _interp_log(self._mem_x, self._mem_y, max(num_bytes, 1))

    @property
    def peak_memory_bytes_per_s(self) -> float:
        """The most `memory_bytes_per_s` returns for any size (the table is interpolated, flat
        outside its sizes)."""
        return max(self._mem_y) if self._mem_y else self.profile.memory_bandwidth_bytes_per_s

    # -- collectives -----------------------------------------------------------------------
    def _bus_bandwidth(self, op: str, scope: str, group_size: int, message_bytes: int) -> float:
        """nccl-tests' bus bandwidth; across nodes, for NIC_SHARE_OPS, one GPU's NIC share. A profile
        without the op's samples answers with its all-reduce's, except across nodes for NIC_SHARE_OPS,
        which a ring's node-wide figure would price 8x too fast: there the profile's NIC share."""
        nic_share = scope == "inter_node" and op in NIC_SHARE_OPS
        groups = self._coll.get((op, scope))
        if groups is None and op in ("all_gather", "reduce_scatter", "all_to_all", "send_recv") and not nic_share:
            groups = self._coll.get(("all_reduce", scope))
        if groups is None:
            nominal = (self.profile.intra_node_bandwidth_bytes_per_s if scope == "intra_node"
                       else self.profile.inter_node_bandwidth_bytes_per_s * (1 if nic_share else self.profile.gpus_per_node))
            latency = self.profile.intra_node_latency_s if scope == "intra_node" else self.profile.inter_node_latency_s
            return message_bytes / (latency + message_bytes / nominal)
        sizes = sorted(groups)
        if group_size <= sizes[0]:
            return _interp_loglog(*groups[sizes[0]], message_bytes)
        if group_size >= sizes[-1]:
            return _interp_loglog(*groups[sizes[-1]], message_bytes)
        i = bisect.bisect_right(sizes, group_size)
        lo, hi = sizes[i - 1], sizes[i]
        y0 = _interp_loglog(*groups[lo], message_bytes)
        y1 = _interp_loglog(*groups[hi], message_bytes)
        w = (math.log(group_size) - math.log(lo)) / (math.log(hi) - math.log(lo))
        return y0 * (1.0 - w) + y1 * w

    def collective_time_s(self, op: str, message_bytes: float, group_size: int,
                          ranks_per_node: int) -> float:
        """Seconds for one collective over `message_bytes` (the full buffer) in a group.

        `ranks_per_node` is how many of the group's ranks share a node: the group is intra-node
        when all of them do. Across nodes a ring's bus bandwidth is the one of a group that fills its
        nodes (every GPU drives its own NIC share); a group with fewer ranks per node drives only
        that many NIC shares, so it gets that fraction. An all-to-all or a send is priced by the bytes
        that cross each link instead (`_nic_share_time_s`).
        """
        if group_size <= 1 or message_bytes <= 0:
            return 0.0
        size = int(message_bytes)
        gpn = self.profile.gpus_per_node
        if group_size <= ranks_per_node:
            busbw = self.bus_bandwidth(op, "intra_node", group_size, size)
        elif op in NIC_SHARE_OPS:
            return self._nic_share_time_s(op, message_bytes, group_size, min(ranks_per_node, gpn))
        else:
            return self._ring_time_s(op, message_bytes, group_size, min(ranks_per_node, gpn))
        return message_bytes * BUS_FACTOR[op](group_size) / busbw

    def _ring_time_s(self, op: str, message_bytes: float, n: int, r: int) -> float:
        """A ring or tree collective across nodes, `r` of the `n` ranks on each node. The table's rows fill
        their nodes (gpus_per_node ranks each). The bytes run over r of a node's NIC shares, so that part
        takes gpus_per_node / r times the table's; the latency part (the table's time at its smallest
        size, latency-bound) is the ring's or tree's over the n / r nodes the group spans, not n / gpn:
        NCCL's hop model (cost_model.profiles.nccl_inter_node_latency_s) gives the ratio."""
        gpn = self.profile.gpus_per_node
        full_s = message_bytes * BUS_FACTOR[op](n) / self.bus_bandwidth(op, "inter_node", n, int(message_bytes))
        if r >= gpn:
            return full_s
        smallest = self._smallest_size(op)
        latency_s = min(full_s, smallest * BUS_FACTOR[op](n) / self.bus_bandwidth(op, "inter_node", n, smallest))
        spread = nccl_inter_node_latency_s(op, n, r) / nccl_inter_node_latency_s(op, n, gpn)
        return (full_s - latency_s) * gpn / r + latency_s * spread

    def _smallest_size(self, op: str) -> int:
        """The smallest message the profile sampled `op` at across nodes (its all-reduce's where it has
        none of its own, as _bus_bandwidth falls back)."""
        groups = self._coll.get((op, "inter_node")) or self._coll.get(("all_reduce", "inter_node"))
        return min(sizes[0] for sizes, _ in groups.values()) if groups else 1

    def hierarchical_time_s(self, nic_bytes: float, nvlink_bytes: float, group_size: int, ranks_per_node: int,
                            buffer_bytes: float) -> float:
        """A two-level exchange of a group across nodes (an all-to-all, DeepEP's dispatch or combine):
        `nic_bytes` leave each GPU through its NIC share while `nvlink_bytes` move inside its node; the
        slower share binds. The NIC share is read at the exchange's per-rank buffer, `buffer_bytes`."""
        nic_s = nic_bytes / self.bus_bandwidth("all_to_all", "inter_node", group_size, max(1, int(buffer_bytes)))
        if ranks_per_node <= 1 or nvlink_bytes <= 0:
            return nic_s
        r = ranks_per_node
        # The NVLink share as an all-to-all of r ranks whose wire bytes are nvlink_bytes.
        buffer = nvlink_bytes / BUS_FACTOR["all_to_all"](r)
        return max(nic_s, nvlink_bytes / self.bus_bandwidth("all_to_all", "intra_node", r, max(1, int(buffer))))

    def _nic_share_time_s(self, op: str, message_bytes: float, n: int, r: int) -> float:
        """An all-to-all or send across nodes, `r` of the `n` ranks on each node. A send crosses one NIC.
        An all-to-all sends (n - r)/n of each GPU's buffer through that GPU's NIC share and (r - 1)/n
        over NVLink at the same time (NCCL posts every peer's send at once; DeepEP forwards both domains
        concurrently): the slower share binds. Either share is priced at its own bytes."""
        size = int(message_bytes)
        if op == "send_recv":
            return message_bytes / self.bus_bandwidth(op, "inter_node", n, size)
        # Off the node (n - r)/n of the buffer; on it (r - 1)/n, an all-to-all of r ranks over its r/n.
        return self.hierarchical_time_s(message_bytes * (n - r) / n, message_bytes * (r - 1) / n, n, r, message_bytes)
