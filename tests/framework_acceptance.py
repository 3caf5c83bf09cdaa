"""Feed an export to the target framework's own configuration code; return "" when it is accepted,
else the framework's complaint. Used by tests/test_export_acceptance.py (docs/export.md says what
each check covers).

- torchtitan 0.2.0: the TOML through its ConfigManager, the degrees through ParallelDims, the
  flavor through the llama3 train spec (after the flavor module a launch script writes), the
  pipeline split through torch.distributed.pipelining's schedule classes and torchtitan's own
  generate_llm_fqn_per_model_part, the batch through the trainer's divisibility rule.
- DeepSpeed 0.19.8: the JSON through DeepSpeedConfig, with a Megatron-DeepSpeed mpu and without
  one; the Megatron-DeepSpeed flags against DeepSpeed's own add_config_arguments and the flags of
  Megatron-DeepSpeed's megatron/arguments.py (listed below, commit 4efb479d).
- Megatron-LM core_v0.16.1: its arguments.py is in no package, so the flags are checked against
  the names its parser defines (literal ones listed below; the rest generated from
  megatron-core's TransformerConfig fields, as its ArgumentGroupFactory does), the validate_args
  rules the plan touches are re-stated here with their line in arguments.py, the batch through
  megatron-core's own ConstantNumMicroBatchesCalculator, and the model through megatron-core's
  TransformerConfig built the way core_transformer_config_from_args builds it.
"""
from __future__ import annotations

import dataclasses
import json
import shlex
import tomllib

# Flags Megatron-LM core_v0.16.1 megatron/training/arguments.py defines literally (group.add_argument),
# checked by reading that file at tag core_v0.16.1; every other flag must come from a TransformerConfig
# or ModelParallelConfig field (ArgumentGroupFactory, arguments.py line 1621).
MEGATRON_LITERAL_FLAGS = frozenset({
    "--num-virtual-stages-per-pipeline-rank", "--num-layers-per-virtual-pipeline-stage",
    "--decoder-first-pipeline-num-layers", "--decoder-last-pipeline-num-layers",
    "--pipeline-model-parallel-layout", "--use-distributed-optimizer", "--use-torch-fsdp2",
    "--num-distributed-optimizer-instances",
    "--no-gradient-accumulation-fusion", "--num-experts", "--swiglu", "--group-query-attention",
    "--seq-length", "--max-position-embeddings", "--position-embedding-type",
    "--untie-embeddings-and-output-weights", "--tokenizer-type", "--vocab-size", "--mock-data",
    "--data-path", "--tokenizer-model", "--micro-batch-size", "--global-batch-size",
    "--tensor-model-parallel-size", "--pipeline-model-parallel-size", "--bf16", "--fp16", "--lr",
    # generated from TrainingConfig (megatron/training/training_config.py, core_v0.16.1), not in megatron-core
    "--train-iters",
    # models of issue 13: MLA, rotary fraction, MoE layer pattern
    "--q-lora-rank", "--kv-lora-rank", "--qk-head-dim", "--qk-pos-emb-head-dim",
    "--v-head-dim", "--rotary-percent", "--moe-layer-freq",
    # the overlap flags the megatron-core facts assume (_add_distributed_args; tp_comm_overlap is
    # also a ModelParallelConfig field)
    "--overlap-grad-reduce", "--overlap-param-gather", "--tp-comm-overlap",
    # Megatron-FSDP (core_v0.16.1 arguments.py lines 2305-2309); --ckpt-format is generated from
    # megatron/training/training_config.py line 411 (ckpt_format: torch, torch_dist, torch_dcp, fsdp_dtensor)
    "--use-megatron-fsdp", "--data-parallel-sharding-strategy", "--ckpt-format",
    # the model's numerics (issue 50): lines 1655, 1661, 1663 and (MLA's YaRN) 2735
    "--rotary-base", "--use-rope-scaling", "--rope-scaling-factor", "--rotary-scaling-factor",
})
# Flags of deepspeedai/Megatron-DeepSpeed megatron/arguments.py (commit 4efb479d) the export uses.
MEGATRON_DEEPSPEED_FLAGS = frozenset({
    "--tensor-model-parallel-size", "--pipeline-model-parallel-size", "--no-pipeline-parallel",
    "--sequence-parallel", "--ds-sequence-parallel-size", "--num-experts", "--topk",
    "--moe-expert-parallel-size", "--zero-stage", "--deepspeed-activation-checkpointing",
    "--recompute-granularity", "--recompute-method", "--recompute-num-layers",
})


def split_flags(words: list) -> dict:
    """["--a", "1", "--b", "--c", "x"] -> {"--a": "1", "--b": True, "--c": "x"}; a repeated flag is an error."""
    flags: dict = {}
    for i, word in enumerate(words):
        if word.startswith("--"):
            if word in flags:
                raise ValueError(f"{word} given twice")
            nxt = words[i + 1] if i + 1 < len(words) else "--"
            flags[word] = True if nxt.startswith("--") else nxt
    return flags


# -- Megatron-LM ----------------------------------------------------------------------------------------
def megatron_command(text: str) -> tuple:
    """(environment, flags) of an exported `pretrain_gpt.py` command (plain export or launch script)."""
    env, command = {}, []
    for line in text.replace("\\\n", " ").splitlines():
        line = line.strip()
        if line.startswith("#"):
            continue
        if line.startswith("export ") and "=" in line:
            name, value = line[len("export "):].split("=", 1)
            env[name] = value
        elif "pretrain_gpt.py" in line:
            command = shlex.split(line)
    words = command[command.index("pretrain_gpt.py") + 1:]
    return env, split_flags(words)


def megatron_accepts(text: str, num_gpus: int, hopper: bool = True) -> str:
    from megatron.core.num_microbatches_calculator import ConstantNumMicroBatchesCalculator
    from megatron.core.transformer.transformer_config import TransformerConfig

    env, a = megatron_command(text)
    generated = set()  # the names ArgumentGroupFactory._build_argparse_kwargs_from_field gives each field
    for f in dataclasses.fields(TransformerConfig):  # a ModelParallelConfig subclass: has its fields too
        name = f.name.replace("_", "-")
        meta = f.metadata.get("argparse_meta", {})
        if "arg_names" in meta:
            generated |= set(meta["arg_names"])
        elif f.default is True:
            generated |= {f"--no-{name}", f"--disable-{name}"}
        else:
            generated.add(f"--{name}")
    unknown = [flag for flag in a if flag not in MEGATRON_LITERAL_FLAGS and flag not in generated]
    if unknown:
        return f"unknown flags {unknown}"
    i = lambda flag, default=None: int(a[flag]) if flag in a else default  # noqa: E731
    tp, pp, cp, ep = (i("--tensor-model-parallel-size", 1), i("--pipeline-model-parallel-size", 1),
                      i("--context-parallel-size", 1), i("--expert-model-parallel-size", 1))
    etp = i("--expert-tensor-parallel-size", tp)  # arguments.py core_v0.16.1 lines 410-411: default tp
    fsdp = "--use-torch-fsdp2" in a
    megatron_fsdp = "--use-megatron-fsdp" in a
    rules = [
        # arguments.py core_v0.16.1, validate_args, in the order they run there
        (num_gpus % (tp * pp * cp) == 0, "world size not divisible by tp*pp*cp (line 341)"),
        (not ("--num-layers-per-virtual-pipeline-stage" in a and ("--decoder-first-pipeline-num-layers" in a
              or "--decoder-last-pipeline-num-layers" in a)),
         "please use --num-virtual-stages-per-pipeline-rank ... uneven pipeline parallelism (line 531)"),
        ("--pipeline-model-parallel-layout" in a or "--decoder-first-pipeline-num-layers" in a
         or "--decoder-last-pipeline-num-layers" in a
         or (i("--num-layers") + ("--account-for-embedding-in-pipeline-split" in a)
             + ("--account-for-loss-in-pipeline-split" in a)) % pp == 0,
         "Number of layers (with the embedding and loss where counted, lines 563-567) should be divisible by "
         "the pipeline-model-parallel size (line 571)"),
        ("--num-virtual-stages-per-pipeline-rank" not in a or pp > 1,
         "interleaved schedule needs pipeline-model-parallel size > 1 (line 577)"),
        (not fsdp or pp == 1, "--use-torch-fsdp2 is not supported with pipeline parallelism (line 609)"),
        (not fsdp or ep == 1, "--use-torch-fsdp2 is not supported with expert parallelism (line 611)"),
        (not fsdp or "--use-distributed-optimizer" not in a, "--use-torch-fsdp2 with distributed optimizer (line 613)"),
        (not fsdp or "--no-gradient-accumulation-fusion" in a,
         "--use-torch-fsdp2 is not supported with gradient accumulation fusion (line 615)"),
        (not fsdp or "--untie-embeddings-and-output-weights" in a,
         "--use-torch-fsdp2 requires --untie-embeddings-and-output-weights (line 619)"),
        (not fsdp or "--fp16" not in a, "--use-torch-fsdp2 not supported with fp16 yet (line 621)"),
        (not fsdp or env.get("CUDA_DEVICE_MAX_CONNECTIONS") != "1",
         "FSDP always requires CUDA_DEVICE_MAX_CONNECTIONS value large than one (line 622)"),
        ("--tp-comm-overlap" not in a or ("--sequence-parallel" in a and tp > 1),
         "Tensor parallel communication/GEMM overlap can happen only when sequence parallelism is enabled "
         "(validate_args; sequence parallelism is switched off at tp = 1 just before)"),
        (not megatron_fsdp or env.get("CUDA_DEVICE_MAX_CONNECTIONS") != "1",
         "FSDP always requires CUDA_DEVICE_MAX_CONNECTIONS value large than one (line 687)"),
        (not megatron_fsdp or a.get("--ckpt-format") == "fsdp_dtensor",
         "Megatron FSDP only supports fsdp_dtensor checkpoint format (line 690)"),
        (not megatron_fsdp or a.get("--data-parallel-sharding-strategy") in
         (None, "no_shard", "optim", "optim_grads", "optim_grads_params"),
         "--data-parallel-sharding-strategy: invalid choice (line 2307)"),
        (cp == 1 or i("--seq-length") % (2 * cp) == 0,
         "seq-length should be a multiple of 2 * context-parallel-size (line 819)"),
        (i("--max-position-embeddings", 0) >= i("--seq-length"),
         "max_position_embeddings must be >= seq_length (line 830)"),
        (a.get("--recompute-granularity") != "selective" or "--recompute-method" not in a,
         "recompute method is not yet supported for selective recomputing granularity (line 901)"),
        (not (hopper and (tp > 1 or cp > 1) and not fsdp and not megatron_fsdp)
         or env.get("CUDA_DEVICE_MAX_CONNECTIONS") == "1",
         "Using tensor model parallelism or context parallelism require setting the environment variable "
         "CUDA_DEVICE_MAX_CONNECTIONS to 1 (line 951, Hopper and older)"),
        (num_gpus % (etp * ep * pp) == 0,
         "world_size is not divisible by expert_tensor_model_pipeline_parallel size (parallel_state.py "
         "core_v0.16.1 lines 788-795)"),
        (ep == 1 or ("--num-experts" in a and i("--num-experts") % ep == 0),
         "Number of experts should be a multiple of expert model parallel_size (line 1028)"),
        (("--mock-data" in a) + ("--data-path" in a) == 1, "A single data source must be provided (line 1050)"),
        (a.get("--tokenizer-type") != "NullTokenizer" or "--vocab-size" in a,
         "NullTokenizer needs --vocab-size (tokenizer.py build_tokenizer)"),
        (a.get("--tokenizer-type") in ("NullTokenizer", None) or "--tokenizer-model" in a,
         f"--tokenizer-type {a.get('--tokenizer-type')} needs --tokenizer-model"),
        ("--tokenizer-type" in a, "no --tokenizer-type: Megatron-LM cannot build a tokenizer, so no vocabulary"),
        (num_gpus // (tp * pp) % i("--num-distributed-optimizer-instances", 1) == 0,
         "Data parallel size should be divisible by partial DistOpt shard factor (parallel_state.py core_v0.16.1 "
         "lines 833-837: dp*cp over the instances)"),
    ]
    for ok, rule in rules:
        if not ok:
            return rule
    try:
        dp = num_gpus // (tp * pp * cp)
        ConstantNumMicroBatchesCalculator(i("--global-batch-size"), i("--micro-batch-size"), dp, None, 0)
    except AssertionError as exc:
        return f"num_microbatches_calculator: {exc}"
    import megatron.core.utils as mcore_utils
    from packaging.version import Version

    # Transformer Engine (CUDA only) is absent here; TransformerConfig asks its version only for fp8
    # (MoE fp8 needs >= 1.7). It stands in at the lowest version megatron-core 0.16.1's dev extra pins.
    saved = mcore_utils.get_te_version
    mcore_utils.get_te_version = lambda: Version("2.9.0")
    if "--multi-latent-attention" in a:  # core_transformer_config_from_args builds the MLA subclass
        from megatron.core.transformer.transformer_config import MLATransformerConfig as TransformerConfig
    try:
        TransformerConfig(**transformer_config_kwargs(a, tp, pp, cp, ep))
    except (ValueError, AssertionError, TypeError) as exc:
        return f"TransformerConfig: {exc}"
    finally:
        mcore_utils.get_te_version = saved
    return ""


def transformer_config_kwargs(a: dict, tp: int, pp: int, cp: int, ep: int) -> dict:
    """What Megatron-LM's core_transformer_config_from_args passes for these flags (arguments.py
    core_v0.16.1): every flag named after a field, plus the renamed and derived ones."""
    import torch
    import torch.nn.functional as F

    dtype = torch.bfloat16 if "--bf16" in a else torch.float16 if "--fp16" in a else torch.float32
    kw = dict(
        num_layers=int(a["--num-layers"]), hidden_size=int(a["--hidden-size"]),
        num_attention_heads=int(a["--num-attention-heads"]), ffn_hidden_size=int(a["--ffn-hidden-size"]),
        tensor_model_parallel_size=tp, pipeline_model_parallel_size=pp, context_parallel_size=cp,
        expert_model_parallel_size=ep, expert_tensor_parallel_size=int(a.get("--expert-tensor-parallel-size", tp)),
        sequence_parallel=bool(a.get("--sequence-parallel")) and tp > 1,
        bf16="--bf16" in a, fp16="--fp16" in a, params_dtype=dtype,
        pipeline_dtype=dtype if pp > 1 else None,
        add_bias_linear="--disable-bias-linear" not in a, add_qkv_bias="--add-qkv-bias" in a,
        normalization=a.get("--normalization", "LayerNorm"),
        gradient_accumulation_fusion="--no-gradient-accumulation-fusion" not in a,
        recompute_granularity=a.get("--recompute-granularity"), recompute_method=a.get("--recompute-method"),
        recompute_num_layers=int(a["--recompute-num-layers"]) if "--recompute-num-layers" in a else None,
    )
    if "--group-query-attention" in a:
        kw["num_query_groups"] = int(a["--num-query-groups"])
    if "--kv-channels" in a:
        kw["kv_channels"] = int(a["--kv-channels"])
    if "--swiglu" in a:  # arguments.py: --swiglu sets gated_linear_unit and silu
        kw.update(gated_linear_unit=True, activation_func=F.silu, bias_activation_fusion=False)
    if "--num-experts" in a:
        kw.update(num_moe_experts=int(a["--num-experts"]), moe_router_topk=int(a.get("--moe-router-topk", 2)))
    if "--fp8-format" in a:
        kw["fp8"] = a["--fp8-format"]
    if "--num-virtual-stages-per-pipeline-rank" in a:
        kw["virtual_pipeline_model_parallel_size"] = int(a["--num-virtual-stages-per-pipeline-rank"])
    if "--decoder-first-pipeline-num-layers" in a:
        kw["num_layers_in_first_pipeline_stage"] = int(a["--decoder-first-pipeline-num-layers"])
    if "--decoder-last-pipeline-num-layers" in a:
        kw["num_layers_in_last_pipeline_stage"] = int(a["--decoder-last-pipeline-num-layers"])
    if "--pipeline-model-parallel-layout" in a:
        from megatron.core.transformer.pipeline_parallel_layer_layout import PipelineParallelLayerLayout

        kw["pipeline_model_parallel_layout"] = PipelineParallelLayerLayout(
            a["--pipeline-model-parallel-layout"].strip('"'), pp)
    for flag in ("--q-lora-rank", "--kv-lora-rank", "--qk-head-dim", "--qk-pos-emb-head-dim", "--v-head-dim",
                 "--moe-ffn-hidden-size", "--moe-shared-expert-intermediate-size"):
        if flag in a:
            kw[flag[2:].replace("-", "_")] = int(a[flag])
    if "--qk-layernorm" in a:
        kw["qk_layernorm"] = True
    if "--norm-epsilon" in a:
        kw["layernorm_epsilon"] = float(a["--norm-epsilon"])
    if "--moe-router-score-function" in a:
        kw["moe_router_score_function"] = a["--moe-router-score-function"]
    if "--multi-latent-attention" in a:  # MLATransformerConfig's own fields, copied from the args by name
        kw.update(multi_latent_attention=True, rotary_base=int(a.get("--rotary-base", 10000)),
                  rotary_scaling_factor=float(a.get("--rotary-scaling-factor", 1.0)))
    # --rotary-percent goes to GPTModel, not to TransformerConfig (pretrain_gpt.py model_provider)
    if "--moe-layer-freq" in a:  # arguments.py moe_freq_type: a string evaluated to a list
        kw["moe_layer_freq"] = eval(a["--moe-layer-freq"], {})  # noqa: S307 -- our own export
    if kw["recompute_granularity"] is None:
        kw.pop("recompute_num_layers")
    return kw


# -- DeepSpeed ------------------------------------------------------------------------------------------
class MegatronDeepSpeedMpu:
    """The part of Megatron-DeepSpeed's mpu (megatron.core.parallel_state) DeepSpeedConfig asks."""

    def __init__(self, dp: int, tp: int, pp: int):
        self.dp, self.tp, self.pp = dp, tp, pp

    def get_data_parallel_world_size(self):
        return self.dp

    def get_model_parallel_world_size(self):
        return self.tp

    def get_pipeline_model_parallel_world_size(self):
        return self.pp


def deepspeed_accepts(config_text: str, num_gpus: int, dp: int, tp: int, pp: int, with_mpu: bool) -> str:
    """DeepSpeedConfig's verdict. Without an mpu DeepSpeed divides by the whole world: its world size
    comes from deepspeed.comm, which stands in for the launcher here (every rank would read the same)."""
    import deepspeed.runtime.config as ds_config

    config = json.loads(config_text)
    saved = ds_config.dist.get_rank, ds_config.dist.get_world_size
    ds_config.dist.get_rank, ds_config.dist.get_world_size = (lambda *_: 0), (lambda *_: num_gpus)
    try:
        ds_config.DeepSpeedConfig(config, mpu=MegatronDeepSpeedMpu(dp, tp, pp) if with_mpu else None)
    except (AssertionError, ValueError, KeyError) as exc:
        return f"DeepSpeedConfig: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
    finally:
        ds_config.dist.get_rank, ds_config.dist.get_world_size = saved
    return ""


def megatron_deepspeed_flags_accepted(flags_text: str) -> str:
    import argparse

    import deepspeed

    parser = deepspeed.add_config_arguments(argparse.ArgumentParser(add_help=False))
    known = {opt for action in parser._actions for opt in action.option_strings}
    unknown = [f for f in split_flags(shlex.split(flags_text)) if f not in known | MEGATRON_DEEPSPEED_FLAGS]
    return f"unknown Megatron-DeepSpeed flags {unknown}" if unknown else ""


# -- torchtitan -----------------------------------------------------------------------------------------
def torchtitan_accepts(toml_text: str, num_gpus: int, tmp_path, flavor_module: str = "") -> str:
    import math

    from torch.distributed.pipelining.schedules import PipelineScheduleSingle, get_schedule_class
    from torchtitan.config import ConfigManager
    from torchtitan.distributed import ParallelDims
    from torchtitan.distributed.pipeline_parallel import generate_llm_fqn_per_model_part
    from torchtitan.protocols.train_spec import get_train_spec

    path = tmp_path / "job.toml"
    path.write_text(toml_text)
    try:
        job = ConfigManager().parse_args(["--job.config_file", str(path)])
    except Exception as exc:  # tyro/TOML errors: the verdict, whatever their type
        return f"ConfigManager: {type(exc).__name__}: {exc}"
    p = job.parallelism
    try:
        dims = ParallelDims(dp_replicate=p.data_parallel_replicate_degree, dp_shard=p.data_parallel_shard_degree,
                            cp=p.context_parallel_degree, tp=p.tensor_parallel_degree, pp=p.pipeline_parallel_degree,
                            ep=p.expert_parallel_degree, etp=p.expert_tensor_parallel_degree, world_size=num_gpus)
    except AssertionError as exc:
        return f"ParallelDims: {exc}"
    if job.experimental.custom_import:
        if not flavor_module:
            return f"custom_import {job.experimental.custom_import!r} but no flavor module"
        exec(compile(flavor_module, job.experimental.custom_import, "exec"), {})
    spec = get_train_spec(job.model.name)
    if job.model.flavor not in spec.model_args:
        return f"model {job.model.name} has no flavor {job.model.flavor!r} (has {sorted(spec.model_args)})"
    model_args = spec.model_args[job.model.flavor]
    dp = dims.dp_replicate * dims.dp_shard
    if job.training.global_batch_size % (job.training.local_batch_size * dp):  # train.py line 204
        return f"global batch {job.training.global_batch_size} not divisible by local batch x dp"
    if dims.pp > 1:
        schedule = get_schedule_class(p.pipeline_parallel_schedule)
        single = issubclass(schedule, PipelineScheduleSingle)
        num_layers, first, last = model_args.n_layers, p.pipeline_parallel_first_stage_less_layers, \
            p.pipeline_parallel_last_stage_less_layers
        # pipeline_llm (torchtitan/distributed/pipeline_parallel.py, 0.2.0) lines 69-113
        if p.pipeline_parallel_layers_per_stage is not None:
            stages = math.ceil((num_layers + first + last) / p.pipeline_parallel_layers_per_stage)
            if stages % dims.pp:
                return f"Number of virtual stages ({stages}) must be divisible by pipeline parallel size ({dims.pp})"
            per_rank = stages // dims.pp
            if single and per_rank != 1 or not single and per_rank < 2:
                return f"{p.pipeline_parallel_schedule} cannot run {per_rank} stages per rank"
        else:
            stages = dims.pp * (1 if single else 2)
        try:
            parts = generate_llm_fqn_per_model_part(stages, num_layers, first, last)
        except ValueError as exc:
            return f"generate_llm_fqn_per_model_part: {exc}"
        if job.training.local_batch_size % p.pipeline_parallel_microbatch_size:
            return "local batch not divisible by pipeline_parallel_microbatch_size"
        return "" if len(parts) == stages else f"{len(parts)} model parts for {stages} stages"
    return ""


def torchtitan_layers_per_rank(toml_text: str, num_layers: int) -> list:
    """Transformer layers each pipeline rank gets from torchtitan's own split of this config."""
    from torchtitan.distributed.pipeline_parallel import generate_llm_fqn_per_model_part

    p = tomllib.loads(toml_text)["parallelism"]
    pp = p["pipeline_parallel_degree"]
    first, last = p["pipeline_parallel_first_stage_less_layers"], p["pipeline_parallel_last_stage_less_layers"]
    stages = math_ceil((num_layers + first + last) / p["pipeline_parallel_layers_per_stage"])
    parts = generate_llm_fqn_per_model_part(stages, num_layers, first, last)
    counts = [sum(name.startswith("layers.") for name in part) for part in parts]
    # stage s runs on rank s % pp (looped schedules place virtual stages round-robin)
    return [sum(counts[s] for s in range(rank, stages, pp)) for rank in range(pp)]


def math_ceil(x: float) -> int:
    return -int(-x // 1)
