"""TrainingSpec (the training shape) and ClusterSpec (which GPUs, how many, which profile)."""
from __future__ import annotations

from dataclasses import asdict, dataclass

from autoplan.specs.schemas import validate_cluster, validate_training
from autoplan.specs.validation import check_spec_fields, spec_from_dict

BYTES_PER_ELEMENT = {"bf16": 2, "fp16": 2, "fp8": 1, "fp32": 4}


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

    def __post_init__(self) -> None:
        if isinstance(self.moe_load_imbalance, int) and not isinstance(self.moe_load_imbalance, bool):
            object.__setattr__(self, "moe_load_imbalance", float(self.moe_load_imbalance))  # JSON's 2 is 2.0

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
        return spec_from_dict(cls, data, what, validate_training)

    def check(self) -> None:
        check_spec_fields(self, "training", validate_training)


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
        return spec_from_dict(cls, data, what, validate_cluster)

    def check(self) -> None:
        check_spec_fields(self, "cluster", validate_cluster)
