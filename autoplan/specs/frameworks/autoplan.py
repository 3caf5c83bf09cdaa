"""autoplan: this project's torch.distributed executor (`autoplan run`), and the executor as the shipped
H100 records ran it (autoplan-91ee867, kept to re-score them)."""
from __future__ import annotations

from dataclasses import replace

from autoplan.specs.framework import Framework, StateTerm
from autoplan.specs.frameworks._eager import EAGER_HOST_S_PER_KERNEL, EAGER_KERNELS_PER_LAYER


AUTOPLAN_SPEEDUPS = ("bf16-params", "native-gqa", "rope-compute-dtype", "chunked-loss", "fused-adamw")
"""The torch executor's switchable speed-ups (executor/options.py SPEEDUPS) that change what the
`autoplan` framework's facts describe; with all of them off it runs as autoplan-91ee867."""


AUTOPLAN_RUNTIME_BYTES = 1.29 * 2 ** 30
"""Measured: the executor's process outside PyTorch's allocator on one H100 (see its source)."""

# The executor's memory-bound kernels over the cost model's minimal count, from one measured step
# (H100, plan l1-s2k-m4: Llama-3.2-1B, seq 2048, 4 micro-batches of 4; the kernel trace in
# cost_model/data/h100_runs/step_kernels_llama1b_mbs4.txt): 336.7 ms of elementwise/copy kernels,
# less the weight casts and gradient accumulation the cost model counts apart (24 B x 1.236e9 params x 4
# micro-batches = 44.7 ms on the shipped profile-full.json), over the minimal count's 87.3 ms on that
# same profile (cost_model/layer_time.py with a factor of 1). What it holds: fp32
# RoPE (x.float()), K/V repeat_interleave for grouped-query attention, unfused SiLU and gate multiply,
# the fp32 logits' cast, log-softmax and its backward (executor/model.py).
AUTOPLAN_ELEMENTWISE_FACTOR = (336.7 - 44.7) / 87.3

# The fused AdamW kernel's traffic per parameter: reads param, grad, exp_avg, exp_avg_sq and writes
# param, exp_avg, exp_avg_sq (7 x 4 B fp32), plus the for-each gradient clipping's norm (read 4) and
# scale (read + write 8).
AUTOPLAN_FUSED_ADAMW_BYTES = 7 * 4 + 12


AUTOPLAN_STATES = {
    "params": StateTerm(4, 1, "fp32 parameters: the master weights (FSDP2-sharded at ZeRO 1-3 and at one "
                              "replica; DDP or plain at ZeRO 0 with several)"),
    "grads": StateTerm(4, 2, "fp32 gradients, accumulated in fp32 over the micro-batches; ZeRO 1 keeps them "
                             "whole until the last micro-batch"),
    "optimizer": StateTerm(8, 1, "AdamW momentum 4 + variance 4 (fp32)"),
}

AUTOPLAN = Framework(
    name="autoplan",
    # Storage, rules and the activation recipe describe today's executor (its speed-ups on; the
    # recipe counted on the CPU by tests/test_memory_counting.py). The time facts (weight casts,
    # optimizer bytes, elementwise factor) were measured for the executor the shipped H100 records
    # ran (autoplan-91ee867): upper bounds for today's fused AdamW and bf16 weight copies until a
    # GPU re-measures (benchmarks/h100_remeasure.sh).
    version="autoplan 0.1 executor, torch backend (torch >= 2.9, torchao float8 for fp8); time facts: the "
            "executor of the shipped H100 records (91ee867), no fp8 step measured on a GPU yet",
    description="this project's torch.distributed executor (`autoplan run`): FSDP2/DDP, TP/SP, "
                "torch.distributed.pipelining, all-gather-KV context parallelism, dropless MoE",
    states=AUTOPLAN_STATES, compute_weight_copy_bytes=2.0, selective_recompute="attention",
    activation_recipe="eager", runtime_bytes=AUTOPLAN_RUNTIME_BYTES,
    fused_cross_entropy=True, flash_attention=True, attention_kernel="sdpa",
    dtypes=("bf16", "fp8", "fp32"),
    fp8_mla=False, fp8_expert_gemms=False, moe_grouped_gemm=True, fp8_weight_copy_bytes=1.0, min_microbatches_per_stage=True, tied_embeddings_one_stage=True,
    hsdp_zero_stages=(1, 2, 3),
    learned_positions_split_sequence=False, seq_len_within_model=True, tp_with_block_extras=False,
    cp_with_masked_attention=False, mla_padded_values=True,
    gemm_efficiency=1.0, attention_efficiency=1.0, elementwise_bytes_factor=AUTOPLAN_ELEMENTWISE_FACTOR,
    weight_cast_bytes_per_param=24.0, optimizer_bytes_per_param=AUTOPLAN_FUSED_ADAMW_BYTES,
    kernels_per_layer=EAGER_KERNELS_PER_LAYER, host_s_per_kernel=EAGER_HOST_S_PER_KERNEL,
    fused_adamw_on_cuda=True, zero2_reduce_every_microbatch=True, sharded_reduce_bytes_per_grad=4.0,
    options={"fp8-rowwise": {"fp8_rowwise": True, "fp8_weight_copy_bytes": 0.0}},
    sources={
        "moe_grouped_gemm": "executor/moe.py GroupedExperts: one torch._grouped_mm per weight over the local experts "
                            "where it runs (grouped_mm_runs: Hopper in bf16; the A100 and fp8 keep the per-expert "
                            "pricing, cost_model/grouped_gemm.py kernel_for)",
        "zero2_reduce_every_microbatch": "executor/torch_backend/train.py _set_grad_sync: FSDP2's gradient sync is "
                                         "turned off between micro-batches at ZeRO 0-1 only",
        "sharded_reduce_bytes_per_grad": "executor/torch_backend/parallelize.py mixed_precision: "
                                         "MixedPrecisionPolicy(reduce_dtype=torch.float32), so FSDP2 reduce-scatters, "
                                         "and accumulates unsharded gradients, in fp32",
        "fused_adamw_on_cuda": "executor/torch_backend/train.py _optimizers: torch.optim.AdamW(fused=True) on CUDA "
                               "(for-each on a CPU); the H200 allocator history of plan l1-s2k-m4-full "
                               "(cost_model/data/h100_runs/2026-11-28) holds no optimizer temporary",
        "hsdp_zero_stages": "executor/torch_backend/train.py fsdp_mesh: FSDP2 over the 2-D mesh (dp_replicate, "
                            "dp_shard x cp) of executor/torch_backend/parallel_dims.py, which all-reduces each "
                            "reduce-scattered shard over the replicas (tests/test_torch_backend.py runs it)",
        "tp_with_block_extras": "executor/torch_backend/parallelize.py: its TP plan covers the Llama/GPT "
                                "block's linears and multi-head latent attention only (q/k norms etc. would be "
                                "replicated without summed grads)",
        "cp_with_masked_attention": "executor/torch_backend/context_parallel.py: plain causal attention",
        "mla_padded_values": "executor/blocks.py LatentAttention: F.pad of the values to head_dim before SDPA",
        "states": "docs/executor.md (Speed): fp32 master weights, FSDP2 bf16 compute copies (at one replica "
                  "too), fp32 gradient accumulation, fused AdamW on CUDA",
        "compute_weight_copy_bytes": "FSDP2 (ZeRO 0-2 at one replica, ZeRO 1/2) keeps the gathered bf16 weights "
                                     "from the first forward to the last backward of a step; autocast's cache "
                                     "(ZeRO 0 with several replicas) holds them for the step",
        "fused_cross_entropy": "executor/loss.py: head matmul (+ bias, logit soft-capping) + cross-entropy "
                               "over token chunks, at most one 256 MiB chunk of fp32 logits; vocabulary-parallel "
                               "under tp > 1 (tests/test_chunked_loss.py)",
        "fused_elementwise": "torch.compile per block is on by default on CUDA, but its effect on the "
                             "memory-bound bytes is not measured yet: eager's 1.0 until a GPU run says more",
        "activation_recipe": "executor/blocks.py + executor/loss.py on FSDP2's bf16 weight copies, or under "
                             "bf16 autocast where FSDP2 does not wrap (train.py compute_mode); every saved "
                             "tensor counted by tests/test_memory_counting.py",
        "runtime_bytes": "1.29 GiB 'non-PyTorch memory' in each of the 4 out-of-memory records of "
                         "cost_model/data/h100_runs (H100, torch 2.11, CUDA 13.0, NCCL 2.28.9)",
        "gemm_efficiency": "torch.matmul -> cuBLAS: the kernels `autoplan profile` times (1 by construction)",
        "attention_efficiency": "F.scaled_dot_product_attention: the kernel `autoplan profile` times",
        "attention_kernel": "F.scaled_dot_product_attention with torch's own backend choice (on torch 2.11 "
                            "and an H100/H200 its rates are cuDNN's: cost_model/data/kernels)",
        "elementwise_bytes_factor": "measured: kernel trace of one step of plan l1-s2k-m4 on an H100 "
                                    "(cost_model/data/h100_runs/step_kernels_llama1b_mbs4.txt), see "
                                    "AUTOPLAN_ELEMENTWISE_FACTOR",
        "weight_cast_bytes_per_param": "executor: fp32 weights under bf16 autocast; per micro-batch the "
                                       "forward cast (read 4, write 2), the cast's backward (read 2, write 4) "
                                       "and AccumulateGrad's in-place fp32 add (read 4+4, write 4)",
        "optimizer_bytes_per_param": "counted: executor/torch_backend/train.py runs torch.optim.AdamW(fused=True) "
                                     "on CUDA, one kernel that reads param, grad, exp_avg, exp_avg_sq and writes "
                                     "param, exp_avg, exp_avg_sq (7 x 4 B fp32), + the for-each clip (norm 4, "
                                     "scale 8); the same count for the for-each AdamW (autoplan-91ee867) matched "
                                     "its H100 kernel trace",
        "dtypes": "fp16 (no loss scaling) is not wired; fp8: torchao float8 training of the blocks' linears "
                  "(executor/fp8.py: wq, wk, wv, wo, w1, w2, w3 with 16-divisible dimensions; the embedding, the "
                  "head, the router and the experts stay bf16)",
        "fp8_expert_gemms": "executor/fp8.py converts the blocks' nn.Linear projections only: the router and "
                            "the experts' grouped GEMMs (executor/moe.py) stay bf16 (tests/fp8_check.py runs a MoE "
                            "model in fp8 on one process, under ep 2 with ZeRO-3 and under tp 2 + SP)",
        "fp8_mla": "executor/fp8.py converts wq, wk, wv, wo, w1, w2, w3: MLA's latent projections (wq_a, wq_b, "
                   "wkv_a, wkv_b) would stay bf16, which the cost model's fp8 layer does not describe",
        "fp8_weight_copy_bytes": "torchao enable_fsdp_float8_all_gather (tensorwise, FSDP2 over several "
                                 "replicas): the gathered weight of an fp8 linear is its fp8 data (1 B) and one "
                                 "fp32 scale; rowwise (`autoplan+fp8-rowwise`) gathers bf16",
        "fp8_weight_cast_per_microbatch": "torchao Float8Linear casts the weight in every forward and again "
                                          "in the backward (matmul_with_hp_or_float8_args saves the bf16 weight)",
        "fp8_rowwise": "run option --fp8-recipe (executor/fp8.py): tensorwise unless the plan's framework "
                       "is autoplan+fp8-rowwise",
        "min_microbatches_per_stage": "torch.distributed.pipelining Schedule1F1B",
        "tied_embeddings_one_stage": "executor: the tied head is neither sharded nor on another stage",
        "learned_positions_split_sequence": "executor: learned positions are not sharded for cp/sp",
        "uneven_interleaved": "executor/torch_backend/pipeline.py builds each virtual stage from "
                              "ParallelPlan.virtual_stage_num_layers; ScheduleInterleaved1F1B takes "
                              "stages of any size (tests/test_torch_backend.py runs one)",
    })

AUTOPLAN_91EE867 = replace(
    AUTOPLAN, name="autoplan-91ee867",
    version="autoplan executor at 91ee867 (committed 2026-11-21, measured 2026-11-22), torch backend: the shipped "
            "H100 records",
    description="historical: autoplan's executor before its speed-ups (fp32 weights under bf16 autocast, "
                "K/V repeated, whole fp32 logits, for-each AdamW) = `autoplan run --without "
                + ",".join(AUTOPLAN_SPEEDUPS) + "`",
    activation_recipe="eager-autocast", fused_cross_entropy=False, optimizer_bytes_per_param=92.0,
    fused_adamw_on_cuda=False,
    dtypes=("bf16", "fp32"), fp8_weight_copy_bytes=0.0, options={}, hsdp_zero_stages=(), mla=False,
    moe_with_tp_pp=False, moe_grouped_gemm=False,
    sources={**AUTOPLAN.sources,
             "moe_with_tp_pp": "executor at 91ee867: MoE ran with dp, cp and ep only",
             "moe_grouped_gemm": "executor/moe.py at 91ee867: a loop of per-expert matmuls",
             "mla": "executor/model.py at 91ee867 refused multi-head latent attention (planned only)",
             "hsdp_zero_stages": "executor/torch_backend/parallel_dims.py at 91ee867: one dp mesh dimension",
             "optimizer_bytes_per_param": "executor/torch_backend/train.py at 91ee867: torch.optim.AdamW(foreach=True), "
                                          "8 passes over fp32 state (decay 8, lerp 12, mul 8, addcmul 12, sqrt 8, "
                                          "div 8, add 8, addcdiv 16 = 80 B) + foreach clip (norm 4, scale 8); the "
                                          "H100 kernel trace shows AdamW.step 37.0 ms for 1.236e9 parameters = "
                                          "92 B/param at the profile's 3.06 TB/s",
             "activation_recipe": "executor/model.py at 91ee867 under torch.autocast(bf16) over fp32 weights; "
                                  "tests/test_memory_counting.py counts it with every speed-up off",
             "fused_cross_entropy": "executor at 91ee867: F.cross_entropy over whole fp32 logits",
             "dtypes": "executor at 91ee867: fp16 and fp8 plans refused (no loss scaling, no float8 linears)"})

LISTED_AT = 0
FRAMEWORKS = (AUTOPLAN, AUTOPLAN_91EE867)
HISTORICAL = {"autoplan-91ee867": "autoplan as of 2026-11-21 (commit 91ee867)"}
"""Frameworks kept to read and re-score old records, not to plan new runs, with what each is (the date
is the commit's in git log); the `autoplan frameworks` list leaves them out unless asked (--all)."""
