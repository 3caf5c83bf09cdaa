"""Can a measured profile stand for the cluster a plan asks for? (Standard library + specs only.)

A measured profile describes the machines it ran on: `num_nodes` nodes of `gpus_per_node`
devices. Its intra-node collective tables stop at that node size and its inter-node figures exist
only if it spanned nodes, so a plan on more devices per node, or on more devices in all, would be
costed from figures nobody measured. Built-in profiles describe a GPU type, not a cluster, and host
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
    num_measured = profile.num_nodes * profile.gpus_per_node
    if num_gpus > num_measured:
        raise AutoplanError(
            f"profile {profile.name!r} measured {profile.num_nodes} node(s) x {profile.gpus_per_node} device(s) = "
            f"{num_measured} but the plan asks for {num_gpus}; plan for at most {num_measured} devices, profile "
            f"the whole cluster (torchrun ... -m profiler --out PATH), or use a built-in profile")
