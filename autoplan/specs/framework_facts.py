"""The groups of a training framework's facts, one frozen dataclass per concern and reader: what it stores
(StateFacts), what a layer saves (MemoryLayoutFacts), its kernels (KernelFacts), the work outside the layers
(StepWorkFacts), its TP/SP communication (TensorParallelFacts), its pipeline (PipelineFacts) and its mixture of
experts (MoEFacts). `Framework` (autoplan.specs.framework) inherits them all, with its data-parallel facts
(framework_dp.DataParallelFacts) and its rules' (framework_rules.PlanRules, ModelRules); `Framework.facts(Group)`
hands a reader one group alone. Every field has a default, so a framework states only where it differs.
"""
from __future__ import annotations

from dataclasses import dataclass, field

NEVER = 4
"""`StateTerm.sharded_from_zero` of a state no ZeRO stage shards."""


@dataclass(frozen=True)
class StateTerm:
    """One per-parameter model state a framework keeps on the GPU."""
    bytes_per_param: float
    sharded_from_zero: int
    """The lowest ZeRO stage that shards this state over the data-parallel group (NEVER: none)."""
    what: str = ""


def megatron_states() -> dict:
    """Megatron-LM's mixed-precision states (Rajbhandari et al. 2019, arXiv 1910.02054, sec. 3;
    Megatron's distributed optimizer docs): bf16 weights, fp32 main gradients, fp32 master weights
    and Adam moments."""
    return {
        "params": StateTerm(2, 3, "bf16 weights the kernels read"),
        "grads": StateTerm(4, 2, "fp32 main-grad buffer (gradients accumulated over micro-batches)"),
        "optimizer": StateTerm(12, 1, "fp32 master weights 4 + Adam momentum 4 + variance 4"),
    }


def fsdp2_states(what: str) -> dict:
    """FSDP2 with a bf16 MixedPrecisionPolicy: the sharded parameter IS the fp32 master (PyTorch
    FSDP2 docs, `fully_shard(mp_policy=MixedPrecisionPolicy(param_dtype=bfloat16,
    reduce_dtype=float32))`); gradients land in fp32 on the sharded parameter; AdamW keeps two fp32
    moments."""
    return {
        "params": StateTerm(4, 1, f"fp32 parameters ({what})"),
        "grads": StateTerm(4, 2, "fp32 gradients"),
        "optimizer": StateTerm(8, 1, "AdamW momentum 4 + variance 4 (fp32)"),
    }



@dataclass(frozen=True, kw_only=True)
class StateFacts:
    """What it keeps per parameter and outside its allocator: read by cost_model/memory.py and stage_memory.py."""
    # -- what it stores --------------------------------------------------------------------------------------
    states: dict = field(default_factory=megatron_states)
    """Model states per parameter: name -> StateTerm (bytes and the ZeRO stage that shards it)."""
    pipeline_zero0_states: dict = field(default_factory=dict)
    """Model states its pipeline engine keeps at ZeRO-0 (pp > 1) instead of `states` (cost_model.memory.states_for);
    empty: `states`. DeepSpeed's pipeline engine runs bf16 at ZeRO-0 with BF16_Optimizer, which
    partitions the master weights and Adam moments over data parallelism whatever the stage."""
    compute_weight_copy_bytes: float = 0.0
    """Bytes per parameter of a compute-dtype copy of the weights held from a micro-batch's forward to
    its backward (autocast over fp32 weights caches its bf16 casts for backward; FSDP2 at ZeRO 1/2
    keeps the gathered bf16 weights unsharded between forward and backward). 0 when the kernels read
    the stored weights directly."""
    fp8_weight_copy_bytes: float = 0.0
    """fp8: bytes per parameter of a layer's gathered compute copy where ZeRO shards the weights and
    they are gathered in fp8 (torchao's float8 all-gather under FSDP2: 1); 0 = gathered in the
    compute dtype like the other weights (compute_weight_copy_bytes, the gathers of comm_buffers)."""
    fp8_weight_workspace_bytes: float = 0.0
    """fp8 with bf16 weights: bytes per element of a dense linear's weight that the framework keeps cast
    between micro-batches (Transformer Engine: the fp8 weight and its fp8 transpose, 2); none where the
    weights are themselves fp8 (fp8_param_gather) or are cast afresh each micro-batch (torchao, 0)."""
    runtime_bytes: float = 0.5 * 2 ** 30
    """Device memory the process holds outside the framework's allocator: CUDA context, kernel
    images, cuBLAS/NCCL buffers (the 'non-PyTorch memory' of an out-of-memory message)."""
    fused_adamw_on_cuda: bool = False
    """Eager recipes (this project's executor): on CUDA its AdamW is one fused kernel that updates in
    place and allocates nothing per parameter; False, or off CUDA: for-each AdamW, whose step holds an
    fp32 sqrt(v) temporary (4 B per local parameter) beside the states."""


@dataclass(frozen=True, kw_only=True)
class MemoryLayoutFacts:
    """What a layer saves for its backward and what the loss holds: read by cost_model/estimator.py's activation
    bytes and stage_memory.py."""
    # -- what a layer saves ----------------------------------------------------------------------------------
    activation_recipe: str = "megatron"
    """Which tensors a layer saves for backward: "megatron" (Korthikanti et al. 2022 Table 2, named
    tensors in bf16 with fused kernels; cost_model/memory.py), "eager" (autoplan's executor today:
    eager PyTorch on FSDP2's bf16 weight copies, or under bf16 autocast over fp32 weights where FSDP2
    does not wrap the model; grouped K/V unrepeated; the fused chunked loss at tp = 1) or
    "eager-autocast" (the executor before its speed-ups: always autocast, K/V repeated, whole fp32
    logits). Both eager recipes: cost_model/eager_activations.py, checked against the executor's
    saved tensors."""
    loss_bytes_per_logit: float = 0.0
    """Bytes per logit the loss path holds at its peak; 0 derives it from `fused_cross_entropy`
    (6 fused, 10 unfused). The eager recipes count their loss tensors themselves."""
    loss_gathers_logits: bool = False
    """The loss sees every logit on every tensor-parallel rank: the LM head's vocab-split output is
    gathered (ColwiseParallel with a Replicate output) instead of a vocab-parallel loss, so each TP rank
    holds and reduces the whole b x s x vocab logits."""
    embedding_tp_sharded: bool = True
    """The token embedding is split over the tensor-parallel ranks (vocab-parallel, Megatron's
    VocabParallelEmbedding, torchtitan's RowwiseParallel); False: every TP rank holds all of it."""
    selective_recompute: str = "attention"
    """What `recompute="selective"` means: "attention" (Megatron: the attention core, Korthikanti 2022)
    or "ops" (torchtitan: save every other matmul output, recompute the rest)."""
    fused_cross_entropy: bool = True
    """Loss over the logits in place (Megatron's vocab-parallel cross-entropy: 6 B per logit) or
    unfused (F.cross_entropy also materializes the fp32 gradient of the logits: 10 B per logit)."""
    loss_chunks: int = 1
    """Sequence chunks the head and loss run over one at a time, each chunk's backward before the next
    (torchtitan's ChunkedLossWrapper: 8), so the loss path holds its bytes per logit for one chunk, plus
    the fp32 gradient of the final hidden states it accumulates. Read by the "megatron" activation
    recipe; the eager recipes count their own loss tensors."""
    fused_cross_entropy_max_tp: int = 1 << 20
    """Highest tp at which the fused loss runs; above it the loss is unfused (autoplan's chunked
    head + loss needs the whole head weight on a rank)."""
    fp8_linear_inputs_saved_in_fp8: bool = False
    """fp8 (the Megatron activation recipe): a dense layer's linears keep the fp8 cast of their input
    for the weight gradient, 1 B per element, not the bf16 input (Transformer Engine's te.Linear and
    te.LayerNormLinear under delayed or current scaling); the attention core still keeps its bf16 output
    for its own backward, so the projection's input costs 2 + 1 B. Off: fp8 plans save what bf16 plans
    save (torchao's Float8Linear)."""
    sp_regathers_in_backward: bool = False
    """Under sequence parallelism a linear saves its sharded input and all-gathers it again for its
    backward (Megatron's linear layers), so a layer's backward and recompute hold the sharded layer and
    one gathered input; False: autograd keeps the gathered inputs (DTensor sequence parallelism)."""
    moe_weighted_outputs_saved: bool = False
    """The router's probabilities weigh the experts' outputs in the unpermutation, and autograd keeps those
    outputs (the routed copies x h, as many rows as the experts' inputs) for the probabilities' gradient
    (Megatron-Core core_v0.6.0 token_dispatcher.py MoEAllGatherTokenDispatcher.token_unpermutation,
    `unpermuted_local_hidden * scores`, line 197; core_v0.7.0 to core_v0.13.0 moe_utils.py unpermute, the
    tokens times the probabilities). False: the weights are applied where nothing more is kept (from
    core_v0.14.0 the dispatchers hand the probabilities to the experts, experts.py
    activation_func_with_probs, inside the fused weighted SwiGLU at core_v0.16.1, which saves its input
    and the probabilities only)."""


@dataclass(frozen=True, kw_only=True)
class KernelFacts:
    """Its kernels, what it fuses and how close they get to the profile (fitted for the published frameworks:
    cost_model/data/constants.json): read by cost_model/estimator.py into layer_terms.Rates."""
    # -- its kernels and what it fuses -----------------------------------------------------------------------
    flash_attention: bool = True
    """Fused attention that never stores the s x s scores (Dao et al. 2022, arXiv 2205.14135)."""
    attention_kernel: str = "flash2"
    """Which fused kernel that is (autoplan.specs.choices.ATTENTION_KERNELS): the built-in Hopper
    profiles time FlashAttention-2 and cuDNN's fused attention apart (cuDNN's is 1.7x faster at long
    sequences and slower at few heads x short sequences: cost_model/data/kernels)."""
    fused_elementwise: float = 1.0
    """Multiplier on the memory-bound ops' bytes (1 = eager kernels; torch.compile lowers it)."""
    fp8_rowwise: bool = False
    """fp8 GEMMs with per-row scales (torchao "rowwise") instead of one scale per tensor."""
    fp8_expert_gemms: bool = True
    """In an fp8 plan, the routed experts' GEMMs run in fp8 too (Transformer Engine's grouped linear);
    False: they stay in the compute dtype, and so do their inputs' casts (a converter of nn.Linear
    only, torchao's Float8Linear)."""
    fp8_norm_writes_fp8: bool = False
    """fp8: the norm in front of a dense layer's QKV and MLP-input linears writes their fp8 input itself
    (Transformer Engine's LayerNormLinear / LayerNormMLP, layernorm_fwd_fp8), so those inputs are never cast;
    the backward transposes the fp8 input for the weight gradient (cost_model/layer_terms.py fp8_cast_times).
    False: the norm writes bf16 and each linear casts its own input (torchao's Float8Linear)."""
    mla_padded_values: bool = False
    """Multi-head latent attention runs its attention core with the values zero-padded to the q/k head
    width (one width for SDPA's flash kernels), so A·V and the output cost head_dim, not v_head_dim."""
    gemm_efficiency: float = 1.0
    """Its training GEMMs' throughput over the profile's GEMM table at the same shape (1 = the very
    kernels the profiler timed, e.g. torch.matmul -> cuBLAS)."""
    attention_efficiency: float = 1.0
    """Its attention kernels' throughput over the profile's attention table."""
    triton_attention_efficiency: float = 1.0
    """flash-attn's Triton kernel (`flash-triton`: flash_attn_triton.py v1.0.4, llm-foundry's copy of it),
    which no profile times and FlashAttention-2's table prices (autoplan.specs.choices
    ATTENTION_KERNEL_STAND_IN), runs at this fraction of that table's rate, on top of attention_efficiency
    (cost_model/estimator.py)."""
    fp8_gemm_efficiency: float = 1.0
    """Its fp8 GEMMs (scaling recipe included) relative to gemm_efficiency on the profile's fp8 table."""
    fp8_rowwise_efficiency: float = 1.0
    """Extra factor for row-wise scaled fp8 GEMMs (their scaling epilogue)."""
    elementwise_bytes_factor: float = 1.0
    """Bytes its memory-bound ops (norms, activations, residuals, RoPE, loss) move over the minimal
    count of cost_model/layer_time.py."""
    compiled_elementwise_factor: float = 1.0
    """`fused_elementwise` when the run uses torch.compile (what compilation leaves of those bytes).
    For the published frameworks derived, not fitted: 1 / elementwise_bytes_factor, so that a compiled
    run moves the minimal count (benchmarks/fit_constants.py constants_from)."""


@dataclass(frozen=True, kw_only=True)
class StepWorkFacts:
    """The memory-bound work of a step outside the layers (weight casts, gradient accumulation, the optimizer
    step): read by cost_model/step_time.py."""
    # -- the work outside the layers -------------------------------------------------------------------------
    weight_cast_bytes_per_param: float = 0.0
    """HBM bytes per parameter and micro-batch spent casting weights and accumulating gradients
    (autocast over fp32 weights: cast 4+2, grad cast 2+4, fp32 accumulate 4+4+4); 0 when the
    kernels read compute-dtype weights and accumulate into the main grad inside the GEMM."""
    fp8_weight_cast_per_microbatch: bool = True
    """fp8: weights cast to fp8 in every micro-batch's forward and again for its backward (torchao
    Float8Linear), or once per step, with the transpose, and reused by later micro-batches
    (Transformer Engine: te.Linear's is_first_microbatch caches the fp8 weight)."""
    grad_accumulation_bytes: dict = field(default_factory=dict)
    """dtype -> (bytes of the first micro-batch, bytes of each later one): HBM bytes per local
    parameter that adding a micro-batch's gradients to the accumulated ones moves outside the weight-
    gradient GEMM, at ZeRO 0-1 (at 2-3 the gradients are reduced and partitioned as they come).
    {} = none: Megatron accumulates into the fp32 main gradient inside the GEMM
    (gradient_accumulation_fusion), FSDP's cost is `reduce_copy_bytes_per_param`'s and
    cost_model.step_time.unsharded_accumulation_bytes_per_param's."""
    pipeline_zero0_grad_accumulation_bytes: dict = field(default_factory=dict)
    """`grad_accumulation_bytes` of its pipeline engine at ZeRO-0 (pp > 1), where that differs
    (cost_model.step_time.grad_accumulation_bytes_per_param, as `pipeline_zero0_states` for memory); {} =
    `grad_accumulation_bytes`. DeepSpeed's pipeline engine runs bf16 at ZeRO-0 with BF16_Optimizer, which
    adds param.grad into its own accumulator after every micro-batch's backward."""
    optimizer_bytes_per_param: float = 30.0
    """HBM bytes per (local) parameter of one optimizer step. 30: a fused AdamW reads fp32 master,
    m, v, grad (16) and writes master, m, v (12) and the bf16 weight (2)."""


@dataclass(frozen=True, kw_only=True)
class TensorParallelFacts:
    """Its tensor- and sequence-parallel collectives and what hides them: read by cost_model/layer_time.py and
    step_time.py."""
    # -- TP/SP communication ---------------------------------------------------------------------------------
    tp_comm_overlap: float = 0.0
    """Fraction of TP/SP collective time hidden behind GEMMs (async TP, as fitted)."""
    tp_comm_gemm_overlap: bool = False
    """TP/SP collectives split into tp chunks and pipelined with the GEMMs that produce or consume
    them (Megatron-Core --tp-comm-overlap: Transformer Engine userbuffers' split-pipelined all-gather
    and reduce-scatter, transformer_engine/common/comm_gemm_overlap): per pass only the first chunk
    (1/tp of the traffic) and the traffic beyond the layer's GEMM time stay exposed. Off in every framework's
    facts: a plan's tp_comm_overlap turns it on where the kind is "userbuffers" (cost_model/estimator.py
    tp_overlap_switches)."""
    tp_comm_overlap_kind: str = ""
    """How it overlaps TP communication when a plan turns ParallelPlan.tp_comm_overlap on
    (autoplan.specs.choices.TP_COMM_OVERLAP_KINDS): "userbuffers" costs it as tp_comm_gemm_overlap,
    "async-tp" as async_tp_overlap with torch.compile's elementwise_bytes (compiled_elementwise_factor),
    "" refuses the plan (cost_model/estimator.py Estimator.for_plan, framework_rules.check_plan)."""
    tp_backward_input_reductions: int = 0
    """Collectives per layer that reduce the input gradients of its column-parallel GEMMs in backward
    (reduce-scatter under SP, all-reduce without). 0: one per block, as Megatron (fused QKV and fc1)
    and torchtitan (PrepareModuleInput gathers each block's input once, so autograd sums the q/k/v
    gradients before the one reduction) run it. A plan that parallelizes q, k, v, gate and up each
    with its own ColwiseParallel reduces five times (KempnerForge; counted, see
    autoplan/specs/frameworks/torchtitan.py KEMPNERFORGE_FACTS)."""
    async_tp_overlap: float = 0.0
    """`tp_comm_overlap` when the run turns async TP on."""


@dataclass(frozen=True, kw_only=True)
class PipelineFacts:
    """Its pipeline schedule's sends and its host's time (overheads, kernel issue): read by cost_model/step_time.py,
    host_time.py (and dp_time.py for FSDP under a pipeline)."""
    # -- the pipeline ----------------------------------------------------------------------------------------
    pp_p2p_overlap: bool = False
    """Interleaved schedules send each virtual stage's activation while the next one computes
    (Megatron-Core overlap_p2p_comm, on by default with vpp > 1: megatron/core/pipeline_parallel/
    schedules.py forward_backward_pipelining_with_interleaving): only a transfer longer than a
    virtual stage's compute shows."""
    pp_reshard_after_forward: bool = False
    """Under a pipeline schedule, FSDP frees the sharded weights after every micro-batch's forward
    (fully_shard reshard_after_forward=True) while torch.distributed.pipelining keeps them gathered
    from each backward to the next forward (stage.py backward_maybe_with_nosync:
    set_reshard_after_backward(False) until the last backward). So the memory peak is ZeRO-2's, every
    layer gathered during a backward, but each backward that follows a forward gathers the weights
    again: m + 1 all-gathers a step under 1F1B, hidden under the backward compute as FSDP prefetches
    them. torchtitan keeps the weights gathered under PP (reshard_after_forward False); KempnerForge's
    PP path does not (scripts/train.py at 601aba9 calls apply_fsdp2 with its default, True)."""
    pp_scatter_gather: bool = True
    """Pipeline sends split over the TP ranks (b*s*h/t each, Narayanan 2021 sec. 4.1), or each TP
    rank sends the whole activation (DeepSpeed's pipeline engine)."""
    layer_overhead_s: float = 0.0
    """Host time per layer and micro-batch the GPU waits for (dispatch, kernel launches)."""
    microbatch_overhead_s: float = 0.0
    """Host time per micro-batch of a pipeline engine (schedule dispatch, blocking sends)."""
    kernels_per_layer: float = 0.0
    """Kernels the host issues per layer and micro-batch, forward and backward (cost_model/host_time.py;
    0: host issue time not priced)."""
    host_s_per_kernel: float = 0.0
    """Host seconds to issue one of them (Python, dispatcher, autograd, launch): a micro-batch takes
    max(GPU time, layers x kernels_per_layer x host_s_per_kernel) (cost_model/host_time.py)."""
    launch_blocking: bool = False
    """CUDA_LAUNCH_BLOCKING=1: each kernel launch returns only once the kernel has run, so the host issues
    the next kernel after the GPU finished the last and the micro-batch takes GPU time + host issue time,
    not the larger of the two (cost_model/host_time.py). BigScience's tr11 runs on 48 Jean Zay nodes
    (tr11-176B-ml.slurm: "do not remove or the training will hang"; chronicles-prequel.md, "dealing with JZ
    hanging": asynchronous launches always hung at 320 GPUs)."""


@dataclass(frozen=True, kw_only=True)
class MoEFacts:
    """How its mixture-of-experts layers move and compute tokens: read by cost_model/moe_time.py (through
    layer_time.py), and dp_time.py for a host sync."""
    # -- mixture of experts ----------------------------------------------------------------------------------
    moe_dispatch: str = "tp-gathered"
    """How a MoE layer's tokens reach its experts under tensor and expert parallelism (priced by
    cost_model/layer_time.py). "tp-gathered": the layer's input is gathered over TP like a dense MLP's
    (an all-gather and a reduce-scatter of the tokens per pass), then its routed copies go to their experts
    in one all-to-all over ep. "alltoall": Megatron-Core's alltoall and flex dispatchers -- the layer takes
    the sequence-parallel share as it is, sends its k routed copies over ep in an all-to-all, then
    all-gathers them over the expert-TP (etp) ranks, and scatters them back the same way; the layer's TP
    collectives are only a shared expert's. "allgather": Megatron-Core's allgather dispatcher -- every rank
    all-gathers the hidden states of its etp x ep group and reduce-scatters the outputs, whatever the
    routing. "alltoall-with-ep" (torchtitan): "alltoall" when ep > 1 (at etp 1: Framework.experts_whole_with_ep),
    "tp-gathered" when ep = 1. "flex": Megatron-Core's flex dispatcher on DeepEP -- one exchange over the
    etp x ep ranks, inside a node an all-to-all of the copies as alltoall's, across nodes each token sent
    once to each node holding one of its experts and forwarded there over NVLink (hierarchical dispatch)."""
    moe_a2a_overlap: bool = False
    """The expert-parallel dispatch/combine all-to-all of one micro-batch's forward runs under another
    micro-batch's backward and the reverse (Megatron-Core --overlap-moe-expert-parallel-comm
    --delay-wgrad-compute; cost_model/moe_time.py)."""
    moe_load_imbalance: float = 0.0
    """Routed tokens of the busiest expert-parallel rank over the mean (a measured max/mean load);
    0: the published default of cost_model/moe_time.py (dropless, auxiliary-loss router); 1: balanced
    routing (Megatron-Core --moe-router-force-load-balancing, a benchmark setting)."""
    moe_grouped_gemm: bool = False
    """The local experts' GEMMs run as one torch._grouped_mm call per weight over every local expert's
    rows (torchtitan 0.3.0 models/common/moe.py GroupedExperts._grouped_mm; KempnerForge's grouped_expert_forward;
    autoplan's executor/moe.py on Hopper in bf16), priced as that kernel where a record of it covers the
    GPU (cost_model/grouped_gemm.py). False: each local expert's GEMM at its own shape from the dense
    table (a loop of GEMMs: Megatron-Core's SequentialMLP, which autoplan's export runs, DeepSpeed's
    experts; Megatron-Core's TE grouped GEMM, no record of which was timed)."""
    moe_padded_expert_gemm: bool = False
    """The grouped expert GEMM runs every local expert over the busiest one's token count (inputs
    zero-padded to (experts, max tokens, h)), so the routed-token imbalance costs GEMM time even
    without expert parallelism (KempnerForge kempnerforge/model/moe.py @abbbac33 grouped_expert_forward,
    lines 55-73). False: GEMMs over each expert's own tokens (Megatron-Core TEGroupedMLP, torchtitan)."""
    moe_stacked_expert_weights: bool = False
    """The local experts' weights are copied into one stacked tensor per projection in every forward
    (KempnerForge kempnerforge/model/moe.py @abbbac33 grouped_expert_forward lines 50-53,
    `torch.stack([e.up_proj.weight.t() for e in experts])` and likewise down and gate, its
    moe_packed_experts=false default), and its backward copies the gradients back apart: a transposing
    HBM copy of every local expert weight in each forward, recompute and backward
    (cost_model/moe_time.py stacked_weights_s). False: packed (E, in, out) parameters read in place."""
    moe_gather_scatter_permute: bool = False
    """The allgather dispatcher of Megatron-Core core_v0.6.0 moves tokens in and out of expert order with
    torch.gather, out-of-place scatter and scatter_add over h-wide rows of the gathered tokens
    (megatron/core/transformer/moe/token_dispatcher.py core_v0.6.0 MoEAllGatherTokenDispatcher, lines 135,
    166, 191-197 and 220-226), not over the rank's sequence-parallel share: forward and backward move
    14 L + 3 N and 17 L + N rows, N the tokens gathered over the tensor x expert group and L the copies
    routed to the rank's experts (cost_model/moe_dispatch_v06.py gather_scatter_rows). The same file ran on
    Megatron-LM main from 2024-04-02 (06cf6d74) to 2024-05-01 (e61c3841), Pai-Megatron-Patch's
    Megatron-LM-240405 (ba773259) included; core_v0.7.0 replaced the unpermutation's scatters with its
    moe_scatter function. False: the permute/unpermute of the rank's routed copies (moe_utils.py permute
    and unpermute)."""
    moe_sp2hp_alltoall: bool = False
    """The alltoall dispatcher of Megatron-Core core_v0.6.0 (the same file on Megatron-LM main from
    2024-04-02 to 2024-05-01) under tensor parallelism: each rank trades its sequence share for every
    tensor rank's tokens at h/tp (all_to_all_sp2hp) and back (all_to_all_hp2sp), gathers the received
    copies along h with a list all-gather and a cat, and reduce-scatters them along h through transposed
    copies (megatron/core/transformer/moe/token_dispatcher.py core_v0.6.0 MoEAlltoAllTokenDispatcher, lines
    404-485; tensor_parallel/mappings.py lines 71-104, 479-502); its unpermute zero-fills, index-copies and
    weighs all k copies (moe_utils.py lines 125-151). cost_model/moe_dispatch_v06.py sp2hp_alltoall_elems
    counts the bytes, moe_time.py tp_exchange_time_s the two tensor-parallel all-to-alls per pass.
    False: today's alltoall dispatcher (moe_time.py permute_elems)."""
    moe_host_sync: bool = False
    """Every MoE layer's forward (and its recompute) waits on the host for the GPU: KempnerForge's
    grouped-GEMM path reads its tokens per expert with `torch.bincount(...).tolist()`
    (kempnerforge/model/moe.py @abbbac33 MoEMLP._local_forward, line 290). FSDP2 issues a unit's
    all-gather in that unit's pre-forward hook, when the host reaches it (torch 2.9
    distributed/fsdp/_fully_shard/_fsdp_state.py _pre_forward, _fsdp_param_group.py pre_forward lines
    431-439; KempnerForge sets no explicit forward prefetch), so the next layer's all-gather can hide
    only under what this layer runs after the sync, its MoE block (cost_model/dp_time.py
    host_sync_exposed_s). False: the host runs ahead and the gathers hide under any compute."""
