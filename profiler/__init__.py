"""Measure a machine or a cluster and write a HardwareProfile (schema autoplan.profile/v1).

`autoplan profile --out cluster.json` on one machine, `torchrun ... -m profiler --out ...` across
nodes. Imports only autoplan.specs (plus torch, pandas, tqdm): never the cost model.

Names are re-exported lazily so that the comparison stays importable without torch; the measuring modules load torch when first used.
"""
from __future__ import annotations

import importlib

_EXPORTS = {
    "build_profile": "profiler.build", "samples_path": "profiler.build",
    "algorithm_bandwidth_bytes_per_s": "profiler.collectives", "bus_bandwidth_factor": "profiler.collectives",
    "group_layouts": "profiler.collectives",
    "comparison_rows": "profiler.compare", "format_comparison": "profiler.compare",
    "check_output_path": "profiler.launch", "profile_local": "profiler.launch",
    "profile_under_torchrun": "profiler.launch", "resolve_device": "profiler.launch",
    "resolve_nproc": "profiler.launch",
    "ProfileRequest": "profiler.runner",
    "Sweep": "profiler.sweeps", "sweep_for": "profiler.sweeps",
    "TimingPolicy": "profiler.timing",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'profiler' has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
