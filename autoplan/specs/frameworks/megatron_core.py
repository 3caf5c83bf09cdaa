"""megatron-core: NVIDIA Megatron-LM / Megatron-Core, and the Megatron stacks of the published runs it
stands in for (NeMo, Megatron-LM before Megatron-Core, InternEvo) as they ran."""
from __future__ import annotations

import math

from autoplan.specs.framework import Framework, StateTerm, megatron_states


MEGATRON_FP16 = {
    "states": {**megatron_states(),
               "params": StateTerm(2, 3, "fp16 weights the kernels read"),
               "grads": StateTerm(2, 2, "fp16 main-grad buffer (gradients accumulated over micro-batches)")},
    "main_grad_reduce_bytes": 2.0,
}
"""Megatron-LM in fp16: only --bf16 turns accumulate_allreduce_grads_in_fp32 on ("bfloat16 requires
gradient accumulation and all-reduce to be done in fp32", megatron/training/arguments.py, core_v0.6.0
lines 279-288 and main of 2026-08); without that flag the gradient buffers take the parameters' dtype
(core_v0.6.0 megatron/core/distributed/distributed_data_parallel.py line 105, `grad_dtype = torch.float
if accumulate_allreduce_grads_in_fp32 else param.dtype`; param_and_grad_buffer.py on main), so an fp16
run keeps and reduces 2 B gradients. The fp32 master weights and Adam moments stay."""

NEMO2_MLPERF_LLAMA31 = {
    "states": {**megatron_states(), "grads": StateTerm(2, 2, "bf16 main-grad buffer (grad_reduce_in_fp32=False)")},
    "main_grad_reduce_bytes": 2.0,
}
"""NVIDIA's MLPerf llama31 implementation (NeMo 2 over Megatron-Core: training_results_v5.0
NVIDIA/benchmarks/llama31_405b/implementations/eos-dfw_n64_ngc25.01_nemo/pretrain.py, which builds the
8b, 70b and 405b configs): MegatronMixedPrecision(grad_reduce_in_fp32=False) and
DistributedDataParallelConfig(grad_reduce_in_fp32=False), so the distributed optimizer's main-grad
buffer and its reduce-scatter are bf16 (megatron/core/distributed/distributed_data_parallel.py: the
buffer takes the parameters' dtype unless grad_reduce_in_fp32), not Megatron-LM's fp32 of --bf16."""
MSAMP_O3_STATES = {
    "params": StateTerm(1, 3, "fp8 weights the GEMMs read"),
    "grads": StateTerm(1, 2, "fp8 weight gradients"),
    "optimizer": StateTerm(5, 1, "fp16 master weights 2 + fp8 first moment 1 + fp16 second moment 2"),
}
"""What FP8-LM's own rows keep per parameter: MS-AMP's O3 level, the one for ZeRO / Megatron training
(Azure/MS-AMP docs/user-tutorial/optimization-level.md table: weight FP8, master weight FP16, weight
gradient FP8, optimizer states FP8 + FP16)."""

MEGATRON_CORE = Framework(
    name="megatron-core", version="Megatron-LM core_r0.13 (2025)",
    description="NVIDIA Megatron-LM / Megatron-Core: TP/SP, interleaved 1F1B, CP, distributed optimizer",
    fp8_weight_cast_per_microbatch=False, fp8_linear_inputs_saved_in_fp8=True, fp8_weight_workspace_bytes=2.0,
    fp8_norm_writes_fp8=True,
    dp_param_gather_overlap=True, pp_p2p_overlap=True, tp_comm_overlap_kind="userbuffers",
    expert_tensor_parallel=True, recompute_modules=True, moe_capacity_factor=True, attention_kernel="cudnn",
    moe_dispatch="alltoall", moe_tp_needs_sequence_parallel=True,
    dp_bucket_params=40e6, dp_bucket_params_per_rank=1e6,
    dp_sync_per_virtual_stage=True, hsdp_zero_stages=(1,), zero2_reduce_every_microbatch=True,
    pipeline_defers_grad_sync=False, sp_regathers_in_backward=True,
    by_dtype={"fp16": MEGATRON_FP16},
    options={"overlap-moe-expert-parallel-comm": {"moe_a2a_overlap": True},
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
             "pipeline_defers_grad_sync": "megatron_fsdp.py core_v0.16.1 lines 654-668 and the no_sync docstring "
                                          "(1044-1048): Megatron-FSDP reduce-scatters at every backward even inside "
                                          "the no_sync its pipeline schedules enter; counted on 2 gloo ranks "
                                          "(tests/test_state_oracle.py): 2 B per parameter of sharded fp32 grads",
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
             "fp8_norm_writes_fp8": "Transformer Engine 1.x pytorch/module/layernorm_linear.py _LayerNormLinear.forward: "
                                    "ln_out = layernorm_fwd_fp8(...) (the norm's output written in fp8, no "
                                    "cast of its own), backward fp8_transpose(ln_out_total) for the wgrad "
                                    "GEMM; layernorm_mlp.py likewise for fc1; Megatron-Core's dense layers "
                                    "build linear_qkv and linear_fc1 as TELayerNormColumnParallelLinear",
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
             "tp_comm_gemm_overlap": "off, as Megatron-LM's --tp-comm-overlap defaults; a plan's "
                                     "tp_comm_overlap turns it on (Transformer Engine userbuffers; Megatron "
                                     "requires --sequence-parallel with it, megatron/training/arguments.py "
                                     "validate_args), for SP plans with tp > 1, and its Megatron export passes "
                                     "the flag; a published run says in its column tp_comm_overlap whether it "
                                     "ran it (its plan's knob)",
             "tp_comm_overlap_kind": "a plan's tp_comm_overlap is --tp-comm-overlap (megatron/training/"
                                     "arguments.py core_v0.16.1: Transformer Engine userbuffers; validate_args "
                                     "refuses it without --sequence-parallel), priced as tp_comm_gemm_overlap",
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
                                   "transformer_config.py, transformer_block.py get_num_layers_to_build)"})

LISTED_AT = 2
FRAMEWORKS = (MEGATRON_CORE,)
PLAN_KNOB_OPTIONS = {"tp-comm-overlap": "tp_comm_overlap"}
"""The option megatron-core+tp-comm-overlap (until 2026-11-29) is the plan's tp_comm_overlap: old plan files
that name it read as megatron-core with the knob on."""
STANDS_IN_FOR = (
    "nemo-megatron-core",
    # NeMo 1.x "legacy" Megatron GPT with Transformer Engine layers (MLPerf GPT-3 2023-2024).
    "nemo-megatron-legacy",
    # Megatron-LM before Megatron-Core (2023 forks of the zero-bubble and FP8-LM papers): the same
    # kernels (Transformer Engine or Apex, flash attention), distributed optimizer.
    "megatron-lm-legacy",
    # InternEvo: Megatron-style TP with ZeRO-1 over bf16 weights and fp32 master weights, flash
    # attention, overlapped ZeRO communication; the closest built-in facts are Megatron-Core's.
    "internevo",
)
# The MoE rows name megatron-core too (Megatron-LM, Pai-Megatron-Patch, FlagPerf's Megatron cases).
AS_RAN = {
    # FlagPerf's Megatron scripts pass no --moe-token-dispatcher-type, so they ran the allgather
    # dispatcher, the default of core_v0.6.0 and after (transformer_config.py moe_token_dispatcher_type =
    # "allgather"), whose unpermutation weighs the experts' outputs by the router's probabilities and so
    # keeps them (token_dispatcher.py line 197 at core_v0.6.0, the tag of its Mixtral H100 row; the
    # others are of the same weeks of 2024). That dispatcher permutes the tokens gathered over the tensor
    # x expert group with torch.gather / scatter / scatter_add (moe_gather_scatter_permute, lines 135-226);
    # Pai-Megatron-Patch's qwen1_5 copy of it (megatron_patch/model/qwen1_5/moe/token_dispatcher.py @1f3c6fc,
    # 2024-04-27) differs from core_v0.6.0's in whitespace only.
    # Its scripts (mixtral_8x7B megatron_main.sh @68d2944f, mixtral_7b @d23d2118, qwen1.5_MoE
    # megatron_pai_main.sh @6faf9c1f on Pai's Megatron-LM-240405) pass --use-distributed-optimizer but
    # neither --overlap-grad-reduce nor --overlap-param-gather, both off by default (Megatron-LM
    # core_v0.6.0 megatron/training/arguments.py lines 1278-1284): the gradients reduce-scatter once the
    # backward is done and the weights gather after the step, all exposed, in one bucket
    # (megatron/core/distributed/distributed_data_parallel.py lines 56-66: bucket_size None without
    # overlap_grad_reduce).
    # The Megatron-LM issue's Mixtral run (NVIDIA/Megatron-LM#756, retest on main ba773259 of 2024-04-04,
    # whose transformer/moe and tensor_parallel/mappings.py equal core_v0.6.0's) passed
    # --moe-token-dispatcher-type alltoall with tp 2: core_v0.6.0's alltoall dispatcher.
    "megatron-lm-issue": {"moe_sp2hp_alltoall": True},
    "flagperf": {"moe_dispatch": "allgather", "moe_weighted_outputs_saved": True, "moe_gather_scatter_permute": True,
                 "dp_overlap_zero_stages": (), "dp_param_gather_overlap": False, "dp_bucket_params": math.inf},
}
