"""Host issue time: when the CPU, not the GPU, sets the pace of a micro-batch.

An eager PyTorch step issues every kernel from the host (Python, the dispatcher, autograd, then
cudaLaunchKernel) while the GPU runs the ones already queued. The GPU waits only when the host falls
behind, so a micro-batch takes max(GPU time, host issue time): the exposed host time is
max(0, host - GPU), zero for every run whose kernels are longer than it takes to issue them (NVIDIA,
"CUDA Graph Best Practice for PyTorch", docs.nvidia.com/dl-cuda-graph: launch overhead shows "when
the CPU cannot keep up with feeding work to the GPU"; each launch costs microseconds, Modal GPU
Glossary, "CUDA Graph"). The host issue time is a count times a measured cost:

  host issue s per micro-batch = layers on the rank x kernels per layer x host s per kernel

Both factors are Framework fields (kernels_per_layer, host_s_per_kernel); for eager PyTorch they are
the repository's own measurements (autoplan/specs/frameworks/_eager.py EAGER_KERNELS_PER_LAYER,
EAGER_HOST_S_PER_KERNEL). A framework that leaves them at 0 has no host term, and so does a CPU
profile: there the host runs the kernels it issues, one after the other, and the profile's timings of
them already hold the dispatch.
"""
from __future__ import annotations

def host_issue_s(layers: int, kernels_per_layer: float, host_s_per_kernel: float) -> float:
    """Seconds the host needs to issue one micro-batch's layer kernels on a rank with `layers` layers."""
    return layers * kernels_per_layer * host_s_per_kernel


def exposed_host_s(gpu_s: float, layers: int, kernels_per_layer: float, host_s_per_kernel: float) -> float:
    """Seconds a micro-batch waits for the host beyond its `gpu_s` of GPU work: the micro-batch takes
    max(gpu_s, host issue time), so this is the part of the host time the GPU does not hide."""
    return max(0.0, host_issue_s(layers, kernels_per_layer, host_s_per_kernel) - gpu_s)


def microbatch_host_wait_s(profile, framework, gpu_s: float, layers: int) -> float:
    """exposed_host_s with `framework`'s facts, 0 on a CPU profile (no device to starve). Under
    synchronous launches (Framework.launch_blocking: CUDA_LAUNCH_BLOCKING=1) the GPU is idle while the
    host issues each kernel, so all of the host issue time shows."""
    if getattr(profile, "device_kind", "gpu") == "cpu":
        return 0.0
    if framework.launch_blocking:
        return host_issue_s(layers, framework.kernels_per_layer, framework.host_s_per_kernel)
    return exposed_host_s(gpu_s, layers, framework.kernels_per_layer, framework.host_s_per_kernel)
