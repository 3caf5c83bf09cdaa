"""Megatron-LM: the `pretrain_gpt.py` command line of a plan (option names of Megatron-LM's
`megatron/training/arguments.py`)."""
from __future__ import annotations

from autoplan.exporters.architecture import architecture_facts, moe_layer_pattern, unmapped_note
from autoplan.exporters.common import comment_block, header_lines, stages_text, uneven_stages
from autoplan.specs import PlanDocument

_NORMS = {"rmsnorm": "RMSNorm", "layernorm": "LayerNorm"}
_POSITIONS = {"rope": "rope", "learned": "learned_absolute"}


def export(doc: PlanDocument) -> tuple:
    notes: list = []
    args = _parallel_args(doc, notes) + _batch_args(doc) + _recompute_args(doc, notes) \
        + _precision_args(doc, notes) + _model_args(doc, notes)
    cluster = doc.cluster
    nproc = min(cluster.gpus_per_node, cluster.num_gpus)
    launch = f"torchrun --nnodes {cluster.num_nodes} --nproc-per-node {nproc}"
    if cluster.num_nodes > 1:  # every node runs this same line and meets at the rendezvous
        launch += " --rdzv-backend c10d --rdzv-endpoint ${MASTER_ADDR}:${MASTER_PORT:-29500}"
    launch += " pretrain_gpt.py"
    lines = [launch] + [f"    {' '.join(str(part) for part in arg)}" for arg in args]
    notes.append(f"vocabulary: Megatron takes the vocabulary from the tokenizer; the plan assumes "
                 f"{doc.model.vocab_size} rows (synthetic data: --tokenizer-type NullTokenizer "
                 f"--vocab-size {doc.model.vocab_size})")
    return comment_block(header_lines(doc, "Megatron-LM"), notes) + " \\\n".join(lines) + "\n", notes


def _parallel_args(doc: PlanDocument, notes: list) -> list:
    par, model = doc.parallel, doc.model
    args = [("--tensor-model-parallel-size", par.tp), ("--pipeline-model-parallel-size", par.pp)]
    if par.vpp > 1:
        args.append(("--num-layers-per-virtual-pipeline-stage", model.num_layers // (par.pp * par.vpp)))
    args += _uneven_stage_args(doc, notes)
    args.append(("--context-parallel-size", par.cp))
    if par.sequence_parallel:
        args.append(("--sequence-parallel",))
    if par.zero_stage in (1, 2):
        # The distributed optimizer shards optimizer state and reduce-scatters gradients, but keeps
        # the whole gradient buffer on every rank: ZeRO-2 communication with ZeRO-1 memory.
        args.append(("--use-distributed-optimizer",))
        if par.zero_stage == 2:
            notes.append("zero_stage=2: Megatron's distributed optimizer reduce-scatters gradients but "
                         "keeps the full gradient buffer per rank, so gradient memory is not sharded")
    elif par.zero_stage == 3:
        args.append(("--use-torch-fsdp2",))
        notes.append("zero_stage=3 maps to --use-torch-fsdp2 (PyTorch FSDP2 inside Megatron-LM, core "
                     "0.10 or later); Megatron documents it as untested with pipeline parallelism"
                     + (f" and this plan has pp={par.pp}" if par.pp > 1 else ""))
    if model.is_moe:
        args += [("--num-experts", model.num_experts), ("--moe-router-topk", model.num_experts_per_token),
                 ("--expert-model-parallel-size", par.ep)]
        if model.moe_ffn_hidden_size:
            args.append(("--moe-ffn-hidden-size", model.expert_ffn_size))
        if model.shared_expert_ffn_size:
            args.append(("--moe-shared-expert-intermediate-size", model.shared_expert_ffn_size))
        if model.num_moe_layers != model.num_layers:
            args.append(("--moe-layer-freq", f"'{moe_layer_pattern(model)}'"))
    return args


def _uneven_stage_args(doc: PlanDocument, notes: list) -> list:
    """Megatron-LM splits num_layers evenly unless the first and/or last stage is given its own
    count (--decoder-first/last-pipeline-num-layers); the stages in between must then be equal."""
    counts = uneven_stages(doc)
    if counts is None:
        return []
    if len(counts) == 2:
        return [("--decoder-first-pipeline-num-layers", counts[0])]
    if len(set(counts[1:-1])) == 1:
        return [("--decoder-first-pipeline-num-layers", counts[0]),
                ("--decoder-last-pipeline-num-layers", counts[-1])]
    notes.append(f"uneven pipeline stages ({stages_text(counts)} layers per rank): Megatron-LM's "
                 f"--decoder-first/last-pipeline-num-layers need equal middle stages, so this split does "
                 f"not map; pick a pp for which num_layers={doc.model.num_layers} leaves equal middle stages")
    return []


def _batch_args(doc: PlanDocument) -> list:
    # Megatron derives the gradient-accumulation count: global / (micro * data-parallel size).
    return [("--micro-batch-size", doc.parallel.micro_batch_size),
            ("--global-batch-size", doc.training.global_batch_size)]


def _recompute_args(doc: PlanDocument, notes: list) -> list:
    par = doc.parallel
    if par.recompute == "selective":
        return [("--recompute-granularity", "selective")]
    if par.recompute != "full":
        return []
    num_layers = par.recompute_num_layers
    if par.vpp > 1:
        # With interleaving, the "block" method counts layers per model chunk (virtual stage), and a
        # pipeline rank holds vpp chunks: the plan's per-rank count is spread over them.
        per_chunk = -(-num_layers // par.vpp)
        if per_chunk * par.vpp != num_layers:
            notes.append(f"recompute_num_layers={num_layers} per pipeline rank is not divisible by "
                         f"vpp={par.vpp}; exported {per_chunk} per virtual stage = "
                         f"{per_chunk * par.vpp} per rank")
        num_layers = per_chunk
    # "block" recomputes the first N layers of each stage and keeps the rest: the plan's meaning.
    return [("--recompute-granularity", "full"), ("--recompute-method", "block"),
            ("--recompute-num-layers", num_layers)]


def _precision_args(doc: PlanDocument, notes: list) -> list:
    dtype = doc.training.dtype
    if dtype == "bf16":
        return [("--bf16",)]
    if dtype == "fp16":
        return [("--fp16",)]
    if dtype == "fp8":
        # Transformer Engine FP8: E4M3 forward, E5M2 gradients ("hybrid"), bf16 outside the GEMMs.
        return [("--bf16",), ("--fp8-format", "hybrid")]
    notes.append("dtype=fp32: Megatron trains in fp32 when neither --bf16 nor --fp16 is given")
    return []


def _model_args(doc: PlanDocument, notes: list) -> list:
    model, seq_len = doc.model, doc.training.seq_len
    args = [("--num-layers", model.num_layers), ("--hidden-size", model.hidden_size),
            ("--num-attention-heads", model.num_heads)]
    if model.num_kv_heads != model.num_heads:
        args += [("--group-query-attention",), ("--num-query-groups", model.num_kv_heads)]
    if model.is_mla:  # Megatron-Core MLA (MLATransformerConfig); --kv-channels does not apply
        args += [("--multi-latent-attention",), ("--kv-lora-rank", model.kv_lora_rank),
                 ("--qk-head-dim", model.head_dim - model.qk_rope_head_dim),
                 ("--qk-pos-emb-head-dim", model.qk_rope_head_dim), ("--v-head-dim", model.value_dim)]
        if model.q_lora_rank:
            args.append(("--q-lora-rank", model.q_lora_rank))
    elif model.head_dim * model.num_heads != model.hidden_size:
        args.append(("--kv-channels", model.head_dim))
    if model.qk_norm == "head":  # Megatron's qk_layernorm normalizes each head, as Qwen3/Gemma 3 do
        args.append(("--qk-layernorm",))
    if model.rope_dim and model.rope_dim != model.head_dim and not model.is_mla:
        args.append(("--rotary-percent", model.rope_dim / model.head_dim))
    args += [("--ffn-hidden-size", model.ffn_hidden_size), ("--seq-length", seq_len),
             ("--max-position-embeddings", max(model.max_seq_len, seq_len))]
    if model.mlp == "swiglu":
        args.append(("--swiglu",))
    args.append(("--normalization", _NORMS[model.norm]))
    if model.position in _POSITIONS:
        args.append(("--position-embedding-type", _POSITIONS[model.position]))
    else:
        notes.append(f"position={model.position!r}: Megatron-LM has no such position embedding "
                     f"(it offers rope and learned_absolute)")
    if not model.tied_embeddings:
        args.append(("--untie-embeddings-and-output-weights",))
    if not model.linear_bias:
        args.append(("--disable-bias-linear",))
        if model.qkv_bias:
            args.append(("--add-qkv-bias",))
    mapped = {"mla", "partial_rotary", "moe_ffn", "shared_experts", "moe_layers"}
    if model.qk_norm == "head":
        mapped.add("qk_norm")
    notes += unmapped_note(architecture_facts(model), mapped, "Megatron-LM's pretrain_gpt.py flags")
    return args
