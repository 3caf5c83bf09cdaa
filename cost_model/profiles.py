"""Built-in hardware profiles: datasheet peaks turned into the tables a measured profile has.

A built-in profile is a HardwareProfile with the same four tables the profiler writes (matmul,
attention, memory ops, collectives), generated from a few cited numbers by small physical models:
a GEMM roofline with wave quantization, a flash-attention efficiency ramp over sequence length,
an HBM copy with a fixed launch cost, and an alpha-beta collective. Every number's source is in
`SPECS` below and travels with the profile in `HardwareProfile.sources`.

Sizes: capacities in bytes (GiB where written), bandwidths in bytes/s (base 10).
"""
from __future__ import annotations

import math
from functools import lru_cache

from autoplan.specs import (
    AttentionSample, AutoplanError, CollectiveSample, HardwareProfile, MatmulSample, MemoryOpSample,
)
from autoplan.specs.gpus import gpu_sheet
from cost_model.attention_tables import flash2_published_attention, hopper_attention, published

GIB = 1024 ** 3
H100_MATMUL_EFF = 713e12 / 989.5e12
"""Best sustained bf16 GEMM of the shipped H100 SXM full profile over the datasheet peak."""
H100_FP8_MATMUL_EFF = 1270e12 / 1979e12
"""Best sustained fp8 (e4m3, tensor-wise scaled `torch._scaled_mm`) GEMM of the same profile over the
datasheet fp8 peak: 0.64, against 0.72 for bf16. fp8 does not reach the same fraction of its doubled peak:
over the profile's large shapes (bf16 above 650 TFLOP/s) fp8 runs 1.66-1.83x bf16, not 2x."""
POWER_CAP_500W_CLOCK = (500 / 700) ** (1 / 3)
"""assumption: a 500 W cap on a 700 W part lowers sustained tensor-core clocks by the cube root of
the power ratio (dynamic power ~ f*V^2 with V ~ f under DVFS), 0.894."""
_NIC_EFF = 0.90
"""Achieved fraction of one NIC's line rate, 45 GB/s of a 400 Gb/s NDR NIC. Benchmark, not datasheet:
NCCL's maintainers quote 46-48 GB/s per NDR NIC for nccl-tests (NVIDIA/nccl-tests issue #290, 2025-03-03)
and up to 48-49 GB/s (issue #267, 2024-11-19); DeepEP's dispatch reaches 43-58 GB/s of RDMA per H800 CX7
400 Gb/s NIC (deepseek-ai/DeepEP docs/legacy.md, normal kernels, EP 16-64), and its V2's 90 GB/s at EP 8x2
and 61 GB/s at EP 8x4 (README.md, SM90 CX7: logical bandwidth counting the local ranks' share) are 45 and
46 GB/s on the NIC once the 1/2 and 3/4 of the bytes that leave the node are taken. A100 (HDR 200 Gb/s):
~24 GB/s per NIC (NVIDIA/nccl issue #412, 2023-04-24; DGX A100 192 GB/s ring bus bandwidth over its 8 NICs,
issue #812, 2023-03-31); 0.9 x 25 = 22.5 GB/s here, the DeepEP-level fraction."""
_A2A_NIC_SOURCE = ("across nodes an all-to-all runs at one NIC share per GPU, not the node's total: it cannot "
                   "aggregate several NICs (NVIDIA/nccl-tests issue #267, sjeaugey 2024-11-19) and its time is "
                   "the off-node share's, bus bandwidth 2x a GPU's network bandwidth on 2 nodes, N/(N-1)x on N "
                   "(issue #130, sjeaugey 2023-02-03); pipeline sends likewise one NIC per pair")
_H100_SOURCES = {
    "peak_flops_per_s": "datasheet (autoplan.specs.gpus)",
    "matmul": "benchmark, not datasheet: the best bf16 GEMM of `autoplan profile` (full sweep, GEMMs back to "
              "back for two minutes, so sustained clocks) on one H100 SXM 700 W, 713 TFLOP/s at 1024x2048x4096 "
              "= 0.72 of peak (cost_model/data/h100_runs/profile-full.json, 2026-11-22); short bursts reach "
              "~795-802 (DESIGN.md facts; the same GPU's --quick sweep), which training does not sustain. "
              "fp8 likewise: the best tensor-wise scaled fp8 GEMM of the same sweep, 1270 TFLOP/s at 1024x2048x8192 "
              "= 0.64 of the fp8 peak",
    "attention": "measured, not datasheet: causal SDPA on one H100 SXM 700 W, flash (FlashAttention-2) and cuDNN "
                 "backends apart, batch x heads 8-512, seq 1k-16k (cost_model/data/kernels/kernel_rates-h100.json, "
                 "benchmarks/kernel_rates.py, torch 2.11, 2026-11-27; cost_model/attention_tables.py)",
    "intra_node_bandwidth_bytes_per_s": "datasheet: NVLink 4, 450 GB/s per direction per GPU",
    "inter_node_bandwidth_bytes_per_s": "datasheet: DGX H100 8x400 Gb/s per node = 50 GB/s per GPU",
    "memory_bandwidth_bytes_per_s": "datasheet HBM bandwidth x the copy efficiency below",
    "collectives": "benchmark, not datasheet: nccl-tests all_reduce_perf bus bandwidth ~370 GB/s in an 8xH100 "
                   "node (DESIGN.md facts); "
                   "across nodes rings at 90% of the node's NIC line rate; " + _A2A_NIC_SOURCE,
}
_H200_ATTENTION_SOURCE = ("measured, not datasheet: causal SDPA on one H200 700 W, flash (FlashAttention-2) and "
                          "cuDNN backends apart (cost_model/data/kernels/kernel_rates-h200.json, "
                          "benchmarks/kernel_rates.py, torch 2.11, 2026-11-27)")
A100 = published()
"""Others' published A100 measurements (cost_model/data/kernels/a100_published.json): no A100 was lent to
this project, so each A100 table passes through these figures, each with its source."""
_A100_SOURCES = {
    "peak_flops_per_s": "datasheet (autoplan.specs.gpus)",
    "matmul": "published benchmark, not datasheet: the GEMM roofline below through a sustained bf16 GEMM, "
              + A100["gemm_bf16"]["sustained"]["source"] + "; upper bound: " + A100["gemm_bf16"]["burst_best"]["source"],
    "attention": "published benchmark: " + A100["flash_attention_2"]["source"] + "; spread over batch x heads "
                 "with FlashAttention-2's occupancy curve measured on an H100 (cost_model/attention_tables.py)",
    "intra_node_bandwidth_bytes_per_s": "datasheet: NVLink 3, 300 GB/s per direction per GPU",
    "inter_node_bandwidth_bytes_per_s": "datasheet: DGX A100 8x200 Gb/s per node = 25 GB/s per GPU",
    "memory_bandwidth_bytes_per_s": "published benchmark: " + A100["hbm"]["a100-80gb"]["source"],
    "collectives": "published benchmark: " + A100["nvlink"]["source"] + "; across nodes rings at 90% of the "
                   "node's NIC line rate (" + A100["nic"]["source"] + "); " + _A2A_NIC_SOURCE,
}
_A100_HBM = A100["hbm"]["a100-80gb"]
_A100_FACTS = dict(matmul_point=A100["gemm_bf16"]["sustained"], attention_published=True,
                   hbm_copy_eff=_A100_HBM["read_bytes_per_s"] / _A100_HBM["datasheet_bytes_per_s"],
                   allreduce_busbw=A100["nvlink"]["all_reduce_busbw_bytes_per_s"])


def _entry(sheet_key: str, **profile_facts) -> dict:
    """A built-in profile's inputs: the datasheet facts of `autoplan.specs.gpus` (peaks, HBM, links,
    SMs), then what is not a datasheet fact (allocatable capacity, achieved efficiencies from the
    benchmarks cited in `sources`); a key given here overrides the sheet's (e.g. a lower-bandwidth
    variant)."""
    sheet = gpu_sheet(sheet_key)
    facts = dict(peak=dict(sheet.peak_flops_per_s), hbm_bytes_per_s=sheet.memory_bandwidth_bytes_per_s,
                 nvlink_bytes_per_s=sheet.nvlink_bytes_per_s, nic_bytes_per_s=sheet.nic_bytes_per_s,
                 num_sms=sheet.num_sms)
    facts.update(profile_facts)
    facts["sources"] = {"datasheet": f"{sheet.key}: {sheet.source}", **profile_facts["sources"]}
    return facts


# One entry per built-in GPU. `*_eff` are achieved fractions of the datasheet figure.
SPECS = {
    "a100-40gb": _entry(
        "a100-sxm-40gb", device_name="NVIDIA A100-SXM4-40GB", capacity_bytes=int(39.59 * GIB), **_A100_FACTS, sources={
            **_A100_SOURCES,
            "memory_capacity_bytes": "40 GB part; torch reports 39.59 GiB total capacity"}),
    "a100-80gb": _entry(
        "a100-sxm-80gb", device_name="NVIDIA A100-SXM4-80GB", capacity_bytes=int(79.15 * GIB), **_A100_FACTS, sources={
            **_A100_SOURCES,
            "memory_capacity_bytes": "80 GB part; torch reports 79.15 GiB total capacity"}),
    "h100-80gb": _entry(
        "h100-sxm", device_name="NVIDIA H100 80GB HBM3", capacity_bytes=int(79.11 * GIB),
        matmul_eff=H100_MATMUL_EFF, fp8_matmul_eff=H100_FP8_MATMUL_EFF, attention_record="kernel_rates-h100.json",
        allreduce_busbw=370e9, sources={
            **_H100_SOURCES,
            "memory_capacity_bytes": "80 GB part; torch reports 79.11 GiB total capacity"}),
    "h200": _entry(
        "h200-sxm", device_name="NVIDIA H200", capacity_bytes=int(139.8 * GIB),
        matmul_eff=H100_MATMUL_EFF, fp8_matmul_eff=H100_FP8_MATMUL_EFF, attention_record="kernel_rates-h200.json",
        allreduce_busbw=370e9, sources={
            **_H100_SOURCES,
            "attention": _H200_ATTENTION_SOURCE,
            "memory_capacity_bytes": "141 GB HBM3e part (143771 MiB); torch reports ~139.8 GiB"}),
    "h100-96gb-500w": _entry(
        "h100-sxm", device_name="NVIDIA H100 96GB HBM2e (500 W cap)", capacity_bytes=int(94.5 * GIB),
        hbm_bytes_per_s=2400e9, matmul_eff=H100_MATMUL_EFF * POWER_CAP_500W_CLOCK,
        fp8_matmul_eff=H100_FP8_MATMUL_EFF * POWER_CAP_500W_CLOCK, attention_record="kernel_rates-h100.json",
        attention_clock=POWER_CAP_500W_CLOCK, allreduce_busbw=370e9,
        sources={
            **_H100_SOURCES,
            "peak_flops_per_s": "H100 SXM datasheet peaks (torchtitan reports MFU against them)",
            "matmul": _H100_SOURCES["matmul"] + "; x the 500 W cap's clock factor (see POWER_CAP_500W_CLOCK)",
            "memory_capacity_bytes": "96 GB HBM2e part; allocatable assumed 94.5 GiB (torchtitan runs peak at 84.9 GiB)",
            "memory_bandwidth_bytes_per_s": "assumption: H100 PCIe HBM2e 2.0 TB/s for 5 stacks, x6/5 for 96 GB = 2.4 TB/s"}),
}
BUILTIN_PROFILE_NAMES = tuple(SPECS)
DEFAULT_PROFILE_NAME = "h100-80gb"

# Generated table grids (powers of two cover the shapes transformer training produces).
_MATMUL_DIMS = (128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536)
_FLASH2_SHAPE_RECORD = "kernel_rates-h100.json"
_MEMORY_SIZES = tuple(2 ** e for e in range(12, 35, 2))
_HBM_COPY_EFF = 0.90       # assumption where no measurement is cited (`hbm_copy_eff`): copies reach ~90% of datasheet
_KERNEL_LAUNCH_S = 2e-6    # measured: fixed per-kernel cost of the memory ops in the shipped H100 profile-full.json
                           # (64 MiB at 2.78 TB/s vs 4 GiB at 3.02 TB/s: ~1.9 us; launches overlap in a stream)
# NCCL's own latency model for its Simple protocol (src/graph/tuning.cc, NCCL 2.18-2.21: baseLat,
# hwLat; ncclTopoTuneModel): a ring of n ranks on N nodes takes n-1 steps, N-1 of them across the
# network; a tree all-reduce climbs (ranks per node - 1) NVLink hops and log2(N) network hops, down
# and up. In microseconds, per step.
_NCCL_BASE_LAT_S = 8.4e-6          # baseLat Ring and Tree, Simple
_NCCL_RING_NVLINK_STEP_S = 3.4e-6  # hwLat NVLINK Ring Simple
_NCCL_TREE_NVLINK_STEP_S = 4.0e-6  # hwLat NVLINK Tree Simple
_NCCL_NET_STEP_S = 14.0e-6         # hwLat NET Ring and Tree Simple
# cuBLAS picks, per shape, the tile that quantizes best; smaller tiles reuse operands less
# (assumption: 5% and 15% lower per-SM throughput for 128x128 and 128x64 than for 256x128).
_GEMM_TILES = ((256, 128, 1.0), (128, 128, 0.95), (128, 64, 0.85))
_GEMM_K_TILE = 64          # K consumed per main-loop iteration of such a tile
_K_FILL_ITERS = 2.0        # assumption: prologue + epilogue ~ 2 main-loop steps per tile
# The cited best GEMM (~8k-16k cubed) already pays the fill at K=8192: divide it out once.
_BEST_FILL_EFF = (8192 / 64) / (8192 / 64 + _K_FILL_ITERS)


def _gemm_flops_per_s(m: int, n: int, k: int, peak: float, eff: float, hbm: float, num_sms: int,
                      bytes_per_elem: float, k_fill_iters: float) -> float:
    """Roofline with wave quantization and pipeline fill.

    The output tiles fill the SMs in whole waves (NVIDIA's "Matrix Multiplication Background"
    guide: wave quantization). Each tile walks K in steps of _GEMM_K_TILE; filling the
    load/MMA pipeline and writing the epilogue cost about `k_fill_iters` extra steps per tile,
    which short-K GEMMs cannot amortize.
    """
    flops = 2.0 * m * n * k
    wave_eff = 0.0
    for tile_m, tile_n, tile_eff in _GEMM_TILES:
        tiles = math.ceil(m / tile_m) * math.ceil(n / tile_n)
        wave_eff = max(wave_eff, tile_eff * tiles / (math.ceil(tiles / num_sms) * num_sms))
    k_iters = math.ceil(k / _GEMM_K_TILE)
    fill_eff = k_iters / (k_iters + k_fill_iters)
    compute_s = flops / (peak * eff * wave_eff * fill_eff)
    memory_s = bytes_per_elem * (m * k + k * n + m * n) / (hbm * _HBM_COPY_EFF)
    return flops / (max(compute_s, memory_s) + _KERNEL_LAUNCH_S)


def matmul_eff_through(spec: dict, point: dict) -> float:
    """The bf16 efficiency whose roofline passes through a measured GEMM (`point`: m, n, k, tflops): the
    measured rate over the roofline's at efficiency 1 (compute-bound there, so the roofline is
    proportional to it; the fixed launch cost, 2 us of a 4 ms GEMM, is left in)."""
    at_one = _gemm_flops_per_s(point["m"], point["n"], point["k"], spec["peak"]["bf16"], 1.0 / _BEST_FILL_EFF,
                               spec["hbm_bytes_per_s"], spec["num_sms"], 2.0, _K_FILL_ITERS)
    return point["tflops"] * 1e12 / at_one


def _matmul_table(spec: dict) -> tuple:
    samples = []
    bf16_eff = spec["matmul_eff"] if "matmul_eff" in spec else matmul_eff_through(spec, spec["matmul_point"])
    for dtype, bpe in (("bf16", 2.0), ("fp8", 1.0)):
        if dtype not in spec["peak"]:
            continue
        for m in _MATMUL_DIMS:
            for n in _MATMUL_DIMS:
                for k in _MATMUL_DIMS:
                    eff = spec["fp8_matmul_eff"] if dtype == "fp8" else bf16_eff
                    fps = _gemm_flops_per_s(m, n, k, spec["peak"][dtype], eff / _BEST_FILL_EFF,
                                            spec["hbm_bytes_per_s"], spec["num_sms"], bpe, _K_FILL_ITERS)
                    samples.append(MatmulSample(m, n, k, dtype, fps))
    return tuple(samples)


def _attention_table(spec: dict) -> tuple:
    """Measured on the GPU where a kernel record exists, else (Ampere) FlashAttention-2's published
    figures spread over batch x heads with its occupancy curve measured on the H100
    (cost_model/attention_tables.py)."""
    if "attention_record" in spec:
        return hopper_attention(spec["attention_record"], spec.get("attention_clock", 1.0))
    return flash2_published_attention(_FLASH2_SHAPE_RECORD)


def _memory_table(spec: dict) -> tuple:
    bw = spec["hbm_bytes_per_s"] * spec.get("hbm_copy_eff", _HBM_COPY_EFF)
    return tuple(MemoryOpSample("copy", b, b / (_KERNEL_LAUNCH_S + b / bw)) for b in _MEMORY_SIZES)


def nccl_inter_node_latency_s(op: str, num_ranks: int, ranks_per_node: int = 8) -> float:
    """NCCL's modelled latency of one collective over `num_ranks` ranks filling nodes of
    `ranks_per_node` (Simple protocol, src/graph/tuning.cc): all-gather and reduce-scatter run as
    rings (n-1 steps, N-1 across the network), all-reduce as a tree (2 x (ranks per node - 1)
    NVLink hops + 2 x log2(N) network hops)."""
    nodes = max(2, math.ceil(num_ranks / ranks_per_node))
    if op in ("all_gather", "reduce_scatter"):
        return (_NCCL_BASE_LAT_S + (num_ranks - nodes) * _NCCL_RING_NVLINK_STEP_S
                + (nodes - 1) * _NCCL_NET_STEP_S)
    return _NCCL_BASE_LAT_S + 2 * ((ranks_per_node - 1) * _NCCL_TREE_NVLINK_STEP_S
                                   + math.log2(nodes) * _NCCL_NET_STEP_S)


def _collective_table(spec: dict) -> tuple:
    """Every op inside a node (groups of 2, 4, 8) and across nodes (groups that fill their nodes, as
    nccl-tests runs them), in nccl-tests' bus bandwidth with each row's ranks_per_node.

    Across nodes the ops differ in the NIC bytes cross. A ring (all-reduce, all-gather, reduce-scatter)
    runs one ring per NIC, so its bus bandwidth is the node's NIC total. An all-to-all sends each GPU's
    off-node share, (n - 8)/n of its buffer, through that GPU's own NIC, and a pipeline send one GPU's
    message through one NIC: both run at one NIC share, not eight (`_A2A_NIC_SOURCE`)."""
    samples = []
    intra_latency_s, inter_latency_s = 8e-6, 15e-6  # assumption: NCCL small-message latencies
    gpn = 8
    nic_share = spec["nic_bytes_per_s"] * _NIC_EFF
    for op in ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv"):
        for scope, groups in (("intra_node", (2, 4, 8)), ("inter_node", (16, 64, 256, 1024, 4096, 16384))):
            for n in groups:
                factor = 2.0 * (n - 1) / n if op == "all_reduce" else ((n - 1) / n if op != "send_recv" else 1.0)
                wire = factor  # bytes per buffer byte on the binding link
                if scope == "intra_node":
                    peak = spec["allreduce_busbw"] if op != "send_recv" else 0.8 * spec["nvlink_bytes_per_s"]
                    latency = intra_latency_s
                elif op in ("all_gather", "reduce_scatter", "all_reduce"):
                    peak, latency = gpn * nic_share, nccl_inter_node_latency_s(op, n)
                else:
                    # Point-to-point based (all-to-all, pipeline sends): one network hop, plus a
                    # slowly growing fan-out (assumption), at one NIC share.
                    peak, latency = nic_share, inter_latency_s * (1.0 + math.log2(n / gpn) / 4)
                    wire = (n - gpn) / n if op == "all_to_all" else 1.0
                for e in range(12, 33, 2):
                    size = 2 ** e
                    time_s = latency + size * wire / peak
                    samples.append(CollectiveSample(op, scope, n, size, size * factor / time_s, time_s,
                                                    ranks_per_node=n if scope == "intra_node" else gpn))
    return tuple(samples)


@lru_cache(maxsize=None)
def builtin_profile(name: str = DEFAULT_PROFILE_NAME, nic_bytes_per_s: float | None = None) -> HardwareProfile:
    """The built-in HardwareProfile of a GPU type (one of BUILTIN_PROFILE_NAMES).

    `nic_bytes_per_s` replaces the DGX scale-out bandwidth per GPU for clusters wired otherwise
    (e.g. BigScience's Jean Zay: 4 x 100 Gb/s Omni-Path per 8-GPU node = 6.25 GB/s per GPU).
    """
    spec = SPECS.get(name)
    if spec is None:
        raise AutoplanError(f"unknown built-in profile {name!r}; known: {', '.join(BUILTIN_PROFILE_NAMES)} "
                            f"(or pass a measured profile JSON from `autoplan profile`)")
    sources = dict(spec["sources"])
    if nic_bytes_per_s is not None:
        spec = {**spec, "nic_bytes_per_s": float(nic_bytes_per_s)}
        sources["inter_node_bandwidth_bytes_per_s"] = f"given: {nic_bytes_per_s / 1e9:g} GB/s per GPU"
    return HardwareProfile(
        name=name, device_name=spec["device_name"], gpus_per_node=8,
        memory_capacity_bytes=spec["capacity_bytes"],
        memory_bandwidth_bytes_per_s=spec["hbm_bytes_per_s"] * spec.get("hbm_copy_eff", _HBM_COPY_EFF),
        peak_flops_per_s=dict(spec["peak"]),
        intra_node_bandwidth_bytes_per_s=spec["nvlink_bytes_per_s"],
        inter_node_bandwidth_bytes_per_s=spec["nic_bytes_per_s"],
        intra_node_latency_s=8e-6, inter_node_latency_s=15e-6, measured=False,
        matmul=_matmul_table(spec), attention=_attention_table(spec), memory_ops=_memory_table(spec),
        collectives=_collective_table(spec),
        sources={**sources, "gpus_per_node": "DGX/HGX nodes: 8 GPUs",
                 "memory_ops": f"HBM copy at {spec.get('hbm_copy_eff', _HBM_COPY_EFF):.0%} of datasheet "
                               f"({'measured, see memory_bandwidth_bytes_per_s' if 'hbm_copy_eff' in spec else 'assumption'})"
                               f" + {_KERNEL_LAUNCH_S * 1e6:.0f} us per kernel (measured on the H100)"},
    )
