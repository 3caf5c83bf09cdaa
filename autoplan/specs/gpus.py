"""The GPU datasheet table: every GPU the profiler, the planner and the executor know, once.

Each entry is a vendor figure with its document. Peaks are dense (no 2:4 sparsity): NVIDIA's
datasheets print the sparse figure with an asterisk, so dense = sparse / 2. These peaks are the
MFU denominator everywhere (`autoplan.specs.flops`), for predicted and measured MFU alike.
What a GPU *achieves* (best GEMM, attention, bus bandwidth) is not a datasheet fact: it lives in a
hardware profile, measured (`autoplan profile`) or built in with its benchmark source
(`cost_model.profiles`).

Units: FLOP/s and bytes/s base 10 (as datasheets print them), memory in bytes.
"""
from __future__ import annotations

from dataclasses import dataclass

TERA, GIGA = 1e12, 1e9


@dataclass(frozen=True)
class GpuSheet:
    key: str
    """Our name of the part, e.g. "h100-sxm"."""
    name_patterns: tuple
    """Substrings of torch.cuda.get_device_name() that identify the part (all must appear)."""
    excluded_patterns: tuple
    """Substrings of other variants (PCIe, NVL) whose figures differ."""
    peak_flops_per_s: dict
    """Dense tensor-core peak per dtype ("bf16", "fp16", "fp8"), and "fp32" without TF32."""
    memory_bytes: int
    """Marketed HBM capacity (what torch can allocate is less: the profile measures it)."""
    memory_bandwidth_bytes_per_s: float
    nvlink_bytes_per_s: float
    """Per-GPU unidirectional NVLink bandwidth (0 for PCIe-only parts)."""
    nic_bytes_per_s: float
    """Per-GPU share of the reference (DGX/HGX) node's scale-out network, one direction."""
    num_sms: int
    source: str


GPU_SHEETS = (
    GpuSheet(
        key="a100-sxm-40gb", name_patterns=("A100", "SXM", "40GB"), excluded_patterns=(),
        peak_flops_per_s={"bf16": 312 * TERA, "fp16": 312 * TERA, "fp32": 19.5 * TERA},
        memory_bytes=40 * 10**9, memory_bandwidth_bytes_per_s=1555 * GIGA,
        nvlink_bytes_per_s=300 * GIGA, nic_bytes_per_s=25 * GIGA, num_sms=108,
        source="NVIDIA A100 Tensor Core GPU datasheet (2021), SXM: BF16/FP16 312 TFLOPS dense, FP32 19.5, "
               "40 GB HBM2 at 1,555 GB/s, NVLink 3 600 GB/s bidirectional; DGX A100 8x200 Gb/s HDR IB; 108 SMs "
               "(A100 architecture whitepaper)"),
    GpuSheet(
        key="a100-sxm-80gb", name_patterns=("A100", "SXM"), excluded_patterns=("40GB",),
        peak_flops_per_s={"bf16": 312 * TERA, "fp16": 312 * TERA, "fp32": 19.5 * TERA},
        memory_bytes=80 * 10**9, memory_bandwidth_bytes_per_s=2039 * GIGA,
        nvlink_bytes_per_s=300 * GIGA, nic_bytes_per_s=25 * GIGA, num_sms=108,
        source="NVIDIA A100 Tensor Core GPU datasheet (2021), SXM 80GB: BF16/FP16 312 TFLOPS dense, FP32 19.5, "
               "80 GB HBM2e at 2,039 GB/s, NVLink 3 600 GB/s bidirectional; DGX A100 8x200 Gb/s HDR IB"),
    GpuSheet(
        key="h100-sxm", name_patterns=("H100",), excluded_patterns=("PCIe", "NVL"),
        peak_flops_per_s={"bf16": 989.5 * TERA, "fp16": 989.5 * TERA, "fp8": 1979 * TERA, "fp32": 67 * TERA},
        memory_bytes=80 * 10**9, memory_bandwidth_bytes_per_s=3350 * GIGA,
        nvlink_bytes_per_s=450 * GIGA, nic_bytes_per_s=50 * GIGA, num_sms=132,
        source="NVIDIA H100 Tensor Core GPU datasheet (2023), SXM: BF16/FP16 1,979 TFLOPS with sparsity -> "
               "989.5 dense, FP8 3,958 -> 1,979 dense, FP32 67; 80 GB HBM3 at 3.35 TB/s; NVLink 4 900 GB/s "
               "bidirectional; DGX H100 8x400 Gb/s ConnectX-7; 132 SMs (H100 architecture whitepaper)"),
    GpuSheet(
        key="h100-pcie", name_patterns=("H100", "PCIe"), excluded_patterns=(),
        peak_flops_per_s={"bf16": 756.5 * TERA, "fp16": 756.5 * TERA, "fp8": 1513 * TERA, "fp32": 51 * TERA},
        memory_bytes=80 * 10**9, memory_bandwidth_bytes_per_s=2000 * GIGA,
        nvlink_bytes_per_s=0.0, nic_bytes_per_s=25 * GIGA, num_sms=114,
        source="NVIDIA H100 Tensor Core GPU datasheet (2023), PCIe: BF16/FP16 1,513 TFLOPS with sparsity -> "
               "756.5 dense, FP8 3,026 -> 1,513 dense, FP32 51; 80 GB HBM2e at 2.0 TB/s; NVLink bridge only "
               "(taken as none); 114 SMs (H100 architecture whitepaper)"),
    GpuSheet(
        key="h200-sxm", name_patterns=("H200",), excluded_patterns=("NVL", "GH200"),
        peak_flops_per_s={"bf16": 989.5 * TERA, "fp16": 989.5 * TERA, "fp8": 1979 * TERA, "fp32": 67 * TERA},
        memory_bytes=141 * 10**9, memory_bandwidth_bytes_per_s=4800 * GIGA,
        nvlink_bytes_per_s=450 * GIGA, nic_bytes_per_s=50 * GIGA, num_sms=132,
        source="NVIDIA H200 Tensor Core GPU datasheet (2024), SXM: BF16/FP16 1,979 TFLOPS with sparsity -> "
               "989.5 dense, FP8 1,979 dense, FP32 67 (the H100 SXM compute die); 141 GB HBM3e at 4.8 TB/s; "
               "NVLink 4 900 GB/s bidirectional; DGX H200 8x400 Gb/s ConnectX-7"),
    GpuSheet(
        key="gh200", name_patterns=("GH200",), excluded_patterns=(),
        peak_flops_per_s={"bf16": 989.5 * TERA, "fp16": 989.5 * TERA, "fp8": 1979 * TERA, "fp32": 67 * TERA},
        memory_bytes=96 * 10**9, memory_bandwidth_bytes_per_s=4000 * GIGA,
        nvlink_bytes_per_s=450 * GIGA, nic_bytes_per_s=50 * GIGA, num_sms=132,
        source="NVIDIA GH200 Grace Hopper Superchip datasheet (2023): H100 tensor cores (BF16 1,979 TFLOPS "
               "sparse -> 989.5 dense, FP8 1,979 dense), 96 GB HBM3 at 4 TB/s"),
    GpuSheet(
        key="l40s", name_patterns=("L40S",), excluded_patterns=(),
        peak_flops_per_s={"bf16": 366.5 * TERA, "fp16": 366.5 * TERA, "fp8": 733 * TERA, "fp32": 91.6 * TERA},
        memory_bytes=48 * 10**9, memory_bandwidth_bytes_per_s=864 * GIGA,
        nvlink_bytes_per_s=0.0, nic_bytes_per_s=25 * GIGA, num_sms=142,
        source="NVIDIA L40S datasheet (2023): BF16/FP16 733 TFLOPS with sparsity -> 366.5 dense, FP8 1,466 -> "
               "733 dense, FP32 91.6; 48 GB GDDR6 at 864 GB/s; PCIe only"),
)
GPU_SHEETS_BY_KEY = {sheet.key: sheet for sheet in GPU_SHEETS}


def lookup_gpu(device_name: str) -> GpuSheet | None:
    """The datasheet of a GPU by its torch device name, or None (CPUs, unknown parts)."""
    for sheet in GPU_SHEETS:
        if all(p in device_name for p in sheet.name_patterns) and not any(
                p in device_name for p in sheet.excluded_patterns):
            return sheet
    return None


def gpu_sheet(key: str) -> GpuSheet:
    """The datasheet of a part by our key (programmer error when unknown)."""
    return GPU_SHEETS_BY_KEY[key]


def datasheet_peak_flops_per_s(device_name: str, dtype: str) -> float:
    """Dense datasheet peak of this device for `dtype`; 0.0 when the part or dtype is unknown
    (a CPU: then no MFU is reported rather than one against a made-up peak)."""
    sheet = lookup_gpu(device_name)
    return sheet.peak_flops_per_s.get(dtype, 0.0) if sheet else 0.0
