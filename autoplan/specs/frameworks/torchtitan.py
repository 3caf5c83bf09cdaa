"""torchtitan: PyTorch's torchtitan, and the FSDP stacks of the published runs it stands in for
(KempnerForge, OLMo-core, fms-fsdp, the flash-attention trainer) as they ran."""
from __future__ import annotations

from autoplan.specs.framework import NEVER, Framework, StateTerm, fsdp2_states
from autoplan.specs.frameworks._eager import EAGER_HOST_S_PER_KERNEL, EAGER_KERNELS_PER_LAYER


KEMPNERFORGE_FACTS = {
    # bf16 master weights: the model is cast to the mixed-precision dtype before and after
    # fully_shard (kempnerforge/distributed/parallel.py build_parallel_model `model.to(dtype=param_dtype)`;
    # config/training.py param_dtype "the master weight dtype", bf16 by default), so the sharded
    # parameters, their gradients and torch AdamW's two moments (zeros_like the parameter) are bf16.
    "states": {
        "params": StateTerm(2, 1, "bf16 parameters (the master weights)"),
        "grads": StateTerm(2, 2, "bf16 gradients (the fp32 reduce-scatter output cast to the parameter)"),
        "optimizer": StateTerm(4, 1, "AdamW momentum 2 + variance 2 (bf16, as the parameters)"),
    },
    # Fused AdamW over bf16 states: reads parameter, gradient, both moments (8), writes parameter
    # and moments (6).
    "optimizer_bytes_per_param": 14.0,
    # The token embedding is never split over TP, and the head's vocab-split logits are gathered to
    # every TP rank for F.cross_entropy (kempnerforge/distributed/tensor_parallel.py
    # apply_tensor_parallel: "Token embedding stays replicated", output head ColwiseParallel(...,
    # output_layouts=Replicate())); the loss is F.cross_entropy on those bf16 logits (scripts/train.py):
    # the logits, the log-softmax output it saves and, in backward, their two gradients, 2 B each.
    "embedding_tp_sharded": False,
    "loss_gathers_logits": True,
    "loss_bytes_per_logit": 8.0,
    # Its TP plan gives q, k, v, gate and up each its own ColwiseParallel (tensor_parallel.py
    # _build_block_tp_plan, at the measured commits), so backward reduces each input gradient apart:
    # 5 reduce-scatters (SP) or all-reduces (its PP stages' plain TP) per layer where torchtitan has 2.
    # Counted with that plan on torch 2.9's DTensor over a fake 2-rank process group
    # (tests/test_tp_collective_counts.py): backward 2 all-gathers + 5 reduce-scatters, compiled or
    # eager; the forward's 5 gathers of eager mode become 2 under torch.compile (AOTAutograd's CSE
    # merges the identical gathers of one input), and every SP row of KempnerForge's is compiled.
    "tp_backward_input_reductions": 5,
    # FSDP2's gradient sync off on every micro-batch but the last (kempnerforge/training/grad.py
    # maybe_no_sync, called by scripts/train.py at the measured commits 01b461a, 601aba9, 3ad9d9a).
    "zero3_reduce_every_microbatch": False,
    "zero2_reduce_every_microbatch": False,
    # Its pipeline path shards each stage with apply_fsdp2's default reshard_after_forward=True
    # (scripts/train.py and kempnerforge/distributed/parallel.py at 601aba9, the config-validation
    # commit), under torch.distributed.pipelining, which keeps the weights gathered from a backward
    # to the next forward: m + 1 gathers a step (Framework.pp_reshard_after_forward).
    "pp_reshard_after_forward": True,
}
"""KempnerForge as it ran its published benchmarks (on torchtitan's facts otherwise)."""

TORCHTITAN_STATES = {
    **fsdp2_states("FSDP2-sharded master"),
    "grads": StateTerm(4, 1, "fp32 gradients, reduce-scattered into the shard every micro-batch from ZeRO-1"),
}
"""torchtitan has no ZeRO-1 of its own: autoplan exports its ZeRO-1 as it does ZeRO-2, fully_shard with
reshard_after_forward "never" (autoplan/exporters/torchtitan/shared.py data_parallel_degrees), and torchtitan
0.3.0's train step never turns FSDP2's gradient sync off between micro-batches (train.py), so the fp32
gradients are reduce-scattered into the shard every micro-batch at ZeRO-1 too: 2 B per parameter on 2 gloo
ranks (tests/test_state_oracle.py, "torchtitan never reshard")."""

TORCHTITAN = Framework(
    name="torchtitan", version="torchtitan 0.3.0 (2026; the 0.2.0 TOML export re-checks 0.2's own rules)",
    description="PyTorch torchtitan: FSDP2/HSDP + TP/SP + torch.distributed.pipelining + CP, "
                "op-level selective activation checkpointing",
    states=TORCHTITAN_STATES, compute_weight_copy_bytes=0.0, fp8_rowwise=True,
    selective_recompute="ops", fused_cross_entropy=False, loss_chunks=8, dtypes=("bf16", "fp8", "fp32"),
    zero_stages=(0, 1, 2, 3), hsdp_zero_stages=(1, 2, 3), min_microbatches_per_stage=True,
    zero2_reduce_every_microbatch=True,
    tied_embeddings_with_pp=False, gather_copy_bytes_per_param=2.0 * 2, reduce_copy_bytes_per_param=2.0 + 4, sharded_reduce_bytes_per_grad=4.0,
    experts_whole_with_ep=True, moe_dispatch="alltoall-with-ep", fp8_expert_gemms=False, moe_grouped_gemm=True,
    kernels_per_layer=EAGER_KERNELS_PER_LAYER, host_s_per_kernel=EAGER_HOST_S_PER_KERNEL,
    tp_comm_overlap_kind="async-tp",
    sources={"moe_grouped_gemm": "models/common/moe.py GroupedExperts: torch._grouped_mm over the local experts' "
                                 "token groups, one call per weight (0.3.0)",
             "tp_comm_overlap_kind": "a plan's tp_comm_overlap is async TP: 0.3.0 CompileConfig."
                                     "enable_async_tensor_parallel (config/configs.py: needs compile.enable and "
                                     "'model' in compile.components, else ValueError), 0.2.0 parallelism."
                                     "enable_async_tensor_parallel (distributed/tensor_parallel.py "
                                     "maybe_enable_async_tp: RuntimeError without --training.compile); "
                                     "the export turns compile on with it, and the cost prices both",
             "kernels_per_layer": "eager PyTorch, counted on the executor's Llama layer, whose op sequence "
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
             "states": "torchtitan parallelize: fully_shard with MixedPrecisionPolicy(bf16, fp32 reduce); "
                       "ZeRO-1 exported as ZeRO-2's FSDP2 (TORCHTITAN_STATES)",
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
                                   "module_fqns_per_model_part lists any split"})

LISTED_AT = 3
FRAMEWORKS = (TORCHTITAN,)
# FSDP stacks on PyTorch (FSDP1 or FSDP2, bf16 compute over fp32 master weights): torchtitan's facts.
# The MoE rows name kempnerforge too (FSDP2 on PyTorch).
STANDS_IN_FOR = ("kempnerforge", "olmo-core", "fms-fsdp", "flash-attn-training")
FLASH_ATTN_TRAINING_STATES = {
    "states": {
        "params": StateTerm(4, NEVER, "fp32 parameters, replicated by DDP"),
        "grads": StateTerm(4, NEVER, "fp32 gradients in DDP's buckets (gradient_as_bucket_view)"),
        "optimizer": StateTerm(8, 1, "AdamW momentum 4 + variance 4 (fp32), ZeroRedundancyOptimizer's partition"),
    },
    "compute_weight_copy_bytes": 2.0,
}
"""The flash-attention repo's GPT trainer (training/, pytorch-lightning 1.8.6 in its Dockerfile): fp32
weights under Lightning's precision bf16 (torch.autocast), whose FusedDense and FusedMLPFunc cast the
weights to bf16 and save the casts for backward (flash_attn/ops/fused_dense.py, 2 B per parameter held
from forward to backward); DDP over the 8 GPUs (trainer.strategy DDPStrategyZero1,
src/utils/ddp_zero1.py, with gradient_as_bucket_view: the fp32 gradients are the buckets) and torch's
ZeroRedundancyOptimizer over AdamW (configs/optimizer/adamw-zero.yaml), which keeps each rank's share of
the moments, from the 760M config on (ZeRO-1; the 125M and 355M configs keep Lightning's plain DDP, where
the row's ZeRO-0 keeps them whole)."""
AS_RAN = {
    # The torchtitan paper's runs (2024) predate 0.3.0's chunked loss (0.2.0 has no ChunkedLossWrapper):
    # F.cross_entropy over the whole fp32-cast logits.
    "torchtitan": {"loss_chunks": 1},
    # fms-fsdp wraps with FSDP1 (main_training_llama.py: FullyShardedDataParallel, use_orig_params only
    # under torch.compile) and its bfSixteen policy (fms_fsdp/policies/mixed_precision.py: param and
    # reduce dtype bf16): the flat parameter is gathered and reduced in place, in bf16, on torchtitan's
    # facts otherwise.
    "fms-fsdp": {"gather_copy_bytes_per_param": 0.0, "reduce_copy_bytes_per_param": 0.0,
                 "sharded_reduce_bytes_per_grad": 2.0},
    "kempnerforge": KEMPNERFORGE_FACTS,
    # The flash-attention repo's GPT trainer takes its own fused loss (training/configs/experiment/pile/
    # base.yaml: train.loss_fn flash_attn.losses.cross_entropy.CrossEntropyLoss, inplace_backward: True,
    # "faster and uses less memory than torch.nn.CrossEntropyLoss"): its kernel keeps the bf16 logits and
    # a per-row log-sum-exp, and its backward writes the logits' gradient over them (in place): 2 B per
    # logit at the loss's peak, not Megatron's 6.
    "flash-attention-2": {"fused_cross_entropy": True, "loss_bytes_per_logit": 2.0,
                          **FLASH_ATTN_TRAINING_STATES},
    # torchao's float8 training table ran torchtitan 0.0.2, before 0.3.0's chunked loss.
    "torchao": {"loss_chunks": 1},
    # KempnerForge pads every expert's tokens to the busiest expert's count before its grouped GEMM,
    # and reads those counts on the host in every MoE layer (Framework.moe_host_sync).
    "kempnerforge-moe": {**KEMPNERFORGE_FACTS, "moe_padded_expert_gemm": True, "moe_host_sync": True},
}
