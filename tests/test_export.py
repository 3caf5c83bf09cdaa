"""Exporters: each target for plans that exercise its mappings, parsed back with the real parsers."""
import json
import re
import shlex
import tomllib

import pytest

from autoplan.cli import main as cli_main
from autoplan.exporters import export_plan
from tests.framework_acceptance import megatron_accepts
from autoplan.specs import AutoplanError, ClusterSpec, InfeasiblePlan, ModelSpec, ParallelPlan, PlanDocument, TrainingSpec

LLAMA2_70B = ModelSpec(name="llama-2-70b", num_layers=80, hidden_size=8192, num_heads=64, num_kv_heads=8,
                       ffn_hidden_size=28672, vocab_size=32000)
MIXTRAL = ModelSpec(name="mixtral-8x7b", num_layers=32, hidden_size=4096, num_heads=32, num_kv_heads=8,
                    ffn_hidden_size=14336, vocab_size=32000, num_experts=8, num_experts_per_token=2)


def _doc(model=LLAMA2_70B, num_gpus=128, gbs=512, seq_len=4096, dtype="bf16", **parallel):
    return PlanDocument(model=model, training=TrainingSpec(global_batch_size=gbs, seq_len=seq_len, dtype=dtype),
                        cluster=ClusterSpec(name="h100-80gb", num_gpus=num_gpus), parallel=ParallelPlan(**parallel))


# dp=4 x tp=8 x pp=4, interleaved with 5 virtual stages of 4 layers, full recompute of 10 layers/rank
TP_PP_VPP_SP = _doc(dp=4, tp=8, pp=4, vpp=5, sequence_parallel=True, zero_stage=1, micro_batch_size=1,
                    num_microbatches=128, recompute="full", recompute_num_layers=10)
FSDP = _doc(num_gpus=64, gbs=128, dp=64, zero_stage=3, micro_batch_size=2, num_microbatches=1,
            recompute="selective")
CONTEXT = _doc(num_gpus=64, gbs=64, seq_len=32768, dp=4, tp=8, cp=2, sequence_parallel=True, zero_stage=1,
               micro_batch_size=1, num_microbatches=16, recompute="full", recompute_num_layers=80)
MOE = _doc(model=MIXTRAL, num_gpus=64, gbs=256, dtype="fp8", dp=16, tp=2, pp=2, ep=8, zero_stage=1,
           sequence_parallel=True, micro_batch_size=1, num_microbatches=16)


def _with(doc, **parallel_changes):
    return PlanDocument(model=doc.model, training=doc.training, cluster=doc.cluster,
                        parallel=doc.parallel.replace(**parallel_changes))


def export_megatron_args(doc) -> dict:
    """Parse the exported shell command into {flag: value or True}."""
    export = export_plan(doc, "megatron")
    command = "\n".join(line for line in export.text.splitlines() if not line.startswith(("#", "export ")))
    words = shlex.split(command.replace("\\\n", " "))
    assert words[0] == "torchrun" and "pretrain_gpt.py" in words
    args, words = {}, words[words.index("pretrain_gpt.py") + 1:]
    for i, word in enumerate(words):
        if word.startswith("--"):
            nxt = words[i + 1] if i + 1 < len(words) else "--"
            args[word] = True if nxt.startswith("--") else nxt
    return args


def test_megatron_tp_pp_vpp_sp_and_block_recompute():
    args = export_megatron_args(TP_PP_VPP_SP)
    assert args["--tensor-model-parallel-size"] == "8" and args["--pipeline-model-parallel-size"] == "4"
    assert args["--num-virtual-stages-per-pipeline-rank"] == "5"
    assert args["--sequence-parallel"] is True and args["--use-distributed-optimizer"] is True
    assert args["--micro-batch-size"] == "1" and args["--global-batch-size"] == "512"
    # 10 recomputed layers per rank spread over 5 model chunks: 2 per chunk with the block method
    assert (args["--recompute-granularity"], args["--recompute-method"], args["--recompute-num-layers"]) == \
        ("full", "block", "2")
    assert args["--num-query-groups"] == "8" and args["--group-query-attention"] is True
    assert args["--ffn-hidden-size"] == "28672" and args["--seq-length"] == "4096"
    assert args["--normalization"] == "RMSNorm" and args["--position-embedding-type"] == "rope"
    for flag in ("--swiglu", "--bf16", "--untie-embeddings-and-output-weights", "--disable-bias-linear"):
        assert args[flag] is True
    assert "--add-qkv-bias" not in args and "--num-experts" not in args


def test_megatron_fsdp_context_and_moe():
    fsdp = export_megatron_args(FSDP)
    assert fsdp["--use-megatron-fsdp"] is True and "--use-torch-fsdp2" not in fsdp
    assert (fsdp["--data-parallel-sharding-strategy"], fsdp["--ckpt-format"]) == ("optim_grads_params", "fsdp_dtensor")
    assert fsdp["--recompute-granularity"] == "selective" and "--recompute-method" not in fsdp
    assert export_megatron_args(CONTEXT)["--context-parallel-size"] == "2"
    assert export_megatron_args(CONTEXT)["--recompute-num-layers"] == "80"
    moe = export_megatron_args(MOE)
    assert (moe["--num-experts"], moe["--moe-router-topk"], moe["--expert-model-parallel-size"]) == ("8", "2", "8")
    assert moe["--fp8-format"] == "hybrid" and moe["--bf16"] is True
    qwen = ModelSpec(name="qwen", num_layers=4, hidden_size=64, num_heads=4, num_kv_heads=4, ffn_hidden_size=128,
                     vocab_size=100, qkv_bias=True)
    assert export_megatron_args(_doc(model=qwen, num_gpus=8, gbs=8, dp=8, micro_batch_size=1))["--add-qkv-bias"] is True


def test_megatron_launch_line_matches_the_cluster():
    multi_node = export_plan(TP_PP_VPP_SP, "megatron").text
    assert "torchrun --nnodes 16 --nproc-per-node 8 --rdzv-backend c10d --rdzv-endpoint" in multi_node
    single = export_plan(_doc(num_gpus=4, gbs=4, dp=4, micro_batch_size=1), "megatron").text
    assert "torchrun --nnodes 1 --nproc-per-node 4 pretrain_gpt.py" in single


def test_megatron_exports_the_zero_stage_it_costs():
    # Megatron's distributed optimizer keeps the whole fp32 main-grad buffer on every rank: ZeRO-1's memory.
    # A ZeRO-2 plan (costed with sharded gradients) is Megatron-FSDP optim_grads, never the distributed
    # optimizer alone (out of memory on the cluster, issue 47).
    zero1 = export_plan(_with(FSDP, zero_stage=1), "megatron")
    assert "--use-distributed-optimizer" in zero1.text and "--use-megatron-fsdp" not in zero1.text
    for stage, strategy in ((2, "optim_grads"), (3, "optim_grads_params")):
        export = export_plan(_with(FSDP, zero_stage=stage), "megatron")
        assert "--use-megatron-fsdp" in export.text
        assert f"--data-parallel-sharding-strategy {strategy} " in export.text.replace("\\\n", " ")
        assert any(f"zero_stage={stage} maps to Megatron-FSDP" in n for n in export.notes)
        assert all(f"#  - {n}" in export.text for n in export.notes)


def test_torchtitan_toml():
    cfg = tomllib.loads(export_plan(TP_PP_VPP_SP, "torchtitan-0.2").text)
    par = cfg["parallelism"]
    assert (par["data_parallel_shard_degree"], par["data_parallel_replicate_degree"]) == (4, 1)
    assert (par["tensor_parallel_degree"], par["pipeline_parallel_degree"], par["context_parallel_degree"]) == (8, 4, 1)
    assert par["pipeline_parallel_schedule"] == "Interleaved1F1B" and par["pipeline_parallel_layers_per_stage"] == 4
    assert par["fsdp_reshard_after_forward"] == "never"  # ZeRO-1 has no exact torchtitan form
    # pipeline: the local batch is the pipeline's micro-batches of 1 sequence
    assert (cfg["training"]["local_batch_size"], cfg["training"]["global_batch_size"]) == (128, 512)
    assert cfg["training"]["seq_len"] == 4096 and cfg["training"]["mixed_precision_param"] == "bfloat16"
    # 10 of 20 layers per stage: every 2nd layer
    assert cfg["activation_checkpoint"] == {"mode": "selective", "selective_ac_option": "2"}

    fsdp = tomllib.loads(export_plan(FSDP, "torchtitan-0.2").text)
    assert fsdp["parallelism"]["data_parallel_shard_degree"] == 64
    assert fsdp["parallelism"]["fsdp_reshard_after_forward"] == "default"
    assert fsdp["training"]["local_batch_size"] == 2  # no pipeline: one micro-batch, accumulation up to global
    assert fsdp["activation_checkpoint"] == {"mode": "selective", "selective_ac_option": "op"}

    context = tomllib.loads(export_plan(CONTEXT, "torchtitan-0.2").text)
    assert context["parallelism"]["context_parallel_degree"] == 2
    assert context["activation_checkpoint"] == {"mode": "full"}  # all 80 layers of the single stage

    # Mixtral maps onto none of torchtitan 0.2.0's MoE models: refused, not exported to fail later
    with pytest.raises(InfeasiblePlan, match="torchtitan 0.2.0 has no model for the mixture of experts 'mixtral-8x7b'"):
        export_plan(_with(MOE, etp=1), "torchtitan-0.2")  # whole experts under EP, as torchtitan runs them
    # 0.2.0's whole experts take whole cp x tp blocks (parallel_dims.py _validate, lines 57-64): ep 2 inside tp 4
    # is refused with that rule, ep 8 over two tp blocks of 4 is exported (0.3.0 runs both)
    from tests.export_plans import PLANS

    inside_tp = PLANS["deepseek-v3 ep inside tp (etp 1)"]
    with pytest.raises(InfeasiblePlan, match=r"ep must be a multiple of cp\*tp = 4 and divide dp_shard\*cp\*tp = 64, got ep=2"):
        export_plan(inside_tp, "torchtitan-0.2")
    over_tp = PlanDocument(model=inside_tp.model, training=inside_tp.training, cluster=inside_tp.cluster,
                           parallel=inside_tp.parallel.replace(ep=8))
    assert tomllib.loads(export_plan(over_tp, "torchtitan-0.2").text)["parallelism"]["expert_parallel_degree"] == 8
    fp8 = tomllib.loads(export_plan(_doc(dtype="fp8", **TP_PP_VPP_SP.parallel.to_dict()), "torchtitan-0.2").text)
    assert fp8["model"]["converters"] == ["quantize.linear.float8"]
    assert fp8["quantize"]["linear"]["float8"] == {"enable_fsdp_float8_all_gather": False}
    # even stages: the embedding and the head weigh nothing, so pp*vpp stages of 4 layers
    assert (par["pipeline_parallel_first_stage_less_layers"], par["pipeline_parallel_last_stage_less_layers"]) == (0, 0)
    # llama-2-70b has the shape of torchtitan's "70B" (the vocabulary comes from the tokenizer)
    assert cfg["model"] == {"name": "llama3", "flavor": "70B"} and "experimental" not in cfg


def test_torchtitan_plain_ddp_only_without_model_parallelism():
    ddp = tomllib.loads(export_plan(_doc(num_gpus=8, gbs=8, dp=8, micro_batch_size=1), "torchtitan-0.2").text)
    assert (ddp["parallelism"]["data_parallel_replicate_degree"], ddp["parallelism"]["data_parallel_shard_degree"]) == (8, 1)
    # torchtitan 0.2.0's DDP is one-dimensional: zero 0 with tp is refused with the rule, not exported as FSDP.
    zero0_tp = _doc(num_gpus=16, gbs=8, dp=8, tp=2, micro_batch_size=1, sequence_parallel=True)
    with pytest.raises(InfeasiblePlan, match="torchtitan 0.2.0 runs plain data parallelism .* only without "
                                             "tp/pp/cp, got tp=2"):
        export_plan(zero0_tp, "torchtitan-0.2")
    # 0.3.0 shards every data-parallel layout with fully_shard: zero 0 is a replicate group of 8, shard 1
    assert "data_parallel_replicate_degree=8,\n        data_parallel_shard_degree=1," in \
        export_plan(zero0_tp, "torchtitan").text
    export = export_plan(_doc(num_gpus=16, gbs=8, dp=8, tp=2, micro_batch_size=1, sequence_parallel=True,
                              zero_stage=3), "torchtitan-0.2")
    assert tomllib.loads(export.text)["parallelism"]["data_parallel_shard_degree"] == 8


def test_torchtitan_03_config_module():
    export = export_plan(TP_PP_VPP_SP, "torchtitan")
    assert export.suffix == ".py" and export.text.startswith("# torchtitan 0.3.0 (Python config module)")
    compile(export.text, "autoplan_job.py", "exec")  # valid Python
    text = export.text
    # llama-2-70b has the blocks of torchtitan's 70B but a 32000-row vocabulary: the module builds it
    # (68.98B parameters; the 70B flavor would be 70.55B), on the 8B recipe's loss and optimizer
    assert "config.model_spec = _model_spec()" in text and "vocab_size = 8192, 32000" in text
    assert "model_registry" not in text
    for line in ("tensor_parallel_degree=8,", "pipeline_parallel_schedule='Interleaved1F1B',",
                 "pipeline_parallel_layers_per_stage=4,", "pipeline_parallel_first_stage_less_layers=0,",
                 "local_batch_size=128,", "global_batch_size=512,", "disable_cuda_graphs=True,",
                 "fsdp_reshard_after_forward='never',"):
        assert f"        {line}\n" in text, line
    # 10 of 20 layers per rank: 0.3.0 has no per-layer checkpointing, all 20 are, and the note says so
    assert "config.activation_checkpoint = FullAC.Config()" in text
    assert any("exported as all 20" in note for note in export.notes)
    # tensor parallelism without sequence parallelism is 0.3.0's enable_sequence_parallel=False
    no_sp = export_plan(_doc(num_gpus=16, gbs=8, dp=4, tp=4, micro_batch_size=2, zero_stage=3), "torchtitan").text
    assert "enable_sequence_parallel=False," in no_sp and "config.activation_checkpoint = None" in no_sp
    with pytest.raises(InfeasiblePlan, match="torchtitan 0.3.0 has no model for the mixture of experts"):
        export_plan(_with(MOE, etp=1), "torchtitan")


def test_torchtitan_03_flavor_only_for_its_whole_shape_and_the_plans_precision():
    from tests.export_plans import LLAMA3_405B, LLAMA3_8B, PLANS

    from dataclasses import replace
    llama3_70b = PlanDocument(model=replace(LLAMA2_70B, name="llama-3-70b", vocab_size=128256),
                              training=TP_PP_VPP_SP.training, cluster=TP_PP_VPP_SP.cluster,
                              parallel=TP_PP_VPP_SP.parallel)
    text = export_plan(llama3_70b, "torchtitan").text
    assert "config.model_spec = model_registry('70B')" in text and "_model_spec" not in text
    # a bf16 405B plan on llama3_405b(): no Float8Linear, compile or async TP from the recipe
    doc = PLANS["uneven 405b (first/last lighter)"]
    assert doc.model == LLAMA3_405B and doc.training.dtype == "bf16"
    export = export_plan(doc, "torchtitan")
    assert "config.model_spec = model_registry('405B')\n" in export.text and "Float8LinearConverter.Config" not in export.text
    assert "config.compile = CompileConfig(enable=False, enable_async_tensor_parallel=False)" in export.text
    assert any(note.startswith("llama3_405b() turns on Float8LinearConverter") for note in export.notes)
    fp8 = export_plan(PLANS["fp8 dense tp+pp"], "torchtitan").text
    assert PLANS["fp8 dense tp+pp"].model == LLAMA3_8B
    assert "model_registry('8B', converters=[Float8LinearConverter.Config(model_compile_enabled=False)])" in fp8


def test_deepspeed_json():
    with pytest.raises(InfeasiblePlan, match="framework deepspeed runs vpp <= 1, got vpp=5"):
        export_plan(TP_PP_VPP_SP, "deepspeed")  # the pipeline engine has no interleaved schedule
    cfg = json.loads(export_plan(_with(TP_PP_VPP_SP, vpp=1), "deepspeed").text)
    assert cfg["train_batch_size"] == 512 and cfg["train_micro_batch_size_per_gpu"] == 1
    assert cfg["gradient_accumulation_steps"] == 128
    # DeepSpeed's own check: train_batch_size = micro * accumulation * data-parallel size
    assert cfg["train_batch_size"] == cfg["train_micro_batch_size_per_gpu"] * cfg["gradient_accumulation_steps"] * 4
    assert cfg["zero_optimization"]["stage"] == 1 and cfg["bf16"] == {"enabled": True}
    assert cfg["activation_checkpointing"]["number_checkpoints"] == 10
    assert cfg["activation_checkpointing"]["partition_activations"] is True
    fsdp = json.loads(export_plan(FSDP, "deepspeed").text)
    assert fsdp["zero_optimization"]["stage"] == 3 and fsdp["gradient_accumulation_steps"] == 1
    assert "number_checkpoints" not in fsdp["activation_checkpointing"]
    fp16 = json.loads(export_plan(_doc(num_gpus=8, gbs=8, dtype="fp16", dp=8, micro_batch_size=1), "deepspeed").text)
    assert fp16["fp16"]["enabled"] is True and fp16["bf16"]["enabled"] is False
    assert "activation_checkpointing" not in fp16


def test_deepspeed_notes_pipeline_zero_limits_and_megatron_flags():
    with pytest.raises(InfeasiblePlan, match="framework deepspeed does not combine ZeRO stage 3 with pipeline "
                                             "parallelism .at most 1 with pp > 1., got pp=4"):
        export_plan(_with(TP_PP_VPP_SP, vpp=1, zero_stage=3), "deepspeed")
    notes = export_plan(_with(TP_PP_VPP_SP, vpp=1), "deepspeed").notes
    flags = next(n for n in notes if n.startswith("Megatron-DeepSpeed flags"))
    assert "--tensor-model-parallel-size 8" in flags and "--pipeline-model-parallel-size 4" in flags
    with pytest.raises(InfeasiblePlan, match="framework deepspeed runs cp <= 1, got cp=2"):
        export_plan(CONTEXT, "deepspeed")


def test_cli_exports_a_ranked_alternative(cli, tmp_path, capsys):
    # The alternative is ZeRO-3: at ZeRO-1 torchtitan's FSDP2 holds every local weight's gathered bf16
    # copy from forward to backward, and this 70B plan at tp 8 would not fit (82.7 GiB).
    doc = _with(FSDP)
    doc.alternatives = [{"parallel": ParallelPlan(dp=8, tp=8, zero_stage=3, micro_batch_size=2, num_microbatches=8,
                                                  sequence_parallel=True).to_dict(), "prediction": {}}]
    plan = tmp_path / "plan.json"
    doc.save(plan)
    assert cli(["export", str(plan), "--to", "torchtitan-0.2", "--alternative", "1"]) == 0
    cfg = tomllib.loads(capsys.readouterr().out)
    assert (cfg["parallelism"]["tensor_parallel_degree"], cfg["parallelism"]["data_parallel_shard_degree"]) == (8, 8)
    assert cli(["export", str(plan), "--to", "torchtitan-0.2", "--alternative", "2"]) == 2
    assert "holds 1 alternatives; choose 0 (the chosen plan) to 1" in capsys.readouterr().err


def test_an_alternative_that_does_not_fit_is_refused_unless_forced(cli, tmp_path, capsys):
    doc = _with(FSDP)
    # A whole prediction block, as search writes it (the plan-file validation checks every field).
    unfit = {"step_time_s": 1.0, "tokens_per_s": 1.0, "tokens_per_s_per_gpu": 1.0, "mfu": 0.5, "fits": False,
             "peak_memory_bytes": 96 * 2**30, "memory_capacity_bytes": 80 * 2**30,
             "time_breakdown_s": {"compute": 1.0}, "memory_breakdown_bytes": {"params": 96 * 2**30}}
    doc.alternatives = [{"parallel": _with(FSDP, micro_batch_size=1, num_microbatches=2).parallel.to_dict(),
                         "prediction": unfit}]
    plan = tmp_path / "plan.json"
    doc.save(plan)
    assert cli(["export", str(plan), "--to", "megatron", "--alternative", "1"]) == 2
    err = capsys.readouterr().err
    assert "--alternative 1 does not fit: predicted peak 96.0 GiB per GPU > 80.0 GiB" in err and "--force" in err
    assert cli(["export", str(plan), "--to", "megatron", "--alternative", "1", "--force"]) == 0
    captured = capsys.readouterr()
    assert "--micro-batch-size 1" in captured.out and "predicted NOT to fit" in captured.err


def test_bad_plans_and_targets_are_refused():
    with pytest.raises(AutoplanError, match="unknown export target 'nemo'"):
        export_plan(FSDP, "nemo")
    with pytest.raises(InfeasiblePlan, match="tp=3"):
        export_plan(_with(FSDP, tp=3), "megatron")


@pytest.fixture
def cli(monkeypatch):
    # Only this command: the CLI's error handling is exercised without the other subcommands.
    monkeypatch.setattr(cli_main, "COMMANDS", ["export"])
    return cli_main.main


def test_cli_writes_atomically_and_reports_notes(cli, tmp_path, capsys):
    plan = tmp_path / "plan.json"
    TP_PP_VPP_SP.save(plan)
    out = tmp_path / "train.toml"
    assert cli(["export", str(plan), "--to", "torchtitan-0.2", "-o", str(out)]) == 0
    assert tomllib.loads(out.read_text())["parallelism"]["tensor_parallel_degree"] == 8
    captured = capsys.readouterr()
    assert captured.out == "" and "torchtitan-0.2: zero_stage=1" in captured.err
    assert {p.name for p in tmp_path.iterdir()} == {"plan.json", "train.toml"}  # no temporary left behind


def test_cli_bad_input_is_one_line_exit_2(cli, tmp_path, capsys):
    plan = tmp_path / "plan.json"
    TP_PP_VPP_SP.save(plan)
    with pytest.raises(SystemExit) as exc:
        cli(["export", str(plan), "--to", "nemo"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "invalid choice: 'nemo'" in err
    not_a_plan = tmp_path / "runs.json"
    not_a_plan.write_text('{"schema": "autoplan.measurement/v1"}')
    out = tmp_path / "megatron.sh"
    assert cli(["export", str(not_a_plan), "--to", "megatron", "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "expected 'autoplan.plan/v2'" in err and not out.exists()


# Uneven pipelines: 126 layers over pp=8 -> [15, 16 x6, 15]; 80 over pp=32 -> unequal middle stages.
LLAMA3_405B = ModelSpec(name="llama-3-405b", num_layers=126, hidden_size=16384, num_heads=128, num_kv_heads=8,
                        ffn_hidden_size=53248, vocab_size=128256)
UNEVEN = _doc(model=LLAMA3_405B, num_gpus=512, gbs=256, dp=8, tp=8, pp=8, zero_stage=1, micro_batch_size=1,
              num_microbatches=32, sequence_parallel=True, recompute="full", recompute_num_layers=16)
UNEVEN_MIDDLE = _doc(num_gpus=256, gbs=64, dp=1, tp=8, pp=32, micro_batch_size=1, num_microbatches=64,
                     sequence_parallel=True, zero_stage=1)


def test_uneven_stages_map_onto_megatron_first_and_last_stage_flags():
    args = export_megatron_args(UNEVEN)
    assert args["--pipeline-model-parallel-size"] == "8" and args["--num-layers"] == "126"
    assert args["--decoder-first-pipeline-num-layers"] == "15" and args["--decoder-last-pipeline-num-layers"] == "15"
    # 3 layers over pp=2 -> [1, 2]: the first stage's count alone says it.
    three = ModelSpec(name="t", num_layers=3, hidden_size=1024, num_heads=8, num_kv_heads=8, ffn_hidden_size=4096,
                      vocab_size=32000)
    two = export_megatron_args(_doc(model=three, num_gpus=2, gbs=4, pp=2, micro_batch_size=1, num_microbatches=4))
    assert two["--decoder-first-pipeline-num-layers"] == "1" and "--decoder-last-pipeline-num-layers" not in two
    # 80 layers over 32 -> [2 x15, 3 x16, 2]: unequal middle stages, spelled out stage by stage.
    args = export_megatron_args(UNEVEN_MIDDLE)
    assert "--decoder-first-pipeline-num-layers" not in args
    assert args["--pipeline-model-parallel-layout"] == "Et*2|" + "t*2|" * 14 + "t*3|" * 16 + "t*2L"


def test_uneven_stages_in_torchtitan_and_deepspeed():
    par = tomllib.loads(export_plan(UNEVEN, "torchtitan-0.2").text)["parallelism"]
    assert par["pipeline_parallel_first_stage_less_layers"] == 1 and par["pipeline_parallel_last_stage_less_layers"] == 1
    assert par["pipeline_parallel_layers_per_stage"] == 16 and par["pipeline_parallel_schedule"] == "1F1B"
    export = export_plan(UNEVEN, "deepspeed")
    flags = next(n for n in export.notes if n.startswith("Megatron-DeepSpeed flags"))
    assert "--pp-partition-method" not in flags  # BigScience's fork only; Megatron-DeepSpeed has no such flag
    assert any("uneven pipeline stages (15, 16 x6, 15 layers per rank) do not map" in n for n in export.notes)
    assert any("uneven pipeline stages" in n and "do not map" in n for n in export_plan(UNEVEN_MIDDLE, "deepspeed").notes)

    # torchtitan lists the modules of every stage when its generated split differs from the plan's.
    middle = tomllib.loads(export_plan(UNEVEN_MIDDLE, "torchtitan-0.2").text)["parallelism"]
    parts = middle["module_fqns_per_model_part"]
    assert [len([m for m in part if m.startswith("layers.")]) for part in parts] == [2] * 15 + [3] * 16 + [2]
    assert parts[0][:2] == ["tok_embeddings", "layers.0"] and parts[-1][-3:] == ["layers.79", "norm", "output"]


def test_megatron_fsdp_takes_tied_embeddings_fp16_and_pipelines():
    """ZeRO-3 exports as Megatron-FSDP, which validate_args (core_v0.16.1 lines 671-690) does not
    restrict to untied embeddings, bf16 or pp = 1 as it does --use-torch-fsdp2 (lines 603-622)."""
    tied = ModelSpec(name="tied", num_layers=16, hidden_size=2048, num_heads=16, num_kv_heads=16,
                     ffn_hidden_size=5632, vocab_size=50304, tied_embeddings=True)
    for doc in (_doc(model=tied, num_gpus=8, gbs=16, dp=8, zero_stage=3, micro_batch_size=2, num_microbatches=1),
                _doc(num_gpus=64, gbs=128, dtype="fp16", dp=64, zero_stage=3, micro_batch_size=2, num_microbatches=1),
                _doc(num_gpus=64, gbs=128, dp=32, pp=2, zero_stage=3, micro_batch_size=1, num_microbatches=4)):
        text = export_plan(doc, "megatron").text
        assert "--use-megatron-fsdp" in text and megatron_accepts(text, doc.cluster.num_gpus) == ""
    fsdp = export_plan(FSDP, "megatron").text
    assert "export CUDA_DEVICE_MAX_CONNECTIONS=8" in fsdp
    assert "export CUDA_DEVICE_MAX_CONNECTIONS=1" in export_plan(TP_PP_VPP_SP, "megatron").text
    # The acceptance check itself refuses what validate_args refuses (a planted fault).
    assert "fsdp_dtensor" in megatron_accepts(fsdp.replace("fsdp_dtensor", "torch_dist"), 64)


# Llama 3.1 405B as NVIDIA's published fp8 runs interleave it: 126 layers, pp=8, vpp=8.
INTERLEAVED_126 = _with(UNEVEN, vpp=8)
# 28 layers at pp=4, vpp=2: ranks of 7 over 2 chunks, which no Megatron first/last flag expresses.
INTERLEAVED_28 = _doc(model=ModelSpec(name="t28", num_layers=28, hidden_size=1024, num_heads=8, num_kv_heads=8,
                                      ffn_hidden_size=4096, vocab_size=32000),
                      num_gpus=8, gbs=16, dp=2, pp=4, vpp=2, zero_stage=1, micro_batch_size=1, num_microbatches=8)


def _megatron_stages(args: dict, num_layers: int, pp: int) -> list:
    """Megatron-LM's layers per virtual stage for these flags, from its documented rules
    (transformer_config.py checks, transformer_block.py get_num_layers_to_build, and the layout
    grammar of pipeline_parallel_layer_layout.py parse_str_to_list), written here."""
    if "--pipeline-model-parallel-layout" in args:
        text = re.sub(r"\(([^)]+)\)\*(\d+)", lambda m: m.group(1) * int(m.group(2)), args["--pipeline-model-parallel-layout"])
        text = re.sub(r"(.)\*(\d+)", lambda m: m.group(1) * int(m.group(2)), text.replace(",", ""))
        stages = text.split("|")
        assert stages[0].startswith("E") and stages[-1].endswith("L") and text.count("E") == text.count("L") == 1
        return [stage.count("t") for stage in stages]
    vpp = int(args["--num-virtual-stages-per-pipeline-rank"])
    embedding = "--account-for-embedding-in-pipeline-split" in args
    loss = "--account-for-loss-in-pipeline-split" in args
    counted = num_layers + embedding + loss
    assert counted % pp == 0 and (counted // pp) % vpp == 0   # Megatron's checks
    stages = [counted // (pp * vpp)] * (pp * vpp)
    stages[0] -= embedding
    stages[-1] -= loss
    return stages


def test_uneven_interleaved_stages_map_onto_megatron():
    args = export_megatron_args(INTERLEAVED_126)
    # 126 + embedding + loss = 128 = 8 ranks x 8 chunks x 2 layers; the first and last chunks hold 1.
    assert args["--num-virtual-stages-per-pipeline-rank"] == "8"
    assert args["--account-for-embedding-in-pipeline-split"] is True and args["--account-for-loss-in-pipeline-split"] is True
    assert "--num-layers-per-virtual-pipeline-stage" not in args and "--decoder-first-pipeline-num-layers" not in args
    assert _megatron_stages(args, 126, 8) == INTERLEAVED_126.parallel.virtual_stage_num_layers(126) == [1] + [2] * 62 + [1]
    # 28 layers at pp=4, vpp=2: 7 per rank, chunks of 3 and 4: only the explicit layout says it.
    args = export_megatron_args(INTERLEAVED_28)
    assert args["--pipeline-model-parallel-layout"] == "Ettt|(ttt|)*2(tttt|)*4tttL"
    assert _megatron_stages(args, 28, 4) == INTERLEAVED_28.parallel.virtual_stage_num_layers(28) == [3, 3, 3, 4, 4, 4, 4, 3]
    assert any("Megatron-Core 0.13" in n for n in export_plan(INTERLEAVED_28, "megatron").notes)
    # 126 at pp=4, vpp=2 (ranks 31, 32, 32, 31): not the account-for split either -> the layout.
    odd = _with(UNEVEN, pp=4, dp=16, vpp=2, num_microbatches=16)
    args = export_megatron_args(odd)
    assert _megatron_stages(args, 126, 4) == odd.parallel.virtual_stage_num_layers(126)


def test_uneven_interleaved_stages_map_onto_torchtitan():
    par = tomllib.loads(export_plan(INTERLEAVED_126, "torchtitan-0.2").text)["parallelism"]
    # torchtitan's own generated split: (126 + 1 + 1) / 2 = 64 stages, the embedding and head one layer each.
    assert par["pipeline_parallel_schedule"] == "Interleaved1F1B" and par["pipeline_parallel_layers_per_stage"] == 2
    assert (par["pipeline_parallel_first_stage_less_layers"], par["pipeline_parallel_last_stage_less_layers"]) == (1, 1)
    parts = tomllib.loads(export_plan(INTERLEAVED_28, "torchtitan-0.2").text)["parallelism"]["module_fqns_per_model_part"]
    assert [sum(m.startswith("layers.") for m in part) for part in parts] == \
        INTERLEAVED_28.parallel.virtual_stage_num_layers(28)


TORCHTITAN_SHARED = {"autoplan.exporters.torchtitan.flavors", "autoplan.exporters.torchtitan.shared"}
"""What both torchtitan releases' exporters may import of their package: the common code, once."""


def torchtitan_borrowed(root) -> dict:
    """Release module -> the modules of autoplan.exporters.torchtitan it imports besides the shared
    ones (read with ast), for each release that imports any."""
    from tests.import_graph import Graph

    graph = Graph(root, ("autoplan",))
    package = "autoplan.exporters.torchtitan"
    found = {name: {edge.target for edge in graph.modules[name].edges
                    if edge.target.startswith(package + ".") and edge.target not in TORCHTITAN_SHARED}
             for name in (f"{package}.v02", f"{package}.v03")}
    return {name: targets for name, targets in found.items() if targets}


def test_torchtitan_releases_share_code_and_do_not_import_each_other(tmp_path):
    """One copy of the flavour tables, the training section, the ZeRO->FSDP degrees and the pipeline
    block (flavors.py, shared.py); neither release borrows from the other (0.3.0 once imported its
    flavour tables from the 0.2 exporter). The check is shown to fail on a copy that does."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    assert torchtitan_borrowed(root) == {}
    planted = tmp_path / "autoplan" / "exporters" / "torchtitan"
    planted.mkdir(parents=True)
    for name in ("__init__", "flavors", "shared", "v02"):
        (planted / f"{name}.py").write_text("")
    (planted / "v03.py").write_text("from autoplan.exporters.torchtitan.v02 import flavor\n")
    (tmp_path / "autoplan" / "__init__.py").write_text("")
    (tmp_path / "autoplan" / "exporters" / "__init__.py").write_text("")
    assert torchtitan_borrowed(tmp_path) == {"autoplan.exporters.torchtitan.v03": {"autoplan.exporters.torchtitan.v02"}}
