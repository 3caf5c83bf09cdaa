"""megatron-2021: Megatron-LM as in Narayanan et al. 2021, the scaling paper's runs."""
from __future__ import annotations

import math

from autoplan.specs.framework import Framework


MEGATRON_2021 = Framework(
    name="megatron-2021", version="Megatron-LM of Narayanan et al. 2021 (arXiv 2104.04473)",
    description="historical: Megatron-LM as in the 2021 scaling paper (no flash attention, no CP/SP)",
    flash_attention=False, dp_comm_overlap=0.0, max_cp=1, sequence_parallel="never", zero_stages=(0,), mla=False,
    uneven_stages=False, uneven_interleaved=False, dp_bucket_params=math.inf,
    sources={"flash_attention": "2021: fused softmax, scores stored", "dp_comm_overlap":
             "2021: gradient all-reduce after the pipeline flush", "dp_bucket_params":
             "Megatron-LM v2.5 megatron/model/distributed.py (DDP-impl local): one all-reduce of the "
             "contiguous gradient buffer", "sequence_parallel":
             "introduced by Korthikanti et al. 2022",
             "uneven_stages": "Megatron-LM v2.5 megatron/model/transformer.py: 'num_layers must be "
                              "divisible by pipeline_model_parallel_size'",
             "uneven_interleaved": "Megatron-LM v2.5: num_layers_per_stage must be divisible by "
                                   "the virtual pipeline size"})

LISTED_AT = 6
FRAMEWORKS = (MEGATRON_2021,)
