"""A framework's rules: what plans it can run (autoplan.specs.framework.Framework asks these).

Each refusal is InfeasiblePlan with the reason tag "framework_<rule>", one sentence with the values
and what to do instead. The problem's own rules (the architecture, the dtype, the sequence length)
come first and hold for every plan; the plan rules follow. Structural rules every framework shares
are ParallelPlan.check's. `fw` is the autoplan.specs.framework.Framework whose facts they read
(that module imports this one, not the other way round).
"""
from __future__ import annotations

from dataclasses import dataclass

from autoplan.specs.errors import InfeasiblePlan
from autoplan.specs.model import ModelSpec
from autoplan.specs.plan import ParallelPlan
from autoplan.specs.training import TrainingSpec


@dataclass(frozen=True, kw_only=True)
class PlanRules:
    """What plans it can run (parallel degrees, ZeRO stages and what they combine with, stages, sequence
    parallelism, recompute): read by the rules below."""
    # -- the plans it runs -----------------------------------------------------------------------------------
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
    recompute_modules: bool = False
    """Selective recompute of named submodules (ParallelPlan.recompute_modules: Megatron-Core's
    --recompute-modules); without it "selective" means the framework's one policy."""
    min_microbatches_per_stage: bool = False
    """The 1F1B schedule needs at least as many micro-batches as pipeline stages."""


@dataclass(frozen=True, kw_only=True)
class ModelRules:
    """What models and dtypes it can train, and how it splits their parts: read by the rules below."""
    # -- the models it trains --------------------------------------------------------------------------------
    dtypes: tuple = ("bf16", "fp16", "fp8", "fp32")
    fp8_moe: bool = True
    """fp8 training of mixture-of-experts models at all (a rule: False refuses the plan)."""
    fp8_mla: bool = True
    """fp8 training of models with multi-head latent attention (its latent projections in fp8 too)."""
    mla: bool = True
    """Multi-head latent attention (DeepSeek-V2/V3's compressed K/V and queries)."""
    moe: bool = True
    moe_with_tp_pp: bool = True
    """Mixture-of-experts layers under tensor or pipeline parallelism."""
    expert_tensor_parallel: bool = False
    """Experts split over their own tensor-parallel degree (etp != tp), so that the expert-parallel
    group may span tensor- and context-parallel ranks too (Megatron-Core's MoE parallel folding,
    --expert-tensor-parallel-size). Without it, experts are split over tp and ep divides dp*cp."""
    moe_tp_needs_sequence_parallel: bool = False
    """Mixture-of-experts training under tensor parallelism requires sequence parallelism."""
    experts_whole_with_ep: bool = False
    """The expert TP follows ep: with ep > 1 every routed expert is whole on its expert-parallel rank
    (etp = 1, the expert-parallel group borrowing the tensor- and context-parallel ranks: ep divides
    dp*cp*tp) and the layer routes its sequence-parallel share as it is; with ep = 1 the experts are split
    over tp (etp = tp). torchtitan: its own choice, not a knob (SearchSpace derives etp from ep)."""
    moe_capacity_factor: bool = False
    """Capacity-limited routing that drops the tokens over an expert's capacity
    (ParallelPlan.moe_capacity_factor); without it the framework's MoE is dropless only."""
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



def block_extras(model: ModelSpec) -> list:
    """A block's parts beyond the Llama/GPT block (pre-norms, one attention, one MLP, in sequence)."""
    extras = []
    if model.qk_norm:
        extras.append(f"q/k norms (qk_norm={model.qk_norm!r})")
    if model.norm_placement != "pre":
        extras.append(f"{model.norm_placement} norms")
    if model.parallel_block:
        extras.append("parallel attention/MLP block")
    return extras


def _refuse(fw, rule: str, tag: str, fix: str) -> None:
    raise InfeasiblePlan(f"framework {fw.name} {rule}; {fix}", f"framework_{tag}")


def check_model(fw, model: ModelSpec, training: TrainingSpec | None = None) -> None:
    """Raise InfeasiblePlan when no plan of this framework can run the model (an architecture
    feature it lacks) or, given the training shape, its sequence length; the planner asks this
    once, before searching."""
    rule = context_rule(fw, model.max_seq_len, model.position, training.seq_len) if training else ""
    if rule:  # the plan-file validation's sentence (autoplan.specs.schemas.validate_plan)
        raise InfeasiblePlan(f"{rule}; plan a shorter --seq-len", "framework_seq_len")
    if model.is_mla and not fw.mla:
        _refuse(fw, f"has no multi-head latent attention, which {model.name!r} uses (kv_lora_rank="
               f"{model.kv_lora_rank})", "mla", "plan it for a framework that has it (--framework megatron-core)")
    if model.is_moe and not fw.moe:
        _refuse(fw, f"runs dense models only, got {model.name!r} with {model.num_experts} experts", "moe",
               "pick a framework that runs mixtures of experts (--framework megatron-core)")


def check_problem(fw, model: ModelSpec, training: TrainingSpec) -> None:
    """Raise InfeasiblePlan when no plan of this framework can train the model this way: the rules
    that depend on the problem alone (architecture, dtype, sequence length), not on the plan. The
    planner asks this once, before searching, so a search that cannot succeed names the problem
    rather than whichever plan rule each candidate happened to break first."""
    check_model(fw, model, training)  # the architecture and the context rule (context_rule)
    if training.dtype not in fw.dtypes:
        _refuse(fw, f"trains in {', '.join(fw.dtypes)}, not dtype={training.dtype}", "dtype",
               f"plan with --dtype {fw.dtypes[0]}")
    if training.dtype == "fp8" and model.is_moe and not fw.fp8_moe:
        _refuse(fw, f"runs fp8 for dense models only, got {model.name!r} with {model.num_experts} experts",
               "fp8_moe", "plan with --dtype bf16")
    if training.dtype == "fp8" and model.is_mla and not fw.fp8_mla:
        _refuse(fw, f"runs fp8 without multi-head latent attention only (its latent projections would stay "
               f"bf16), got {model.name!r}", "fp8_mla", "plan with --dtype bf16")


def check_tp_comm_overlap_offered(fw) -> None:
    """Refuse TP communication overlap where the framework has none (Framework.tp_comm_overlap_kind "")."""
    if not fw.tp_comm_overlap_kind:
        _refuse(fw, "cannot overlap tensor-parallel communication with its GEMMs (only megatron-core's "
               "--tp-comm-overlap and torchtitan's async TP can), got tp_comm_overlap=true", "tp_comm_overlap",
               "plan with --no-tp-comm-overlap")


def _check_tp_group(fw, plan: ParallelPlan) -> None:
    """The framework's rules inside the TP group: sequence parallelism (Framework.sequence_parallel) and
    overlapping the TP communication (Framework.tp_comm_overlap_kind)."""
    if fw.sequence_parallel == "always" and plan.tp > 1 and not plan.sequence_parallel:
        _refuse(fw, f"always shards norms on the sequence under tensor parallelism, got tp={plan.tp} with "
               "sequence_parallel=false", "sp_always", "plan with --sequence-parallel")
    if fw.sequence_parallel == "never" and plan.sequence_parallel:
        _refuse(fw, "has no sequence parallelism", "sp_never", "plan with --no-sequence-parallel")
    if not plan.tp_comm_overlap:
        return
    check_tp_comm_overlap_offered(fw)
    if fw.tp_comm_overlap_kind == "userbuffers" and not plan.sequence_parallel:
        # megatron/training/arguments.py validate_args (core_v0.16.1): "Tensor parallel communication/GEMM
        # overlap can happen only when sequence parallelism is enabled"
        _refuse(fw, f"overlaps TP communication (--tp-comm-overlap) only with sequence parallelism, got tp={plan.tp} "
               "with sequence_parallel=false", "tp_comm_overlap_sp", "plan with --sequence-parallel")


def check_plan(fw, model: ModelSpec, training: TrainingSpec, plan: ParallelPlan) -> None:
    """check's rules that read the plan: what a search asks of each candidate once the problem
    has passed check_problem."""
    if plan.zero_stage not in fw.zero_stages:
        _refuse(fw, f"has ZeRO stages {', '.join(map(str, fw.zero_stages))}, got zero_stage={plan.zero_stage}",
               "zero_stage", "pick one of those (--zero)")
    if plan.zero_shard and plan.zero_stage not in fw.hsdp_zero_stages:
        stages = ", ".join(map(str, fw.hsdp_zero_stages))
        where = f" (hybrid sharding at ZeRO stages {stages} only)" if stages else ""
        _refuse(fw, f"shards ZeRO states over every data-parallel rank{where}, got zero_shard={plan.zero_shard} at "
               f"zero_stage={plan.zero_stage}", "zero_shard",
               "plan without --zero-shard" + (f", or with --zero {fw.hsdp_zero_stages[-1]}" if stages else ""))
    if plan.zero_shard and model.is_moe:
        _refuse(fw, f"is planned here with hybrid sharding for dense models only (the experts' states shard over "
               f"their own expert-data-parallel ranks), got zero_shard={plan.zero_shard} for {model.name!r}",
               "zero_shard_moe", "plan without --zero-shard")
    # Before the degree rules: it holds whatever the degrees, so a pinned --zero on an MoE model is
    # refused for this reason, not for whichever pp or ep a candidate happened to have.
    if model.is_moe and plan.zero_stage > fw.max_zero_with_moe:
        _refuse(fw, f"does not run mixtures of experts with ZeRO stage {plan.zero_stage} (at most "
               f"{fw.max_zero_with_moe}), got zero_stage={plan.zero_stage} for {model.name!r} with "
               f"{model.num_experts} experts", "zero_with_moe", f"plan with --zero {fw.max_zero_with_moe}")
    _check_degrees(fw, model, training, plan)
    _check_layout(fw, model, plan)
    _check_experts(fw, model, plan)
    _check_model_parts(fw, model, plan)


def _check_degrees(fw, model: ModelSpec, training: TrainingSpec, plan: ParallelPlan) -> None:
    """check_plan's rules on the parallel degrees and what ZeRO stage they combine with."""
    for degree, limit in (("tp", fw.max_tp), ("pp", fw.max_pp), ("cp", fw.max_cp), ("vpp", fw.max_vpp)):
        value = getattr(plan, degree)
        if value > limit:
            _refuse(fw, f"runs {degree} <= {limit}, got {degree}={value}", f"{degree}_limit",
                   f"plan with --{degree} {limit}" if limit == 1 else f"pick {degree} <= {limit}")
    if plan.pp > 1 and plan.zero_stage > fw.max_zero_with_pp:
        _refuse(fw, f"does not combine ZeRO stage {plan.zero_stage} with pipeline parallelism (at most "
               f"{fw.max_zero_with_pp} with pp > 1), got pp={plan.pp}, zero_stage={plan.zero_stage}",
               "zero_with_pp", f"plan with --zero {fw.max_zero_with_pp} or --pp 1")
    if plan.ep > 1 and plan.zero_stage > fw.max_zero_with_ep:
        _refuse(fw, f"does not combine ZeRO stage {plan.zero_stage} with expert parallelism (at most "
               f"{fw.max_zero_with_ep} with ep > 1), got ep={plan.ep}", "zero_with_ep",
               f"plan with --zero {fw.max_zero_with_ep} or ep=1")
    if plan.zero_stage == 3 and model.tied_embeddings and not fw.zero3_tied_embeddings:
        _refuse(fw, f"does not shard tied embedding/head weights (ZeRO-3), got zero_stage=3 for {model.name!r} "
               "with tied_embeddings", "zero3_tied_embeddings", "plan with --zero 2 or less")
    if plan.zero_stage == 3 and training.dtype not in fw.zero3_dtypes:
        _refuse(fw, f"runs ZeRO-3 in {', '.join(fw.zero3_dtypes)} only, got dtype={training.dtype}", "zero3_dtype",
               "plan with --zero 2 or less, or another --dtype")
    if fw.zero0_only_pure_dp and plan.zero_stage == 0 and (plan.tp, plan.pp, plan.cp) != (1, 1, 1):
        _refuse(fw, f"runs plain data parallelism (zero_stage=0) only without tp/pp/cp, got tp={plan.tp}, "
               f"pp={plan.pp}, cp={plan.cp}", "zero0_mixed", "plan with --zero 1 or more")


def _check_layout(fw, model: ModelSpec, plan: ParallelPlan) -> None:
    """check_plan's rules on how the layers split into stages, sequence parallelism and recompute."""
    if not fw.uneven_stages and plan.pp > 1 and len(set(plan.stage_num_layers(model.num_layers))) > 1:
        _refuse(fw, f"needs pp to divide num_layers, got pp={plan.pp}, num_layers={model.num_layers}",
               "uneven_stages", "pick a pp that divides the layers")
    if not fw.uneven_interleaved and plan.vpp > 1 and \
            len(set(plan.virtual_stage_num_layers(model.num_layers))) > 1:
        _refuse(fw, f"interleaves equal virtual stages only: pp*vpp must divide num_layers, got pp={plan.pp} * "
               f"vpp={plan.vpp} = {plan.pp * plan.vpp}, num_layers={model.num_layers}", "uneven_interleaved",
               "pick a vpp for which pp*vpp divides the layers")
    _check_tp_group(fw, plan)
    if plan.recompute_modules and not fw.recompute_modules:
        _refuse(fw, f"has no per-module selective recompute, got recompute_modules={list(plan.recompute_modules)}",
               "recompute_modules", "plan without recompute_modules, or for --framework megatron-core")


def _check_model_parts(fw, model: ModelSpec, plan: ParallelPlan) -> None:
    """check_plan's rules on the pipeline schedule and the parts of the model a plan splits (tied
    embeddings, learned positions, block extras, masked attention)."""
    if fw.min_microbatches_per_stage and plan.pp > 1 and plan.num_microbatches < plan.pp:
        _refuse(fw, f"runs 1F1B, which needs at least as many micro-batches as pipeline stages, got "
               f"num_microbatches={plan.num_microbatches}, pp={plan.pp}", "microbatches_per_stage",
               "raise --global-batch or lower --micro-batch")
    if fw.tied_embeddings_one_stage and model.tied_embeddings and (plan.tp > 1 or plan.pp > 1):
        _refuse(fw, f"runs tied embedding/head weights only with tp=1 and pp=1, got tp={plan.tp}, pp={plan.pp} "
               f"for {model.name!r}", "tied_embeddings", "plan with --tp 1 --pp 1")
    if not fw.tied_embeddings_with_pp and model.tied_embeddings and plan.pp > 1:
        _refuse(fw, f"does not tie embedding and head weights across pipeline stages, got pp={plan.pp} for "
               f"{model.name!r} with tied_embeddings", "tied_embeddings_pp", "plan with --pp 1")
    if not fw.learned_positions_split_sequence and model.position == "learned" and (
            plan.cp > 1 or plan.sequence_parallel):
        _refuse(fw, f"does not split learned position embeddings over the sequence, got cp={plan.cp}, "
               f"sequence_parallel={plan.sequence_parallel} for {model.name!r}", "learned_positions",
               "plan with --cp 1 --no-sequence-parallel")
    extras = block_extras(model)
    if not fw.tp_with_block_extras and plan.tp > 1 and extras:
        _refuse(fw, f"shards no {', '.join(extras)} of {model.name!r} over tensor parallelism, got tp={plan.tp}",
               "tp_block_extras", "plan with --tp 1 (or for a framework that has these layers)")
    if not fw.cp_with_masked_attention and plan.cp > 1 and (model.sliding_window or model.attn_logit_softcap):
        _refuse(fw, f"runs context parallelism with plain causal attention only, got cp={plan.cp} for {model.name!r} "
               f"(sliding_window={model.sliding_window}, attn_logit_softcap={model.attn_logit_softcap})",
               "cp_masked_attention", "plan with --cp 1")


def _check_experts(fw, model: ModelSpec, plan: ParallelPlan) -> None:
    """check_plan's rules on how a mixture of experts routes and splits its experts."""
    if plan.moe_capacity_factor and not fw.moe_capacity_factor:
        _refuse(fw, f"routes dropless only (no expert capacity), got moe_capacity_factor={plan.moe_capacity_factor}",
               "moe_capacity_factor", "plan without moe_capacity_factor (dropless), or for --framework megatron-core")
    if fw.experts_whole_with_ep and model.is_moe:
        etp = fw.default_etp(model, plan.ep) or plan.tp
        if plan.expert_tp != etp:
            _refuse(fw, f"keeps each expert whole under expert parallelism and splits experts over tp without it "
                   f"(etp = 1 with ep > 1, etp = tp with ep = 1), got ep={plan.ep}, etp={plan.etp}, tp={plan.tp}",
                   "expert_tp", "plan with --etp 1" if etp == 1 else "plan without --etp (etp = tp)")
    elif plan.expert_tp != plan.tp and not fw.expert_tensor_parallel:
        _refuse(fw, f"splits experts over the tensor-parallel ranks (no expert TP of their own), got etp={plan.etp}, "
               f"tp={plan.tp}", "expert_tp", "plan without etp (etp = tp), or for --framework megatron-core")
    if fw.moe_a2a_overlap and model.is_moe and plan.ep > 1 and (
            plan.recompute == "full" or (plan.pp > 1 and plan.vpp == 1)):
        # Megatron-Core transformer_config.py core_v0.16.1 lines 1857-1879.
        _refuse(fw, f"overlaps the expert all-to-all only without full recompute and, with a pipeline, with "
               f"interleaving, got recompute={plan.recompute}, pp={plan.pp}, vpp={plan.vpp}", "moe_a2a_overlap",
               "plan with --recompute none/selective and --vpp > 1 under --pp, or without the option")
    if fw.moe_dispatch == "flex" and model.is_moe and plan.ep * plan.expert_tp == 1:
        # Megatron-Core token_dispatcher.py core_v0.16.1 line 1346: "Flex token dispatcher requires TPxEP > 1".
        _refuse(fw, f"runs the flex (DeepEP) dispatcher only over more than one expert rank, got ep={plan.ep}, "
               f"etp={plan.expert_tp}", "moe_flex", "plan with --ep > 1, or without the flex-deepep option")
    if fw.moe_tp_needs_sequence_parallel and model.is_moe and plan.tp > 1 and not plan.sequence_parallel:
        _refuse(fw, f"trains mixtures of experts under tensor parallelism only with sequence parallelism, got "
               f"tp={plan.tp} with sequence_parallel=false for {model.name!r}", "moe_tp_sp",
               "plan with --sequence-parallel")
    if model.is_moe and not fw.moe_with_tp_pp and (plan.tp > 1 or plan.pp > 1):
        _refuse(fw, f"runs mixtures of experts with data, context and expert parallelism only, got "
               f"tp={plan.tp}, pp={plan.pp}", "moe_tp_pp", "plan with --tp 1 --pp 1")


def context_rule(fw, max_seq_len: int, position: str, seq_len: int) -> str:
    """The one rule on a sequence longer than the model's context, in the one sentence search, export,
    run and the plan-file validation say: "" when this framework runs it, else "training.seq_len
    must be at most the model's context ... for framework <name>, got <seq_len>". A learned position
    table is the model's length in every framework; a framework with `seq_len_within_model` builds
    its RoPE tables that long too; the others size RoPE for the run (torchtitan 0.3.0
    models/common/decoder.py update_from_config; the exports write max(max_seq_len, seq_len), and
    size a shipped flavor's RoPE cache for the plan)."""
    if seq_len <= max_seq_len or not (fw.seq_len_within_model or position == "learned"):
        return ""
    why = "learned position embeddings" if position == "learned" else "position tables of the model's length"
    return (f"training.seq_len must be at most the model's context model.max_seq_len={max_seq_len} ({why}) "
            f"for framework {fw.name}, got {seq_len}")
