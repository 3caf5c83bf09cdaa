"""Megatron-LM: the `pretrain_gpt.py` command line of a plan (option names of Megatron-LM's
`megatron/training/arguments.py` at core_v0.16.1), with the environment its `validate_args` demands.

It runs as printed on synthetic data (`--mock-data` with a NullTokenizer of the plan's vocabulary);
`--launch` scripts (autoplan.exporters.launch) swap in real data and tokenizer placeholders."""
from __future__ import annotations

import shlex

from autoplan.exporters.architecture import architecture_facts, moe_layer_pattern, unmapped_note
from autoplan.exporters.common import comment_block, header_lines, stages_text, uneven_stages
from autoplan.exporters.launch import launch_script
from autoplan.specs import InfeasiblePlan, PlanDocument, get_framework

_NORMS = {"rmsnorm": "RMSNorm", "layernorm": "LayerNorm"}
_POSITIONS = {"rope": "rope", "learned": "learned_absolute"}


def export(doc: PlanDocument) -> tuple:
    notes: list = []
    args = megatron_args(doc, notes) + synthetic_data_args(doc)
    cluster = doc.cluster
    nproc = min(cluster.gpus_per_node, cluster.num_gpus)
    launch = f"torchrun --nnodes {cluster.num_nodes} --nproc-per-node {nproc}"
    if cluster.num_nodes > 1:  # every node runs this same line and meets at the rendezvous
        launch += " --rdzv-backend c10d --rdzv-endpoint ${MASTER_ADDR}:${MASTER_PORT:-29500}"
    launch += " pretrain_gpt.py"
    lines = [launch] + [f"    {' '.join(shlex.quote(str(part)) for part in arg)}" for arg in args]
    env = "".join(f"export {name}={value}\n" for name, value in environment(doc).items())
    return comment_block(header_lines(doc, "megatron"), notes) + env + " \\\n".join(lines) + "\n", notes


def launch(doc: PlanDocument, launcher: str, header: list, text: str) -> str:
    """The command in a launch script, reading real data through a Hugging Face tokenizer."""
    placeholders = {
        "MEGATRON_LM": "checkout of Megatron-LM at core_v0.16.1 (holds pretrain_gpt.py)",
        "DATA_PATH": "prefix of the tokenized dataset (.bin/.idx from tools/preprocess_data.py)",
        "TOKENIZER_MODEL": f"Hugging Face tokenizer (name or path) with {doc.model.vocab_size} ids or fewer",
        "TRAIN_ITERS": "optimizer steps to run",
        "LR": "peak learning rate",
    }
    args = megatron_args(doc, []) + [
        ("--data-path", '"$DATA_PATH"'), ("--tokenizer-type", "HuggingFaceTokenizer"),
        ("--tokenizer-model", '"$TOKENIZER_MODEL"'), ("--train-iters", '"$TRAIN_ITERS"'), ("--lr", '"$LR"')]
    return launch_script(doc, header, placeholders, environment(doc), {}, ['"$MEGATRON_LM/pretrain_gpt.py"'],
                         args, launcher)


def megatron_args(doc: PlanDocument, notes: list) -> list:
    """The plan's `pretrain_gpt.py` arguments as (flag, value...) tuples, without data or tokenizer."""
    return _parallel_args(doc, notes) + _batch_args(doc) + _recompute_args(doc, notes) \
        + _precision_args(doc, notes) + _model_args(doc, notes)


def synthetic_data_args(doc: PlanDocument) -> list:
    """Data and tokenizer for a throughput run: Megatron's mock dataset and a NullTokenizer. The
    NullTokenizer adds one end-of-document id to --vocab-size, so the plan's rows are V - 1 + 1."""
    return [("--mock-data",), ("--tokenizer-type", "NullTokenizer"), ("--vocab-size", doc.model.vocab_size - 1)]


def environment(doc: PlanDocument) -> dict:
    """Environment variables Megatron-LM's validate_args asserts (arguments.py, core_v0.16.1): with
    tp > 1 or cp > 1 on Hopper and older, CUDA_DEVICE_MAX_CONNECTIONS must be 1 (one hardware queue
    orders the TP/CP communication before the GEMMs that wait for it); FSDP (--use-megatron-fsdp) must
    not run with 1 -- it takes precedence, and Megatron only warns about tp with FSDP."""
    par = doc.parallel
    if par.zero_stage in (2, 3):  # both Megatron-FSDP (_parallel_args)
        return {"CUDA_DEVICE_MAX_CONNECTIONS": 8}
    if par.tp > 1 or par.cp > 1:
        return {"CUDA_DEVICE_MAX_CONNECTIONS": 1}
    return {}


def _parallel_args(doc: PlanDocument, notes: list) -> list:
    par, model = doc.parallel, doc.model
    args = [("--tensor-model-parallel-size", par.tp), ("--pipeline-model-parallel-size", par.pp)]
    args += _interleaved_args(doc, notes) if par.vpp > 1 else _uneven_stage_args(doc, notes)
    args.append(("--context-parallel-size", par.cp))
    if par.sequence_parallel:
        args.append(("--sequence-parallel",))
        if par.tp > 1 and par.tp_comm_overlap:
            # A plan with tp_comm_overlap was costed with the TP collectives pipelined with the GEMMs
            # (Transformer Engine userbuffers), which Megatron runs only with this flag.
            args.append(("--tp-comm-overlap",))
    if par.zero_stage == 1:
        # The distributed optimizer shards optimizer state and reduce-scatters gradients, but keeps
        # the whole gradient buffer on every rank: ZeRO-1 memory, as megatron-core's states cost it
        # (its ZeRO-2, sharded gradients, is Megatron-FSDP below: an export never changes the plan's memory). The
        # plan's costs overlap both collectives with compute, as these two flags make Megatron do.
        args += [("--use-distributed-optimizer",), ("--overlap-grad-reduce",), ("--overlap-param-gather",)]
        if par.zero_shard:
            # Partial distributed optimizer: one instance per shard group of consecutive dp-cp ranks.
            args.append(("--num-distributed-optimizer-instances", par.zero_replicas))
    elif par.zero_stage in (2, 3):
        # Megatron-FSDP shards optimizer state and gradients (optim_grads: ZeRO-2, reduce-scattered every
        # micro-batch as Framework.zero2_reduce_every_microbatch costs it) and the weights too
        # (optim_grads_params: ZeRO-3), with pipeline and expert parallelism, which --use-torch-fsdp2
        # refuses; validate_args (core_v0.16.1 lines 671-690) wants CUDA_DEVICE_MAX_CONNECTIONS > 1 and
        # the fsdp_dtensor checkpoint format.
        strategy = "optim_grads" if par.zero_stage == 2 else "optim_grads_params"
        args += [("--use-megatron-fsdp",), ("--data-parallel-sharding-strategy", strategy),
                 ("--ckpt-format", "fsdp_dtensor"), ("--use-distributed-optimizer",), ("--overlap-grad-reduce",),
                 ("--overlap-param-gather",)]
        notes.append(f"zero_stage={par.zero_stage} maps to Megatron-FSDP (--use-megatron-fsdp "
                     f"--data-parallel-sharding-strategy {strategy}, --ckpt-format fsdp_dtensor) with "
                     f"CUDA_DEVICE_MAX_CONNECTIONS > 1, as validate_args requires")
    if model.is_moe:
        # The dispatcher the plan was costed with (Framework.moe_dispatch "alltoall"); Megatron's default
        # is the allgather dispatcher (transformer_config.py core_v0.16.1 line 675).
        flex = get_framework(doc.framework).moe_dispatch == "flex"
        args += [("--num-experts", model.num_experts), ("--moe-router-topk", model.num_experts_per_token),
                 ("--expert-model-parallel-size", par.ep), ("--moe-token-dispatcher-type", "flex" if flex else "alltoall")]
        if flex:
            # megatron-core+flex-deepep: costed as DeepEP's hierarchical dispatch (cost_model/moe_time.py).
            args.append(("--moe-flex-dispatcher-backend", "deepep"))
        if model.moe_router_group_topk:
            # Group-limited routing is the model's (DeepSeek-V3 n_group/topk_group): Megatron-Core's
            # group_limited_topk (moe_utils.py core_v0.16.1 line 519).
            args += [("--moe-router-num-groups", model.moe_router_num_groups),
                     ("--moe-router-group-topk", model.moe_router_group_topk)]
        if par.etp:
            # Only when the plan sets it: absent, Megatron takes etp = tp (arguments.py lines 410-411).
            args.append(("--expert-tensor-parallel-size", par.etp))
        if par.moe_capacity_factor:
            # Absent: dropless (transformer_config.py core_v0.16.1 lines 690-691); tokens over an
            # expert's capacity are dropped by lowest routing probability (the default policy "probs").
            args.append(("--moe-expert-capacity-factor", par.moe_capacity_factor))
        if model.moe_ffn_hidden_size:
            args.append(("--moe-ffn-hidden-size", model.expert_ffn_size))
        if model.shared_expert_ffn_size:
            args.append(("--moe-shared-expert-intermediate-size", model.shared_expert_ffn_size))
        if model.num_moe_layers != model.num_layers:
            args.append(("--moe-layer-freq", moe_layer_pattern(model)))
        if par.ep > 1 and get_framework(doc.framework).moe_a2a_overlap:
            # A plan made for megatron-core+overlap-moe-expert-parallel-comm was costed with each
            # micro-batch's all-to-all under another's compute; Megatron runs that with these flags
            # (and the all-to-all dispatcher above).
            args += [("--overlap-moe-expert-parallel-comm",), ("--delay-wgrad-compute",)]
    return args


def _uneven_stage_args(doc: PlanDocument, notes: list) -> list:
    """Megatron-LM splits num_layers evenly unless the first and/or last stage is given its own
    count (--decoder-first/last-pipeline-num-layers, the stages in between then equal); any other
    split is spelled out stage by stage with --pipeline-model-parallel-layout ("E" the embedding,
    "t" a transformer layer, "L" the loss; megatron.core PipelineParallelLayerLayout)."""
    counts = uneven_stages(doc)
    if counts is None:
        return []
    if len(counts) == 2:
        return [("--decoder-first-pipeline-num-layers", counts[0])]
    if len(set(counts[1:-1])) == 1:
        return [("--decoder-first-pipeline-num-layers", counts[0]),
                ("--decoder-last-pipeline-num-layers", counts[-1])]
    stages = [("E" if rank == 0 else "") + f"t*{n}" + ("L" if rank == len(counts) - 1 else "")
              for rank, n in enumerate(counts)]
    notes.append(f"uneven pipeline stages ({stages_text(counts)} layers per rank) exported as "
                 f"--pipeline-model-parallel-layout")
    return [("--pipeline-model-parallel-layout", "|".join(stages))]


def _interleaved_args(doc: PlanDocument, notes: list) -> list:
    """Megatron-LM's flags for the plan's virtual stages (ParallelPlan.virtual_stage_num_layers),
    the simplest that reproduce them, checked by re-deriving Megatron's split from the flags
    (megatron/core/transformer/transformer_block.py get_num_layers_to_build,
    transformer_layer.py get_transformer_layer_offset, transformer_config.py's checks):
    equal stages -> --num-layers-per-virtual-pipeline-stage; one layer fewer in the first and/or
    last virtual stage -> --account-for-embedding/loss-in-pipeline-split (core 0.12); anything else
    -> --pipeline-model-parallel-layout (core 0.13). (--decoder-first/last-pipeline-num-layers with
    vpp > 1 need every rank's count divisible by vpp; ranks of the plan's split differ by at most
    one layer, so that never describes an uneven one.)"""
    par, num_layers = doc.parallel, doc.model.num_layers
    stages = par.virtual_stage_num_layers(num_layers)
    vpp_arg = ("--num-virtual-stages-per-pipeline-rank", par.vpp)
    if len(set(stages)) == 1:
        # The per-rank count rather than --num-layers-per-virtual-pipeline-stage: validate_args
        # refuses the latter beside the uneven first/last stage flags, so one spelling serves all.
        return [vpp_arg]
    for embedding, loss in ((True, True), (True, False), (False, True)):
        counted = num_layers + embedding + loss
        if counted % (par.pp * par.vpp) == 0:
            per_stage = counted // (par.pp * par.vpp)
            megatron = [per_stage] * len(stages)
            megatron[0] -= embedding
            megatron[-1] -= loss
            if megatron == stages:
                notes.append(f"uneven interleaved stages ({stages_text(stages)} layers per virtual stage): "
                             f"the embedding and/or loss counted as a layer, Megatron-Core 0.12 or later")
                return [vpp_arg] + [(flag,) for flag, on in (
                    ("--account-for-embedding-in-pipeline-split", embedding),
                    ("--account-for-loss-in-pipeline-split", loss)) if on]
    notes.append(f"uneven interleaved stages ({stages_text(stages)} layers per virtual stage): "
                 "--pipeline-model-parallel-layout needs Megatron-Core 0.13 or later")
    return [("--pipeline-model-parallel-layout", pipeline_layout(stages))]  # quoted with the command


def pipeline_layout(stages: list) -> str:
    """Megatron's --pipeline-model-parallel-layout string: virtual stages in pipeline order split
    by "|", E the embedding, t a decoder layer, L the loss; runs of equal stages folded as
    "(tt|)*n" (megatron/core/transformer/pipeline_parallel_layer_layout.py parse_str_to_list)."""
    texts = [("E" if k == 0 else "") + ("t" * n) + ("L" if k == len(stages) - 1 else "")
             for k, n in enumerate(stages)]
    parts, k = [], 0
    while k < len(texts):
        run = 1
        while k + run < len(texts) - 1 and texts[k + run] == texts[k]:
            run += 1
        parts.append(f"({texts[k]}|)*{run}" if run > 1 else texts[k] + ("|" if k < len(texts) - 1 else ""))
        k += run
    return "".join(parts)


def _batch_args(doc: PlanDocument) -> list:
    # Megatron derives the gradient-accumulation count: global / (micro * data-parallel size).
    return [("--micro-batch-size", doc.parallel.micro_batch_size),
            ("--global-batch-size", doc.training.global_batch_size)]


def _recompute_args(doc: PlanDocument, notes: list) -> list:
    par = doc.parallel
    if par.recompute == "selective":
        # Without --recompute-modules Megatron recomputes core_attn (transformer_config.py core_v0.16.1
        # lines 1193-1194), the plan's "selective" without modules.
        modules = [("--recompute-modules", *par.recompute_modules)] if par.recompute_modules else []
        return [("--recompute-granularity", "selective")] + modules
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


def numerics_args(model, notes: list) -> list:
    """RoPE base and scaling, norm epsilon and router scoring, as the model's config states them
    (arguments.py core_v0.16.1: --rotary-base line 1655 (an int), --use-rope-scaling/--rope-scaling-factor
    1661-1663 (Llama 3.1's scaling, its other parameters fixed in rope_utils), --rotary-scaling-factor
    2735 (MLA's YaRN); --norm-epsilon and --moe-router-score-function are TransformerConfig fields).
    Unstated, Megatron's defaults apply: base 10000, eps 1e-5, softmax."""
    args = []
    if model.position == "rope" and model.rope_theta:
        if model.rope_theta != int(model.rope_theta):
            raise InfeasiblePlan(f"rope_theta={model.rope_theta:g}: Megatron-LM's --rotary-base takes an integer "
                                 f"(arguments.py core_v0.16.1 line 1655)", "export_megatron_rope_theta")
        args.append(("--rotary-base", int(model.rope_theta)))
    if model.rope_scaling == "llama3":
        args += [("--use-rope-scaling",), ("--rope-scaling-factor", model.rope_scaling_factor)]
    elif model.rope_scaling == "yarn" and model.is_mla:
        # MLA takes YaRN by default (--rope-type); beta_fast/slow 32/1 and the original 4096 positions are
        # MLATransformerConfig's defaults, which no flag sets (DeepSeek-V2/V3's own values)
        args.append(("--rotary-scaling-factor", model.rope_scaling_factor))
        notes.append("rope_scaling yarn: Megatron's YaRN takes beta_fast 32, beta_slow 1, 4096 original positions "
                     "and mscale 1.0 / mscale_all_dim 0.0 (no flags for the first three; DeepSeek-V3's config "
                     "has mscale_all_dim 1.0: add --mscale-all-dim 1.0 if yours does)")
    elif model.rope_scaling:
        raise InfeasiblePlan(f"rope_scaling={model.rope_scaling!r}: Megatron-LM's GPT flags scale RoPE as Llama 3.1 "
                             f"does (--use-rope-scaling) or, under MLA, by YaRN only; export another target",
                             "export_megatron_rope_scaling")
    if model.norm_eps:
        args.append(("--norm-epsilon", model.norm_eps))
    unstated = ([("rope_theta", "--rotary-base 10000")] if model.position == "rope" and not model.rope_theta else []) \
        + ([("norm_eps", "--norm-epsilon 1e-5")] if not model.norm_eps else [])
    if unstated:
        notes.append(f"{' and '.join(name for name, _ in unstated)} not stated by the model's catalog entry or "
                     f"config.json: Megatron's defaults apply ({', '.join(flag for _, flag in unstated)})")
    if model.is_moe and model.moe_router_score:
        args.append(("--moe-router-score-function", model.moe_router_score))
    if model.moe_router_score == "sigmoid":
        notes.append("moe_router_score=sigmoid: DeepSeek-V3's router also has a per-expert bias, group-limited "
                     "top-k and a scaling factor the plan does not carry (--moe-router-enable-expert-bias, "
                     "--moe-router-num-groups, --moe-router-group-topk, --moe-router-topk-scaling-factor)")
    return args


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
    if model.qk_norm == "head" or model.is_mla:
        # Megatron's qk_layernorm normalizes each head, as Qwen3/Gemma 3 do; under MLA it is what
        # builds the RMSNorms of the compressed query and key/value latents (DeepSeek's q_a_layernorm
        # and kv_a_layernorm: MLASelfAttentionSubmodules q_layernorm/kv_layernorm, IdentityOp without it)
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
    args += numerics_args(model, notes)
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
