"""The reader of the published runs (cost_model/data/published_runs.csv) into PublishedRun records.

Each row becomes (ModelSpec, TrainingSpec, ClusterSpec, ParallelPlan, framework, measured tokens/s/GPU).
Where the source leaves a cell empty, the filling rule is written next to it here and recorded on the
run (`assumptions`), so a reader can see what was inferred. How a run is priced is cost_model/published.py;
what its software ran against its framework's defaults, cost_model/row_stack_facts.py.
"""
from __future__ import annotations

import csv
import re
from pathlib import Path
from typing import NamedTuple

from autoplan.specs import FRAMEWORKS, AutoplanError, ClusterSpec, ModelSpec, ParallelPlan, TrainingSpec
from autoplan.specs.frameworks import AS_RAN, STANDS_IN_FOR
from autoplan.specs.frameworks.deepspeed import DEEPSPEED_V0_3_13_ZERO3
from cost_model.moe_time import moe_run_facts
from cost_model.published import PublishedRun
from cost_model.row_stack_facts import stack_facts, stated_flash_attention
from cost_model.source_facts import MODEL_FACTS, SOURCES

PUBLISHED_RUNS_PATH = Path(__file__).parent / "data" / "published_runs.csv"
_PEAK_MEMORY = re.compile(r"(?:peak mem|max GPU mem|mem) ([0-9.]+) ?(GiB|GB)")
_MEMORY_USED_OF_TOTAL = re.compile(r"\bmem ([0-9.]+)/[0-9.]+\b")
"""FlagPerf's "mem 75/80" (its published_metric cell): GiB in use of the device's total."""

_SESSION = re.compile(r"\((\d\d-\d\d)\)|(\d{4}-\d{2}-\d{2})|@([0-9a-f]{7,40})")
"""The first date or commit a row's citation names (BigScience's "(02-25)", a README table's
"(2024-09-26)", "@130677789"): when, or on which code, its campaign measured it (PublishedRun.session)."""
_ASYNC_TP = re.compile(r"asyncTP|AsyncTP|enable_async_tensor_parallel\s*=\s*true")
"""How a torchtitan row states async TP (experimental.enable_async_tensor_parallel)."""
_HSDP_SHARD = re.compile(r"HSDP shard group (\d+)|shard group (\d+) GPUs|shard group =? ?(\d+) (?:ranks|\(zero1=)")
"""How a row's notes state hybrid sharding: "HSDP shard group 8" (fms-fsdp's HYBRID_SHARD within a node,
BloombergGPT's 128), "shard group 256 GPUs" (OLMo-core's num_replicas), "shard group = 8 ranks" or
"shard group 8 (zero1=8" (InternEvo's zero1 size)."""
_ETP = re.compile(r"--expert-tensor-parallel-size (\d+)|\bETP ?=? ?(\d+)\b")
_RECOMPUTE_MODULES = re.compile(r"--recompute-modules ((?:[a-z_]+ ?)+)")
"""Megatron-Core's selective recompute modules, as a run's notes quote its command line."""
_OLMO_CORE_MLP_AC = "selected_modules = blocks.*.feed_forward"
"""OLMo-core's per-module activation checkpointing of the feed-forward only (ActivationCheckpointingConfig
mode selected_modules, as a row's notes quote its script): Megatron-Core's "mlp" recompute module."""


def _hsdp_shard_group(notes: str, ranks: int) -> int:
    """The ZeRO shard group a row's notes state (ParallelPlan.zero_shard), 0 where they state none or
    the whole of its dp*cp ranks."""
    found = _HSDP_SHARD.search(notes)
    size = int(next(g for g in found.groups() if g)) if found else 0
    return size if 0 < size < ranks and ranks % size == 0 else 0


def _recompute_modules(notes: str) -> tuple:
    """The submodules a selective-recompute row reruns, where its notes name them (Megatron-Core's
    --recompute-modules, OLMo-core's feed-forward-only checkpointing); () = the framework's own."""
    if _OLMO_CORE_MLP_AC in notes:
        return ("mlp",)
    return tuple(next(iter(_RECOMPUTE_MODULES.findall(notes)), "").split())


def _session(citation: str) -> str:
    """The first date or commit `citation` names (_SESSION), "" where it names none."""
    found = _SESSION.search(citation)
    return next(g for g in found.groups() if g) if found else ""


def _per_gpu(value, gpu: str):
    """A source's fact given once, or per GPU type ({gpu: value}) where its clusters differ."""
    return value.get(gpu) if isinstance(value, dict) else value


def _int(row: dict, key: str, default=None):
    value = row[key].strip()
    return int(value) if value else default


def _source_key(row_id: str) -> str:
    prefix = row_id.split("-")[0]
    if prefix not in SOURCES:
        raise AutoplanError(f"published run {row_id!r} has an unknown source prefix {prefix!r}; "
                            f"known: {', '.join(SOURCES)}")
    return prefix


_BOOL = {"true": True, "false": False}


def _row_facts(row: dict) -> dict:
    """The per-row facts of the newer sources' columns (absent or empty cells: the source's)."""
    facts = {}
    for key in ("norm", "position", "framework", "fp8_recipe"):
        if (row.get(key) or "").strip():
            facts[key] = row[key].strip().lower()
    for key in ("tied_embeddings", "linear_bias", "tp_comm_overlap", "compiled"):
        value = (row.get(key) or "").strip().lower()
        if value in _BOOL:
            facts[key] = _BOOL[value]
    if (row.get("gpus_per_node") or "").strip():
        facts["gpus_per_node"] = int(row["gpus_per_node"])
    return facts


class _AsRan(NamedTuple):
    """The built-in framework that prices a row and its facts as the row's source ran it."""
    framework: str
    then: dict
    """Framework field -> value over the built-in framework's (PublishedRun.framework_then), the facts
    the source's measured rows chose among them (RowDerivedFact, recorded in PublishedRun.derived_facts)."""


def row_to_run(row: dict) -> PublishedRun:
    """One CSV row as cost-model inputs. Raises AutoplanError on a malformed row."""
    prefix = _source_key(row["id"])
    facts = {**SOURCES[prefix], **_row_facts(row)}
    assumptions = []
    model = _model_of(row, facts)
    training = TrainingSpec(global_batch_size=_int(row, "global_batch"), seq_len=_int(row, "seq_len"),
                            dtype=row["precision"])
    cluster = ClusterSpec(name=row["gpu"], num_gpus=_int(row, "num_gpus"), gpus_per_node=facts.get("gpus_per_node", 8),
                          profile=f"builtin:{row['gpu']}")
    derived = tuple(facts.get("derived", ()))
    plan = _plan_of(prefix, row, facts, model, training, assumptions, derived)
    # The plan by the row's own rules alone, for a split that withholds the plan facts its source's
    # measured rows chose (PublishedRun.withholding).
    plan_withheld = _plan_of(prefix, row, facts, model, training, [], ()) \
        if any(f.on_plan for f in derived) else None
    compiled = facts["compiled"] if "compiled" in facts else "compile" in row["notes"]
    as_ran = _as_ran(prefix, row, facts, plan, compiled)
    framework, notes = as_ran.framework, row["notes"]
    if facts.get("tp_comm_overlap", False) and framework == "megatron-core":
        # Megatron-Core's --tp-comm-overlap (Transformer Engine userbuffers), as the row's column states
        # (empty: off, Megatron-LM's default): the plan's knob (ParallelPlan.tp_comm_overlap).
        plan = plan.replace(tp_comm_overlap=True)
        plan_withheld = plan_withheld and plan_withheld.replace(tp_comm_overlap=True)
    return PublishedRun(
        id=row["id"], source=facts["source"], gpu=row["gpu"], model=model, training=training,
        cluster=cluster, plan=plan, framework=framework,
        compiled=compiled,
        async_tp=bool(_ASYNC_TP.search(notes)) and framework == "torchtitan",
        fp8_rowwise="rowwise" in row["id"] or facts.get("fp8_recipe") == "rowwise",
        # The FlashAttention-2 paper's baselines name their attention in the model column; the
        # Megatron-DeepSpeed long-sequence README's "New" rows ran its script's --use-flash-attn-triton
        # (the rebase added FlashAttention: examples_deepspeed/rebase/README.md), its "Old" rows not.
        flash_attention=stated_flash_attention(prefix, row),
        nic_bytes_per_s=_per_gpu(facts.get("nic_bytes_per_s"), row["gpu"]),
        reported_peak_memory_bytes=_reported_memory_bytes(row, facts),
        reported_memory_is_allocated=facts.get("memory_is_allocated", False),
        reported_memory_of_rank0=facts.get("memory_of_rank0", False),
        recompute_unstated=_recompute_unstated(prefix, row),
        micro_batch_unstated=_micro_batch_unstated(prefix, row),
        measured_tokens_per_s_per_gpu=float(row["tokens_per_s_per_gpu"]),
        assumptions=tuple(assumptions), notes=notes, session=_session(row["source"]),
        # Every published run mapped onto torchtitan's facts predates 0.3.0's chunked loss (or is
        # another FSDP stack with its own whole-logit loss), so none takes that fact.
        framework_then=tuple({**({"loss_chunks": 1} if framework == "torchtitan" else {}),
                              **as_ran.then, **(moe_run_facts(f"{notes} {row.get('published_metric') or ''}")
                                                if model.is_moe else {})}.items()),
        derived_facts=derived, plan_withheld=plan_withheld,
        sweep=f"{facts['source']}/{row['model_name']}/{row['gpu']}/{row['precision']}")


def _model_of(row: dict, facts: dict) -> ModelSpec:
    """The row's model: its columns, its source's architecture facts and MODEL_FACTS."""
    experts = _int(row, "moe_num_experts", 1) if "moe_num_experts" in row else 1
    moe = dict(num_experts=experts, num_experts_per_token=_int(row, "moe_top_k", 1),
               moe_ffn_hidden_size=_int(row, "moe_ffn_hidden_size", 0)) if experts > 1 else {}
    return ModelSpec(
        name=row["model_name"], num_layers=_int(row, "num_layers"), hidden_size=_int(row, "hidden_size"),
        num_heads=_int(row, "num_heads"), num_kv_heads=_int(row, "num_kv_heads"),
        ffn_hidden_size=_int(row, "ffn_hidden_size"), vocab_size=_int(row, "vocab_size"),
        mlp=row["mlp"], norm=facts["norm"], position=facts["position"],
        tied_embeddings=facts["tied_embeddings"], linear_bias=facts["linear_bias"],
        max_seq_len=_int(row, "seq_len"), **moe, **MODEL_FACTS.get(row["model_name"], {}))


def _plan_of(prefix: str, row: dict, facts: dict, model: ModelSpec, training: TrainingSpec,
             assumptions: list, derived: tuple) -> ParallelPlan:
    """The row's plan, each cell the source leaves empty filled by its rule (appended to `assumptions`),
    or by a plan fact its source's measured rows chose (`derived`, source_facts.RowDerivedFact.on_plan)."""
    layers, moe = model.num_layers, model.is_moe
    tp, pp, dp, cp = (_int(row, k) for k in ("tp", "pp", "dp", "cp"))
    chosen = {f.field: f for f in derived if f.on_plan}
    if set(chosen) - {"micro_batch_size"}:
        raise AutoplanError(f"row {row['id']}: no rule applies a measured-row fact to plan field(s) "
                            f"{sorted(set(chosen) - {'micro_batch_size'})}; add one in _plan_of")
    mb = _micro_batch(prefix, row, pp, assumptions, chosen.get("micro_batch_size"))
    m = training.global_batch_size // max(1, dp * mb)
    recompute = _recompute(prefix, row, assumptions)
    vpp = _virtual_stages(prefix, row, layers, pp, m, assumptions)
    sp = _sequence_parallel(row, facts, tp, assumptions)
    zero = _int(row, "zero_stage", 0)
    # Expert TP: what the notes state (Megatron's --expert-tensor-parallel-size, "ETP=1"), else tp
    # (Megatron's default, and the only choice before core 0.10).
    etp = next((int(a or b) for a, b in _ETP.findall(row["notes"])), 0) if moe else 0
    plan = ParallelPlan(dp=dp, tp=tp, pp=pp, cp=cp, vpp=vpp, sequence_parallel=sp, zero_stage=zero,
                        micro_batch_size=mb, num_microbatches=max(1, m), recompute=recompute,
                        recompute_num_layers=0, ep=(_int(row, "ep", 1) if moe else 1),
                        etp=0 if etp == tp else etp,
                        recompute_modules=_recompute_modules(row["notes"]) if recompute == "selective" else (),
                        zero_shard=_hsdp_shard_group(row["notes"], dp * cp) if zero else 0)
    if recompute == "full":
        # Every layer of every stage (the largest stage bounds the count).
        plan = plan.replace(recompute_num_layers=plan.layers_per_stage(layers))
    return plan


def _micro_batch(prefix: str, row: dict, pp: int, assumptions: list, chosen=None) -> int:
    mb = _int(row, "micro_batch")
    if mb is None and chosen is not None:
        mb = int(chosen.value)
        assumptions.append(f"micro_batch missing: {mb}, {chosen.how} (withheld where those rows are held out)")
    if mb is None:
        # Megatron-LM's runs in Narayanan 2021 Table 1 do not state it; their Table 2 PTD rows
        # use 1, so do we.
        mb = 1
        assumptions.append("micro_batch missing: 1 (as the paper's PTD rows)")
    if prefix == "TORCHTITAN" and pp > 1:
        # torchtitan's table gives the local (per-DP-rank) batch; its pipeline schedule splits it
        # into one micro-batch per pipeline stage when pipeline_parallel_microbatches is unset,
        # and its interleaved schedules default to 2 stages per rank.
        num_stages = pp * (2 if "interleaved" in row["notes"].lower() else 1)
        if mb % num_stages == 0:
            mb //= num_stages
            assumptions.append(f"micro_batch: local batch / {num_stages} pipeline stages = {mb}")
    return mb


def _recompute(prefix: str, row: dict, assumptions: list) -> str:
    recompute = row["recompute"].strip()
    if not recompute:
        if prefix == "N21":
            recompute = "full"    # the paper recomputes activations in every run (section 5)
        else:
            recompute = "selective"  # torchtitan's llama3_8b.toml default activation checkpointing
        assumptions.append(f"recompute missing: {recompute}")
    return recompute


def _virtual_stages(prefix: str, row: dict, layers: int, pp: int, m: int, assumptions: list) -> int:
    vpp = _int(row, "vpp")
    if vpp and pp > 1 and pp * vpp > layers and "account-for-embedding" in row["notes"]:
        # Megatron-LM's --account-for-embedding/loss-in-pipeline-split counts the embedding and the
        # loss as a layer each (PP32 x VPP3 = 96 chunks for 94 layers); autoplan needs a layer in
        # every virtual stage: the most chunks that have one.
        vpp = layers // pp
        assumptions.append(f"vpp: {vpp} (the source's chunks count the embedding and the loss as layers)")
    if vpp is None:
        vpp = 1
        per_stage = layers // pp if pp else layers
        if prefix == "TORCHTITAN" and pp > 1 and "interleaved" in row["notes"].lower() and m % pp == 0:
            # torchtitan's interleaved default: 2 stages per rank (126 layers over 16 stages: its
            # generated split [7, 8 x14, 7] is ParallelPlan.virtual_stage_num_layers).
            vpp = 2
            assumptions.append("vpp missing: 2 (torchtitan's interleaved default)")
        elif prefix not in ("TORCHTITAN", "BLOOM", "LLMFOUNDRY") and "interleav" in row["notes"].lower() \
                and pp > 1 and m % pp == 0:
            # Interleaved 1F1B with an unstated chunk count: the smallest split of a stage.
            vpp = next((v for v in (2, 3, 5) if per_stage % v == 0), 1)
            assumptions.append(f"vpp missing: {vpp} (interleaved per the notes)")
    return vpp


def _sequence_parallel(row: dict, facts: dict, tp: int, assumptions: list) -> bool:
    sp = row["sequence_parallel"].strip().lower() == "true"
    if sp and tp == 1:
        # Megatron-LM accepts --sequence-parallel at TP 1 and turns it off (megatron/training/
        # arguments.py core_v0.16.1 lines 904-913: "Disabling sequence parallelism because tensor
        # model parallelism is disabled").
        sp = False
        assumptions.append("sequence_parallel: false (the flag has no effect at tp = 1)")
    if not row["sequence_parallel"].strip() and tp > 1 and (row.get("framework") or "").strip() and \
            STANDS_IN_FOR.get(facts["framework"], facts["framework"]) == "megatron-core":
        # Megatron-Core's recipes (NeMo, Megatron-LM examples) turn sequence parallelism on with TP.
        sp = True
        assumptions.append("sequence_parallel missing: true (Megatron-Core recipes with tp > 1)")
    return sp


def _as_ran(prefix: str, row: dict, facts: dict, plan: ParallelPlan, compiled: bool) -> _AsRan:
    """The built-in framework standing in for the software the row ran, and that software's facts."""
    framework = facts["framework"]
    if (row.get("framework") or "").strip():
        # The software the row names, as the built-in framework whose facts predict it.
        framework = STANDS_IN_FOR.get(framework, framework)
    if prefix == "MTNLG":
        framework = "megatron-deepspeed"    # 2021: fused softmax, no flash attention
    then = dict(AS_RAN.get(facts["source"], {}))  # its framework as the source ran it
    # Facts a source's measured rows chose (source_facts.RowDerivedFact), recorded so a held-out split
    # can withhold them (those of the plan are _plan_of's).
    then.update({f.field: f.value for f in facts.get("derived", ()) if not f.on_plan})
    if prefix == "N21" and plan.zero_stage == 3:
        # Table 2's ZeRO-3 baseline ran on DeepSpeed of early 2021 (the paper is of 2021-04).
        framework = "deepspeed"
        then.update(DEEPSPEED_V0_3_13_ZERO3)
    if plan.zero_shard and framework in FRAMEWORKS and plan.zero_stage not in FRAMEWORKS[framework].hsdp_zero_stages:
        # The stack the row ran shards so, whatever the built-in framework standing in for it can do
        # (BloombergGPT: SageMaker's sharded data parallelism, MiCS over 128 GPUs, on DeepSpeed's facts).
        then["hsdp_zero_stages"] = (plan.zero_stage,)
    if plan.recompute_modules and framework in FRAMEWORKS and not FRAMEWORKS[framework].recompute_modules:
        # The stack it ran names the submodules it recomputes (OLMo-core's selected_modules mode).
        then["recompute_modules"] = True
    then.update(stack_facts(prefix, row, facts, compiled))
    return _AsRan(framework, then)


def _reported_memory_bytes(row: dict, facts: dict) -> float | None:
    """The peak memory the source printed, in bytes (None: it printed none)."""
    mem = _PEAK_MEMORY.search(row["notes"])
    gib = mem and (mem.group(2) == "GiB" or facts.get("memory_gb_is_gib", False))
    reported_memory = float(mem.group(1)) * (2 ** 30 if gib else 1e9) if mem else None
    used = _MEMORY_USED_OF_TOTAL.search(row["published_metric"]) if facts.get("memory_used_of_total_gib") else None
    if used:
        reported_memory = float(used.group(1)) * 2 ** 30
    return reported_memory


def _recompute_unstated(prefix: str, row: dict) -> bool:
    """Rows whose activation checkpointing the source leaves open. fms-fsdp's "Selective AC" is full
    checkpointing of a fraction of the blocks (fms_fsdp/config/training.py selective_checkpointing,
    "percentage of blocks to apply ac"), the fraction of its README's runs not stated. The
    FlashAttention-2 paper's 8k baselines without FlashAttention: "implementation not detailed" (their
    notes); a standard attention's saved scores at 8k leave no room without checkpointing."""
    if prefix == "FMS" and row["recompute"].strip() == "selective":
        return True
    return prefix == "FA2" and "no flashattention" in row["model_name"].lower() and int(row["seq_len"]) >= 8192


def _micro_batch_unstated(prefix: str, row: dict) -> bool:
    """Rows whose micro-batch the source does not state and the row takes from its configs' rule. The
    FlashAttention-2 paper (Table 1) and the flash-attention repo's README table state the model, the
    context, the GPUs and the tokens per step, not the micro-batch; the configs pick it by GPU memory
    (training/configs/experiment/pile/*.yaml datamodule.batch_size, e.g. gpt3-2.7B-flash-8k.yaml: "1 if
    gpu_mem < 40 else (2 if gpu_mem < 80 else 4)"), and the README tells the user to lower it to fit
    ("Gradient accumulation: to adjust device batch size to fit into GPU memory ... set
    datamodule.batch_size", training/README.md). The 2.7B 8k rule's 4 cannot fit an 80 GB GPU: its model
    code saves 38 B per token, hidden unit and layer at that commit (flash_attn/ops/layer_norm.py: each
    fused dropout-add-LayerNorm keeps the fp32 residual (residual_in_fp32) and a 1 B dropout mask
    (resid_pdrop 0.1, GPT2Config's default); FusedDense the bf16 input of Wqkv and out_proj;
    flash_attn_qkvpacked_func q, k, v and the output; FusedMLPFunc at mlp_checkpoint_lvl 0 its input,
    pre_act and the GeLU output): 95 GiB at 4 x 8192 tokens over 32 layers of 2560."""
    return prefix == "FA2"


def load_published_runs(path: str | Path = PUBLISHED_RUNS_PATH) -> list:
    """Every row of the CSV as a PublishedRun (rows whose plan breaks a rule are still returned)."""
    p = Path(path)
    if not p.exists():
        raise AutoplanError(f"published-runs file {p} does not exist; pass an existing CSV")
    with p.open(newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    if not rows or "tokens_per_s_per_gpu" not in rows[0]:
        raise AutoplanError(f"{p} is not a published-runs CSV (no tokens_per_s_per_gpu column)")
    return [row_to_run(r) for r in rows]
