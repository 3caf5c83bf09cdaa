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
