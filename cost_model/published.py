"""A published training run (cost_model/data/published_runs.csv) as cost-model inputs, and how it is priced.

PublishedRun holds one row as (ModelSpec, TrainingSpec, ClusterSpec, ParallelPlan, framework, measured
tokens/s/GPU) with what the row states of its software; its methods give the framework's facts as the run
ran them, the plan to price and the profile of its GPU. cost_model/published_rows.py reads the CSV into
PublishedRun records (with each rule that fills a cell the source leaves empty).
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

from autoplan.specs import ClusterSpec, Framework, HardwareProfile, ModelSpec, ParallelPlan, TrainingSpec
from cost_model.constants import Constants, load_constants
from cost_model.profiles import builtin_profile


@dataclass(frozen=True)
class PublishedRun:
    id: str
    source: str
    """Short source key: narayanan2021, bigscience, llm-foundry, torchtitan."""
    gpu: str
    model: ModelSpec
    training: TrainingSpec
    cluster: ClusterSpec
    plan: ParallelPlan
    framework: str
    """Training framework (a name in autoplan.specs.frameworks)."""
    compiled: bool
    """torch.compile fused the elementwise ops (from the run's notes)."""
    async_tp: bool
    """Async tensor parallelism overlapped TP collectives with GEMMs (from the run's notes)."""
    fp8_rowwise: bool
    """fp8 with row-wise scales (torchao's "rowwise" recipe, from the run's id or fp8_recipe)."""
    measured_tokens_per_s_per_gpu: float
    flash_attention: bool | None = None
    """What the row states of fused attention where it differs from its framework's default: False
    for a paper's baseline row without it, True for a run that turned it on; None: the default."""
    nic_bytes_per_s: float | None = None
    """Scale-out bandwidth per GPU when the cluster is not DGX-like (None: the profile's)."""
    reported_peak_memory_bytes: float | None = None
    """Peak GPU memory the source printed (its notes: "peak mem 82.4 GiB", "max GPU mem 49GB")."""
    reported_memory_is_allocated: bool = False
    """The reported peak is torch.cuda.max_memory_allocated (what tensors held: no allocator slack, no
    CUDA context), so it is compared with the predicted allocated peak; else with the whole peak."""
    recompute_unstated: bool = False
    """How many layers the run recomputed, the source does not say: it is priced with the fewest fully
    recomputed layers that fit (Estimator.min_full_recompute_layers, the planner's own rule), never with
    a count solved from its throughput (`plan_to_price`)."""
    reported_memory_of_rank0: bool = False
    """The reported peak is rank 0's, the first pipeline stage's, not the largest rank's."""
    micro_batch_unstated: bool = False
    """The source does not state the micro-batch; the row's is its configs' rule, a ceiling the trainer
    lowers to fit (cost_model/published_rows.py `_micro_batch_unstated`): priced with the largest
    micro-batch, halving from the row's, that fits (`plan_to_price`)."""
    assumptions: tuple = ()
    notes: str = ""
    sweep: str = field(default="")
    """Rows of one source, model and GPU that vary the plan (for rank correlation)."""
    session: str = ""
    """The date or commit its citation names ("" where it names none): rows of one document measured on
    other days or code are other campaigns (BigScience timed tp8 pp12 mb4 at 88.3 on 02-21 and 93.3 on
    02-25; cost_model.validation.problem_key)."""
    framework_then: tuple = ()
    """(fact, value) pairs of the framework as it was when the run was made (its framework module's
    AS_RAN in autoplan/specs/frameworks, and what the row states)."""
    derived_facts: tuple = ()
    """The facts among framework_then and the plan that came from a source's measured rows (RowDerivedFact)."""
    plan_withheld: ParallelPlan | None = None
    """The plan by the row's own rules, without the plan facts among derived_facts (None: it has none)."""

    def campaign(self) -> tuple:
        """Where and how it was measured, all but the batch: one document of a source (the first two parts
        of the id, e.g. BLOOM-PREQ, MLPERF-v31) in one session, one model on one GPU type and count, one
        sequence length and precision (cost_model.validation.problem_key adds the global batch,
        cost_model/row_checks.py the plan less its micro-batch count)."""
        t = self.training
        return ("-".join(self.id.split("-")[:2]), self.session, repr(self.model), self.gpu, self.cluster.num_gpus,
                t.seq_len, t.dtype)

    def switches(self) -> tuple:
        """The switches a user turns on beside the plan: async TP, row-wise fp8, torch.compile, fused attention."""
        return self.async_tp, self.fp8_rowwise, self.compiled, self.flash_attention

    def withholding(self, held_out) -> "PublishedRun":
        """This run without the facts derived from measurements that `held_out` (a predicate on a
        cost_model.splits.Where) holds: they fall back to the framework's fitted or documented value, and a
        plan fact (RowDerivedFact.on_plan) to the row's own rule for the cell (plan_withheld)."""
        gone = [f for f in self.derived_facts if any(held_out(w) for w in f.evidence)]
        if not gone:
            return self
        fields = {f.field for f in gone if not f.on_plan}
        plan = self.plan_withheld if any(f.on_plan for f in gone) else self.plan
        return replace(self, plan=plan, framework_then=tuple((k, v) for k, v in self.framework_then if k not in fields),
                       derived_facts=tuple(f for f in self.derived_facts if f not in gone))

    def framework_facts(self, constants: Constants | None = None, name: str | None = None) -> Framework:
        """The run's framework (or framework `name`) under the given (fitted) constants, with the
        run's own switches (torch.compile, async TP, row-wise fp8)."""
        framework = (constants or load_constants()).framework(name or self.framework)
        overrides = dict(self.framework_then)
        if self.compiled:
            overrides["fused_elementwise"] = framework.compiled_elementwise_factor
        if self.async_tp:
            overrides["tp_comm_overlap"] = framework.async_tp_overlap
        if self.flash_attention is not None:
            overrides["flash_attention"] = self.flash_attention
        # The scaling the run states (tensorwise unless it says rowwise), not the framework's default.
        overrides["fp8_rowwise"] = self.fp8_rowwise
        return framework.with_overrides(**overrides)

    def plan_to_price(self, est) -> ParallelPlan:
        """The plan to price: the row's; where its micro-batch is unstated (micro_batch_unstated) the
        largest, halving from the row's, that fits on `est`; where its recompute count is unstated
        (recompute_unstated) the fewest fully recomputed layers per stage that fit (none if it fits
        without)."""
        plan = self._micro_batch_that_fits(est) if self.micro_batch_unstated else self.plan
        if not self.recompute_unstated:
            return plan
        layers = est.min_full_recompute_layers(plan.replace(recompute="full"))
        if layers is None:
            return plan
        return plan.replace(recompute="full" if layers else "none", recompute_num_layers=layers)

    def _micro_batch_that_fits(self, est) -> ParallelPlan:
        """The row's plan with its micro-batch halved (the step's sequences kept: twice the
        micro-batches) until it fits in `est`'s usable memory (with every layer recomputed where the
        recompute is unstated too), or is odd."""
        def fits(plan: ParallelPlan) -> bool:
            if self.recompute_unstated:
                return est.min_full_recompute_layers(plan.replace(recompute="full")) is not None
            return sum(est.memory(plan).values()) <= est.usable_memory_bytes

        plan = self.plan
        while plan.micro_batch_size % 2 == 0 and not fits(plan):
            plan = plan.replace(micro_batch_size=plan.micro_batch_size // 2, num_microbatches=2 * plan.num_microbatches)
        return plan

    def profile(self) -> HardwareProfile:
        """The built-in profile of the run's GPU, on the run's network."""
        return builtin_profile(self.gpu, self.nic_bytes_per_s)
