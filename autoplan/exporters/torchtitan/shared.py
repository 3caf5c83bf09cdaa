"""What both torchtitan releases' exports write alike: the training section, the plan's ZeRO stage as
torchtitan's FSDP2 degrees, and the pipeline block with torchtitan's generated stage split. Option
names are the same in 0.2.0's `JobConfig` and 0.3.0's `TrainingConfig`/`ParallelismConfig`."""
from __future__ import annotations

from autoplan.exporters.common import stages_text
from autoplan.specs import PlanDocument

PARAM_DTYPES = {"bf16": "bfloat16", "fp8": "bfloat16", "fp16": "bfloat16", "fp32": "float32"}
"""mixed_precision_param accepts bfloat16 or float32; fp8 runs the GEMMs through the float8 converter on
top of bfloat16 parameters."""


def training_section(doc: PlanDocument, notes: list) -> dict:
    """local/global batch, sequence length and mixed precision."""
    par, training = doc.parallel, doc.training
    if training.dtype == "fp16":
        notes.append("dtype=fp16: torchtitan has no fp16 with loss scaling; exported as bfloat16")
    # With pp > 1 a rank's local batch is split into pipeline micro-batches; without pp, torchtitan
    # accumulates gradients until global_batch_size is reached (0.3.0 trainer.py lines 415-433).
    return {"local_batch_size": par.micro_batch_size * (par.num_microbatches if par.pp > 1 else 1),
            "global_batch_size": training.global_batch_size, "seq_len": training.seq_len,
            "mixed_precision_param": PARAM_DTYPES[training.dtype], "mixed_precision_reduce": "float32"}


def data_parallel_degrees(doc: PlanDocument, notes: list, experts_take_shard_ranks: bool = False) -> tuple:
    """(data_parallel_replicate_degree, data_parallel_shard_degree, fsdp_reshard_after_forward) of the
    plan's ZeRO stage. ZeRO 0 over several replicas: replicate only (0.2.0 applies DDP; 0.3.0 HSDP with
    a shard group of one, llama3/parallelize.py line 70: every rank keeps whole weights), unless
    `experts_take_shard_ranks` (0.3.0, ep > 1: the experts' group comes out of dp_shard). ZeRO 1/2:
    FSDP that keeps the parameters gathered (SHARD_GRAD_OP). ZeRO 3: FSDP. With hybrid sharding
    (zero_shard) the replicas are the data_parallel_replicate_degree and the shard group is
    data_parallel_shard_degree x cp (torchtitan's fsdp mesh dimension is dp_shard x cp)."""
    par = doc.parallel
    replicas = par.zero_replicas
    if par.zero_stage == 0 and par.dp > 1:
        if not (experts_take_shard_ranks and par.ep > 1):
            return par.dp, 1, "default"
        # the experts' FSDP group is dp_shard * cp * tp / ep (0.3.0 parallel_dims.py line 279)
        notes.append("zero_stage=0 with ep > 1: torchtitan borrows expert ranks from dp_shard, so the "
                     "data-parallel group runs as FSDP (less memory, extra all-gathers)")
    elif par.zero_stage in (1, 2):
        notes.append(f"zero_stage={par.zero_stage}: torchtitan has no ZeRO-1/2 distinction; exported "
                     f"as FSDP with fsdp_reshard_after_forward='never' (gradients and optimizer state "
                     f"sharded, parameters gathered for the whole step)")
        return replicas, par.dp // replicas, "never"
    return replicas, par.dp // replicas, "default"


def pipeline_and_experts(doc: PlanDocument, notes: list, head: str) -> dict:
    """The pipeline options (pp > 1: schedule, stage split, micro-batch size) and the expert degree
    (MoE) of the parallelism section; `head` as in pipeline_stages."""
    par, out = doc.parallel, {}
    if par.pp > 1:
        out["pipeline_parallel_schedule"] = "Interleaved1F1B" if par.vpp > 1 else "1F1B"
        out.update(pipeline_stages(doc, notes, head))
        out["pipeline_parallel_microbatch_size"] = par.micro_batch_size
    if doc.model.is_moe:
        out["expert_parallel_degree"] = par.ep
    return out


def pipeline_stages(doc: PlanDocument, notes: list, head: str) -> dict:
    """The plan's (virtual) stages (ParallelPlan.virtual_stage_num_layers) in torchtitan's terms:
    its generated split when some weighing of the embedding and the head reproduces them, else the
    modules of every stage listed (module_fqns_per_model_part). `head`: the output projection's
    module name ("output" in 0.2, "lm_head" in 0.3)."""
    par, num_layers = doc.parallel, doc.model.num_layers
    stages = par.virtual_stage_num_layers(num_layers)
    default_stages = par.pp * (1 if par.vpp == 1 else 2)   # stages torchtitan makes per schedule
    for first_less, last_less in ((1, 1), (0, 0), (1, 0), (0, 1)):
        if torchtitan_split(len(stages), num_layers, first_less, last_less) != stages:
            continue
        out = {"pipeline_parallel_first_stage_less_layers": first_less,
               "pipeline_parallel_last_stage_less_layers": last_less}
        effective = num_layers + first_less + last_less
        per_stage = -(-effective // len(stages))
        if -(-effective // per_stage) == len(stages):   # torchtitan: ceil(effective / per stage) stages
            out["pipeline_parallel_layers_per_stage"] = per_stage   # stated even where it is the default
            return out
        if default_stages == len(stages):
            return out
    if par.pp > 1 and len(set(stages)) > 1:
        notes.append(f"uneven pipeline stages ({stages_text(stages)} layers per stage) are not torchtitan's "
                     f"generated split; every stage's modules are listed in module_fqns_per_model_part")
    first_layer = [sum(stages[:k]) for k in range(len(stages))]
    return {"module_fqns_per_model_part": [
        (["tok_embeddings"] if k == 0 else []) + [f"layers.{i}" for i in range(first_layer[k], first_layer[k] + n)]
        + (["norm", head] if k == len(stages) - 1 else []) for k, n in enumerate(stages)]}


def torchtitan_split(num_stages: int, num_layers: int, first_less: int, last_less: int) -> list | None:
    """Layers per stage of torchtitan's generated split (torchtitan 0.2 distributed/pipeline_parallel.py
    generate_llm_fqn_per_model_part; the same in 0.3.0's _generate_llm_fqn_per_model_part, line 366):
    num_layers + first_less + last_less "effective" layers shared out evenly, the first stages taking
    the remainder, then the embedding's and the head's weights taken off the first and the last stage.
    None when a stage would be left without layers."""
    effective = num_layers + first_less + last_less
    base, extra = divmod(effective, num_stages)
    counts = [base + (k < extra) for k in range(num_stages)]
    counts[0] -= first_less
    counts[-1] -= last_less
    return counts if min(counts) > 0 and base >= max(first_less, last_less) else None
