"""torchtitan 0.3.0 (the current release), export target `torchtitan`: a Python config module.

torchtitan 0.3 describes a job as a function returning `Trainer.Config`, found by its ConfigManager
from `--module <python module> --config <function>` (torchtitan/config/manager.py, `_load_config`:
a module name that is not one of its own is imported as given), with tyro overrides such as
`--training.steps 1000` on top. The module written here starts from torchtitan's own recipe for the
model (loss, optimizer, data loader, checkpointing: torchtitan/models/<model>/config_registry.py) and
sets what the plan decides: `ParallelismConfig`, `TrainingConfig` (torchtitan/config/configs.py),
the activation-checkpointing policy (torchtitan/distributed/activation_checkpoint.py) and, for a
shape torchtitan does not ship, the model built the way llama3's own flavors are built
(torchtitan/models/llama3/__init__.py). The TOML of 0.2.x is target `torchtitan-0.2`
(autoplan/exporters/torchtitan/v02.py)."""
from __future__ import annotations

import pprint

from autoplan.exporters.architecture import architecture_facts, unmapped_note
from autoplan.exporters.common import comment_block, header_lines
from autoplan.exporters.launch import launch_script
from autoplan.exporters.torchtitan.flavors import (
    DEEPSEEK_V3_FLAVORS, LLAMA3_03_FLAVORS, QWEN3_FLAVORS, deepseek_v3_flavor, llama3_03_flavor,
    llama3_architecture_notes, qwen3_flavor,
)
from autoplan.exporters.torchtitan.numerics import numerics
from autoplan.exporters.torchtitan.shared import data_parallel_degrees, pipeline_and_experts, training_section
from autoplan.specs import InfeasiblePlan, PlanDocument

CONFIG_FUNCTION = "autoplan_job"
"""The function `--config` names; the module is the file's name (`autoplan_job.py` in a launch script)."""
MODULE = "autoplan_job"

# torchtitan 0.3.0's recipe per shipped (model, flavor): torchtitan/models/llama3/config_registry.py
# (llama3_8b line 184, llama3_70b 257, llama3_405b 295) and deepseek_v3/config_registry.py (deepseek_v3_16b
# 138, deepseek_v3_671b 206; 236B has a flavor, deepseek_v3/__init__.py line 611, but no recipe).
# The 405B starts from llama3_70b(): llama3_405b() constructs a Float8LinearConverter when called (and turns on
# compile and async TP), which refuses to build on a GPU older than SM89 or a CPU login node ("float8 is only
# supported on NVIDIA SM89 or later"); its own learning rate and warm-up are set after (_RECIPE_SETTINGS).
_RECIPES = {("llama3", "8B"): "llama3_8b", ("llama3", "70B"): "llama3_70b", ("llama3", "405B"): "llama3_70b",
            ("deepseek_v3", "16B"): "deepseek_v3_16b", ("deepseek_v3", "236B"): "deepseek_v3_16b",
            ("deepseek_v3", "671B"): "deepseek_v3_671b"}
_MODEL_SPEC_IMPORTS = [
    ("torchtitan.components.loss", "ChunkedLossWrapper, CrossEntropyLoss"),
    ("torchtitan.distributed.pipeline_parallel", "pipeline_llm"),
    ("torchtitan.models.common", "ComplexRoPE, Embedding, Linear, RMSNorm"),
    ("torchtitan.models.common.config_utils", "decoder_vocab_size"),
    ("torchtitan.models.llama3", "_EMBEDDING_INIT, _NORM_INIT, Llama3Model, _build_llama3_layers, "
                                 "_output_linear_init, parallelize_llama"),
    ("torchtitan.models.llama3.state_dict_adapter", "Llama3StateDictAdapter"),
    ("torchtitan.models.utils", "validate_converter_order"),
    ("torchtitan.protocols.model_spec", "ModelSpec"),
]
"""What the model built in the module imports: llama3's own (private) flavor builders of 0.3.0."""
_RECIPE_SETTINGS = {
    "405B": ["    # llama3_405b()'s own optimizer settings (models/llama3/config_registry.py lines 326-327), without",
             "    # the Float8LinearConverter, compile and async TP it constructs",
             "    config.optimizer = default_adamw(lr=8e-5)",
             "    config.lr_scheduler = LRSchedulersContainer.Config(warmup_steps=600)"],
}
"""What a flavor's own recipe sets beyond the recipe the module starts from."""
_RECIPE_SWITCHES = {
    "deepseek_v3_16b": "compile of the loss (models/deepseek_v3/config_registry.py line 169)",
    "deepseek_v3_671b": "compile of the loss (models/deepseek_v3/config_registry.py line 241)",
}
"""Recipes that change precision or compile behind the plan's back."""
FLAVOR_ROPE_POSITIONS = {"llama3": 131072, "qwen3": 40960, "deepseek_v3": 16384}
"""Positions the RoPE cache of torchtitan 0.3.0's shipped flavors holds (models/llama3/__init__.py line 308,
qwen3/__init__.py line 395, deepseek_v3/__init__.py line 577: 4096 * 4, a tenth of DeepSeek-V3's YaRN
context of 40 x 4096). Decoder.Config.update_from_config refuses a longer training.seq_len
(models/common/decoder.py line 169: "Training sequence length ... exceeds attention RoPE maximum
supported sequence length"); the export sizes the cache for the plan, as the torchtitan entry's
context rule says torchtitan does (its modelled shapes are built that long too)."""


def export(doc: PlanDocument) -> tuple:
    """The config module's text and the notes on what does not map."""
    model, notes = doc.model, []
    name = "deepseek_v3" if model.is_moe or model.is_mla else "llama3"
    shipped = deepseek_v3_flavor(model) if name == "deepseek_v3" else llama3_03_flavor(model)
    qwen3 = qwen3_flavor(model)
    if qwen3:
        name, shipped = "qwen3", qwen3
    elif model.is_moe and not model.is_mla:
        # 0.3.0's MoE models are deepseek_v3 (MLA), qwen3's 30B-A3B/235B-A22B, gpt_oss, kimi_k2_7: each
        # with its own layers; a plain top-k mixture such as Mixtral's maps onto none of them.
        raise InfeasiblePlan(f"torchtitan 0.3.0 has no model for the mixture of experts {model.name!r} (its MoE "
                             f"models are deepseek_v3 with MLA, qwen3's 30B-A3B and 235B-A22B shapes, gpt_oss and "
                             f"kimi_k2_7, with their own layers); export it to megatron or deepspeed",
                             "export_torchtitan_moe")
    if name == "deepseek_v3" and shipped not in DEEPSEEK_V3_FLAVORS:
        raise InfeasiblePlan(f"torchtitan 0.3.0's deepseek_v3 ships the shapes {', '.join(DEEPSEEK_V3_FLAVORS)} "
                             f"only, {model.name!r} is none of them; export it to megatron", "export_torchtitan_mla")
    custom = name == "llama3" and shipped not in LLAMA3_03_FLAVORS
    recipe = QWEN3_FLAVORS[shipped][1] if qwen3 else _RECIPES[(name, "8B" if custom else shipped)]
    _model_notes(doc, name, custom, notes)
    imports = [("torchtitan.config", "CompileConfig, ParallelismConfig, TrainingConfig"),
               (f"torchtitan.models.{name}.config_registry", recipe),
               ("torchtitan.trainer", "Trainer")]
    body = [f"    config = {recipe}()  # torchtitan's own recipe: loss, optimizer, data loader, checkpointing",
            "    # The plan's precision and switches, whatever the recipe turns on (deepseek_v3: compile of the",
            "    # loss): the model is rebuilt without converters unless the plan trains in fp8.",
            f"    config.compile = {_compile_config(doc.parallel)}"]
    _switch_notes(recipe, notes)
    if not custom and shipped in _RECIPE_SETTINGS and name == "llama3":
        imports.append(("torchtitan.components.optimizer", "LRSchedulersContainer, default_adamw"))
        body += _RECIPE_SETTINGS[shipped]
    converters = ""
    if doc.training.dtype == "fp8":
        # torchao Float8Linear, rowwise scaling, as in the llama3/deepseek_v3 float8 recipes (eager: the
        # torchtitan entry's facts are eager kernels without compile)
        imports.append(("torchtitan.components.quantization", "Float8LinearConverter"))
        converters = f"converters=[Float8LinearConverter.Config(model_compile_enabled={doc.parallel.tp_comm_overlap})]"
    if custom:
        imports += _MODEL_SPEC_IMPORTS
        body += [f"    config.model_spec = _model_spec({converters})",
                 "    config.loss = ChunkedLossWrapper.Config(loss_fn=CrossEntropyLoss.Config(",
                 "        global_vocab_size=decoder_vocab_size(config.model_spec)))"]
    else:
        imports.append((f"torchtitan.models.{name}", "model_registry"))
        body.append(f"    config.model_spec = model_registry({shipped!r}{', ' + converters if converters else ''})")
    positions = max(model.max_seq_len, doc.training.seq_len) if custom else FLAVOR_ROPE_POSITIONS[name]
    more_imports, helper, lines = numerics(doc, name, custom, positions, notes)
    imports += more_imports
    body += lines
    body += _call("config.parallelism = ParallelismConfig", _parallelism(doc, notes))
    body += _call("config.training = TrainingConfig", _training(doc, notes))
    ac = _activation_checkpoint(doc, notes)
    if ac != "None":
        imports.append(("torchtitan.distributed.activation_checkpoint", ac.split(".")[0]))
    body += [f"    config.activation_checkpoint = {ac}", "    return config"]
    lines = _import_lines(imports)
    text = [comment_block(header_lines(doc, "torchtitan") + _usage(), notes), "\n".join(lines), ""]
    if custom:
        text += ["", _model_spec_source(doc), ""]
    if helper:
        text += ["", helper, ""]
    text += ["", f"def {CONFIG_FUNCTION}() -> Trainer.Config:",
             # a string literal by repr: quotes, backslashes and \"\"\" in a name cannot end it early
             f"    {f'autoplan plan {doc.plan_id}: {model.name} on {doc.cluster.num_gpus} x {doc.cluster.name}.'!r}",
             *body]
    return "\n".join(text) + "\n", notes


def _compile_config(par) -> str:
    """compile on with async TP where the plan overlaps its TP communication (0.3.0 CompileConfig refuses
    async TP without compile of the model: config/configs.py), off otherwise (the entry's eager facts)."""
    on = bool(par.tp_comm_overlap)
    return f"CompileConfig(enable={on}, enable_async_tensor_parallel={on})"


def _import_lines(imports: list) -> list:
    """One import line per module, its names merged (module "" : a plain `import name`)."""
    merged: dict = {}
    for module, names in imports:
        merged.setdefault(module, set()).update(name.strip() for name in names.split(","))
    lines = []
    for module, names in sorted(merged.items()):
        joined = ", ".join(sorted(names, key=lambda n: (n.lstrip("_").lower(), n)))
        lines.append(f"import {joined}" if not module else f"from {module} import {joined}" if len(module + joined) < 100
                     else f"from {module} import (\n    {joined},\n)")
    return lines


def _switch_notes(recipe: str, notes: list) -> None:
    """What the recipe turns on that the plan does not (torchtitan 0.3.0 config_registry.py files)."""
    if recipe in _RECIPE_SWITCHES:
        notes.append(f"{recipe}() turns on {_RECIPE_SWITCHES[recipe]}: exported off, as planned (the torchtitan "
                     f"entry's facts are eager kernels without async TP); fp8 only where the plan trains in fp8")


def _usage() -> list:
    return [f"run: save as {MODULE}.py in a folder on PYTHONPATH, then torchrun ... -m torchtitan.train",
            f"  --module {MODULE} --config {CONFIG_FUNCTION} --hf_assets_path TOKENIZER_DIR --dataloader.dataset c4 "
            f"--training.steps N"]


def _call(target: str, values: dict) -> list:
    """`target(` with one keyword argument a line: the generated module stays within 120 columns."""
    lines = [f"    {target}("]
    for key, value in values.items():
        text = pprint.pformat(value, width=110 - len(key), compact=True).replace("\n", "\n" + " " * (9 + len(key)))
        lines.append(f"        {key}={text},")
    return lines + ["    )"]


def _model_notes(doc: PlanDocument, name: str, custom: bool, notes: list) -> None:
    model = doc.model
    if custom:
        notes.append(f"model shape: torchtitan 0.3.0 ships the llama3 flavors {', '.join(LLAMA3_03_FLAVORS)}; "
                     f"{model.name!r} is built in this module as llama3's own flavors are")
    if name == "llama3":
        notes += llama3_architecture_notes(model)
    mapped = {"deepseek_v3": {"mla", "moe_ffn", "shared_experts", "moe_layers"},
              "qwen3": {"qk_norm", "moe_ffn", "moe_layers"}}.get(name, set())
    notes += unmapped_note(architecture_facts(model), mapped, f"torchtitan's {name} model")
    if model.tied_embeddings and not custom:
        notes.append("tied_embeddings: torchtitan's shipped flavor keeps separate embedding and output weights")


def _model_spec_source(doc: PlanDocument) -> str:
    """Python building the plan's shape as a llama3 model, as torchtitan 0.3.0 builds its "8B"
    (torchtitan/models/llama3/__init__.py `_8b`, `model_registry`), the FFN width given directly."""
    model = doc.model
    heads = model.num_heads
    return "\n".join([
        "def _model_spec(converters=None) -> ModelSpec:",
        f"    {f'{model.name}: the shape of the plan as a torchtitan llama3 model (its private builders, 0.3.0).'!r}",
        f"    dim, vocab_size = {model.hidden_size}, {model.vocab_size}",
        "    model = Llama3Model.Config(",
        f"        dim=dim, vocab_size=vocab_size, enable_weight_tying={model.tied_embeddings},",
        "        tok_embeddings=Embedding.Config(num_embeddings=vocab_size, embedding_dim=dim, "
        "param_init=_EMBEDDING_INIT),",
        "        norm=RMSNorm.Config(normalized_shape=dim, param_init=_NORM_INIT),",
        "        lm_head=Linear.Config(in_features=dim, out_features=vocab_size, param_init=_output_linear_init(dim)),",
        "        layers=_build_llama3_layers(",
        f"            fuse_qkv=True, n_layers={model.num_layers}, dim=dim, n_heads={heads}, "
        f"n_kv_heads={model.num_kv_heads}, hidden_dim={model.ffn_hidden_size},",
        f"            rope=ComplexRoPE.Config(dim=dim // {heads}, "
        f"max_seq_len={max(model.max_seq_len, doc.training.seq_len)}, theta=10000.0),"
        "  # the model's: autoplan_job()",
        '            attn_backend="flex",',
        "        ),",
        "    )",
        "    if converters is not None:",
        "        validate_converter_order(converters)",
        "        for converter in converters:",
        "            model = converter.build().convert(model)",
        f"    return ModelSpec(name=\"llama3\", flavor={model.name!r}, model=model, parallelize_fn=parallelize_llama,",
        "                     pipelining_fn=pipeline_llm, post_optimizer_build_fn=None,",
        "                     state_dict_adapter=Llama3StateDictAdapter)",
    ])


def _training(doc: PlanDocument, notes: list) -> dict:
    out = training_section(doc, notes)
    if doc.parallel.pp > 1 or doc.parallel.ep > 1:
        # Trainer.Config._validate_cuda_graphs (trainer.py line 179): CUDA graphs (on by default) refuse
        # pipeline parallelism, and expert parallelism with the default token dispatcher.
        out["disable_cuda_graphs"] = True
    return out


def _parallelism(doc: PlanDocument, notes: list) -> dict:
    par = doc.parallel
    replicate, shard, reshard = data_parallel_degrees(doc, notes, experts_take_shard_ranks=True)
    if par.ep > 1 and (shard * par.cp * par.tp) % par.ep:
        raise InfeasiblePlan(f"torchtitan 0.3.0 takes expert ranks from dp_shard * cp * tp = "
                             f"{shard * par.cp * par.tp}, which ep={par.ep} does not divide (parallel_dims.py "
                             f"line 279)", "export_torchtitan_ep")
    # spmd_backend: 0.3.0's default "spmd_types" hands fully_shard plain local tensors with SPMD type
    # annotations and a DataParallelMeshDims (distributed/full_dtensor.py resolve_fsdp_mesh), which the
    # fully_shard of torch 2.13.0, the newest release 0.3.0 imports on, refuses ("When dp_mesh_dims is
    # provided, all parameters must be DTensors", fsdp/_fully_shard/_fsdp_param.py line 346) for any
    # world above one rank; "partial_dtensor" is FSDP2 over (dp_replicate, fsdp) with DTensor TP/EP/CP
    # (models/llama3/parallelize.py lines 47-85), what the torchtitan entry's facts describe.
    return {"spmd_backend": "partial_dtensor",
            "data_parallel_replicate_degree": replicate, "data_parallel_shard_degree": shard,
            "fsdp_reshard_after_forward": reshard, "tensor_parallel_degree": par.tp,
            # async TP fuses the sequence-parallel all-gathers and reduce-scatters with their GEMMs (what
            # the published async TP runs ran; 0.2.0 always shards on the sequence under TP)
            "enable_sequence_parallel": bool(par.sequence_parallel or par.tp == 1 or par.tp_comm_overlap),
            "context_parallel_degree": par.cp, "pipeline_parallel_degree": par.pp,
            **pipeline_and_experts(doc, notes, head="lm_head")}


def _activation_checkpoint(doc: PlanDocument, notes: list) -> str:
    """The policy's constructor: 0.3.0 has whole-block (FullAC), op-level selective (SelectiveAC) and
    memory-budget checkpointing, none per layer (0.2's selective_ac_option "k" is gone)."""
    par = doc.parallel
    if par.recompute == "none":
        return "None"
    if par.recompute == "selective":
        notes.append("recompute=selective: torchtitan's op-level selective checkpointing saves the "
                     "matmul outputs (every second one) and recomputes the rest, close to but not only the "
                     "attention core")
        return "SelectiveAC.Config()"
    per_stage = par.layers_per_stage(doc.model.num_layers)
    if par.recompute_num_layers < per_stage:
        notes.append(f"recompute_num_layers={par.recompute_num_layers} of {per_stage} layers per stage: "
                     f"torchtitan 0.3.0 checkpoints every block or none (FullAC); exported as all {per_stage} "
                     f"(less memory than planned, more recompute time)")
    return "FullAC.Config()"


def launch(doc: PlanDocument, launcher: str, header: list, module_text: str) -> str:
    """A launch script: the config module written next to the run, then torchtitan.train with it."""
    placeholders = {
        "TOKENIZER_PATH": "folder with the Hugging Face tokenizer files (hf_assets_path)",
        "DATASET": "a dataset torchtitan registers (torchtitan/hf_datasets/text_datasets.py, e.g. c4)",
        "TRAIN_STEPS": "optimizer steps to run",
    }
    env = {"PYTHONPATH": '"$RUN_DIR${PYTHONPATH:+:$PYTHONPATH}"'}  # where --module finds autoplan_job
    args = [("--module", MODULE), ("--config", CONFIG_FUNCTION), ("--hf_assets_path", '"$TOKENIZER_PATH"'),
            ("--dataloader.dataset", '"$DATASET"'), ("--training.steps", '"$TRAIN_STEPS"')]
    return launch_script(doc, header, placeholders, env, {f"{MODULE}.py": module_text},
                         ["-m", "torchtitan.train"], args, launcher)
