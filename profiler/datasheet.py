"""Datasheet figures of the GPUs the profiler recognises, each with its source.

A measured profile's `peak_flops_per_s` is the MFU denominator, so for a known GPU it is the
vendor's dense peak (not the best measured matmul, which would flatter MFU); link figures fill in
what one node cannot measure (the NIC share when there is a single node). Unknown devices, CPUs
included, get measured figures instead and `sources` says so.
"""
from __future__ import annotations

from dataclasses import dataclass

TERA, GIGA = 1e12, 1e9


@dataclass(frozen=True)
class Datasheet:
    key: str
    name_patterns: tuple
    """Substrings of torch.cuda.get_device_name() that identify the part (all must appear)."""
    excluded_patterns: tuple
    """Substrings of other variants (PCIe, NVL) whose figures differ."""
    peak_flops_per_s: dict
    nvlink_bytes_per_s: float
    """Per-GPU unidirectional NVLink bandwidth."""
    nic_bytes_per_s: float
    """Per-GPU share of the reference DGX node's scale-out network, one direction."""
    source: str


DATASHEETS = (
    Datasheet(
        key="a100-sxm",
        name_patterns=("A100", "SXM"), excluded_patterns=(),
        peak_flops_per_s={"bf16": 312 * TERA, "fp16": 312 * TERA, "fp32": 19.5 * TERA},
        nvlink_bytes_per_s=300 * GIGA, nic_bytes_per_s=25 * GIGA,
        source="NVIDIA A100 Tensor Core GPU datasheet (SXM, dense; fp32 without TF32); "
               "NVLink 3 600 GB/s bidirectional per GPU; DGX A100 8x200 Gb/s HDR InfiniBand",
    ),
    Datasheet(
        key="h100-sxm",
        name_patterns=("H100",), excluded_patterns=("PCIe", "NVL"),
        peak_flops_per_s={"bf16": 989 * TERA, "fp16": 989 * TERA, "fp8": 1979 * TERA, "fp32": 67 * TERA},
        nvlink_bytes_per_s=450 * GIGA, nic_bytes_per_s=50 * GIGA,
        source="NVIDIA H100 Tensor Core GPU datasheet (SXM5, dense = half the sparsity figures; "
               "fp32 without TF32); NVLink 4 900 GB/s bidirectional per GPU; DGX H100 8x400 Gb/s ConnectX-7",
    ),
    Datasheet(
        key="h200-sxm",
        name_patterns=("H200",), excluded_patterns=("NVL",),
        peak_flops_per_s={"bf16": 989 * TERA, "fp16": 989 * TERA, "fp8": 1979 * TERA, "fp32": 67 * TERA},
        nvlink_bytes_per_s=450 * GIGA, nic_bytes_per_s=50 * GIGA,
        source="NVIDIA H200 Tensor Core GPU datasheet (SXM, dense; same compute as H100 SXM); "
               "NVLink 4 900 GB/s bidirectional per GPU; DGX H200 8x400 Gb/s ConnectX-7",
    ),
)


def lookup_datasheet(device_name: str) -> Datasheet | None:
    """The datasheet of a GPU by its torch device name, or None when not known."""
    for sheet in DATASHEETS:
        if all(p in device_name for p in sheet.name_patterns) and not any(
                p in device_name for p in sheet.excluded_patterns):
            return sheet
    return None
