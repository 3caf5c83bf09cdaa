"""llm-foundry: MosaicML llm-foundry on Composer FSDP."""
from __future__ import annotations

from autoplan.specs.framework import Framework, fsdp2_states


LLM_FOUNDRY = Framework(
    name="llm-foundry", version="MosaicML llm-foundry 0.x with Composer FSDP (2023-2024)",
    description="MosaicML llm-foundry: PyTorch FSDP (Composer) data parallelism, flash attention",
    states=fsdp2_states("FSDP flat-parameter master"), zero_stages=(0, 2, 3), hsdp_zero_stages=(2, 3),
    max_tp=1, max_pp=1,
    max_cp=1, max_vpp=1, sequence_parallel="never", loss_bytes_per_logit=2.0, mla=False,
    sources={"loss_bytes_per_logit": "llm-foundry MPT yamls: loss_fn fused_crossentropy (flash-attn's "
                                     "cross_entropy, inplace_backward: the gradient overwrites the bf16 logits)",
             "zero_stages": "Composer FSDP sharding_strategy NO_SHARD / SHARD_GRAD_OP / FULL_SHARD",
             "hsdp_zero_stages": "Composer composer/distributed/dist_strategy.py: over a 2-D device mesh "
                                 "SHARD_GRAD_OP runs as _HYBRID_SHARD_ZERO2 and FULL_SHARD as HYBRID_SHARD",
             "max_tp": "llm-foundry trains with FSDP only (its benchmark tables)"})

LISTED_AT = 5
FRAMEWORKS = (LLM_FOUNDRY,)
