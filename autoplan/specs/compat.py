"""Can a measured profile stand for the cluster a plan asks for? (Standard library + specs only.)

A measured profile describes the machines it ran on: `num_nodes` nodes of `gpus_per_node`
devices. Its intra-node collective tables stop at that node size and its inter-node figures exist
only if it spanned nodes, so a plan on more devices per node, or on more devices in all, would be
costed from figures nobody measured. More nodes than were measured are fine: per-GPU links carry
over (a one-node profile's network figure is the datasheet's, and its `sources` says so). Built-in profiles describe a GPU type, not a cluster, and host
any count.
"""
from __future__ import annotations

from autoplan.specs import AutoplanError, HardwareProfile


def check_profile_hosts(profile: HardwareProfile, num_gpus: int, gpus_per_node: int) -> None:
    """Raise AutoplanError (one line) when a measured `profile` cannot host num_gpus/gpus_per_node."""
    if not profile.measured:
        return
    if gpus_per_node > profile.gpus_per_node:
        raise AutoplanError(
            f"profile {profile.name!r} was measured on nodes of {profile.gpus_per_node} device(s) but the plan "
            f"asks for {gpus_per_node} per node; pass --gpus-per-node {profile.gpus_per_node} or fewer, or "
            f"profile a node with {gpus_per_node} devices")
    # Scaling out beyond the measured node count is what users do (profile one node, plan 128 GPUs):
    # per-GPU link figures carry over. Only a plan that crosses nodes when the profile has no
    # cross-node figure at all (neither measured nor from a datasheet) cannot be costed.
    if num_gpus > gpus_per_node and profile.num_nodes == 1 and profile.inter_node_bandwidth_bytes_per_s <= 0:
        raise AutoplanError(
            f"profile {profile.name!r} was measured on one node and has no cross-node bandwidth, but the plan "
            f"asks for {num_gpus} devices on {gpus_per_node}-device nodes; profile across nodes "
            f"(torchrun --nnodes 2 ... -m profiler --out PATH) or plan for at most {gpus_per_node} devices")


# fp32 bytes per parameter a CPU run holds: weights 4, gradients 4, AdamW's two moments 8.
_HOST_WEIGHT_BYTES, _HOST_GRAD_BYTES, _HOST_ADAM_BYTES = 4, 4, 8


def host_state_bytes(model, plan, num_devices: int) -> int:
    """A lower bound on the host memory a CPU run needs: fp32 weights, gradients and AdamW states on
    every device (sharded over tp*pp, and over dp as the ZeRO stage says; activations not counted).
    Torch processes and XLA's virtual CPU devices alike live in this host's memory."""
    per_shard = model.num_params / (plan.tp * plan.pp)
    zero = plan.zero_stage
    per_device = per_shard * (_HOST_WEIGHT_BYTES / (plan.dp if zero >= 3 else 1)
                              + _HOST_GRAD_BYTES / (plan.dp if zero >= 2 else 1)
                              + _HOST_ADAM_BYTES / (plan.dp if zero >= 1 else 1))
    return int(per_device * num_devices)


def available_host_bytes() -> int | None:
    """MemAvailable from /proc/meminfo (Linux); None where it cannot be read."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def check_host_memory(model, plan, num_devices: int, plan_name: str = "") -> None:
    """Refuse a CPU run whose model states alone exceed this machine's free memory: started anyway,
    its processes would swap or be killed by the OOM killer after minutes of work."""
    need, have = host_state_bytes(model, plan, num_devices), available_host_bytes()
    if have is not None and need > have:
        raise AutoplanError(
            f"plan {plan_name or model.name} ({model.name}, {model.num_params / 1e9:.2f}B params) needs at least "
            f"{need / 2**30:.1f} GiB of host memory for fp32 weights, gradients and AdamW states over "
            f"{num_devices} CPU devices, but {have / 2**30:.1f} GiB is available; run it with --device cuda, "
            f"or plan a smaller model")
