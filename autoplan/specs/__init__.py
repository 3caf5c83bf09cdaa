"""The shared vocabulary of autoplan. Standard library only: planning runs without torch."""
from autoplan.specs.choices import COLLECTIVE_OPS, DTYPES, NIC_SHARE_OPS, RECOMPUTE_POLICIES, SCOPES
from autoplan.specs.errors import AutoplanError, InfeasiblePlan, SchemaError
from autoplan.specs.estimate import CostEstimate
from autoplan.specs.framework import Framework, StateTerm
from autoplan.specs.frameworks import DEFAULT_FRAMEWORK, FRAMEWORK_NAMES, FRAMEWORKS, get_framework
from autoplan.specs.headroom import MemoryHeadroom, parse_headroom, resolve_headroom
from autoplan.specs.hardware import (
    PROFILE_SCHEMA, AttentionSample, CollectiveSample, HardwareProfile,
    MatmulSample, MemoryOpSample,
)
from autoplan.specs.jsonio import read_json, write_json_atomic
from autoplan.specs.measurement import (
    MEASUREMENT_SCHEMA, Measurement, append_measurement, read_measurements,
)
from autoplan.specs.model import ModelSpec
from autoplan.specs.output import (
    append_output, check_output, check_output_folder, is_stdout, publish_folder, staging_folder, write_output,
    write_text_atomic,
)
from autoplan.specs.plan import ParallelPlan
from autoplan.specs.planfile import AUTOPLAN_VERSION, PLAN_SCHEMA, PLAN_SCHEMA_V1, PlanDocument, plan_id
from autoplan.specs.training import BYTES_PER_ELEMENT, ClusterSpec, TrainingSpec

__all__ = [
    "AUTOPLAN_VERSION", "AttentionSample", "AutoplanError", "BYTES_PER_ELEMENT", "COLLECTIVE_OPS", "NIC_SHARE_OPS",
    "ClusterSpec", "CollectiveSample", "CostEstimate", "DEFAULT_FRAMEWORK", "DTYPES", "FRAMEWORKS",
    "FRAMEWORK_NAMES", "Framework", "StateTerm", "get_framework", "HardwareProfile", "InfeasiblePlan",
    "MEASUREMENT_SCHEMA", "MatmulSample", "Measurement", "MemoryHeadroom", "MemoryOpSample", "ModelSpec",
    "PLAN_SCHEMA", "PLAN_SCHEMA_V1", "PROFILE_SCHEMA", "ParallelPlan", "PlanDocument", "RECOMPUTE_POLICIES", "SCOPES",
    "SchemaError", "TrainingSpec", "append_measurement", "parse_headroom", "plan_id", "read_json", "read_measurements",
    "resolve_headroom",
    "append_output", "check_output", "check_output_folder", "is_stdout", "publish_folder", "staging_folder",
    "write_json_atomic", "write_output", "write_text_atomic",
]
