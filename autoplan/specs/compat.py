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
from autoplan.specs.frameworks.autoplan import AUTOPLAN_SPEEDUPS
from autoplan.specs.gpus import lookup_gpu


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


# Which plans each executor backend runs (executor/torch_backend/checks.py and
# executor/xla_backend/launch.py refuse the others): a measurement of a plan made for another
# framework times software the prediction did not describe.
BACKEND_FRAMEWORKS = {"torch": ("autoplan", "autoplan-91ee867"), "xla": ("autoplan-xla", "autoplan")}

def record_framework(record, plan_framework: str) -> str:
    """The framework whose facts describe what a measurement ran: the plan's, except that a torch
    run of an `autoplan` plan without the executor's speed-ups (AUTOPLAN_SPEEDUPS all off, or made
    before they could be switched: no options, or options without "without"; every torch record
    has carried them since) ran autoplan-91ee867's executor."""
    if plan_framework != "autoplan" or record.backend != "torch":
        return plan_framework
    options = record.extra.get("options")
    without = options.get("without") if isinstance(options, dict) else None
    if without is None or set(AUTOPLAN_SPEEDUPS) <= set(without):
        return "autoplan-91ee867"
    return plan_framework


def _hardware_of_run(environment: dict) -> tuple[str, str]:
    """("gpu" | "cpu", device name) of a measured run, from its environment stamp."""
    device = str(environment.get("device", ""))
    return ("gpu" if device == "cuda" else "cpu"), str(environment.get("device_name") or device or "unknown device")


def measurement_mismatch(record, planned: HardwareProfile, framework: str) -> str | None:
    """Why a measurement and the prediction it is compared with describe different things, or None.

    `planned` is the profile the plan was predicted with, `framework` the plan's framework. A CPU run
    of a plan predicted for a GPU (or the reverse), a run on another GPU type, or a backend that does
    not run that framework: the error between the two numbers then measures the mismatch, not the
    cost model. Two CPU runs are not told apart (a CPU's name says little about its speed)."""
    ran_kind, ran_name = _hardware_of_run(record.environment)
    planned_kind = "cpu" if planned.device_kind == "cpu" else "gpu"
    where = f"plan {record.plan_id} was predicted for {planned.name} ({planned_kind}) but ran on {ran_name} ({ran_kind})"
    if not record.environment.get("device"):
        return None  # a crashed run's stamp names no device: nothing to compare
    if ran_kind != planned_kind:
        return where
    if ran_kind == "gpu":
        ran_sheet, planned_sheet = lookup_gpu(ran_name), lookup_gpu(planned.device_name)
        if ran_sheet is not None and planned_sheet is not None and ran_sheet.key != planned_sheet.key:
            return where
    accepted = BACKEND_FRAMEWORKS.get(record.backend)
    if accepted is not None and framework not in accepted:
        return (f"plan {record.plan_id} was predicted for framework {framework!r} but ran on the {record.backend} "
                f"backend ({' / '.join(accepted)})")
    return None


MISMATCH_ADVICE = ("re-plan for the hardware it runs on (--profile PATH from `autoplan profile`, or the shipped "
                   "profiler/data/cpu2-quick.json on a CPU) so prediction and measurement describe the same machine")
