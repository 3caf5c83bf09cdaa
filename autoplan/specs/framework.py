"""Framework: the training framework a plan is made for -- what it stores, fuses, overlaps, and
what it can run.

A plan is made for the framework that will run it (DESIGN.md "The framework is an input"). The
cost model reads the storage and fusion facts; the search explores only plans `check()` allows;
the plan file records the framework's name; the executor and the exporters re-check against it.
The built-in frameworks are in the package `autoplan.specs.frameworks` (one module each, with sources).

Its facts come in groups, one frozen dataclass per concern and reader, which Framework inherits:
  what it stores ............. framework_facts.StateFacts          (cost_model/memory.py, stage_memory.py)
  what a layer saves ......... framework_facts.MemoryLayoutFacts   (cost_model/estimator.py, stage_memory.py)
  its kernels, what it fuses . framework_facts.KernelFacts         (cost_model/estimator.py -> layer_terms.Rates)
  the work outside the layers  framework_facts.StepWorkFacts       (cost_model/step_time.py)
  TP/SP communication ........ framework_facts.TensorParallelFacts (cost_model/layer_time.py, step_time.py)
  the pipeline ............... framework_facts.PipelineFacts       (cost_model/step_time.py)
  mixture of experts ......... framework_facts.MoEFacts            (cost_model/moe_time.py via layer_time.py)
  data parallelism and ZeRO .. framework_dp.DataParallelFacts      (cost_model/dp_time.py)
  the plans it runs .......... framework_rules.PlanRules           (framework_rules.check_plan)
  the models it trains ....... framework_rules.ModelRules          (framework_rules.check_problem)
`Framework.facts(Group)` hands a reader one group alone. The efficiency fields (overlap fractions,
overheads) hold neutral or documented values; the cost model may replace them with values fitted on
published runs of that framework (`cost_model/data/constants.json`, "frameworks"): a fitted constant
belongs to a framework, never to a GPU type.
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields, replace

from autoplan.specs import framework_rules as rules
from autoplan.specs.framework_dp import DataParallelFacts
from autoplan.specs.framework_facts import (  # noqa: F401 - StateTerm, NEVER and the state recipes re-exported
    NEVER, KernelFacts, MemoryLayoutFacts, MoEFacts, PipelineFacts, StateFacts, StateTerm, StepWorkFacts,
    TensorParallelFacts, fsdp2_states, megatron_states)
from autoplan.specs.framework_rules import ModelRules, PlanRules, block_extras  # noqa: F401 - re-exported
from autoplan.specs.model import ModelSpec
from autoplan.specs.plan import ParallelPlan
from autoplan.specs.training import TrainingSpec


@dataclass(frozen=True, kw_only=True)
class Framework(StateFacts, MemoryLayoutFacts, KernelFacts, StepWorkFacts, TensorParallelFacts, PipelineFacts, MoEFacts,
                DataParallelFacts, PlanRules, ModelRules):
    name: str
    description: str
    version: str
    """The release or era whose facts these are."""
    by_dtype: dict = field(default_factory=dict)
    """dtype -> {field: value}: the facts a run in that dtype has instead (`for_dtype`). DeepSpeed's
    bf16 runs at ZeRO 0-1 take its BF16_Optimizer, whose fp32 gradients are full-size (its `states`);
    Megatron-LM's fp16 runs keep and reduce fp16 gradients (`states`, `main_grad_reduce_bytes`)."""
    options: dict = field(default_factory=dict)
    """Switches a run of this framework may turn on, named after its flag: option -> the facts it
    changes. A plan made with one names the framework "<name>+<option>" (autoplan.specs.frameworks
    get_framework), so the plan file, the estimate and the export agree on it."""
    sources: dict = field(default_factory=dict)
    """Where each fact comes from: field name -> document."""

    def facts(self, group: type):
        """This framework's facts of one group (KernelFacts, MoEFacts, ...) alone, for a reader that
        takes only those."""
        return group(**{f.name: getattr(self, f.name) for f in fields(group)})

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
