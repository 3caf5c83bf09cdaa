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
    "ep_comm": ("MoE token dispatch and combine (all-to-all over ep, gather over expert TP)",
                "per pass: the routed tokens' all-to-all each way over ep, their all-gather and reduce-scatter over "
                "etp, or the allgather dispatcher's (Framework.moe_dispatch)"),
    "pp_comm": ("pipeline point-to-point sends", "b*s*h/t per micro-batch and virtual stage (Narayanan sec. 4.1)"),
    "pp_bubble": ("pipeline fill and drain: (pp-1)/(vpp*micro-batches) of the step (unequal stages: the other "
                  "ranks' time)", "Narayanan et al. 2021 sec. 2.2"),
    "dp_comm": ("data-parallel / ZeRO gradient and weight collectives, exposed part",
                "ZeRO (Rajbhandari et al. 2019) sec. 7 volumes; overlap per framework"),
    "weight_casts": ("casts of fp32 weights to the compute dtype + gradient accumulation outside the GEMM",
                     "Framework.weight_cast_bytes_per_param and grad_accumulation_bytes over the profile's copy "
                     "bandwidth (0 for frameworks that keep compute-dtype weights and fuse the accumulation)"),
    "sharded_copies": ("FSDP2's copies around its collectives: all-gather output into the parameters, "
                       "gradients into the reduce-scatter input", "Framework.gather_copy_bytes_per_param and "
                       "reduce_copy_bytes_per_param per gather and reduction over the profile's copy bandwidth "
                       "(torch distributed/fsdp/_fully_shard/_fsdp_collectives.py)"),
    "optimizer": ("AdamW update of the local shard",
                  "memory-bound: Framework.optimizer_bytes_per_param (fused AdamW + clip 40 B, for-each AdamW + clip 92 B)"),
    "sync_wait": ("waiting for the slowest GPU: step jitter x E[max of N GPUs' normal scatter]",
                  "order statistics of N i.i.d. normals (~sqrt(2 ln N)); jitter measured on the H100 records "
                  "(cost_model/scale_terms.py)"),
    "host_issue": ("GPU idle while the host issues kernels (eager kernels shorter than their launch)", "max(GPU time, layers x kernels per layer x host s per kernel) per "
                   "micro-batch, eager PyTorch's counted and measured (cost_model/host_time.py)"),
    "overhead": ("host time of sharding hooks or a blocking pipeline engine",
                 "fitted per framework (cost_model/data/constants.json)"),
}

MEMORY_TERMS = {
    "params": ("weights held by this GPU (dtype: the framework's)", "Framework.states (autoplan.specs.frameworks)"),
    "grads": ("gradients held by this GPU (dtype: the framework's)", "Framework.states"),
    "grad_partition": ("fp32 copy of this rank's gradient partition the optimizer updates from",
                       "Framework.states (DeepSpeed ZeRO, stage_1_and_2.py)"),
    "grad_accumulator": ("gradients the micro-batches add into (DeepSpeed BF16_Optimizer: whole, its accumulation dtype)",
                         "Framework.by_dtype (deepspeed/runtime/bf16_optimizer.py)"),
    "optimizer": ("Adam moments (+ fp32 master weights where kept apart from the weights)",
                  "Framework.states; ZeRO (Rajbhandari et al. 2019) sec. 3"),
    "weight_copies": ("compute-dtype copy of the weights kept from forward to backward",
                      "Framework.compute_weight_copy_bytes (autocast cache, FSDP2 gathered weights), "
                      "Framework.fp8_weight_workspace_bytes (Transformer Engine's cached fp8 weight and transpose)"),
    "activations": ("saved for backward, all micro-batches in flight",
                    "Framework.activation_recipe: Korthikanti et al. 2022 Table 2 per named tensor, or the "
                    "executor's saved tensors (cost_model/eager_activations.py); 1F1B in-flight count "
                    "(Narayanan sec. 2.2.1)"),
    "activation_working": ("the peak phase's backward working set: a layer's gradients, or the loss's",
                           "cost_model/stage_memory.py phases"),
    "logits": ("last stage: what the head and loss save", "Korthikanti sec. 4.3 (4sbv/t); eager: fp32 log_softmax"),
    "comm_buffers": ("ZeRO-3 gathered weights and unsharded gradients",
                     "FSDP prefetch of one layer ahead; DeepSpeed's live-parameter and reduce buckets"),
    "optimizer_working": ("for-each AdamW's fp32 sqrt(v) temporary, when the optimizer step is the peak",
                          "torch/optim/adamw.py _multi_tensor_adamw"),
    "allocator_overhead": ("allocator headroom: one largest transient block (not allocated)",
                           "H100 out-of-memory records: reserved-but-free 0.2-1.0x the failing request"),
    "cuda_context": ("outside the allocator: CUDA context, kernels, cuBLAS/NCCL",
                     "Framework.runtime_bytes (autoplan: 1.29 GiB measured on H100; others 0.5 GiB assumed)"),
    "cpu_runtime": ("CPU plans: what the process holds beyond its tensors after its first step (lazily "
                    "imported modules, gloo and heap buffers)",
                    "the CPU profile's runtime_memory_bytes, measured by profiler/runtime_memory.py"),
}


def meaning(term: str, memory: bool = False) -> str:
    """What a breakdown term is, in one line ("" for a term this version does not know)."""
    table = MEMORY_TERMS if memory else TIME_TERMS
    return table.get(term, ("", ""))[0]
