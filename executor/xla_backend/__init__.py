"""The `xla` backend: a plan run as one torch_xla SPMD program over a ("dp", "cp", "tp") mesh.

Importing this package does not import torch_xla; the runs happen in a worker process that does.
"""
from executor.xla_backend.launch import check, run, run_many
from executor.xla_backend.mesh import AXES, MeshShape
from executor.xla_backend.sharding import PARAM_SPECS, activation_specs, param_spec

__all__ = ["AXES", "MeshShape", "PARAM_SPECS", "activation_specs", "check", "param_spec", "run", "run_many"]
