"""Estimator: (model, training, cluster, profile) fixed once; `estimate(plan)` many times.

Step time (exposed seconds per optimizer step) on the slowest pipeline stage:

    per micro-batch  T_mb = stage layers * (fwd + bwd + exposed TP/CP/EP comm) + stage extras
                            + recompute + pipeline point-to-point      (slowest rank, cost_model.stages)
    step             = m * T_mb                      (compute, memory-bound, recompute, comm terms)
                     + (p - 1) / v * T_mb            (bubble, Narayanan 2021 sec. 2.2: (p-1)/(v*m))
                     + exposed DP/FSDP collectives + optimizer step + software overhead

Memory is the worst rank's: each rank's own layers' states and activations times its micro-batches
in flight, the embedding on the first, the logits on the last (uneven splits: cost_model.stages
names the ranks that can be the worst). The breakdown dictionaries' sums are the totals
(CostEstimate checks it).
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from autoplan.specs import (
    DEFAULT_FRAMEWORK, ClusterSpec, CostEstimate, Framework, HardwareProfile, InfeasiblePlan, ModelSpec, ParallelPlan,
    TrainingSpec,
)
from autoplan.specs.flops import model_flops_per_token
from autoplan.specs.framework_facts import MoEFacts
from cost_model.constants import Constants, load_constants
from cost_model.eager_activations import RECIPES, recipe_for, uncounted_features
from cost_model.layer_mix import layer_seconds, mixes_dense_and_moe, pacing_layer_kinds
from cost_model.layer_time import LayerTimes, Rates, embedding_time_s, head_times, mean_layer_times
from cost_model.memory import BYTES_ACT, activation_bytes_per_layer, full_recompute_layer_bytes, selective_kept_bytes
from cost_model.moe_time import moe_padded_memory
from cost_model.stage_memory import (
    allocated_peak_bytes, min_full_recompute_layers, plan_memory_key, stage_breakdown, stage_peak,
)
from cost_model.stages import stage_split
from cost_model.step_time import step_time_terms
from cost_model.tables import ProfileTables

_TABLES: dict = {}


@dataclass(frozen=True)
class ParamCounts:
    """Parameters of the whole model by where they live (stages, TP and EP divide them)."""
    dense_per_layer: float
    """Attention, norms, router and any non-expert MLP of one layer."""
    expert_per_layer: float
    """All experts of one MoE layer (0 for a dense model)."""
    embedding: float
    head: float
    """Final norm + LM head (the norm only when tied to the embedding)."""
    tied: bool
    embedding_tp_sharded: bool = True
    """Framework.embedding_tp_sharded: else every TP rank holds the whole embedding."""

    def local(self, plan: ParallelPlan, layers: int, first: bool, last: bool) -> tuple:
        """(dense, expert) parameters one GPU of a rank with `layers` layers holds before ZeRO sharding."""
        dense = layers * self.dense_per_layer / plan.tp
        expert = layers * self.expert_per_layer / (plan.expert_tp * plan.ep)
        if first:
            dense += self.embedding / (plan.tp if self.embedding_tp_sharded else 1)
        if last and not (first and self.tied):
            dense += self.head / plan.tp
        return dense, expert


@dataclass(frozen=True)
class StageCosts:
    """Per-micro-batch costs of one plan's shapes that the step-time terms are built from: one
    layer's times and the extras of the first (embedding) and last (head + loss) ranks."""
    layer: LayerTimes
    head_compute_s: float
    head_memory_s: float
    embed_s: float
    params: ParamCounts


def tp_overlap_switches(framework: Framework) -> dict:
    """The Framework fields a plan with tp_comm_overlap runs with, by how the framework overlaps
    (Framework.tp_comm_overlap_kind): Megatron-Core's userbuffers pipeline each TP collective with its
    GEMM (tp_comm_gemm_overlap, cost_model/step_time.py tp_exposed_s); torchtitan's async TP hides its
    fitted share of the TP traffic (async_tp_overlap, measured on torchtitan's paired rows) and needs
    torch.compile, which moves the compiled elementwise bytes (compiled_elementwise_factor). A framework
    without a kind has no such plan (framework_rules.check_plan refuses it)."""
    kind = framework.tp_comm_overlap_kind
    if kind == "userbuffers":
        return {"tp_comm_gemm_overlap": True}
    if kind == "async-tp":
        return {"tp_comm_overlap": framework.async_tp_overlap,
                "fused_elementwise": framework.compiled_elementwise_factor}
    raise InfeasiblePlan(f"framework {framework.name} cannot overlap tensor-parallel communication "
                         f"(tp_comm_overlap_kind={kind!r})", "framework_tp_comm_overlap")


def tables_for(profile: HardwareProfile) -> ProfileTables:
    """One ProfileTables per profile object, so every Estimator on it shares the caches."""
    entry = _TABLES.get(id(profile))
    if entry is None or entry[0] is not profile:
        entry = _TABLES[id(profile)] = (profile, ProfileTables(profile))
    return entry[1]


class Estimator:
    """The analytical cost model (cost_model.contract.PlanEstimator): problem fixed once, plans many times."""
    def __init__(self, model: ModelSpec, training: TrainingSpec, cluster: ClusterSpec,
                 profile: HardwareProfile, framework: Framework | None = None,
                 constants: Constants | None = None, allow_tp_across_nodes: bool = False,
                 memory_headroom_bytes: int = 0):
        self.model, self.training, self.cluster, self.profile = model, training, cluster, profile
        self.constants = constants or load_constants()
        # The framework's documented facts with its fitted efficiency values merged in; a Framework
        # given here is used as it is (the caller merged what it wanted), with the model states a run in
        # the training dtype keeps (Framework.for_dtype: DeepSpeed's bf16 optimizer).
        self.framework = (framework or self.constants.framework(DEFAULT_FRAMEWORK)).for_dtype(training.dtype)
        self.allow_tp_across_nodes = allow_tp_across_nodes
        # The user's safety margin: "fits" (and the fewest recomputed layers that fit) is judged
        # against capacity - headroom; the breakdowns themselves do not change.
        self.memory_headroom_bytes = int(memory_headroom_bytes)
        self.tables = tables_for(profile)
        self.gpus_per_node = cluster.gpus_per_node
        dtype = "bf16" if training.dtype == "fp16" else training.dtype
        # Hardware from the profile (its tables, built-in or measured alike), software from the
        # framework: how close its kernels get to those tables and how many bytes it moves.
        fw = self.framework
        self.rates = Rates(
            gemm_dtype=dtype, matmul_scale=fw.gemm_efficiency,
            fp8_scale=fw.fp8_gemm_efficiency * (fw.fp8_rowwise_efficiency if fw.fp8_rowwise else 1.0),
            attention_scale=fw.attention_efficiency * (fw.triton_attention_efficiency
                                                       if fw.attention_kernel == "flash-triton" else 1.0),
            memory_scale=fw.elementwise_bytes_factor * fw.fused_elementwise,
            flash_attention=fw.flash_attention, attention_kernel=fw.attention_kernel,
            # The user's measured routing (TrainingSpec.moe_load_imbalance) over the framework's default.
            moe=replace(fw.facts(MoEFacts), moe_load_imbalance=training.moe_load_imbalance or fw.moe_load_imbalance),
            mla_padded_values=fw.mla_padded_values,
            fp8_rowwise=fw.fp8_rowwise, fp8_expert_gemms=fw.fp8_expert_gemms, fp8_norm_writes_fp8=fw.fp8_norm_writes_fp8,
            tp_backward_input_reductions=fw.tp_backward_input_reductions)
        self.peak_flops_per_s = profile.peak(training.dtype)
        self.model_flops_per_step = model_flops_per_token(model, training.seq_len) * training.tokens_per_step
        # Parameter counts (whole model; stages and TP divide them below), per layer on average over
        # the model's layers (DeepSeek's leading dense layers and MoE layers share one mean).
        expert = model.expert_params_all_layers()
        self.params = ParamCounts(dense_per_layer=(model.all_layers_params() - expert) / model.num_layers,
                                  expert_per_layer=expert / model.num_layers,
                                  embedding=model.embedding_params(), head=model.output_params(),
                                  tied=model.tied_embeddings, embedding_tp_sharded=fw.embedding_tp_sharded)
        self._moe_layer_share = model.num_moe_layers / model.num_layers
        self.cache: dict = {}
        """Results any cost-model function keeps for this estimator's model, training, profile and
        framework, keyed by a tuple that starts with what it is and names all it depends on."""
        self._layer_kind_cache: dict = {}  # mean_layer_times' memo: one layer of each kind, per shape
        uncounted = uncounted_features(model) if self.framework.activation_recipe in RECIPES else []
        self._memory_notes = (f"activation memory of {', '.join(uncounted)} not counted tensor by tensor "
                              "(the plain pre-norm block's tensors are)",) if uncounted else ()

    # -- the plan's own switches ---------------------------------------------------------------
    def for_plan(self, plan: ParallelPlan) -> "Estimator":
        """This estimator, or, for a plan that overlaps its TP communication (ParallelPlan.tp_comm_overlap),
        one whose framework runs that way (tp_overlap_switches), kept for the next such plan."""
        if not plan.tp_comm_overlap:
            return self
        twin = self.cache.get("tp_comm_overlap")
        if twin is None:
            twin = self.cache["tp_comm_overlap"] = Estimator(
                self.model, self.training, self.cluster, self.profile,
                framework=self.framework.with_overrides(**tp_overlap_switches(self.framework)),
                constants=self.constants, allow_tp_across_nodes=self.allow_tp_across_nodes,
                memory_headroom_bytes=self.memory_headroom_bytes)
        return twin

    # -- shared pieces -------------------------------------------------------------------------
    def _layer(self, plan: ParallelPlan):
        # Dense and MoE layers on different pipeline ranks: the mean layer of the costliest rank
        # (cost_model/layer_mix.py); otherwise the model's mean layer.
        mixed = plan.pp > 1 and mixes_dense_and_moe(self.model)
        key = (plan.micro_batch_size, plan.tp, plan.cp, plan.ep, plan.sequence_parallel, plan.expert_tp,
               (plan.pp, plan.vpp) if mixed else None, plan.moe_capacity_factor)
        lt = self.cache.get(key)
        if lt is None:
            def times(kinds: tuple = ()) -> LayerTimes:
                return mean_layer_times(
                    self.model, self.tables, self.rates, plan.micro_batch_size, self.training.seq_len,
                    plan.tp, plan.cp, plan.ep, plan.sequence_parallel, self.gpus_per_node, plan.expert_tp, kinds,
                    plan.moe_capacity_factor, self._layer_kind_cache)
            kinds = pacing_layer_kinds(self.model, plan, lambda k: layer_seconds(times(k))) if mixed else None
            lt = self.cache[key] = times(kinds or ())
        return lt

    def _extras(self, plan: ParallelPlan) -> tuple:
        # The eager recipe's chunked loss recomputes the head's logits in its backward.
        recomputed = self.framework.activation_recipe == "eager" and self.eager_recipe(plan).chunked_loss
        key = ("extras", plan.micro_batch_size, plan.tp, plan.cp, recomputed)
        ex = self.cache.get(key)
        if ex is None:
            tokens = plan.micro_batch_size * (self.training.seq_len // plan.cp)
            head_compute_s, head_memory_s = head_times(self.model, self.tables, self.rates, tokens, plan.tp,
                                                       recomputed, self.framework.loss_gathers_logits)
            ex = self.cache[key] = (head_compute_s, head_memory_s,
                                           embedding_time_s(self.model, self.tables, self.rates, tokens))
        return ex

    def eager_recipe(self, plan: ParallelPlan):
        """eager_activations.recipe_for the framework's eager recipe as `plan` runs it, cached per
        what it reads of the plan (tp, cp and the replicas and ZeRO stage that decide autocast)."""
        key = ("recipe", plan.tp, plan.cp, plan.dp, plan.zero_stage)
        hit = self.cache.get(key)
        if hit is None:
            on_cpu = getattr(self.profile, "device_kind", "gpu") == "cpu"
            hit = self.cache[key] = recipe_for(self.framework.activation_recipe, self.model, plan, on_cpu=on_cpu)
        return hit

    def stage_costs(self, plan: ParallelPlan) -> StageCosts:
        """The per-micro-batch costs of this plan's shapes (cached per shape), for the step time."""
        if plan.tp_comm_overlap:
            return self.for_plan(plan).stage_costs(plan.replace(tp_comm_overlap=False))
        key = ("costs", plan.micro_batch_size, plan.tp, plan.cp, plan.ep, plan.sequence_parallel, plan.expert_tp,
               plan.pp, plan.vpp, plan.moe_capacity_factor, plan.dp, plan.zero_stage)  # all _layer, _extras read
        hit = self.cache.get(key)
        if hit is None:
            head_compute_s, head_memory_s, embed_s = self._extras(plan)
            hit = self.cache[key] = StageCosts(self._layer(plan), head_compute_s, head_memory_s, embed_s,
                                                      self.params)
        return hit

    # -- memory --------------------------------------------------------------------------------
    @property
    def usable_memory_bytes(self) -> int:
        """The profile's capacity less the user's headroom: what "fits" is judged against."""
        return self.profile.memory_capacity_bytes - self.memory_headroom_bytes

    def layer_activation_bytes(self, b: int, s_local: int, tp: int, sp: bool, etp: int = 0,
                                modules: tuple = (), ep: int = 1, capacity_factor: float = 0.0) -> tuple:
        """Per layer and micro-batch, cached: (stored without recompute, stored under selective
        recompute, stored under full recompute, backward working set). `etp`: the expert TP degree;
        `modules`: ParallelPlan.recompute_modules; `ep`, `capacity_factor`: the plan's, for the padded
        experts' rows of frameworks that run them so (cost_model/moe_time.py moe_padded_memory)."""
        key = ("act", b, s_local, tp, sp, etp, modules, ep, capacity_factor)
        hit = self.cache.get(key)
        if hit is None:
            flash, model = self.framework.flash_attention, self.model
            fp8_inputs = self.training.dtype == "fp8" and self.framework.fp8_linear_inputs_saved_in_fp8
            weighted = self.framework.moe_weighted_outputs_saved
            padded = moe_padded_memory(model, self.rates.moe, ep, capacity_factor)
            stored = selective = working = 0.0
            # Mean over the layers: MoE and dense layers (DeepSeek's first k) store different MLP tensors.
            for moe, share in ((True, self._moe_layer_share), (False, 1.0 - self._moe_layer_share)):
                if share:
                    parts = activation_bytes_per_layer(model, b, s_local, tp, sp, flash, moe=moe, etp=etp,
                                                       fp8_inputs=fp8_inputs, weighted_outputs_saved=weighted,
                                                       **(padded if moe else {}))
                    stored += share * sum(parts.values())
                    selective += share * selective_kept_bytes(parts, self.framework.selective_recompute, model,
                                                              b, s_local, tp, sp, moe=moe, modules=modules)
                    working += share * sum(activation_bytes_per_layer(model, b, s_local, tp, False, flash,
                                                                      moe=moe, etp=etp, fp8_inputs=fp8_inputs,
                                                                      weighted_outputs_saved=weighted,
                                                                      **(padded if moe else {})).values())
            if sp and tp > 1 and self.framework.sp_regathers_in_backward:
                # Under sequence parallelism the backward keeps the layer's tensors sharded and gathers
                # a linear's input again only for its own backward (Korthikanti et al. 2022 sec. 4.2.2):
                # the working set is the sharded layer and one gathered input with its gradient.
                working = min(working, stored + 2 * BYTES_ACT * b * s_local * model.hidden_size)
            hit = self.cache[key] = (stored, selective,
                                            full_recompute_layer_bytes(model, b, s_local, tp, sp), working)
        return hit

    def _stages_memory(self, plan: ParallelPlan, recompute: str, num_recompute: int) -> tuple:
        """(worst rank's breakdown, first rank's total bytes) over the ranks that can be the worst:
        the first, the last, and a middle rank with more layers than the first (uneven splits).
        Cached per plan without its own recompute fields, which `recompute` and `num_recompute`
        stand for (the search prices one plan under several policies and layer counts)."""
        if plan.tp_comm_overlap:
            return self.for_plan(plan)._stages_memory(plan.replace(tp_comm_overlap=False), recompute, num_recompute)
        plan_key = plan_memory_key(plan)
        key = ("memory", recompute, num_recompute, plan_key)
        hit = self.cache.get(key)
        if hit is None:
            hit = self.cache[key] = self._worst_stage_memory(plan, recompute, num_recompute, plan_key)
        return dict(hit[0]), hit[1]

    def _worst_stage_memory(self, plan: ParallelPlan, recompute: str, num_recompute: int, plan_key: tuple) -> tuple:
        split = stage_split(plan, self.model.num_layers)
        worst = stage_peak(self, plan, 0, recompute, num_recompute, split.num_layers[0], plan_key)
        first_total = worst.total_bytes
        for rank in split.memory_ranks[1:]:
            peak = stage_peak(self, plan, rank, recompute, num_recompute, split.num_layers[rank], plan_key)
            if peak.total_bytes > worst.total_bytes:
                worst = peak
        return stage_breakdown(worst), first_total

    def memory(self, plan: ParallelPlan, recompute: str | None = None, num_recompute: int | None = None) -> dict:
        """Memory breakdown (bytes) of the worst pipeline rank (the max over ranks)."""
        recompute = plan.recompute if recompute is None else recompute
        num_recompute = plan.recompute_num_layers if num_recompute is None else num_recompute
        return self._stages_memory(plan, recompute, num_recompute)[0]

    def min_full_recompute_layers(self, plan: ParallelPlan) -> int | None:
        """Fewest layers per stage to recompute fully so the plan fits in memory.

        0 when it fits without any recompute, None when it does not fit even with every layer
        of the largest rank recomputed. Memory falls monotonically with the count (each rank
        recomputes min(count, its layers)), so bisect.
        """
        return min_full_recompute_layers(self, plan)

    # -- time ----------------------------------------------------------------------------------
    def estimate(self, plan: ParallelPlan) -> CostEstimate:
        plan.check(self.model, self.training, self.cluster, allow_tp_across_nodes=self.allow_tp_across_nodes)
        self.framework.check(self.model, self.training, plan)
        return self._estimate(plan)

    def time_terms(self, plan: ParallelPlan, keep: bool = False) -> tuple:
        """step_time.step_time_terms of a checked plan. The exact search prices a plan's step time as a
        bound first (`keep`: held for later) and scores the same plan later, which takes the held
        terms instead of pricing them again (and lets them go: an exhaustive search holds nothing).
        A held result is shared until then: read it, do not change it."""
        if plan.tp_comm_overlap:
            return self.for_plan(plan).time_terms(plan.replace(tp_comm_overlap=False), keep)
        key = ("time", plan)
        hit = self.cache.get(key) if keep else self.cache.pop(key, None)
        if hit is None:
            hit = step_time_terms(self, plan, self.stage_costs(plan))
            if keep:
                self.cache[key] = hit
        return hit

    def _estimate(self, plan: ParallelPlan) -> CostEstimate:
        time, details, hw_flops = self.time_terms(plan)
        memory, details["memory_first_stage_bytes"] = self._stages_memory(plan, plan.recompute, plan.recompute_num_layers)
        details["memory_allocated_peak_bytes"] = allocated_peak_bytes(memory)
        return CostEstimate(
            time_breakdown_s=time, memory_breakdown_bytes=memory,
            memory_capacity_bytes=self.profile.memory_capacity_bytes,
            tokens_per_step=self.training.tokens_per_step, num_gpus=plan.num_gpus,
            model_flops_per_step=self.model_flops_per_step, hardware_flops_per_step=hw_flops,
            peak_flops_per_s=self.peak_flops_per_s, cost_model="analytical/1",
            details=details, notes=self._memory_notes, memory_headroom_bytes=self.memory_headroom_bytes)


def estimate(model: ModelSpec, training: TrainingSpec, cluster: ClusterSpec, profile: HardwareProfile,
             plan: ParallelPlan, **kwargs) -> CostEstimate:
    """One-shot convenience: Estimator(...).estimate(plan)."""
    return Estimator(model, training, cluster, profile, **kwargs).estimate(plan)
