"""Framework: the training framework a plan is made for -- what it stores, fuses, overlaps, and
what it can run.

A plan is made for the framework that will run it (DESIGN.md "The framework is an input"). The
cost model reads the storage and fusion facts; the search explores only plans `check()` allows;
the plan file records the framework's name; the executor and the exporters re-check against it.
The built-in frameworks are in `autoplan.specs.frameworks` (one entry each, with sources).

Its data-parallel and ZeRO facts are its base class's (autoplan.specs.framework_dp.DataParallelFacts).
The efficiency fields (overlap fractions, overheads) hold neutral or documented values here; the
cost model may replace them with values fitted on published runs of that framework
(`cost_model/data/constants.json`, "frameworks"): a fitted constant belongs to a framework,
never to a GPU type.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

from autoplan.specs import framework_rules as rules
from autoplan.specs.framework_dp import DataParallelFacts
from autoplan.specs.framework_rules import block_extras  # noqa: F401 - re-exported
from autoplan.specs.model import ModelSpec
from autoplan.specs.plan import ParallelPlan
from autoplan.specs.training import TrainingSpec

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


@dataclass(frozen=True, kw_only=True)
class Framework(DataParallelFacts):
    name: str
    description: str
    version: str
    """The release or era whose facts these are."""
    # -- what it stores -------------------------------------------------------------------------
    states: dict = field(default_factory=megatron_states)
    """Model states per parameter: name -> StateTerm (bytes and the ZeRO stage that shards it)."""
    by_dtype: dict = field(default_factory=dict)
    """dtype -> {field: value}: the facts a run in that dtype has instead (`for_dtype`). DeepSpeed's
    bf16 runs at ZeRO 0-1 take its BF16_Optimizer, whose fp32 gradients are full-size (its `states`);
    Megatron-LM's fp16 runs keep and reduce fp16 gradients (`states`, `main_grad_reduce_bytes`)."""
    compute_weight_copy_bytes: float = 0.0
    """Bytes per parameter of a compute-dtype copy of the weights held from a micro-batch's forward to
    its backward (autocast over fp32 weights caches its bf16 casts for backward; FSDP2 at ZeRO 1/2
    keeps the gathered bf16 weights unsharded between forward and backward). 0 when the kernels read
    the stored weights directly."""
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
    runtime_bytes: float = 0.5 * 2 ** 30
    """Device memory the process holds outside the framework's allocator: CUDA context, kernel
    images, cuBLAS/NCCL buffers (the 'non-PyTorch memory' of an out-of-memory message)."""
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
    # -- what it fuses --------------------------------------------------------------------------
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
    fp8_moe: bool = True
    """fp8 training of mixture-of-experts models at all (a rule: False refuses the plan)."""
    fp8_mla: bool = True
    """fp8 training of models with multi-head latent attention (its latent projections in fp8 too)."""
    fp8_expert_gemms: bool = True
    """In an fp8 plan, the routed experts' GEMMs run in fp8 too (Transformer Engine's grouped linear);
    False: they stay in the compute dtype, and so do their inputs' casts (a converter of nn.Linear
    only, torchao's Float8Linear)."""
    fp8_weight_copy_bytes: float = 0.0
    """fp8: bytes per parameter of a layer's gathered compute copy where ZeRO shards the weights and
    they are gathered in fp8 (torchao's float8 all-gather under FSDP2: 1); 0 = gathered in the
    compute dtype like the other weights (compute_weight_copy_bytes, the gathers of comm_buffers)."""
    # -- what it overlaps -----------------------------------------------------------------------
    tp_comm_overlap: float = 0.0
    """Fraction of TP/SP collective time hidden behind GEMMs (async TP, as fitted)."""
    tp_comm_gemm_overlap: bool = False
    """TP/SP collectives split into tp chunks and pipelined with the GEMMs that produce or consume
    them (Megatron-Core --tp-comm-overlap: Transformer Engine userbuffers' split-pipelined all-gather
    and reduce-scatter, transformer_engine/common/comm_gemm_overlap): per pass only the first chunk
    (1/tp of the traffic) and the traffic beyond the layer's GEMM time stay exposed."""
    tp_backward_input_reductions: int = 0
    """Collectives per layer that reduce the input gradients of its column-parallel GEMMs in backward
    (reduce-scatter under SP, all-reduce without). 0: one per block, as Megatron (fused QKV and fc1)
    and torchtitan (PrepareModuleInput gathers each block's input once, so autograd sums the q/k/v
    gradients before the one reduction) run it. A plan that parallelizes q, k, v, gate and up each
    with its own ColwiseParallel reduces five times (KempnerForge; counted, see
    cost_model/source_facts.py KEMPNERFORGE_FACTS)."""
    fp8_linear_inputs_saved_in_fp8: bool = False
    """fp8 (the Megatron activation recipe): a dense layer's linears keep the fp8 cast of their input
    for the weight gradient, 1 B per element, not the bf16 input (Transformer Engine's te.Linear and
    te.LayerNormLinear under delayed or current scaling); the attention core still keeps its bf16 output
    for its own backward, so the projection's input costs 2 + 1 B. Off: fp8 plans save what bf16 plans
    save (torchao's Float8Linear)."""
    fp8_weight_workspace_bytes: float = 0.0
    """fp8 with bf16 weights: bytes per element of a dense linear's weight that the framework keeps cast
    between micro-batches (Transformer Engine: the fp8 weight and its fp8 transpose, 2); none where the
    weights are themselves fp8 (fp8_param_gather) or are cast afresh each micro-batch (torchao, 0)."""
    fp8_weight_cast_per_microbatch: bool = True
    """fp8: weights cast to fp8 in every micro-batch's forward and again for its backward (torchao
    Float8Linear), or once per step, with the transpose, and reused by later micro-batches
    (Transformer Engine: te.Linear's is_first_microbatch caches the fp8 weight)."""
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
    moe_host_sync: bool = False
    """Every MoE layer's forward (and its recompute) waits on the host for the GPU: KempnerForge's
    grouped-GEMM path reads its tokens per expert with `torch.bincount(...).tolist()`
    (kempnerforge/model/moe.py @abbbac33 MoEMLP._local_forward, line 290). FSDP2 issues a unit's
    all-gather in that unit's pre-forward hook, when the host reaches it (torch 2.9
    distributed/fsdp/_fully_shard/_fsdp_state.py _pre_forward, _fsdp_param_group.py pre_forward lines
    431-439; KempnerForge sets no explicit forward prefetch), so the next layer's all-gather can hide
    only under what this layer runs after the sync, its MoE block (cost_model/dp_time.py
    host_sync_exposed_s). False: the host runs ahead and the gathers hide under any compute."""
    moe_weighted_outputs_saved: bool = False
    """The router's probabilities weigh the experts' outputs in the unpermutation, and autograd keeps those
    outputs (the routed copies x h, as many rows as the experts' inputs) for the probabilities' gradient
    (Megatron-Core core_v0.6.0 token_dispatcher.py MoEAllGatherTokenDispatcher.token_unpermutation,
    `unpermuted_local_hidden * scores`, line 197; core_v0.7.0 to core_v0.13.0 moe_utils.py unpermute, the
    tokens times the probabilities). False: the weights are applied where nothing more is kept (from
    core_v0.14.0 the dispatchers hand the probabilities to the experts, experts.py
    activation_func_with_probs, inside the fused weighted SwiGLU at core_v0.16.1, which saves its input
    and the probabilities only)."""
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
    # -- how close its kernels get to the profile, and what it adds (fitted values for the published
    # frameworks: cost_model/data/constants.json "frameworks"; hardware facts stay in the profile) --
    gemm_efficiency: float = 1.0
    """Its training GEMMs' throughput over the profile's GEMM table at the same shape (1 = the very
    kernels the profiler timed, e.g. torch.matmul -> cuBLAS)."""
    attention_efficiency: float = 1.0
    """Its attention kernels' throughput over the profile's attention table."""
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
    async_tp_overlap: float = 0.0
    """`tp_comm_overlap` when the run turns async TP on."""
    overlap_contention: float = 0.0
    """Fraction of overlapped DP/FSDP collective time that still slows the step (NCCL kernels hold
    SMs and HBM bandwidth while the GEMMs run)."""
    weight_cast_bytes_per_param: float = 0.0
    """HBM bytes per parameter and micro-batch spent casting weights and accumulating gradients
    (autocast over fp32 weights: cast 4+2, grad cast 2+4, fp32 accumulate 4+4+4); 0 when the
    kernels read compute-dtype weights and accumulate into the main grad inside the GEMM."""
    grad_accumulation_bytes: dict = field(default_factory=dict)
    """dtype -> (bytes of the first micro-batch, bytes of each later one): HBM bytes per local
    parameter that adding a micro-batch's gradients to the accumulated ones moves outside the weight-
    gradient GEMM, at ZeRO 0-1 (at 2-3 the gradients are reduced and partitioned as they come).
    {} = none: Megatron accumulates into the fp32 main gradient inside the GEMM
    (gradient_accumulation_fusion), FSDP's cost is `reduce_copy_bytes_per_param`'s and
    cost_model.step_time.unsharded_accumulation_bytes_per_param's."""
    optimizer_bytes_per_param: float = 30.0
    """HBM bytes per (local) parameter of one optimizer step. 30: a fused AdamW reads fp32 master,
    m, v, grad (16) and writes master, m, v (12) and the bf16 weight (2)."""
    fused_adamw_on_cuda: bool = False
    """Eager recipes (this project's executor): on CUDA its AdamW is one fused kernel that updates in
    place and allocates nothing per parameter; False, or off CUDA: for-each AdamW, whose step holds an
    fp32 sqrt(v) temporary (4 B per local parameter) beside the states."""
    # -- what it can run ------------------------------------------------------------------------
    dtypes: tuple = ("bf16", "fp16", "fp8", "fp32")
    zero_stages: tuple = (0, 1, 2, 3)
    hsdp_zero_stages: tuple = ()
    """The ZeRO stages at which it shards within groups of data-parallel ranks and replicates across
    them (ParallelPlan.zero_shard); () = it shards over every data-parallel rank only."""
    max_zero_with_pp: int = 3
    """Highest ZeRO stage it combines with pipeline parallelism."""
    max_zero_with_ep: int = 3
    """Highest ZeRO stage it combines with expert parallelism."""
    max_zero_with_moe: int = 3
    """Highest ZeRO stage it runs a mixture-of-experts model with (whatever ep is)."""
    zero3_tied_embeddings: bool = True
    """ZeRO-3 (parameter sharding) with tied embedding/head weights."""
    zero3_dtypes: tuple = ("bf16", "fp16", "fp8", "fp32")
    """The dtypes it runs ZeRO-3 (parameter sharding) in."""
    zero0_only_pure_dp: bool = False
    """Plain (ZeRO-0) data parallelism only when dp is the only parallelism (torchtitan's DDP)."""
    max_tp: int = 1 << 20
    max_pp: int = 1 << 20
    max_cp: int = 1 << 20
    max_vpp: int = 1 << 20
    """1: no interleaved schedule."""
    uneven_stages: bool = True
    """Pipeline ranks may hold different layer counts."""
    uneven_interleaved: bool = True
    """With interleaving (vpp > 1), virtual stages may hold different layer counts
    (ParallelPlan.virtual_stage_num_layers), e.g. 126 layers at pp=8, vpp=8."""
    sequence_parallel: str = "optional"
    """"optional", "always" (every tp > 1 plan shards norms/dropout on the sequence) or "never"."""
    sp_regathers_in_backward: bool = False
    """Under sequence parallelism a linear saves its sharded input and all-gathers it again for its
    backward (Megatron's linear layers), so a layer's backward and recompute hold the sharded layer and
    one gathered input; False: autograd keeps the gathered inputs (DTensor sequence parallelism)."""
    moe: bool = True
    moe_with_tp_pp: bool = True
    """Mixture-of-experts layers under tensor or pipeline parallelism."""
    expert_tensor_parallel: bool = False
    """Experts split over their own tensor-parallel degree (etp != tp), so that the expert-parallel
    group may span tensor- and context-parallel ranks too (Megatron-Core's MoE parallel folding,
    --expert-tensor-parallel-size). Without it, experts are split over tp and ep divides dp*cp."""
    mla_padded_values: bool = False
    """Multi-head latent attention runs its attention core with the values zero-padded to the q/k head
    width (one width for SDPA's flash kernels), so A·V and the output cost head_dim, not v_head_dim."""
    moe_tp_needs_sequence_parallel: bool = False
    """Mixture-of-experts training under tensor parallelism requires sequence parallelism."""
    experts_whole_with_ep: bool = False
    """The expert TP follows ep: with ep > 1 every routed expert is whole on its expert-parallel rank
    (etp = 1, the expert-parallel group borrowing the tensor- and context-parallel ranks: ep divides
    dp*cp*tp) and the layer routes its sequence-parallel share as it is; with ep = 1 the experts are split
    over tp (etp = tp). torchtitan: its own choice, not a knob (SearchSpace derives etp from ep)."""
    recompute_modules: bool = False
    """Selective recompute of named submodules (ParallelPlan.recompute_modules: Megatron-Core's
    --recompute-modules); without it "selective" means the framework's one policy."""
    moe_capacity_factor: bool = False
    """Capacity-limited routing that drops the tokens over an expert's capacity
    (ParallelPlan.moe_capacity_factor); without it the framework's MoE is dropless only."""
    min_microbatches_per_stage: bool = False
    """The 1F1B schedule needs at least as many micro-batches as pipeline stages."""
    tied_embeddings_one_stage: bool = False
    """Tied embedding/head weights only without tp and pp."""
    tied_embeddings_with_pp: bool = True
    """Tied embedding/head weights under pipeline parallelism (the first and last stage share them)."""
    learned_positions_split_sequence: bool = True
    """Learned position embeddings under cp or sequence parallelism."""
    seq_len_within_model: bool = False
    """seq_len may not exceed the model's max_seq_len (position tables are built that long). Learned
    position tables bound it in every framework (`context_rule`)."""
    tp_with_block_extras: bool = True
    """Tensor parallelism of blocks with q/k norms, post/sandwich norms or parallel attention/MLP."""
    cp_with_masked_attention: bool = True
    """Context parallelism of sliding-window or soft-capped attention."""
    mla: bool = True
    """Multi-head latent attention (DeepSeek-V2/V3's compressed K/V and queries)."""
    options: dict = field(default_factory=dict)
    """Switches a run of this framework may turn on, named after its flag: option -> the facts it
    changes. A plan made with one names the framework "<name>+<option>" (autoplan.specs.frameworks
    get_framework), so the plan file, the estimate and the export agree on it."""
    sources: dict = field(default_factory=dict)
    """Where each fact comes from: field name -> document."""

    def with_overrides(self, **changes) -> "Framework":
        """The same framework with some efficiency facts replaced (fitted values, torch.compile on)."""
        return replace(self, **changes)

    def for_dtype(self, dtype: str) -> "Framework":
        """The framework as a run in `dtype` uses it: its `by_dtype` facts for that dtype, if any."""
        facts = self.by_dtype.get(dtype)
        if not facts or all(getattr(self, key) == value for key, value in facts.items()):
            return self  # nothing for this dtype, or already applied: the same object
        return replace(self, **facts)

    def default_etp(self, model: ModelSpec, ep: int) -> int:
        """The expert TP a plan gets when nobody names one (ParallelPlan.etp; 0 = tp): 1 under expert
        parallelism where the framework keeps experts whole there (experts_whole_with_ep), else 0."""
        return 1 if self.experts_whole_with_ep and model.is_moe and ep > 1 else 0

    # -- the rules (autoplan.specs.framework_rules) ------------------------------------------------
    def check_model(self, model: ModelSpec, training: TrainingSpec | None = None) -> None:
        """Raise InfeasiblePlan when no plan of this framework can run the model (an architecture
        feature it lacks) or, given the training shape, its sequence length; the planner asks this
        once, before searching."""
        rules.check_model(self, model, training)

    def check_problem(self, model: ModelSpec, training: TrainingSpec) -> None:
        """Raise InfeasiblePlan when no plan of this framework can train the model this way: the rules
        that depend on the problem alone (architecture, dtype, sequence length), not on the plan."""
        rules.check_problem(self, model, training)

    def check(self, model: ModelSpec, training: TrainingSpec, plan: ParallelPlan) -> None:
        """Raise InfeasiblePlan (reason tag "framework_...") for the first rule of this framework
        the plan breaks, the problem's own rules (check_problem) first. Structural rules every
        framework shares are ParallelPlan.check's."""
        rules.check_problem(self, model, training)
        rules.check_plan(self, model, training, plan)

    def check_plan(self, model: ModelSpec, training: TrainingSpec, plan: ParallelPlan) -> None:
        """check's rules that read the plan: what a search asks of each candidate once the problem
        has passed check_problem."""
        rules.check_plan(self, model, training, plan)

    def context_rule(self, max_seq_len: int, position: str, seq_len: int) -> str:
        """The one rule on a sequence longer than the model's context ("" when this framework runs it):
        framework_rules.context_rule."""
        return rules.context_rule(self, max_seq_len, position, seq_len)
