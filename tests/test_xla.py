"""The xla backend: real torch_xla SPMD on 8 virtual CPU devices against the eager single-device run.

One `autoplan run --backend xla` with seven plans (one worker process, one runtime start) covers DP,
ZeRO-1/2/3, TP, TP+SP, a DP x TP mesh, context parallelism as a sequence split, selective and full
recompute, gradient accumulation, and a GPT-style model with tied embeddings. Each plan's losses and gradient norms must match the same loop
run eagerly on one CPU device with no sharding, within LOSS_TOL / GRAD_NORM_RTOL; the parameter,
moment and gradient layouts XLA reports must be the ones the plan asks for.
"""
import re

import pytest

from autoplan.cli import main as cli_main
from autoplan.specs import AutoplanError, ClusterSpec, ModelSpec, ParallelPlan, PlanDocument, TrainingSpec, read_measurements
from executor.model import build_model
from executor.options import RunOptions
from executor.record import run_extra
from executor.xla_backend import AXES, activation_specs, check, param_spec
from executor.xla_backend.compiled import CompiledStep
from executor.xla_backend.train import Placement, make_optimizer, microbatch_rows, train

LOSS_TOL = 1e-4
"""Absolute, on losses near ln(64) = 4.16: fp32 with the same math, only the summation order of the
sharded matmuls and reductions differs (measured: at most 5e-7)."""
GRAD_NORM_RTOL = 1e-4

GQA = ModelSpec(name="tiny-gqa", num_layers=2, hidden_size=32, num_heads=8, num_kv_heads=4, ffn_hidden_size=64,
                vocab_size=64, max_seq_len=64)
MHA = ModelSpec(name="tiny-mha", num_layers=2, hidden_size=32, num_heads=8, num_kv_heads=8, ffn_hidden_size=64,
                vocab_size=64, max_seq_len=64)
GPT = ModelSpec(name="tiny-gpt", num_layers=2, hidden_size=32, num_heads=4, num_kv_heads=4, ffn_hidden_size=64,
                vocab_size=64, mlp="gelu", norm="layernorm", position="learned", linear_bias=True,
                tied_embeddings=True, max_seq_len=32)
OPTIONS = RunOptions(steps=3, warmup_steps=1, out="", backend="xla")


def _doc(model=GQA, num_gpus=8, **parallel) -> PlanDocument:
    return PlanDocument(model=model, training=TrainingSpec(global_batch_size=8, seq_len=16, dtype="fp32"),
                        # An H100 plan run on CPU devices: every reader checks the profile a plan names.
                        cluster=ClusterSpec(name="h100-80gb", num_gpus=num_gpus), parallel=ParallelPlan(**parallel))


# name -> (plan, expected tiling of layers.0.attention.wq.weight {param, exp_avg, grad}; recomputed modules)
PLANS = {
    "dp8-zero1": (_doc(dp=8, zero_stage=1), {"param": [], "exp_avg": [1, 8], "grad": [1, 8]}, []),
    "dp8-zero3-fsdp-full": (_doc(dp=8, zero_stage=3, recompute="full", recompute_num_layers=1),
                            {"param": [1, 8], "exp_avg": [1, 8], "grad": [1, 8]}, ["layers.0"]),
    "tp8-accumulate": (_doc(MHA, tp=8, micro_batch_size=4, num_microbatches=2),
                       {"param": [8, 1], "exp_avg": [8, 1]}, []),
    "dp4xtp2-zero2-selective": (_doc(dp=4, tp=2, zero_stage=2, num_microbatches=2, recompute="selective"),
                                {"param": [2, 1], "exp_avg": [2, 4], "grad": [2, 4]},
                                ["layers.0.attention.core", "layers.1.attention.core"]),
    "dp2xtp4-sp-zero3": (_doc(dp=2, tp=4, sequence_parallel=True, zero_stage=3, micro_batch_size=4),
                         {"param": [4, 2], "exp_avg": [4, 2]}, []),
    "dp2xcp2xtp2-sp": (_doc(dp=2, cp=2, tp=2, sequence_parallel=True, micro_batch_size=4),
                       {"param": [2, 1], "exp_avg": [2, 1]}, []),
    # GPT-style: LayerNorm, GeLU, biases, learned positions, and the head tied to a vocab-parallel
    # embedding (one parameter, one spec), which the torch backend refuses with tp > 1.
    "gpt-dp2xtp4-sp-zero1": (_doc(GPT, dp=2, tp=4, sequence_parallel=True, zero_stage=1, micro_batch_size=4),
                             {"param": [4, 1], "exp_avg": [4, 2]}, []),
}


def _tiles(sharding: str) -> list:
    """Tile counts per tensor dimension from an XLA sharding string; [] when not split at all."""
    match = re.search(r"devices=\[([\d,]+)\]", sharding)
    tiles = [int(t) for t in match.group(1).split(",")] if match else []
    if "last_tile_dim_replicate" in sharding:
        tiles = tiles[:-1]  # the last entry counts replicas, not a tensor dimension
    return [] if all(t == 1 for t in tiles) else tiles


def _reference(doc: PlanDocument, options: RunOptions):
    """The same loop, eagerly on one CPU device, nothing sharded."""
    model = build_model(doc.model, "cpu")
    model.init_weights(options.seed)
    return train(model, make_optimizer(model, options), doc, options, Placement())


@pytest.fixture
def cli(monkeypatch):
    monkeypatch.setattr(cli_main, "COMMANDS", ["run"])
    return cli_main.main


@pytest.mark.slow
def test_spmd_plans_match_the_single_device_run(cli, tmp_path, capfd, monkeypatch):
    # The worker inherits this: LLVM's optimization level only changes how fast the CPU code is, and
    # it cut XLA's compile time for the first six plans about fourfold (measured 126 s -> 33 s).
    monkeypatch.setenv("XLA_FLAGS", "--xla_backend_optimization_level=0")
    paths = []
    for name, (doc, _, _) in PLANS.items():
        paths.append(str(tmp_path / f"{name}.json"))
        doc.save(paths[-1])
    out = tmp_path / "runs.jsonl"
    assert cli(["run", *paths, "--backend", "xla", "--steps", "3", "--warmup-steps", "1", "--out", str(out)]) == 0
    records, problems = read_measurements(out)
    assert not problems and len(records) == len(PLANS)
    out = capfd.readouterr().out  # capfd: the worker process prints its step lines straight to the terminal
    assert out.count("[xla]: ok") == len(PLANS)
    assert len([_step_fields(line) for line in out.splitlines() if "] step " in line]) == 3 * len(PLANS)
    for (name, (doc, layout, recomputed)), record in zip(PLANS.items(), records):
        assert record.plan_id == doc.plan_id and record.backend == "xla" and record.status == "ok", name
        reference = _reference(doc, OPTIONS)
        assert reference.losses[0] != reference.losses[-1]  # it trains: a frozen model would match trivially
        assert record.losses == pytest.approx(reference.losses, abs=LOSS_TOL), name
        assert record.extra["grad_norms"] == pytest.approx(reference.grad_norms, rel=GRAD_NORM_RTOL), name
        assert set(run_extra(OPTIONS, [], [], 0, "", [])) <= set(record.extra), name  # the torch backend's too
        assert len(record.step_times_s) == 2 and all(t > 0 for t in record.step_times_s)
        assert record.extra["mesh"] == {"axes": list(AXES), "shape": [doc.parallel.dp, doc.parallel.cp, doc.parallel.tp]}
        for what, tiles in layout.items():
            assert _tiles(record.extra["wq_layout"][what]) == tiles, (name, what, record.extra["wq_layout"][what])
        assert record.extra["recomputed_modules"] == recomputed, name
        # one device's compiled step, far below the whole process (8 devices, Python, torch)
        assert record.extra["peak_memory_kind"] == "xla_compiled_bytes_per_device", name
        assert 0 < record.peak_memory_bytes < record.extra["cpu_rss_high_water_bytes"] / 8, name
        # the process's growth over itself before the model, as the torch backend records it on a CPU
        assert 0 < record.extra["cpu_rss_growth_bytes"] < record.extra["cpu_rss_high_water_bytes"], name
    # Full recompute of one block re-runs its forward matmuls in the backward pass: q, k, v, QK^T,
    # AV, wo, w1, w3 (w2's output is not needed there): 8 more than the same model without it.
    by_name = dict(zip(PLANS, records))
    assert by_name["dp8-zero3-fsdp-full"].extra["num_matmuls_in_step"] == \
        by_name["dp8-zero1"].extra["num_matmuls_in_step"] + 8
    # The tied head stays one parameter on the device (Module.to() would have split it in two).
    assert "output.weight" not in records[-1].extra["param_sharding"]
    tp8 = records[2].extra["param_sharding"]
    # Megatron layout over 8 devices: column-parallel on the output dim, row-parallel on the input dim,
    # vocab-parallel embedding and head, replicated norms.
    assert _tiles(tp8["layers.0.attention.wo.weight"]) == [1, 8]
    assert _tiles(tp8["layers.0.feed_forward.w1.weight"]) == [8, 1]
    assert _tiles(tp8["layers.0.feed_forward.w2.weight"]) == [1, 8]
    assert _tiles(tp8["tok_embeddings.weight"]) == [8, 1] and _tiles(tp8["output.weight"]) == [8, 1]
    assert _tiles(tp8["norm.weight"]) == []


@pytest.mark.slow
def test_the_loop_trains_like_the_torch_backend(capsys):
    """The reference loop above is this backend's own code; one torch.distributed process (H4's
    backend, its own loop) must train the same plan to the same numbers."""
    from executor import torch_backend

    doc = _doc(num_gpus=1, dp=1, micro_batch_size=4, num_microbatches=2)
    record = torch_backend.run(doc, OPTIONS.replace(backend="torch"))
    reference = _reference(doc, OPTIONS)
    assert record.status == "ok"
    assert record.losses == pytest.approx(reference.losses, abs=LOSS_TOL)
    assert record.extra["grad_norms"] == pytest.approx(reference.grad_norms, rel=GRAD_NORM_RTOL)
    assert record.extra["learning_rates"] == pytest.approx(reference.learning_rates, rel=1e-12)
    assert set(run_extra(OPTIONS, [], [], 0, "", [])) <= set(record.extra)  # the fields both backends record
    # one log line format for both backends (issue 14): the torch run's lines parse like this loop's
    torch_lines = [line for line in capsys.readouterr().out.splitlines() if "] step " in line]
    assert [_step_fields(line)["step"] for line in torch_lines] == ["1/3", "2/3", "3/3"], torch_lines


STEP_LINE = re.compile(r"^\[autoplan run\] step (?P<step>\d+/\d+) loss (?P<loss>[\d.]+) grad_norm (?P<grad_norm>[\d.]+) "
                       r"lr (?P<lr>[\d.]+e[+-]\d+) step_time_s (?P<step_time_s>[\d.]+) "
                       r"tokens_per_s (?P<tokens_per_s>[\d,]+) mfu (?P<mfu>n/a|[\d.]+%)$")


def _step_fields(line: str) -> dict:
    match = STEP_LINE.match(line)
    assert match, f"not the step line format of executor.record.step_line: {line!r}"
    return match.groupdict()


def test_the_loop_logs_the_step_line_both_backends_print():
    """The XLA loop's progress line is executor.record.step_line's, figures as the record holds them."""
    doc = _doc(num_gpus=1, dp=1, micro_batch_size=4, num_microbatches=2)
    model = build_model(doc.model, "cpu")
    model.init_weights(OPTIONS.seed)
    lines = []
    result = train(model, make_optimizer(model, OPTIONS), doc, OPTIONS, Placement(), log=lines.append)
    fields = [_step_fields(line) for line in lines]
    assert [f["step"] for f in fields] == ["1/3", "2/3", "3/3"]
    for f, loss, norm, lr, t in zip(fields, result.losses, result.grad_norms, result.learning_rates,
                                    result.step_times_s):
        assert f["loss"] == f"{loss:.4f}" and f["grad_norm"] == f"{norm:.4f}" and float(f["lr"]) == pytest.approx(lr, rel=1e-2)
        assert f["step_time_s"] == f"{t:.3f}" and f["mfu"] == "n/a"
        assert int(f["tokens_per_s"].replace(",", "")) == pytest.approx(doc.training.tokens_per_step / t, abs=1)


def test_pp_and_other_unsupported_input_is_refused_before_anything_starts(cli, tmp_path, capsys, monkeypatch):
    pp = _doc(num_gpus=8, dp=4, pp=2, micro_batch_size=1, num_microbatches=2)
    with pytest.raises(AutoplanError, match=r"pp=2.*--backend torch"):
        check(pp, OPTIONS)
    plan = tmp_path / "pp.json"
    pp.save(plan)
    assert cli(["run", str(plan), "--backend", "xla", "--out", str(tmp_path / "runs.jsonl")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "pp=2" in err and "--backend torch" in err
    assert not (tmp_path / "runs.jsonl").exists()
    with pytest.raises(AutoplanError, match="--device cuda.*--backend torch"):
        check(_doc(dp=8), OPTIONS.replace(device="cuda"))
    with pytest.raises(AutoplanError, match="does not exist"):
        check(_doc(dp=8), OPTIONS.replace(data=str(tmp_path / "missing.bin")))
    with pytest.raises(AutoplanError, match="--nproc 4"):
        check(_doc(dp=8), OPTIONS.replace(nproc=4))
    with pytest.raises(AutoplanError, match="checkpoint"):
        check(_doc(dp=8), OPTIONS.replace(checkpoint_dir=str(tmp_path), checkpoint_every=1))
    moe = ModelSpec(name="moe", num_layers=2, hidden_size=32, num_heads=8, num_kv_heads=8, ffn_hidden_size=64,
                    vocab_size=64, num_experts=4, num_experts_per_token=2)
    with pytest.raises(AutoplanError, match="mixture of experts"):
        check(_doc(moe, dp=8), OPTIONS)


@pytest.mark.parametrize("model", [GQA, ModelSpec(
    name="gpt-like", num_layers=2, hidden_size=32, num_heads=4, num_kv_heads=4, ffn_hidden_size=64, vocab_size=64,
    mlp="gelu", norm="layernorm", position="learned", linear_bias=True, tied_embeddings=True, max_seq_len=32)])
def test_every_parameter_has_a_megatron_spec(model):
    for name, param in build_model(model, "meta").named_parameters():
        spec = param_spec(name, "dp")
        assert len(spec) == param.dim(), name
        assert spec.count("tp") <= 1 and spec.count("dp") <= 1, name
    assert param_spec("layers.7.attention.wq.weight", None) == ("tp", None)   # column: output dim
    assert param_spec("layers.7.attention.wo.weight", None) == (None, "tp")   # row: input dim
    assert param_spec("layers.7.feed_forward.w2.weight", "dp") == ("dp", "tp")
    assert param_spec("layers.0._checkpoint_wrapped_module.ffn_norm.weight", "dp") == ("dp",)
    with pytest.raises(KeyError, match="router"):
        param_spec("layers.0.feed_forward.router.weight", None)


def test_compiled_step_reads_only_the_new_programs(tmp_path):
    def report(name: str, total: int) -> None:
        (tmp_path / f"{name}.cpu_after_optimizations-memory-usage-report.txt").write_text(
            f"Total bytes used: {total} ({total / 1024:.1f}KiB)\n\nAllocations sorted by size:\n")

    report("module_0000.SyncTensorsGraph.254", 4096)
    memory = CompiledStep(str(tmp_path))
    memory.start()
    assert memory.program_bytes_per_device() is None  # nothing compiled since start()
    report("module_0001.SyncTensorsGraph.254", 1024)      # materialization of weights and moments
    report("module_0002.SyncTensorsGraph.2564", 394522)   # the training step
    (tmp_path / "module_0002.SyncTensorsGraph.2564.cpu_after_optimizations.txt").write_text(
        "  dot.1 = f32[128,32]{1,0} dot(f32[128,32]{1,0} p0, f32[32,32]{1,0} p1)\n"
        "  add.2 = f32[128,32]{1,0} add(dot.1, dot.1)\n"
        "  %dot.3 = f32[8,16,16]{2,1,0} dot(f32[8,16,4]{2,1,0} %q, f32[8,16,4]{2,1,0} %k)\n")
    assert memory.program_bytes_per_device() == 394522
    assert memory.program_num_matmuls() == 2
    assert CompiledStep(None).program_bytes_per_device() is None


def test_activation_specs_split_sequence_over_tp_only_under_sp():
    assert activation_specs(False)["residual"] == ("dp", "cp", None)
    assert activation_specs(True)["residual"] == ("dp", ("cp", "tp"), None)
    assert activation_specs(True)["column"] == ("dp", "cp", "tp")


def test_microbatches_give_each_dp_rank_its_own_rows():
    doc = _doc(num_gpus=2, dp=2, micro_batch_size=2, num_microbatches=2)
    rows = microbatch_rows(doc)
    # rank 0 owns sequences 0-3, rank 1 owns 4-7; micro-batch j takes each rank's j-th pair
    assert [r.tolist() for r in rows] == [[0, 1, 4, 5], [2, 3, 6, 7]]
