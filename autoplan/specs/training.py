"""TrainingSpec (the training shape) and ClusterSpec (which GPUs, how many, which profile)."""
from __future__ import annotations

from dataclasses import asdict, dataclass

from autoplan.specs.choices import DTYPES
from autoplan.specs.errors import SchemaError
from autoplan.specs.jsonio import require
from autoplan.specs.schemas import validate_cluster, validate_training
from autoplan.specs.validation import MAX_GLOBAL_BATCH, MAX_GPUS_PER_NODE, MAX_MOE_LOAD_IMBALANCE, MAX_NUM_GPUS, \
    MAX_SEQ_LEN, Issues, refuse_unknown_fields, require_object

BYTES_PER_ELEMENT = {"bf16": 2, "fp16": 2, "fp8": 1, "fp32": 4}


def _check_counts(spec, what: str, bounds: tuple) -> None:
    """Each (field, upper bound) of `spec` a positive integer at most its bound, else one SchemaError line."""
    for key, high in bounds:
        v = getattr(spec, key)
        if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
            raise SchemaError(f"{what} {key} must be a positive integer, got {v!r}")
        if v > high:
            raise SchemaError(f"{what} {key} must be at most {high:,}, got {v:,}")


@dataclass(frozen=True)
class TrainingSpec:
    global_batch_size: int
    """Sequences per optimizer step, over all data-parallel replicas."""
    seq_len: int
    """Tokens per sequence."""
    dtype: str = "bf16"
    """Compute dtype of the matmuls. fp8 keeps bf16 weights/activations outside the GEMMs."""
    optimizer: str = "adamw"
    moe_load_imbalance: float = 0.0
    """Mixture-of-experts models: routed tokens of the busiest expert-parallel rank over the mean rank's,
    as the user's own run measured them (torchtitan 0.3.0 counts them per MoE layer in its tokens_per_expert_E
    buffer, models/common/moe.py; Megatron-Core's dispatchers count tokens_per_expert each step but
    log only the balance losses); 0: the framework's default (cost_model/moe_time.py: 1.25 for a dropless
    router trained with a balance loss, 1 where the framework forces balanced routing)."""

    @property
    def tokens_per_step(self) -> int:
        return self.global_batch_size * self.seq_len

    def to_dict(self) -> dict:
        """Every field; moe_load_imbalance only when set, so the plan ids and files of plans made without
        it stay as they were."""
        data = asdict(self)
        if not self.moe_load_imbalance:
            del data["moe_load_imbalance"]
        return data

    @classmethod
    def from_dict(cls, data: dict, what: str = "training") -> "TrainingSpec":
        issues = Issues(what)
        validate_training(require_object(data, what), issues, prefix="")
        issues.raise_if_any()
        refuse_unknown_fields(data, cls.__dataclass_fields__, what)
        spec = cls(
            global_batch_size=require(data, "global_batch_size", int, what),
            seq_len=require(data, "seq_len", int, what),
            dtype=data.get("dtype", "bf16"),
            optimizer=data.get("optimizer", "adamw"),
            moe_load_imbalance=float(data.get("moe_load_imbalance", 0.0)),
        )
        spec.check()
        return spec

    def check(self) -> None:
        _check_counts(self, "training", (("global_batch_size", MAX_GLOBAL_BATCH), ("seq_len", MAX_SEQ_LEN)))
        if self.dtype not in DTYPES:
            raise SchemaError(f"training dtype must be one of {DTYPES}, got {self.dtype!r}")
        if self.optimizer != "adamw":
            raise SchemaError(f"training optimizer must be 'adamw' (the only one modelled), got {self.optimizer!r}")
        if self.moe_load_imbalance and not 1.0 <= self.moe_load_imbalance <= MAX_MOE_LOAD_IMBALANCE:
            raise SchemaError(f"training moe_load_imbalance (busiest expert-parallel rank's routed tokens over the "
                              f"mean) must be 0 (the framework's default) or 1 to {MAX_MOE_LOAD_IMBALANCE:g}, got "
                              f"{self.moe_load_imbalance!r}")


@dataclass(frozen=True)
class ClusterSpec:
    name: str
    """GPU type name of the profile, e.g. "h100-80gb"."""
    num_gpus: int
    gpus_per_node: int = 8
    profile: str = ""
    """Where the HardwareProfile comes from: "builtin:<name>" or a file path."""

    @property
    def num_nodes(self) -> int:
        return -(-self.num_gpus // self.gpus_per_node)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict, what: str = "cluster") -> "ClusterSpec":
        issues = Issues(what)
        validate_cluster(require_object(data, what), issues, prefix="")
        issues.raise_if_any()
        refuse_unknown_fields(data, cls.__dataclass_fields__, what)
        spec = cls(
            name=require(data, "name", str, what),
            num_gpus=require(data, "num_gpus", int, what),
            gpus_per_node=require(data, "gpus_per_node", int, what) if "gpus_per_node" in data else 8,
            profile=data.get("profile", "") or "",
        )
        spec.check()
        return spec

    def check(self) -> None:
        _check_counts(self, "cluster", (("num_gpus", MAX_NUM_GPUS), ("gpus_per_node", MAX_GPUS_PER_NODE)))
