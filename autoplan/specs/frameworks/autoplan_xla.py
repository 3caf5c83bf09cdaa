"""autoplan-xla: this project's torch_xla SPMD executor (`autoplan run --backend xla`)."""
from __future__ import annotations

from autoplan.specs.framework import Framework
from autoplan.specs.frameworks.autoplan import AUTOPLAN_STATES


AUTOPLAN_XLA = Framework(
    name="autoplan-xla", version="autoplan 0.1 executor, torch_xla 2.9 SPMD backend",
    description="this project's torch_xla SPMD executor (`autoplan run --backend xla`): one SPMD "
                "program over a (dp, cp, tp) mesh, ZeRO by sharding annotations",
    states=AUTOPLAN_STATES, selective_recompute="attention", fused_cross_entropy=False,
    flash_attention=False, dtypes=("bf16", "fp32"), max_pp=1, max_vpp=1, moe=False,
    seq_len_within_model=True, tp_with_block_extras=False, cp_with_masked_attention=False, mla=False,
    sources={"max_pp": "executor/xla_backend: one SPMD program, no pipeline schedule",
             "moe": "executor/xla_backend: dense models only",
             "flash_attention": "XLA's CPU devices run attention as plain matmuls"})

LISTED_AT = 1
FRAMEWORKS = (AUTOPLAN_XLA,)
