"""The breakdown terms of an estimate: name -> (what it is, where its formula comes from).

One table, read by every renderer (`autoplan search/estimate` text, the HTML report), so a term
means the same everywhere. docs/cost_model.md has the formulas. Each CostEstimate's time terms sum
to the step time and its memory terms to the peak; a term absent from an estimate is zero there.
"""
from __future__ import annotations

TIME_TERMS = {
    "compute": ("GEMMs and attention, forward + backward, at the profile's shape efficiency",
                "per-GEMM shapes after the TP split (Shoeybi et al. 2019); backward = 2x forward "
                "(Narayanan et al. 2021 sec. 3.5); rates from the hardware profile"),
    "memory_bound": ("norms, activations, residual adds, RoPE, loss: HBM-bandwidth bound",
                     "bytes read + written per element op over the profile's copy bandwidth"),
    "recompute": ("forward passes re-run by activation checkpointing",
                  "Korthikanti et al. 2022 sec. 5: selective reruns the attention core, full the whole layer"),
    "tp_comm": ("tensor-parallel all-reduce / SP all-gather + reduce-scatter, exposed part",
                "4 collectives of b*s*h per layer and micro-batch (Narayanan 2021 sec. 3.2; Korthikanti sec. 4.2.2)"),
    "cp_comm": ("context-parallel K/V exchange not hidden behind attention",
                "all-gather of K and V over the cp group, overlapped with attention"),
    "ep_comm": ("MoE all-to-all dispatch and combine", "2 all-to-alls forward, 2 backward, of the routed tokens"),
    "pp_comm": ("pipeline point-to-point sends", "b*s*h/t per micro-batch and virtual stage (Narayanan sec. 4.1)"),
    "pp_bubble": ("pipeline fill and drain: (pp-1)/(vpp*micro-batches) of the step",
                  "Narayanan et al. 2021 sec. 2.2"),
    "dp_comm": ("data-parallel / ZeRO gradient and weight collectives, exposed part",
                "ZeRO (Rajbhandari et al. 2019) sec. 7 volumes; overlap per framework"),
    "optimizer": ("AdamW update of the local shard", "memory-bound: 30 bytes read + written per parameter"),
    "overhead": ("host time of sharding hooks or a blocking pipeline engine",
                 "fitted per framework (cost_model/data/constants.json)"),
}

MEMORY_TERMS = {
    "params": ("weights held by this GPU (dtype: the framework's)", "Framework.states (autoplan.specs.frameworks)"),
    "grads": ("gradients held by this GPU (fp32 in every built-in framework)", "Framework.states"),
    "optimizer": ("optimizer states: Adam moments (+ fp32 master weights where the framework keeps them apart)",
                  "Framework.states; ZeRO (Rajbhandari et al. 2019) sec. 3"),
    "weight_copies": ("compute-dtype copy of the weights kept from forward to backward",
                      "Framework.compute_weight_copy_bytes (autocast cache, FSDP2 gathered weights)"),
    "activations": ("saved for backward, all micro-batches in flight",
                    "Korthikanti et al. 2022 Table 2, per named tensor; 1F1B in-flight count (Narayanan sec. 2.2.1)"),
    "activation_working": ("one layer's backward working set", "one layer's activations at full sequence length"),
    "logits": ("last stage: logits and loss in fp32", "Korthikanti sec. 4.3 (4sbv/t), + the fp32 gradient when unfused"),
    "comm_buffers": ("ZeRO-3 gathered weights and unsharded gradients", "FSDP prefetch of one layer ahead"),
    "allocator_overhead": ("caching-allocator fragmentation", "assumption: 8% of the transient memory"),
    "cuda_context": ("CUDA context and kernels", "assumption: 0.5 GiB"),
}


def meaning(term: str, memory: bool = False) -> str:
    """What a breakdown term is, in one line ("" for a term this version does not know)."""
    table = MEMORY_TERMS if memory else TIME_TERMS
    return table.get(term, ("", ""))[0]
