"""The framework as an input: one GPU table, one MFU convention, each framework's rules applied by the
planner, the executor and the exporters alike (the layering is tests/test_layering.py's)."""
from __future__ import annotations

import json
import re

import pytest

from autoplan.cli.main import main
from autoplan.specs import (
    FRAMEWORK_NAMES, FRAMEWORKS, AutoplanError, ClusterSpec, InfeasiblePlan, ModelSpec, ParallelPlan, PlanDocument, TrainingSpec,
    get_framework,
)
from autoplan.specs.gpus import GPU_SHEETS, lookup_gpu

TINY_LLAMA = {"model_type": "llama", "num_hidden_layers": 4, "hidden_size": 64, "num_attention_heads": 4,
              "num_key_value_heads": 2, "intermediate_size": 128, "vocab_size": 256,
              "max_position_embeddings": 128}


# -- facts once -----------------------------------------------------------------------------------

def test_every_builtin_profile_and_the_executor_read_the_one_gpu_table():
    from cost_model.profiles import SPECS, builtin_profile
    from autoplan.specs.gpus import datasheet_peak_flops_per_s as peak_flops_per_s

    for name, spec in SPECS.items():
        profile = builtin_profile(name)
        sheet = lookup_gpu(profile.device_name) or lookup_gpu("NVIDIA H100 80GB HBM3")
        assert profile.peak_flops_per_s == sheet.peak_flops_per_s, name
        assert peak_flops_per_s(profile.device_name, "bf16") == profile.peak("bf16"), name
        assert "datasheet" in profile.sources
    for sheet in GPU_SHEETS:
        assert sheet.source and all(v > 0 for v in sheet.peak_flops_per_s.values())
        assert sheet.peak_flops_per_s["bf16"] == sheet.peak_flops_per_s["fp16"]


def test_predicted_and_measured_mfu_share_one_numerator():
    """Same plan, same tokens/s: the cost model's MFU and the run record's MFU are equal."""
    from cost_model import Estimator, builtin_profile
    from autoplan.specs.flops import mfu

    model = ModelSpec(name="m", num_layers=16, hidden_size=2048, num_heads=32, num_kv_heads=8,
                      ffn_hidden_size=8192, vocab_size=128256)
    training, cluster = TrainingSpec(global_batch_size=16, seq_len=2048), ClusterSpec("h100-80gb", 1, 1)
    est = Estimator(model, training, cluster, builtin_profile("h100-80gb")).estimate(
        ParallelPlan(micro_batch_size=4, num_microbatches=4))
    measured = mfu(model, training.seq_len, est.tokens_per_s, 1, 989.5e12)
    assert measured == pytest.approx(est.mfu, rel=1e-12)


# -- frameworks ------------------------------------------------------------------------------------

def test_every_published_run_passes_its_own_frameworks_rules():
    from cost_model.published_rows import load_published_runs

    runs = load_published_runs()
    assert len(runs) > 500
    # Rows of software without a built-in framework (nanotron, MaxText, Paxml) are validate's skipped rows.
    known = [run for run in runs if run.framework in FRAMEWORK_NAMES]
    assert len(known) > 400 and {r.framework for r in runs} - set(FRAMEWORK_NAMES) == {"nanotron", "maxtext", "paxml"}
    for run in known:
        # As the row ran: the built-in framework with the facts its source states (framework_then),
        # e.g. BloombergGPT's hybrid ZeRO-3 on SageMaker's stack, standing on DeepSpeed's entry.
        run.framework_facts().check(run.model, run.training, run.plan)


@pytest.mark.parametrize("name, plan, rule", [
    ("deepspeed", dict(dp=4, pp=2, zero_stage=2, num_microbatches=4), "ZeRO stage 2 with pipeline"),
    ("deepspeed", dict(dp=4, pp=2, vpp=2, zero_stage=1, num_microbatches=4), "vpp <= 1, got vpp=2"),
    ("autoplan", dict(dp=4, pp=2, num_microbatches=1, micro_batch_size=4), "at least as many micro-batches"),
    ("torchtitan", dict(dp=4, pp=2, zero_stage=1, num_microbatches=1, micro_batch_size=4),
     "at least as many micro-batches"),
    ("autoplan-xla", dict(dp=4, pp=2, num_microbatches=4), "pp <= 1, got pp=2"),
    ("llm-foundry", dict(dp=4, tp=2, zero_stage=3, num_microbatches=4), "tp <= 1, got tp=2"),
])
def test_each_framework_refuses_what_it_cannot_run_with_the_rule_and_numbers(name, plan, rule):
    model = ModelSpec(name="m", num_layers=8, hidden_size=256, num_heads=8, num_kv_heads=8, ffn_hidden_size=512,
                      vocab_size=1000)
    training = TrainingSpec(global_batch_size=16, seq_len=512)
    plan = ParallelPlan(**{"micro_batch_size": 1, **plan})
    plan.check(model, training, ClusterSpec("h100-80gb", plan.num_gpus))  # structurally valid
    with pytest.raises(InfeasiblePlan, match=rule) as info:
        get_framework(name).check(model, training, plan)
    assert info.value.reason.startswith("framework_") and f"framework {name}" in str(info.value)
    for other in FRAMEWORKS.values():  # the rule is this framework's, not a universal one
        if other.name in ("megatron-core",) and name != "megatron-core":
            other.check(model, training, plan.replace(sequence_parallel=plan.tp > 1))


def test_unknown_framework_is_one_line(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["search", "--model", "llama-2-7b", "--gpus", "8", "--framework", "jax"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unknown framework 'jax'; known: autoplan, autoplan-xla" in err


# -- the contract: what search plans for autoplan, the executor runs ------------------------------

def test_tiny_llama_search_for_autoplan_gives_a_plan_the_executor_accepts(tmp_path, capsys, monkeypatch):
    """The issue's case: tp=2 pp=2 on 4 GPUs with a global batch of 8. For `autoplan` the search keeps
    at least pp micro-batches (1F1B); for megatron-core it may choose one micro-batch, and says so."""
    from executor.options import RunOptions
    from executor.torch_backend import check

    config = tmp_path / "tiny.json"
    config.write_text(json.dumps(TINY_LLAMA))
    pins = ["--gpus", "4", "--global-batch", "8", "--seq-len", "64", "--tp", "2", "--pp", "2", "--dp", "1",
            "--cp", "1", "--gpu", "h100-80gb"]
    ours, theirs = tmp_path / "autoplan.json", tmp_path / "megatron.json"
    assert main(["search", "--model", str(config), *pins, "--framework", "autoplan", "-o", str(ours)]) == 0
    assert main(["search", "--model", str(config), *pins, "--framework", "megatron-core", "-o", str(theirs)]) == 0
    out = capsys.readouterr().out
    assert "framework autoplan:" in out and "framework megatron-core:" in out
    doc = PlanDocument.load(ours)
    assert doc.framework == "autoplan" and doc.parallel.num_microbatches >= doc.parallel.pp == 2
    monkeypatch.setenv("WORLD_SIZE", "4")
    check(doc, RunOptions(device="cpu", steps=4))  # the executor's own pre-launch checks
    megatron = PlanDocument.load(theirs)
    assert megatron.framework == "megatron-core"
    with pytest.raises(AutoplanError, match="made for framework 'megatron-core'; this backend runs plans made "
                                            "for 'autoplan'"):
        check(megatron, RunOptions(device="cpu", steps=4))


def test_estimate_rescores_a_plan_file_for_another_framework_side_by_side(tmp_path, capsys):
    plan = tmp_path / "plan.json"
    assert main(["estimate", "--model", "llama-2-7b", "--gpus", "8", "--tp", "2", "--pp", "1", "--zero", "1",
                 "--micro-batch", "1", "--global-batch", "64", "--seq-len", "4096", "-o", str(plan)]) == 0
    capsys.readouterr()
    again = tmp_path / "megatron.json"
    assert main(["estimate", str(plan), "--framework", "megatron-core", "--gpu", "a100-80gb", "-o", str(again)]) == 0
    out = capsys.readouterr().out
    assert "prediction: the plan file's and now" in out
    assert "plan file  autoplan" in out and "now        megatron-core" in out and "builtin:a100-80gb" in out
    old, new = PlanDocument.load(plan), PlanDocument.load(again)
    assert new.framework == "megatron-core" and new.cluster.name == "a100-80gb"
    assert new.prediction["step_time_s"] > old.prediction["step_time_s"]  # an A100 is slower
    # Model states are 18 B per parameter in both at zero 0 (fp32 weights + grads + moments + a bf16
    # copy, against bf16 weights + fp32 main grads, master and moments), but autoplan's unfused loss
    # keeps the fp32 gradient of the logits too.
    assert old.prediction["peak_memory_bytes"] > new.prediction["peak_memory_bytes"]


def test_export_of_a_plan_made_for_another_framework_rechecks_and_rescores(tmp_path, capsys):
    plan = tmp_path / "plan.json"
    assert main(["estimate", "--model", "llama-2-7b", "--gpus", "8", "--tp", "2", "--pp", "2", "--zero", "3",
                 "--micro-batch", "1", "--global-batch", "64", "--seq-len", "4096", "-o", str(plan)]) == 0
    capsys.readouterr()
    assert main(["export", str(plan), "--to", "deepspeed"]) == 2  # DeepSpeed's pipeline engine: ZeRO <= 1
    assert "framework deepspeed does not combine ZeRO stage 3 with pipeline" in capsys.readouterr().err
    assert main(["export", str(plan), "--to", "megatron"]) == 0  # Megatron-FSDP runs it
    assert "--use-megatron-fsdp" in capsys.readouterr().out
    assert main(["export", str(plan), "--to", "torchtitan-0.2"]) == 0  # tp without sp: 0.2.0 runs it with sp, noted
    assert "always shards the norms on the sequence" in capsys.readouterr().err
    capsys.readouterr()
    sp_plan = tmp_path / "sp.json"
    assert main(["estimate", "--model", "llama-2-7b", "--gpus", "8", "--tp", "2", "--pp", "2", "--zero", "1",
                 "--sequence-parallel", "--micro-batch", "1", "--global-batch", "64", "--seq-len", "4096",
                 "-o", str(sp_plan)]) == 0
    capsys.readouterr()
    assert main(["export", str(sp_plan), "--to", "megatron"]) == 0
    err = capsys.readouterr().err
    assert "plan made for autoplan, re-checked against megatron-core's rules: accepted" in err
    assert "step " in err and "GiB" in err


def test_analytical_and_calibrated_estimators_share_one_contract(tmp_path):
    from cost_model.learned.calibration import CalibratedEstimator
    from cost_model import Estimator, PlanEstimator, builtin_profile

    model = ModelSpec(name="m", num_layers=8, hidden_size=1024, num_heads=16, num_kv_heads=16,
                      ffn_hidden_size=4096, vocab_size=32000)
    training, cluster = TrainingSpec(global_batch_size=16, seq_len=2048), ClusterSpec("h100-80gb", 8)
    plan = ParallelPlan(dp=8, micro_batch_size=1, num_microbatches=2, zero_stage=1)
    analytical = Estimator(model, training, cluster, builtin_profile("h100-80gb"))
    calibrated = CalibratedEstimator(model, training, cluster, builtin_profile("h100-80gb"))
    for est in (analytical, calibrated):
        assert isinstance(est, PlanEstimator)
        assert est.framework.name == "autoplan"
    assert calibrated.memory(plan) == analytical.memory(plan)
    assert calibrated.min_full_recompute_layers(plan) == analytical.min_full_recompute_layers(plan) == 0
    assert calibrated.estimate(plan).step_time_s == analytical.estimate(plan).step_time_s  # no correction given


def test_model_features_a_framework_lacks_are_refused_first(capsys):
    """DeepSeek-V3's multi-head latent attention: Megatron-DeepSpeed has none, Megatron-Core and
    autoplan's executor (executor/blocks.py LatentAttention) have it."""
    from autoplan.inputs.catalog import catalog_model

    deepseek = catalog_model("deepseek-v3")
    plan = ParallelPlan(dp=8, ep=8, micro_batch_size=1, num_microbatches=8, zero_stage=1)
    training = TrainingSpec(global_batch_size=64, seq_len=4096)
    with pytest.raises(InfeasiblePlan, match="framework deepspeed has no multi-head latent attention") as info:
        get_framework("deepspeed").check(deepseek, training, plan)
    assert info.value.reason == "framework_mla"
    get_framework("megatron-core").check(deepseek, training, plan)
    get_framework("autoplan").check(deepseek, training, plan)
    assert main(["search", "--model", "deepseek-v3", "--gpus", "256", "--framework", "deepspeed"]) == 2
    assert "multi-head latent attention" in capsys.readouterr().err
    assert main(["search", "--model", "deepseek-v3", "--gpus", "256", "--json"]) == 0  # the default framework


def test_frameworks_command_lists_every_framework_and_one_with_sources(capsys):
    from autoplan.specs.frameworks import HISTORICAL_FRAMEWORKS

    assert main(["frameworks"]) == 0
    out = capsys.readouterr().out
    rows = [line.split()[0] for line in out.splitlines()[1:] if line[:2] == "  " and line[2:3].strip()]
    assert set(rows) == set(FRAMEWORKS) - set(HISTORICAL_FRAMEWORKS)  # issue 53: a commit hash is no framework
    assert "autoplan-91ee867 = autoplan as of 2026-11-21" in out and "--all" in out
    assert main(["frameworks", "--all"]) == 0
    out = capsys.readouterr().out
    assert all(name in out for name in FRAMEWORKS)
    assert main(["frameworks", "torchtitan"]) == 0
    out = capsys.readouterr().out
    assert "fitted on published runs" in out and "dp_comm_overlap" in out and "sources" in out


def test_a_record_names_the_framework_its_executor_ran():
    """Which executor a torch record ran follows its speed-up switches (autoplan.specs.compat)."""
    from types import SimpleNamespace

    from autoplan.specs.compat import record_framework
    from autoplan.specs.frameworks.autoplan import AUTOPLAN_SPEEDUPS
    from executor.options import SPEEDUPS

    assert set(AUTOPLAN_SPEEDUPS) <= set(SPEEDUPS)   # names the executor's --without accepts

    def record(backend="torch", **extra):   # what record_framework reads of a Measurement
        return SimpleNamespace(backend=backend, extra=extra)

    assert record_framework(record(options={"without": []}), "autoplan") == "autoplan"
    assert record_framework(record(options={"without": ["native-gqa"]}), "autoplan") == "autoplan"
    assert record_framework(record(options={"without": [*AUTOPLAN_SPEEDUPS, "expandable-segments"]}),
                            "autoplan") == "autoplan-91ee867"
    assert record_framework(record(options={"steps": 8}), "autoplan") == "autoplan-91ee867"  # before the switches
    assert record_framework(record(), "autoplan") == "autoplan-91ee867"
    assert record_framework(record(options={"steps": 8}), "megatron-core") == "megatron-core"
    assert record_framework(record("xla", options={"steps": 8}), "autoplan") == "autoplan"


def test_torchtitan_refuses_tied_embeddings_under_pipeline_parallelism():
    """torchtitan 0.3.0 models/common/decoder.py lines 139-142 raise 'Weight tying is not supported with
    Pipeline Parallel.' (the real torchtitan says so in tests/test_export_acceptance.py); tp alone is fine."""
    from tests.export_plans import PLANS

    doc = PLANS["gpt3 learned positions tp+pp"]
    assert doc.model.tied_embeddings and doc.parallel.pp == 8
    with pytest.raises(InfeasiblePlan, match="does not tie embedding and head weights across pipeline stages, "
                                             "got pp=8") as info:
        get_framework("torchtitan").check(doc.model, doc.training, doc.parallel)
    assert info.value.reason == "framework_tied_embeddings_pp"
    no_pp = doc.parallel.replace(pp=1, dp=128, num_microbatches=12)
    get_framework("torchtitan").check(doc.model, doc.training, no_pp)
    get_framework("megatron-core").check(doc.model, doc.training, doc.parallel)


def test_torchtitan_memory_counts_its_chunked_loss_not_whole_fp32_logits():
    """torchtitan 0.3.0's recipes and autoplan's export use ChunkedLossWrapper (8 chunks,
    components/loss.py line 610): Llama-3-8B at seq 8192 holds one chunk of logits at 10 B each plus the
    fp32 gradient of the hidden states, 1.35 GiB, where whole fp32 logits were 9.79 GiB of a 45.9 GiB peak."""
    from cost_model import Estimator, builtin_profile
    from cost_model.constants import load_constants
    from tests.export_plans import LLAMA3_8B

    training, cluster = TrainingSpec(global_batch_size=8, seq_len=8192), ClusterSpec("h100-80gb", 8)
    plan = ParallelPlan(dp=8, zero_stage=3, micro_batch_size=1, num_microbatches=1, recompute="selective")
    framework = load_constants().framework("torchtitan")
    assert framework.loss_chunks == 8 and "ChunkedLossWrapper" in framework.sources["loss_chunks"]
    memory = Estimator(LLAMA3_8B, training, cluster, builtin_profile("h100-80gb"),
                       framework=framework).estimate(plan).memory_breakdown_bytes
    chunk = 10 * 8192 * 128256 / 8
    assert memory["logits"] == pytest.approx(chunk + 4 * 8192 * 4096)
    # 34.3 GiB when selective AC was counted as keeping half of wqkv's output: SelectiveAC keeps all of it
    # (cost_model/memory.py ops_saved_elems), 2 B x 3072 elements x 8192 tokens x 32 layers = 1.5 GiB more
    assert sum(memory.values()) / 2 ** 30 == pytest.approx(34.3 + 2 * 3072 * 8192 * 32 / 2 ** 30, abs=0.1)
    unchunked = Estimator(LLAMA3_8B, training, cluster, builtin_profile("h100-80gb"),
                          framework=framework.with_overrides(loss_chunks=1)).estimate(plan).memory_breakdown_bytes
    assert unchunked["logits"] == pytest.approx(10 * 8192 * 128256)


WRITTEN = [
    # (framework, model, seq_len, GPUs, what else reads the plan): search writes a plan every reader takes
    ("torchtitan", "llama-3-70b", 32768, 64, [["export", "{plan}", "--to", "torchtitan", "-o", "{dir}/job.py"]]),
    ("megatron-core", "llama-3-70b", 32768, 64, [["export", "{plan}", "--to", "megatron", "-o", "{dir}/job.sh"]]),
    ("autoplan", "llama-3-8b", 4096, 8, [["run", "{plan}", "--print-launch", "torchrun"]]),
]
REFUSED = [
    # (framework, model, seq_len, GPUs): search refuses it up front, with the plan-file validation's sentence
    ("autoplan", "llama-3-70b", 32768, 64),
    ("torchtitan", "gpt3-175b", 4096, 64),
    ("megatron-core", "gpt3-175b", 4096, 64),
]


@pytest.mark.parametrize("framework,model,seq_len,gpus,readers", WRITTEN)
def test_whatever_search_writes_every_reader_takes(framework, model, seq_len, gpus, readers, tmp_path, capsys):
    """A plan past the model's context where the framework sizes RoPE for the run (torchtitan, Megatron),
    and a plain one for the executor: estimate, export and run read it without a word on stderr."""
    plan = tmp_path / "plan.json"
    assert main(["search", "--model", model, "--seq-len", str(seq_len), "--gpus", str(gpus), "--trials", "20",
                 "--framework", framework, "-o", str(plan)]) == 0
    capsys.readouterr()
    for command in [["estimate", str(plan)], *readers]:
        assert main([word.format(plan=plan, dir=tmp_path) for word in command]) == 0, command
        err = capsys.readouterr().err
        assert "error" not in err.lower() and "refuse" not in err.lower(), (command, err)


@pytest.mark.parametrize("framework,model,seq_len,gpus", REFUSED)
def test_search_refuses_up_front_what_the_plan_file_refuses(framework, model, seq_len, gpus, tmp_path, capsys):
    """The executor builds its position tables the model's length, and learned positions are the
    model's length everywhere: search refuses in one line, writing nothing, with the very sentence the
    plan-file validation gives a plan file of that problem (edited by hand)."""
    args = ["search", "--model", model, "--seq-len", str(seq_len), "--gpus", str(gpus), "--trials", "20",
            "--framework", framework, "-o", str(tmp_path / "refused.json")]
    assert main(args) == 2
    said = capsys.readouterr().err.strip()
    assert len(said.splitlines()) == 1 and not (tmp_path / "refused.json").exists()
    from autoplan.inputs.catalog import catalog_model
    from tests.export_plans import export_doc
    doc = export_doc(catalog_model(model), gpus, gpus, seq_len=seq_len, dp=gpus, zero_stage=1, micro_batch_size=1,
               num_microbatches=1)
    data = {**doc.to_dict(), "framework": framework}
    (tmp_path / "edited.json").write_text(json.dumps(data))
    with pytest.raises(AutoplanError) as refused:
        PlanDocument.load(tmp_path / "edited.json")
    sentence = str(refused.value).split("': ", 1)[1]  # after "plan file '<path>': "
    max_seq_len = catalog_model(model).max_seq_len
    assert sentence.startswith(f"training.seq_len must be at most the model's context model.max_seq_len="
                               f"{max_seq_len} (") and sentence.endswith(f"for framework {framework}, got {seq_len}")
    assert sentence in said, (sentence, said)
