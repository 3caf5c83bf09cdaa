"""Cluster resolution: `--gpu TYPE --gpus N --gpus-per-node G --profile PATH` -> (ClusterSpec,
HardwareProfile). A built-in profile is named `builtin:<name>` in the plan file; a measured one by
its path, so a plan says which numbers it was predicted with.
"""
from __future__ import annotations

from pathlib import Path

from autoplan.specs import AutoplanError, ClusterSpec, HardwareProfile
from autoplan.specs.compat import check_profile_hosts

DEFAULT_GPU = "h100-80gb"
DEFAULT_GPUS_PER_NODE = 8


def check_count(name: str, value) -> int:
    """A GPU or batch count given by the user: a positive integer, else one clear line."""
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise AutoplanError(f"{name} must be a positive integer, got {value!r}")
    return value


def builtin_gpu_names() -> tuple:
    from cost_model import BUILTIN_PROFILE_NAMES

    return tuple(BUILTIN_PROFILE_NAMES)


def load_profile_file(path: str | Path) -> HardwareProfile:
    """A measured HardwareProfile JSON; any defect (unreadable, wrong schema, bad field) is one line."""
    try:
        return HardwareProfile.load(path)
    except (TypeError, ValueError, KeyError, AttributeError) as exc:
        raise AutoplanError(f"hardware profile {str(path)!r} is malformed ({type(exc).__name__}: {exc}); "
                            f"regenerate it with `autoplan profile`") from None


def check_dtype(profile: HardwareProfile, dtype: str) -> None:
    """fp8 needs hardware fp8 matmuls (Hopper and later); the profile says which dtypes it has."""
    if dtype not in profile.peak_flops_per_s:
        raise AutoplanError(f"--dtype {dtype} is not supported by {profile.name} (it has "
                            f"{', '.join(sorted(profile.peak_flops_per_s))}); pick one of those or another --gpu")


def suggest_gpu(name: str, known) -> list:
    """Known GPU types a mistyped one probably meant: those it starts ("h100" -> h100-80gb,
    h100-96gb-500w), else those of its chip ("h100-sxm", "H100 SXM5" -> the h100 ones), else the
    closest spellings ("h10-80gb" -> h100-80gb)."""
    import difflib

    key = name.strip().lower().replace(" ", "-").replace("_", "-")
    if not key:
        return []
    chip = key.split("-")[0]
    return ([k for k in known if k.startswith(key)] or [k for k in known if len(chip) >= 3 and k.split("-")[0] == chip]
            or difflib.get_close_matches(key, known, n=2, cutoff=0.6))


def resolve_cluster(num_gpus: int, gpu: str | None = None, gpus_per_node: int | None = None,
                    profile_path: str | None = None) -> tuple[ClusterSpec, HardwareProfile]:
    """The cluster to plan for and the profile its costs come from.

    `--profile` wins over `--gpu` (a measured profile already says which GPU it is); gpus per node
    defaults to the profile's own figure for a measured profile and to 8 otherwise.
    """
    check_count("--gpus", num_gpus)
    if gpus_per_node is not None:
        check_count("--gpus-per-node", gpus_per_node)
    if profile_path is not None:
        if gpu is not None:
            raise AutoplanError(f"pass either --gpu {gpu} or --profile {profile_path}, not both "
                                f"(a measured profile already names its GPU)")
        profile = load_profile_file(profile_path)
        per_node = gpus_per_node or profile.gpus_per_node or DEFAULT_GPUS_PER_NODE
        source = str(Path(profile_path).resolve())  # absolute: the plan file may be read from elsewhere
    else:
        from cost_model import builtin_profile

        name = (DEFAULT_GPU if gpu is None else gpu).strip().lower()
        known = builtin_gpu_names()
        if name not in known:
            close = suggest_gpu(name, known)
            hint = f"did you mean {' or '.join(close)}? " if close else ""
            raise AutoplanError(f"unknown GPU type {gpu!r}; {hint}known: {', '.join(known)} "
                                f"(or measure yours with `autoplan profile` and pass --profile)")
        profile = builtin_profile(name)
        per_node = gpus_per_node or DEFAULT_GPUS_PER_NODE
        source = f"builtin:{name}"
    if num_gpus > per_node and num_gpus % per_node:
        raise AutoplanError(f"--gpus {num_gpus} is not a whole number of {per_node}-GPU nodes; "
                            f"use a multiple of {per_node} (or set --gpus-per-node)")
    check_profile_hosts(profile, num_gpus, per_node)
    cluster = ClusterSpec(name=profile.name, num_gpus=num_gpus, gpus_per_node=per_node, profile=source)
    cluster.check()
    return cluster, profile


def cluster_for_plan_file(cluster: ClusterSpec, base_dir: Path | None = None) -> HardwareProfile:
    """The profile a plan file was predicted with, so `estimate plan.json` re-scores it the same way."""
    source = cluster.profile or f"builtin:{cluster.name}"
    if source.startswith("builtin:"):
        from cost_model import builtin_profile

        name = source.split(":", 1)[1]
        if name not in builtin_gpu_names():
            raise AutoplanError(f"plan file names the built-in profile {name!r}, which this version does not know; "
                                f"known: {', '.join(builtin_gpu_names())}")
        return builtin_profile(name)
    path = Path(source)
    if not path.exists() and base_dir is not None and (Path(base_dir) / path.name).exists():
        path = Path(base_dir) / path.name  # plan and profile moved together to another folder
    return load_profile_file(path)
