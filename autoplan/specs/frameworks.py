"""The built-in frameworks: one entry each, every fact with its source.

A new framework is one entry here (plus its fitted efficiency values, if any, in
`cost_model/data/constants.json`). `get_framework(name)` is the one lookup; unknown names are one
line that lists the known ones.
"""
from __future__ import annotations

import math

from dataclasses import replace

from autoplan.specs.errors import AutoplanError
from autoplan.specs.framework import Framework
from autoplan.specs.framework_states import (
    AUTOPLAN_STATES, DEEPSPEED_BF16_STATES, DEEPSPEED_GRAD_ACCUMULATION, DEEPSPEED_STATES, MEGATRON_FP16, fsdp2_states)

DEFAULT_FRAMEWORK = "autoplan"

AUTOPLAN_SPEEDUPS = ("bf16-params", "native-gqa", "rope-compute-dtype", "chunked-loss", "fused-adamw")
"""The torch executor's switchable speed-ups (executor/options.py SPEEDUPS) that change what the
`autoplan` framework's facts describe; with all of them off it runs as autoplan-91ee867."""


AUTOPLAN_RUNTIME_BYTES = 1.29 * 2 ** 30
"""Measured: the executor's process outside PyTorch's allocator on one H100 (see its source)."""

_DEEPSPEED_OVERLAP_SOURCE = (
    "deepspeed/runtime/zero/config.py overlap_comm_valid: overlap_comm defaults to stage == 3; without it "
    "engine.backward reduces the gradients after loss.backward() (engine.py allreduce_gradients)")
_DEEPSPEED_PIPE_REDUCE_SOURCE = (
    "deepspeed/runtime/pipe/schedule.py TrainSchedule.steps: ReduceTiedGrads, ReduceGrads and OptimizerStep "
    "follow the last micro-batch's backward (Megatron-DeepSpeed trains GPTModelPipe on this engine)")

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

# Eager PyTorch's host issue facts (cost_model/host_time.py), measured on the executor's model and the
# plain loop a user writes: cost_model/data/h100_runs/2026-11-29-cpu-host-time, file
# profile-after2-noloss-llama-3.2-1b.json, case `torch-eager` (a 2-layer Llama, hidden 64, stepped as 4
# micro-batches of 2, seq 32).
# Kernels per layer and micro-batch, counted: the profiler's kernels of one step (gemm 180,
# attention 24, elementwise/copies 1,346) over 2 layers x 4 micro-batches. The GEMMs check the count:
# 21 per layer and micro-batch (7 projections forward, 14 backward) x 8 = 168, plus the head's 3 x 4
# micro-batches = 180. The head's, loss's and embedding's other kernels are in the share too, so this
# is at most 2 % high for a 16-layer model and ~25 % for 2 layers. The optimizer's 411 kernels run once a
# step, not per micro-batch, and are not priced here.
EAGER_KERNELS_PER_LAYER = (180 + 24 + 1346) / (2 * 4)

# Host seconds per kernel, measured: process CPU time of that step (18.37 ms, median of 30 steps) over
# all its kernels (180 + 24 + 1,346 + 411 = 1,961) = 9.4 us. On a CPU device every kernel is host work,
# so this is dispatch + autograd + the (tiny: hidden 64) kernel itself, on the project's shared 2-core
# VM: an upper bound on the host side of a CUDA eager op. Published cross-checks: eager `x + 1` costs
# 4.5 us on an i9-11900K (J. Ansel, "Micro-optimizations for the most micro of benchmarks",
# dev-discuss.pytorch.org/t/1836), a CUDA launch a few us more.
EAGER_HOST_S_PER_KERNEL = 0.018371569 / (180 + 24 + 1346 + 411)


_AUTOPLAN = Framework(
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
    fp8_mla=False, fp8_expert_gemms=False, fp8_weight_copy_bytes=1.0, min_microbatches_per_stage=True, tied_embeddings_one_stage=True,
    hsdp_zero_stages=(1, 2, 3),
    learned_positions_split_sequence=False, seq_len_within_model=True, tp_with_block_extras=False,
    cp_with_masked_attention=False, mla_padded_values=True,
    gemm_efficiency=1.0, attention_efficiency=1.0, elementwise_bytes_factor=AUTOPLAN_ELEMENTWISE_FACTOR,
    weight_cast_bytes_per_param=24.0, optimizer_bytes_per_param=AUTOPLAN_FUSED_ADAMW_BYTES,
    kernels_per_layer=EAGER_KERNELS_PER_LAYER, host_s_per_kernel=EAGER_HOST_S_PER_KERNEL,
    fused_adamw_on_cuda=True, zero2_reduce_every_microbatch=True,
    options={"fp8-rowwise": {"fp8_rowwise": True, "fp8_weight_copy_bytes": 0.0}},
    sources={
        "zero2_reduce_every_microbatch": "executor/torch_backend/train.py _set_grad_sync: FSDP2's gradient sync is "
                                         "turned off between micro-batches at ZeRO 0-1 only",
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

_AUTOPLAN_91EE867 = replace(
    _AUTOPLAN, name="autoplan-91ee867",
    version="autoplan executor at 91ee867 (committed 2026-11-21, measured 2026-11-22), torch backend: the shipped "
            "H100 records",
    description="historical: autoplan's executor before its speed-ups (fp32 weights under bf16 autocast, "
                "K/V repeated, whole fp32 logits, for-each AdamW) = `autoplan run --without "
                + ",".join(AUTOPLAN_SPEEDUPS) + "`",
    activation_recipe="eager-autocast", fused_cross_entropy=False, optimizer_bytes_per_param=92.0,
    fused_adamw_on_cuda=False,
    dtypes=("bf16", "fp32"), fp8_weight_copy_bytes=0.0, options={}, hsdp_zero_stages=(), mla=False,
    moe_with_tp_pp=False,
    sources={**_AUTOPLAN.sources,
             "moe_with_tp_pp": "executor at 91ee867: MoE ran with dp, cp and ep only",
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

FRAMEWORKS = {f.name: f for f in (
    _AUTOPLAN,
    Framework(
        name="autoplan-xla", version="autoplan 0.1 executor, torch_xla 2.9 SPMD backend",
        description="this project's torch_xla SPMD executor (`autoplan run --backend xla`): one SPMD "
                    "program over a (dp, cp, tp) mesh, ZeRO by sharding annotations",
        states=AUTOPLAN_STATES, selective_recompute="attention", fused_cross_entropy=False,
        flash_attention=False, dtypes=("bf16", "fp32"), max_pp=1, max_vpp=1, moe=False,
        seq_len_within_model=True, tp_with_block_extras=False, cp_with_masked_attention=False, mla=False,
        sources={"max_pp": "executor/xla_backend: one SPMD program, no pipeline schedule",
                 "moe": "executor/xla_backend: dense models only",
                 "flash_attention": "XLA's CPU devices run attention as plain matmuls"}),
    Framework(
        name="megatron-core", version="Megatron-LM core_r0.13 (2025)",
        description="NVIDIA Megatron-LM / Megatron-Core: TP/SP, interleaved 1F1B, CP, distributed optimizer",
        fp8_weight_cast_per_microbatch=False, fp8_linear_inputs_saved_in_fp8=True, fp8_weight_workspace_bytes=2.0,
        dp_param_gather_overlap=True, pp_p2p_overlap=True,
        expert_tensor_parallel=True, recompute_modules=True, moe_capacity_factor=True, attention_kernel="cudnn",
        moe_dispatch="alltoall", moe_tp_needs_sequence_parallel=True,
        dp_bucket_params=40e6, dp_bucket_params_per_rank=1e6,
        dp_sync_per_virtual_stage=True, hsdp_zero_stages=(1,), zero2_reduce_every_microbatch=True,
        sp_regathers_in_backward=True,
        by_dtype={"fp16": MEGATRON_FP16},
        options={"tp-comm-overlap": {"tp_comm_gemm_overlap": True},
                 "overlap-moe-expert-parallel-comm": {"moe_a2a_overlap": True},
                 "flex-deepep": {"moe_dispatch": "flex"}},
        sources={"states": "Megatron distributed optimizer docs: bf16 params, fp32 main grads, fp32 master + Adam",
                 "moe_dispatch": "megatron/core/transformer/moe/token_dispatcher.py core_v0.16.1 "
                                 "MoEAlltoAllTokenDispatcher: all-to-all over the ep group (token_dispatch), then "
                                 "gather_from_sequence_parallel_region over the expert-TP group (dispatch_postprocess, "
                                 "lines 691-700), the reverse in combine; the export passes "
                                 "--moe-token-dispatcher-type alltoall (the default is allgather); the framework "
                                 "megatron-core+flex-deepep runs MoEFlexTokenDispatcher on DeepEP (one group over "
                                 "etp x ep, line 1320; a token crosses the network once per node, cost_model/"
                                 "moe_time.py flex_dispatch_time_s) and its export passes --moe-token-dispatcher-type "
                                 "flex --moe-flex-dispatcher-backend deepep",
                 "moe_tp_needs_sequence_parallel": "megatron/core/transformer/moe/moe_layer.py core_v0.16.1 lines "
                                                   "379-383: MoELayer.forward raises ValueError in training when the "
                                                   "attention TP group is larger than 1 without sequence parallelism "
                                                   "(since core_v0.8.0)",
                 "by_dtype": "fp16: megatron/training/arguments.py (fp32 gradient accumulation only with --bf16) and "
                             "distributed_data_parallel.py grad_dtype (core_v0.6.0 line 105): fp16 main grads",
                 "attention_kernel": "Transformer Engine DotProductAttention: where both apply, TE prefers cuDNN "
                                     "fused attention on Hopper and later, flash-attn before (NeMo docs, "
                                     "memory_optimizations.rst, NVIDIA/NeMo PR 9188); the built-in Ampere profiles "
                                     "hold FlashAttention-2 only, so an A100 plan gets flash-attn",
                 "zero_stages": "ZeRO-1 is the distributed optimizer (--use-distributed-optimizer): it shards the fp32 "
                                "main parameters and Adam state over dp x cp and keeps the whole fp32 main-grad buffer "
                                "on every rank (megatron/core/distributed/param_and_grad_buffer.py core_v0.16.1: each "
                                "bucket's grad_data spans the buffer; the reduce-scatter writes this rank's slice of it). "
                                "ZeRO-2 and 3 are Megatron-FSDP, data_parallel_sharding_strategy optim_grads and "
                                "optim_grads_params (megatron/core/distributed/fsdp/src/megatron_fsdp/"
                                "param_and_grad_buffer.py _init_each_parameter_group_buffers: grad buffer distributed "
                                "from optim_grads, model weights from optim_grads_params)",
                 "sp_regathers_in_backward": "megatron/core/tensor_parallel/layers.py "
                                             "LinearWithGradAccumulationAndAsyncCommunication: with sequence_parallel "
                                             "the forward saves the sharded input and the backward all-gathers it again "
                                             "(Korthikanti et al. 2022, arXiv 2205.05198, sec. 4.2.2)",
                 "zero2_reduce_every_microbatch": "megatron/core/distributed/fsdp/src/megatron_fsdp/megatron_fsdp.py "
                                                  "core_v0.16.1 lines 770-775: grad_reduce_every_bprop for optim_grads "
                                                  "and optim_grads_params, whatever the micro-batch",
                 "hsdp_zero_stages": "Megatron-LM core_v0.16.1 megatron/training/arguments.py line 2333 "
                                     "--num-distributed-optimizer-instances; megatron/core/parallel_state.py lines "
                                     "833-840: each instance shards the distributed optimizer over consecutive dp-cp "
                                     "ranks (Megatron-FSDP's hybrid mode is not planned here)",
                 "fp8_linear_inputs_saved_in_fp8": "Transformer Engine v1.4 pytorch/module/linear.py lines 264-278 "
                                                   "(the fp8 input or its fp8 transpose saved for backward, "
                                                   "sequence parallel or not) and layernorm_linear.py (ln_out "
                                                   "cast to fp8 by the norm); v2.2 the same files (saved input "
                                                   "reduced to its column-wise fp8 data, or row-wise where sequence "
                                                   "parallelism gathers it: 1 B either way). Not the experts: "
                                                   "v2.2 grouped_linear.py keeps row- and column-wise fp8 (2 B)",
                 "fp8_weight_workspace_bytes": "Transformer Engine v1.4 pytorch/module/base.py set_fp8_weights: "
                                               "persistent weight{i}_fp8 and weight{i}_t_fp8 buffers per weight, "
                                               "not when the primary weights are fp8 (--fp8-param-gather); v2.x "
                                               "caches the quantized weight, row- and column-wise, under "
                                               "is_first_microbatch (module/base.py get_weight_workspace)",
                 "fp8_weight_cast_per_microbatch": "Transformer Engine te.Linear forward(is_first_microbatch): the "
                                                   "fp8 weight and its transpose are cast on the first micro-batch "
                                                   "and reused (Megatron-Core passes it under gradient accumulation)",
                 "dp_param_gather_overlap": "NeMo docs, features/optimizations/communication_overlap.rst: the "
                                            "distributed optimizer's reduce-scatter and all-gather overlap per "
                                            "layer (per virtual stage under PP), one chunk exposed; on in its "
                                            "recipes (overlap_grad_sync, overlap_param_gather)",
                 "dp_bucket_params": "megatron/core/distributed/distributed_data_parallel.py core_v0.16.1 line "
                                     "65: bucket_size = max(40000000, 1000000 * dp_group.size()) parameters "
                                     "(one bucket without --overlap-grad-reduce, which its recipes turn on)",
                 "dp_sync_per_virtual_stage": "megatron/core/pipeline_parallel/schedules.py core_v0.16.1 "
                                              "forward_backward_pipelining_with_interleaving: grad_sync_func"
                                              "[chunk] when a model chunk's last micro-batch backward ends "
                                              "(lines 1257-1290), param_sync_func[chunk] before its first "
                                              "forward (lines 1176-1186); each chunk is its own DDP",
                 "pp_p2p_overlap": "megatron/core/pipeline_parallel/schedules.py: overlap_p2p_comm with the "
                                   "interleaved schedule (--no-overlap-p2p-communication turns it off)",
                 "tp_comm_gemm_overlap": "off, as Megatron-LM's --tp-comm-overlap defaults; the framework "
                                         "megatron-core+tp-comm-overlap turns it on (Transformer Engine userbuffers; "
                                         "Megatron requires --sequence-parallel with it, megatron/training/"
                                         "arguments.py validate_args), for SP plans with tp > 1, and its Megatron "
                                         "export passes the flag; a published run says in its column "
                                         "tp_comm_overlap whether it ran it",
                 "moe_a2a_overlap": "off, as Megatron-LM's --overlap-moe-expert-parallel-comm defaults; the framework "
                                    "megatron-core+overlap-moe-expert-parallel-comm turns it on and its export passes "
                                    "it with --delay-wgrad-compute and the alltoall dispatcher (megatron/core/"
                                    "transformer/moe/README.md core_v0.16.1 'EP A2A Overlap'; transformer_config.py "
                                    "lines 1852-1879: ep > 1, alltoall/flex dispatcher, no full recompute, vpp with pp)",
                 "max_zero_with_pp": "ZeRO-3 is Megatron-FSDP (--use-megatron-fsdp --data-parallel-sharding-"
                                     "strategy optim_grads_params), which validate_args does not restrict to pp = 1, "
                                     "ep = 1, untied embeddings or bf16 (megatron/training/arguments.py core_v0.16.1 "
                                     "lines 671-690; main of 2026-08-22 lines 1118-1170); only PyTorch FSDP2 "
                                     "(--use-torch-fsdp2) refuses pipeline and expert parallelism (core_v0.16.1 "
                                     "lines 603-622), and the export does not use it",
                 "recompute_modules": "--recompute-granularity selective --recompute-modules (megatron/core/"
                                      "transformer/transformer_config.py core_v0.16.1 lines 411-424, 1193-1221)",
                 "moe_capacity_factor": "--moe-expert-capacity-factor, None = dropless (transformer_config.py "
                                        "core_v0.16.1 lines 690-691; with aux-loss or no load balancing only, "
                                        "lines 1105-1128)",
                 "expert_tensor_parallel": "--expert-tensor-parallel-size (default tp: megatron/training/arguments.py "
                                           "core_v0.16.1 lines 410-411); the expert ranks are tp*cp*dp regrouped "
                                           "as etp x ep x edp, so ep*etp must divide tp*cp*dp "
                                           "(megatron/core/parallel_state.py core_v0.16.1 lines 786-795)",
                 "uneven_stages": "--decoder-first/last-pipeline-num-layers (equal middle ranks), "
                                  "--pipeline-model-parallel-layout for any split (core 0.13)",
                 "uneven_interleaved": "core 0.12 (uneven virtual pipeline parallelism, Feb 2025): "
                                       "--num-virtual-stages-per-pipeline-rank with --decoder-first/last-"
                                       "pipeline-num-layers (each rank's count divisible by vpp) or "
                                       "--account-for-embedding/loss-in-pipeline-split; core 0.13: "
                                       "--pipeline-model-parallel-layout (megatron/core/transformer/"
                                       "transformer_config.py, transformer_block.py get_num_layers_to_build)"}),
    Framework(
        name="torchtitan", version="torchtitan 0.3.0 (2026; the 0.2.0 TOML export re-checks 0.2's own rules)",
        description="PyTorch torchtitan: FSDP2/HSDP + TP/SP + torch.distributed.pipelining + CP, "
                    "op-level selective activation checkpointing",
        states=fsdp2_states("FSDP2-sharded master"), compute_weight_copy_bytes=0.0, fp8_rowwise=True,
        selective_recompute="ops", fused_cross_entropy=False, loss_chunks=8, dtypes=("bf16", "fp8", "fp32"),
        zero_stages=(0, 1, 2, 3), hsdp_zero_stages=(1, 2, 3), min_microbatches_per_stage=True,
        zero2_reduce_every_microbatch=True,
        tied_embeddings_with_pp=False, gather_copy_bytes_per_param=2.0 * 2, reduce_copy_bytes_per_param=2.0 + 4, sharded_reduce_bytes_per_grad=4.0,
        experts_whole_with_ep=True, moe_dispatch="alltoall-with-ep", fp8_expert_gemms=False,
        kernels_per_layer=EAGER_KERNELS_PER_LAYER, host_s_per_kernel=EAGER_HOST_S_PER_KERNEL,
        sources={"kernels_per_layer": "eager PyTorch, counted on the executor's Llama layer, whose op sequence "
                                      "torchtitan's Llama shares (RMSNorm, RoPE, K/V repeat, SDPA, SwiGLU: "
                                      "models/llama3/model.py); torch.compile fuses some of them (an upper bound there)",
                 "fp8_expert_gemms": "torchtitan 0.3.0 components/quantization/float8.py: Float8LinearConverter (what "
                                     "autoplan's export turns on) swaps Linear configs only (convert, lines 151-172); "
                                     "the routed experts' grouped GEMMs go fp8 only with Float8GroupedExpertsConverter, "
                                     "not exported",
                 "experts_whole_with_ep": "torchtitan 0.3.0 models/common/moe_sharding.py: with EP the routed experts' "
                                          "weights are placed over (dp_replicate, efsdp, ep) with ep Shard(0) and no TP "
                                          "axis (expert_param_placement_sparse, lines 29-47); without EP they are split "
                                          "over TP (expert_param_placement_dense, Shard(1)/Shard(2)); distributed/"
                                          "parallel_dims.py line 279: efsdp = dp_shard * cp * tp / ep (EP borrows ranks "
                                          "from FSDP and TP, config/configs.py expert_parallel_degree). 0.2.0 exports "
                                          "keep its default expert_tensor_parallel_degree = 1 (whole experts with ep > 1)",
                 "moe_dispatch": "torchtitan 0.3.0 models/common/moe_sharding.py _routed_experts_sharding_configs and "
                                 "_router_sharding_config: with EP the router and the experts take the sequence shard "
                                 "(Shard(1); 'MoE reuses the mesh axis named TP for sequence-token sharding', "
                                 "_tokens_per_expert_placement) and the tokens move in the EP all-to-all "
                                 "(token_dispatcher.py); without EP the input is replicated over TP",
"attention_kernel": "F.scaled_dot_product_attention; the published runs (torch 2.5-2.7 "
                                     "nightlies) took its default order, flash first (aten sdp_utils.cpp "
                                     "priority_order: flash, efficient, math, cudnn; pytorch issue 138907)",
                 "fp8_rowwise": "torchtitan 0.3.0 components/quantization/float8.py Float8LinearConverter.Config: "
                               "recipe_name Literal['rowwise', 'rowwise_with_gw_hp'], default rowwise (what "
                               "autoplan's export turns on)",
                 "states": "torchtitan parallelize: fully_shard with MixedPrecisionPolicy(bf16, fp32 reduce)",
                 "hsdp_zero_stages": "torchtitan 0.3.0 models/llama3/parallelize.py lines 74-77: fully_shard over "
                                     "the mesh ['dp_replicate', 'fsdp'] (fsdp = dp_shard x cp) when "
                                     "data_parallel_replicate_degree > 1, at every FSDP reshard setting",
                 "gather_copy_bytes_per_param": "torch 2.9 distributed/fsdp/_fully_shard/_fsdp_collectives.py "
                                                "foreach_all_gather_copy_out: fsdp.split_with_sizes_copy of the "
                                                "all-gather output into each bf16 parameter, on the compute stream",
                 "reduce_copy_bytes_per_param": "same file, foreach_reduce: foreach_reduce_scatter_copy_in "
                                                "(torch._chunk_cat) of the bf16 gradients into a reduce_dtype "
                                                "buffer on the current stream, before the reduce-scatter stream "
                                                "waits on it",
                 "sharded_reduce_bytes_per_grad": "torchtitan 0.3.0 config/configs.py line 93: "
                                                  "mixed_precision_reduce: Literal['float32'] (the reduce-scatter "
                                                  "runs in fp32)",
                 "tied_embeddings_with_pp": "torchtitan 0.3.0 models/common/decoder.py lines 139-142, "
                                            "Decoder.Config.update_from_config: NotImplementedError('Weight tying "
                                            "is not supported with Pipeline Parallel.')",
                 "selective_recompute": "torchtitan 0.3.0 distributed/activation_checkpoint.py lines 31-93 and "
                                        "243-276 (SelectiveAC): keeps the outputs of mm, attention, reduce-scatter "
                                        "and all-to-all except every second mm of a block; a llama3 block keeps "
                                        "wqkv's, w1's and w2's outputs and the attention's (traced: "
                                        "cost_model/memory.py ops_saved_elems)",
                 "fused_cross_entropy": "torchtitan 0.3.0 components/loss.py line 32 cross_entropy_loss: "
                                        "F.cross_entropy over fp32-cast logits (10 B per logit of a chunk)",
                 "loss_chunks": "torchtitan 0.3.0 components/loss.py line 610: ChunkedLossWrapper.Config num_chunks "
                                "= 8, head + loss + backward per chunk, fp32 GradAccumulator of the hidden states "
                                "(line 705); the loss of every 0.3.0 llama3/qwen3/deepseek_v3 recipe "
                                "(models/llama3/config_registry.py line 187) and of autoplan's export",
                 "dtypes": "torchtitan 0.3.0 config/configs.py TrainingConfig: mixed_precision_param is bfloat16 "
                           "or float32, no fp16 with loss scaling",
                 "zero2_reduce_every_microbatch": "torchtitan 0.3.0 train.py: the micro-batches of a step run "
                                                  "forward and backward with FSDP2's gradient sync on (only the "
                                                  "chunked loss's lm_head turns it off, components/loss.py line "
                                                  "731), so each backward reduce-scatters; under a pipeline "
                                                  "torch.distributed.pipelining keeps it off until the last",
                 "zero_stages": "torchtitan 0.3.0 models/llama3/parallelize.py line 70: every data-parallel layout "
                                "is fully_shard over (dp_replicate, dp_shard), so ZeRO-0 is dp_replicate with tp/pp/cp "
                                "too (0.2.0's DDP was one-dimensional: its exporter refuses that)",
                 "sequence_parallel": "torchtitan 0.3.0 config/configs.py ParallelismConfig.enable_sequence_parallel "
                                      "(0.2.0 always sequence-parallel: its export notes it)",
                 "min_microbatches_per_stage": "torch.distributed.pipelining Schedule1F1B",
                 "seq_len_within_model": "off: torchtitan 0.3.0 resizes each layer's RoPE cache to training.seq_len "
                                         "(models/common/decoder.py lines 169-181) once seq_len is within the "
                                         "flavor's cache, which the export sizes for the plan "
                                         "(autoplan/exporters/torchtitan/v03.py FLAVOR_ROPE_POSITIONS)",
                 "uneven_interleaved": "torchtitan 0.3.0 distributed/pipeline_parallel.py lines 194-264, 366-477: "
                                       "the generated split over pp * stages-per-rank weighs the embedding and the "
                                       "head (pipeline_parallel_first/last_stage_less_layers); "
                                       "module_fqns_per_model_part lists any split"}),
    Framework(
        name="deepspeed", version="DeepSpeed 0.16 (2025) with Megatron-DeepSpeed",
        description="Microsoft DeepSpeed ZeRO 1-3 and its pipeline engine",
        states=DEEPSPEED_STATES, zero3_max_live_params=1e9, zero3_reduce_bucket_params=5e8, dp_bucket_params=5e8,
        zero3_recompute_reuse_params=1e9,
        pp_scatter_gather=False, max_zero_with_pp=1, max_zero_with_moe=2, max_cp=1, max_vpp=1, mla=False,
        dp_overlap_zero_stages=(3,), grad_accumulation_bytes=DEEPSPEED_GRAD_ACCUMULATION,
        by_dtype={"bf16": {"states": DEEPSPEED_BF16_STATES}}, sp_regathers_in_backward=True,
        sources={"mla": "Megatron-DeepSpeed has no multi-latent attention",
                 "sp_regathers_in_backward": "Megatron-DeepSpeed megatron/core/tensor_parallel/layers.py: Megatron's "
                                             "sequence-parallel linears, which all-gather their saved sharded input "
                                             "again in backward",
                 "by_dtype": "deepspeed/runtime/bf16_optimizer.py: fp32_groups_gradients_flat (full-size)",
                 "grad_accumulation_bytes": "deepspeed/runtime/bf16_optimizer.py update_hp_grads; torch autograd "
                                            "AccumulateGrad (fp16)",
                 "dp_overlap_zero_stages": _DEEPSPEED_OVERLAP_SOURCE,
                 "hsdp_zero_stages": "DeepSpeed 0.19 removed MiCS, its hybrid ZeRO-3 (runtime/config.py "
                                     "_REMOVED_ZERO_CONFIG_KEYS: mics_shard_size)",
                 "max_zero_with_moe": "deepspeedai/DeepSpeed deepspeed/runtime/engine.py (commit 007cca6), "
                                      "DeepSpeedEngine._configure_zero_optimizer, the ZeroStageEnum.weights "
                                      "branch: assert not self.has_moe_layers, \"MoE not supported with Stage 3\"",
                 "states": "deepspeed/runtime/zero/stage_1_and_2.py, stage3.py: 16-bit grads, fp32 partitions",
                 "zero3_recompute_reuse_params": "DeepSpeed config docs: stage3_max_reuse_distance 1e9 "
                                                 "(default); partitioned_param_coordinator.py __params_to_release",
                 "zero3_max_live_params": "DeepSpeed config docs: stage3_max_live_parameters 1e9, "
                                          "reduce_bucket_size 5e8 (defaults)",
                 "dp_bucket_params": "deepspeed/runtime/zero/config.py: reduce_bucket_size and "
                                     "allgather_bucket_size default 5e8 elements (ZeRO 1/2)",
                 "max_zero_with_pp": "deepspeed/runtime/pipe/engine.py: ZeRO-2/3 are incompatible with "
                                     "pipeline parallelism",
                 "max_cp": "DeepSpeed's sequence parallelism is Ulysses (all-to-all over heads), not the "
                           "context parallelism planned here",
                 "max_vpp": "the pipeline engine has no interleaved schedule",
                 "pp_scatter_gather": "the pipeline engine sends whole activations from every TP rank",
                 "uneven_stages": "deepspeed/runtime/pipe/module.py: PipelineModule partition_method "
                                  "'parameters' balances stages by parameter count, not layer count"}),
    Framework(
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
                 "max_tp": "llm-foundry trains with FSDP only (its benchmark tables)"}),
    Framework(
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
                                       "the virtual pipeline size"}),
    Framework(
        name="megatron-deepspeed", version="Megatron-DeepSpeed as BigScience ran BLOOM (2022)",
        description="historical: Megatron-DeepSpeed (fused softmax, ZeRO-1, DeepSpeed pipeline engine)",
        states=DEEPSPEED_STATES, flash_attention=False, pp_scatter_gather=False, max_zero_with_pp=1, dp_bucket_params=5e8,
        max_zero_with_moe=2, max_cp=1, max_vpp=1, sequence_parallel="never", mla=False, dp_overlap_zero_stages=(),
        grad_accumulation_bytes=DEEPSPEED_GRAD_ACCUMULATION, by_dtype={"bf16": {"states": DEEPSPEED_BF16_STATES}},
        sources={"dp_overlap_zero_stages": _DEEPSPEED_PIPE_REDUCE_SOURCE,
                 "by_dtype": "deepspeed/runtime/bf16_optimizer.py: fp32_groups_gradients_flat (full-size)",
                 "grad_accumulation_bytes": "deepspeed/runtime/pipe/engine.py _exec_backward_pass: "
                                            "optimizer.update_hp_grads after every micro-batch's backward (bf16)",
                 "max_zero_with_moe": "deepspeedai/DeepSpeed deepspeed/runtime/engine.py (commit 007cca6), "
                                      "DeepSpeedEngine._configure_zero_optimizer, the ZeroStageEnum.weights "
                                      "branch: assert not self.has_moe_layers, \"MoE not supported with Stage 3\"",
                 "states": "DeepSpeed ZeRO-1 (deepspeed/runtime/zero/stage_1_and_2.py): fp16 grads, fp32 partitions",
                 "flash_attention": "BLOOM training (2022) predates flash attention in Megatron-DeepSpeed",
                 "pp_scatter_gather": "DeepSpeed's pipeline engine sends whole activations"}),
    _AUTOPLAN_91EE867,
)}
FRAMEWORK_NAMES = tuple(FRAMEWORKS)


HISTORICAL_FRAMEWORKS = {"autoplan-91ee867": "autoplan as of 2026-11-21 (commit 91ee867)"}
"""Frameworks kept to read and re-score old records, not to plan new runs, with what each is (the date
is the commit's in git log); the `autoplan frameworks` list leaves them out unless asked (--all)."""


def get_framework(name: str) -> Framework:
    """The built-in framework of this name, with any of its options appended ("megatron-core+tp-comm-
    overlap": the switches a run turns on, Framework.options); one line listing the known ones
    otherwise."""
    base, *options = (name.strip().lower() if isinstance(name, str) else str(name)).split("+")
    framework = FRAMEWORKS.get(base)
    if framework is None:
        raise AutoplanError(f"unknown framework {name!r}; known: {', '.join(FRAMEWORK_NAMES)}")
    if not options:
        return framework
    unknown = [o for o in options if o not in framework.options]
    if unknown:
        known = ", ".join(f"{base}+{o}" for o in framework.options) or "none"
        raise AutoplanError(f"framework {base} has no option {unknown[0]!r}; its options: {known}")
    overrides = {}
    for option in sorted(set(options)):
        overrides.update(framework.options[option])
    return framework.with_overrides(name="+".join([base, *sorted(set(options))]), **overrides)


def base_framework_name(name: str) -> str:
    """The built-in framework a name with options ("megatron-core+tp-comm-overlap") builds on."""
    return name.split("+")[0]

