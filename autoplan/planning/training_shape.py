"""The training shape a planning request did not fully give: the defaults chosen (sequence length, global
batch, the MoE load assumed) and a line for each, which the commands print as `default  ...`."""
from __future__ import annotations

import math

from autoplan.inputs.clusters import check_count
from autoplan.specs import AutoplanError, ClusterSpec, ModelSpec, TrainingSpec

DEFAULT_SEQ_LEN = 4096
DEFAULT_TOKENS_PER_STEP = 2**22
"""~4M tokens per optimizer step: the batch of Llama 2 (4M tokens, arXiv 2307.09288 sec. 2.2) and the
order of GPT-3's 175B run (3.2M, arXiv 2005.14165 Table 2.1)."""


def default_global_batch(num_gpus: int, seq_len: int) -> int:
    """~4M tokens, but at least one sequence per 8 GPUs so huge clusters still have micro-batches
    to pipeline; and (odd part of the GPU count) x a power of two, the power nearest in log scale,
    so the batch divides over data-parallel degrees that are products of the GPU count's factors
    (384 GPUs -> a multiple of 3)."""
    target = max(1, DEFAULT_TOKENS_PER_STEP // seq_len, num_gpus // 8)
    odd = num_gpus
    while odd % 2 == 0:
        odd //= 2
    power = max(0, round(math.log2(target / odd))) if target > odd else 0
    return odd << power


def training_shape(model: ModelSpec, cluster: ClusterSpec, seq_len: int | None, global_batch_size: int | None,
                   dtype: str, moe_load_imbalance: float = 0.0) -> tuple[TrainingSpec, list]:
    """The training shape, with defaults for what was not given and a line for each default.
    `moe_load_imbalance`: the user's measured busiest/mean expert-parallel load (--moe-load-imbalance)."""
    if moe_load_imbalance and not model.is_moe:
        raise AutoplanError(f"--moe-load-imbalance {moe_load_imbalance:g} is the routing of a mixture-of-experts "
                            f"model; {model.name} has no experts: drop the flag")
    defaults = []
    if seq_len is None:
        seq_len = min(DEFAULT_SEQ_LEN, model.max_seq_len)
        why = "default" if seq_len == DEFAULT_SEQ_LEN else f"default {DEFAULT_SEQ_LEN} capped at the model's context"
        defaults.append(f"seq_len {seq_len} ({why}; set --seq-len)")
    check_count("--seq-len", seq_len)
    if global_batch_size is None:
        global_batch_size = default_global_batch(cluster.num_gpus, seq_len)
        defaults.append(f"global batch {global_batch_size} sequences = {global_batch_size * seq_len / 1e6:.2f}M tokens "
                        f"(default: ~4M tokens, at least num_gpus/8 sequences, divisible over the GPUs; "
                        f"set --global-batch)")
    check_count("--global-batch", global_batch_size)
    if model.is_moe and not moe_load_imbalance:
        from cost_model.moe_time import DEFAULT_EXPERT_LOAD_IMBALANCE
        defaults.append(f"MoE load {DEFAULT_EXPERT_LOAD_IMBALANCE:g}x the mean on the busiest expert-parallel rank "
                        f"(the framework's default for a dropless router with a balance loss, Switch Transformer "
                        f"sec. 2.2; set --moe-load-imbalance to your run's)")
    training = TrainingSpec(global_batch_size=global_batch_size, seq_len=seq_len, dtype=dtype,
                            moe_load_imbalance=moe_load_imbalance)
    training.check()
    return training, defaults
