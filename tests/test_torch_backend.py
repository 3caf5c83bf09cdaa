"""The torch backend on CPU with gloo, in real processes.

Correctness: every parallel plan trains the same tiny model on the same global batch as a
single-process run and must reproduce its losses within LOSS_RTOL and its gradient norms (which,
unlike the loss under AdamW, see a wrong gradient scale) within the per-step tolerances of
`grad_norms_close`. fp32 throughout; the differences are summation order only (measured: at most
~1e-6 relative on the losses, which AdamW's first steps amplify in the gradient norms: see there).
Launches are few: one single-process reference launch and one 4-process launch that runs all the
parallel plans in sequence in the same workers.
"""
import json
from dataclasses import replace

import numpy as np
import pytest

from autoplan.cli.main import main
from autoplan.specs import (
    AutoplanError, ClusterSpec, ModelSpec, ParallelPlan, PlanDocument, TrainingSpec, read_measurements,
)
from executor import RunOptions
from executor.torch_backend import run_many
from executor.torch_backend.pipeline import build_stage, stage_indices, stage_layer_counts, stage_layer_ids

LOSS_RTOL = 1e-5
GRAD_NORM_RTOL = 1e-4
"""First step (identical weights, only the summation order differs): fp32's unit roundoff 6e-8 grows
like sqrt(n) over a reduction of n terms; the longest here (a gradient norm over ~1e5 parameters)
gives ~2e-5, so 1e-4 leaves a 5x margin and still fails a wrong gradient scale by orders of magnitude."""
GRAD_NORM_RTOL_AFTER_UPDATE = 1e-3
"""Later steps: AdamW's first update is lr * g / (|g| + eps), i.e. +-lr for every element, so an
element whose gradient is within rounding of zero moves by up to 2 * lr depending on the summation
order of its reduction, and the next gradient differs by more than rounding. Measured on an AMD EPYC
(2 cores): the two single-process references of a tiny StarCoder2, which differ by rounding only
(chunked vs whole-logit loss), differ by 2.4e-4 in the third step's norm, and its dp=2 tp=2 SP run by
1.3e-4 from the whole-logit one (Intel machines measured below 1e-4). 1e-3 is 4x the widest measured
spread; a wrong gradient scale still fails the first step."""
LLAMA = ModelSpec("tiny-llama", 4, 64, 4, 2, 128, 256, max_seq_len=64)
GPT = ModelSpec("tiny-gpt", 2, 64, 4, 4, 256, 256, mlp="gelu", norm="layernorm", position="learned",
                tied_embeddings=True, linear_bias=True, max_seq_len=64)
LLAMA5 = ModelSpec("tiny-llama-5", 5, 64, 4, 2, 128, 256, max_seq_len=64)  # 5 layers over pp=4: [1, 1, 2, 1]
BLOOM = ModelSpec("tiny-bloom", 2, 64, 4, 4, 256, 256, mlp="gelu", norm="layernorm", position="alibi",
                  linear_bias=True, max_seq_len=64)  # built with RoPE; LayerNorm and biases under TP+SP
MOE = ModelSpec("tiny-moe", 2, 32, 4, 2, 64, 256, num_experts=4, num_experts_per_token=2, max_seq_len=64)
# A shared expert beside the routed ones and a dense first layer (DeepSeekMoE's layout), for MoE under TP.
SHARED_MOE = replace(MOE, name="tiny-moe-shared", num_layers=3, shared_expert_ffn_size=32, num_dense_layers=1)
GLOBAL_BATCH, SEQ_LEN = 8, 32
# 16-token chunks: the fused head + loss runs over 2-16 chunks per micro-batch.
OPTIONS = RunOptions(steps=3, warmup_steps=1, lr=1e-2, warmup=0, grad_clip=1.0, out="", log_every=100,
                     loss_chunk_tokens=16, fsdp_one_replica_on_cpu=True)  # the GPU's code path at dp*cp = 1
CPU_SPEEDUPS = ("bf16-params", "chunked-loss", "native-gqa", "rope-compute-dtype")
"""The speed-ups that change what a CPU run executes (the others are CUDA only)."""

PARALLEL_PLANS = [  # (model, plan) on 4 processes; num_microbatches = 8 / (dp * micro_batch_size)
    (LLAMA, dict(dp=4, zero_stage=0, num_microbatches=2)),                       # DDP
    (LLAMA, dict(dp=4, zero_stage=1, num_microbatches=2)),                       # FSDP2, one reduce-scatter
    (LLAMA, dict(dp=4, zero_stage=2, num_microbatches=2)),
    (LLAMA, dict(dp=4, zero_stage=3, num_microbatches=2, recompute="selective")),
    (LLAMA, dict(dp=4, zero_stage=0, num_microbatches=2, recompute="full", recompute_num_layers=2)),
    (LLAMA, dict(dp=2, tp=2, num_microbatches=4)),                               # TP, grads all-reduced
    (LLAMA, dict(dp=2, tp=2, sequence_parallel=True, zero_stage=3, num_microbatches=4)),  # FSDP2 x TP+SP
    (LLAMA, dict(dp=2, pp=2, num_microbatches=4)),                               # 1F1B
    (LLAMA, dict(dp=2, pp=2, vpp=2, zero_stage=2, num_microbatches=4)),          # interleaved 1F1B
    (LLAMA, dict(tp=2, pp=2, sequence_parallel=True, num_microbatches=8)),
    (GPT, dict(dp=4, zero_stage=3, num_microbatches=2)),                         # tied embeddings, FSDP2
    (BLOOM, dict(dp=2, tp=2, sequence_parallel=True, num_microbatches=4)),
    (LLAMA, dict(cp=4, num_microbatches=8)),                                     # CP, DDP over cp ranks
    (LLAMA, dict(dp=2, cp=2, zero_stage=3, num_microbatches=4, recompute="selective")),
    (LLAMA, dict(cp=2, tp=2, sequence_parallel=True, num_microbatches=8)),
    (LLAMA, dict(cp=2, pp=2, num_microbatches=8)),
    (LLAMA5, dict(pp=4, num_microbatches=8, recompute="full", recompute_num_layers=2)),  # uneven stages
    (LLAMA5, dict(dp=2, pp=2, vpp=2, zero_stage=1, num_microbatches=4)),  # interleaved, chunks [1, 1] and [2, 1]
    (MOE, dict(dp=4, num_microbatches=2)),                                       # MoE, experts in DDP
    (MOE, dict(dp=4, ep=2, num_microbatches=2)),                  # all-to-all; DDP + expert all-reduce
    (MOE, dict(dp=4, ep=2, zero_stage=3, num_microbatches=2)),    # experts FSDP2 over their edp pair
    (MOE, dict(dp=2, cp=2, ep=4, zero_stage=1, num_microbatches=4, recompute="full", recompute_num_layers=1)),
    (MOE, dict(dp=2, tp=2, num_microbatches=4)),                  # experts split over tp, outputs all-reduced
    (MOE, dict(dp=2, tp=2, sequence_parallel=True, zero_stage=3, num_microbatches=4)),   # reduce-scattered
    (MOE, dict(dp=2, pp=2, num_microbatches=4)),                  # MoE pipeline stages
    (SHARED_MOE, dict(tp=2, pp=2, sequence_parallel=True, num_microbatches=8)),
    (MOE, dict(dp=2, tp=2, ep=2, sequence_parallel=True, zero_stage=3, num_microbatches=4)),  # ep x tp
    (SHARED_MOE, dict(dp=2, pp=2, ep=2, zero_stage=1, num_microbatches=4)),                 # ep x pp
    (LLAMA, dict(dp=4, zero_stage=3, zero_shard=2, num_microbatches=2)),         # HSDP: 2 shard groups of 2
    (LLAMA, dict(dp=2, cp=2, zero_stage=1, zero_shard=2, num_microbatches=4)),   # HSDP over dp x cp
]


def plan_doc(model, **parallel) -> PlanDocument:
    plan = ParallelPlan(**parallel)
    return PlanDocument(model=model, training=TrainingSpec(GLOBAL_BATCH, SEQ_LEN, "bf16"),
                        # An H100 plan run on the CPU (as the README's laptop tour runs one): every reader
                        # checks the profile a plan names, and no built-in profile is called "cpu".
                        cluster=ClusterSpec("h100-80gb", plan.num_gpus, gpus_per_node=8), parallel=plan)


def reference_runs(models) -> dict:
    """Single-process references with the chunked head + loss, which every plan runs (vocabulary-parallel
    under tp > 1), keyed by model name."""
    docs = [plan_doc(model, num_microbatches=8) for model in models]
    return {m.name: r for m, r in zip(models, run_many(docs, OPTIONS.replace(nproc=1)))}


def close_enough(measured, reference, rtol):
    return all(abs(m - r) <= rtol * abs(r) for m, r in zip(measured, reference)) and len(measured) == len(reference)


def grad_norms_close(measured, reference):
    """Per-step gradient norms: the first step within GRAD_NORM_RTOL, the steps after an AdamW update
    within GRAD_NORM_RTOL_AFTER_UPDATE (the reasons are at the two constants)."""
    return (len(measured) == len(reference) and close_enough(measured[:1], reference[:1], GRAD_NORM_RTOL)
            and close_enough(measured[1:], reference[1:], GRAD_NORM_RTOL_AFTER_UPDATE))


@pytest.mark.slow
def test_parallel_plans_reproduce_single_device_losses():
    models = [LLAMA, GPT, BLOOM, LLAMA5, MOE, SHARED_MOE]
    reference = references = reference_runs(models)
    # The executor before the speed-ups (fp32 weights without FSDP2, K/V repeated, fp32 RoPE, whole
    # logits) trains the same numbers as with them: they change how, not what, is computed.
    for model in (LLAMA, GPT):
        (before,) = run_many([plan_doc(model, num_microbatches=8)], OPTIONS.replace(nproc=1, without=CPU_SPEEDUPS))
        assert before.status == "ok" and close_enough(before.losses, reference[model.name].losses, LOSS_RTOL)
        assert grad_norms_close(before.extra["grad_norms"], reference[model.name].extra["grad_norms"])
    for ref in references.values():
        assert ref.status == "ok" and len(ref.losses) == 3
        # Training moves the loss by far more than the tolerance, so matching it means something.
        assert abs(ref.losses[2] - ref.losses[0]) > 100 * LOSS_RTOL * ref.losses[0], ref.losses
    records = run_many([plan_doc(model, **plan) for model, plan in PARALLEL_PLANS], OPTIONS.replace(nproc=4))
    mismatches = []
    for (model, plan), record in zip(PARALLEL_PLANS, records):
        ref = references[model.name]
        if record.status != "ok" or not close_enough(record.losses, ref.losses, LOSS_RTOL) or \
                not grad_norms_close(record.extra["grad_norms"], ref.extra["grad_norms"]):
            mismatches.append((model.name, plan, record.status, record.error, record.losses, ref.losses,
                               record.extra.get("grad_norms"), ref.extra["grad_norms"]))
        # Parity cannot tell sharding from replication: what rank 0 holds can. FSDP2 over the shard
        # group (every dp*cp rank, or zero_shard of them under HSDP) and TP over tp; the tiny
        # models' odd widths pad a little.
        parsed = ParallelPlan(**{"micro_batch_size": 1, **plan})
        if record.status == "ok" and parsed.zero_stage and parsed.ep == 1:
            held = record.extra["runtime"]["weights_held_fraction"]
            shards = parsed.tp * parsed.zero_shard_group
            if abs(held * shards - 1) > 0.1:
                mismatches.append((model.name, plan, f"rank 0 holds 1/{1 / held:.2f} of its weights, "
                                                     f"the plan shards them {shards} ways"))
    assert len(records) == len(PARALLEL_PLANS) and not mismatches, mismatches


def _cli(capsys, *argv):
    code = main(["run", *map(str, argv)])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.slow
def test_expert_parallelism_with_tp_and_pp_on_8_ranks():
    """Expert parallelism over replica groups of two (edp = 2: the experts' FSDP and gradient sums over
    edp are not trivial) combined with tp, SP and pp, on 8 processes: the single-process losses and
    gradient norms (the ep groups are per pipeline and tp rank: expert_parallel.build_expert_mesh)."""
    plans = [(MOE, dict(dp=4, tp=2, ep=2, sequence_parallel=True, zero_stage=3, num_microbatches=2)),
             (MOE, dict(dp=4, tp=2, ep=2, zero_stage=0, num_microbatches=2)),
             (SHARED_MOE, dict(dp=2, pp=2, tp=2, ep=2, sequence_parallel=True, num_microbatches=4))]
    references = reference_runs([MOE, SHARED_MOE])
    records = run_many([plan_doc(model, **plan) for model, plan in plans], OPTIONS.replace(nproc=8))
    mismatches = [(model.name, plan, r.status, r.error, r.losses) for (model, plan), r in zip(plans, records)
                  if r.status != "ok" or not close_enough(r.losses, references[model.name].losses, LOSS_RTOL)
                  or not grad_norms_close(r.extra["grad_norms"], references[model.name].extra["grad_norms"])]
    assert len(records) == len(plans) and not mismatches, mismatches


@pytest.mark.slow
def test_killed_and_resumed_run_continues_with_the_same_losses(tmp_path, capsys):
    plan = tmp_path / "plan.json"
    plan_doc(LLAMA, dp=2, pp=2, zero_stage=3, num_microbatches=4).save(plan)
    ckpt, full_out, resumed_out = tmp_path / "ckpt", tmp_path / "full.jsonl", tmp_path / "resumed.jsonl"
    common = ["--steps", 4, "--warmup-steps", 1, "--lr", "1e-2", "--checkpoint-dir", ckpt]
    code, out, _ = _cli(capsys, plan, *common, "--checkpoint-every", 2, "--out", full_out)
    assert code == 0, out
    assert sorted(p.name for p in ckpt.iterdir()) == ["step-000002", "step-000004"]
    # Simulate a kill after step 2 and during the save of step 4: the complete step-4 checkpoint
    # is gone and a half-written temporary folder is left; resume must use step 2.
    for f in (ckpt / "step-000004").iterdir():
        f.unlink()
    (ckpt / "step-000004").rmdir()
    (ckpt / ".tmp-step-000004").mkdir()
    (ckpt / ".tmp-step-000004" / "__0_0.distcp").write_bytes(b"half")
    code, out, _ = _cli(capsys, plan, *common, "--resume", "--warmup-steps", 0, "--out", resumed_out)
    assert code == 0, out
    (full,), _ = read_measurements(full_out)
    (resumed,), _ = read_measurements(resumed_out)
    assert resumed.extra["first_step"] == 2
    assert resumed.losses == full.losses[2:] and len(full.losses) == 4
    assert resumed.extra["grad_norms"] == full.extra["grad_norms"][2:]
    record = json.loads(full_out.read_text().splitlines()[0])
    for key in ("schema", "plan_id", "plan", "prediction", "backend", "status", "step_times_s", "losses",
                "peak_memory_bytes", "environment"):
        assert key in record
    assert record["status"] == "ok" and len(record["step_times_s"]) == 3 and record["peak_memory_bytes"] > 0
    assert record["environment"]["world_size"] == 4 and record["environment"]["torch"]

    # Trust boundary: --resume loads only a checkpoint whose manifest autoplan wrote, for this plan,
    # with its .metadata unchanged (DCP unpickles .metadata); each refusal happens before any process.
    step2 = ckpt / "step-000002"
    manifest = json.loads((step2 / "autoplan_manifest.json").read_text())
    assert manifest["plan_id"] == full.plan_id and manifest["step"] == 2 and len(manifest["metadata_sha256"]) == 64
    resume = [plan, *common, "--resume", "--out", tmp_path / "runs.jsonl"]
    metadata = (step2 / ".metadata").read_bytes()
    (step2 / ".metadata").write_bytes(metadata + b"\x00")
    assert "does not match the SHA-256" in _bad(tmp_path, capsys, *resume)
    (step2 / ".metadata").write_bytes(metadata)
    other = tmp_path / "other.json"
    plan_doc(LLAMA, dp=4, num_microbatches=2).save(other)
    assert "was written for plan" in _bad(tmp_path, capsys, other, *resume[1:])
    (step2 / "autoplan_manifest.json").unlink()
    err = _bad(tmp_path, capsys, *resume)
    assert "has no autoplan_manifest.json" in err and "a checkpoint is code" in err


@pytest.mark.slow
@pytest.mark.parametrize("layout", [
    dict(dp=4, ep=2, num_microbatches=2),  # DDP: each ep rank's experts plain tensors, alike on its edp pair
    dict(dp=2, tp=2, ep=2, sequence_parallel=True, zero_stage=3, num_microbatches=4),  # FSDP x TP DTensors
], ids=["ddp-ep2", "zero3-tp2-ep2"])
def test_expert_parallel_run_resumes_with_the_same_losses(tmp_path, capsys, layout):
    """Each ep rank keeps other experts under the same parameter names; a checkpoint that keyed them
    alike would keep one rank's experts for all, and the resumed losses would part from the run's."""
    plan = tmp_path / "plan.json"
    plan_doc(MOE, **layout).save(plan)
    ckpt, full_out, resumed_out = tmp_path / "ckpt", tmp_path / "full.jsonl", tmp_path / "resumed.jsonl"
    common = ["--steps", 4, "--warmup-steps", 0, "--lr", "1e-2", "--checkpoint-dir", ckpt]
    code, out, _ = _cli(capsys, plan, *common, "--checkpoint-every", 2, "--out", full_out)
    assert code == 0, out
    for f in (ckpt / "step-000004").iterdir():  # resume from step 2: two steps must match
        f.unlink()
    (ckpt / "step-000004").rmdir()
    code, out, err = _cli(capsys, plan, *common, "--resume", "--out", resumed_out)
    assert code == 0, out + err
    (full,), _ = read_measurements(full_out)
    (resumed,), _ = read_measurements(resumed_out)
    assert resumed.extra["first_step"] == 2 and len(full.losses) == 4
    assert resumed.losses == full.losses[2:]
    assert resumed.extra["grad_norms"] == full.extra["grad_norms"][2:]


@pytest.mark.slow
def test_failure_inside_the_run_is_recorded_as_data(tmp_path, capsys):
    plan, data, out_file = tmp_path / "plan.json", tmp_path / "tokens.bin", tmp_path / "runs.jsonl"
    plan_doc(LLAMA, num_microbatches=8).save(plan)
    np.full(1000, 300, dtype=np.uint16).tofile(data)  # token id 300 >= vocab 256: found while training
    code, out, _ = _cli(capsys, plan, "--steps", 3, "--data", data, "--out", out_file)
    (record,), problems = read_measurements(out_file)
    assert code == 1 and not problems
    assert record.status == "error" and "outside the model's vocab_size=256" in record.error
    assert "error" in out


def _bad(tmp_path, capsys, *argv):
    code, out, err = _cli(capsys, *argv)
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1, (code, out, err)
    assert not (tmp_path / "runs.jsonl").exists()  # nothing started, nothing recorded
    return err


def test_bad_input_is_one_line_exit_2_and_starts_nothing(tmp_path, capsys):
    out = tmp_path / "runs.jsonl"
    plan4 = tmp_path / "plan4.json"
    plan_doc(LLAMA, dp=4, num_microbatches=2).save(plan4)
    not_plan = tmp_path / "notplan.json"
    not_plan.write_text('{"schema": "autoplan.profile/v1"}')
    assert "expected 'autoplan.plan/v2'" in _bad(tmp_path, capsys, not_plan, "--out", out)
    big = tmp_path / "big.json"
    PlanDocument(model=LLAMA, training=TrainingSpec(128, SEQ_LEN), cluster=ClusterSpec("h100-80gb", 128),
                 parallel=ParallelPlan(dp=128, micro_batch_size=1, num_microbatches=1)).save(big)
    assert "is for 128 GPUs" in _bad(tmp_path, capsys, big, "--nproc", 4, "--out", out)
    assert "this run has 3 processes" in _bad(tmp_path, capsys, plan4, "--nproc", 3, "--out", out)
    assert "does not exist" in _bad(tmp_path, capsys, plan4, "--data", tmp_path / "none.bin", "--out", out)
    assert "unknown backend 'jax'" in _bad(tmp_path, capsys, plan4, "--backend", "jax", "--out", out)
    assert "no complete checkpoint" in _bad(tmp_path, capsys, plan4, "--resume", "--checkpoint-dir",
                                            tmp_path / "none", "--out", out)
    cp_learned = tmp_path / "cp.json"
    plan_doc(GPT, dp=2, cp=2, num_microbatches=4).save(cp_learned)
    assert "does not split learned position embeddings over the sequence, got cp=2" in _bad(tmp_path, capsys, cp_learned, "--out", out)
    tied_tp = tmp_path / "tied.json"
    plan_doc(GPT, dp=2, tp=2, num_microbatches=4).save(tied_tp)
    assert "runs tied embedding/head weights only with tp=1 and pp=1, got tp=2" in _bad(tmp_path, capsys, tied_tp, "--out", out)


@pytest.mark.parametrize("policy,expected_core_calls", [("none", 1), ("selective", 2), ("full", 2)])
def test_recompute_reruns_the_checkpointed_part_in_backward(policy, expected_core_calls):
    """The attention core's forward runs again during the backward when it is checkpointed
    (selective: the core itself; full: the whole first layer), and only then."""
    import torch

    from executor.model import build_model
    from executor.torch_backend.parallelize import apply_recompute

    model = build_model(LLAMA)
    apply_recompute(model, policy, 1 if policy == "full" else 0)
    model.to_empty(device="cpu")
    model.init_weights(0)
    calls = []
    core = model.layers["0"]
    core = getattr(core, "_checkpoint_wrapped_module", core).attention.core
    core = getattr(core, "_checkpoint_wrapped_module", core)
    # A pre-hook: recomputation stops early once it has what the backward needs (torch's
    # checkpoint early stop), so the recomputed forward may never reach a post-forward hook.
    core.register_forward_pre_hook(lambda *_: calls.append(1))
    model(torch.randint(0, 256, (2, 16))).sum().backward()
    assert len(calls) == expected_core_calls
    wrapped = [type(layer).__name__ == "CheckpointWrapper" for layer in model.layers.values()]
    assert wrapped == ([True, False, False, False] if policy == "full" else [False] * 4)


@pytest.mark.slow
def test_torchrun_entry_point_records_from_rank_0(tmp_path):
    """The cluster path: torchrun starts the ranks, `python -m executor` trains, rank 0 appends."""
    import os
    import subprocess
    import sys

    plan, out_file = tmp_path / "plan.json", tmp_path / "runs.jsonl"
    plan_doc(LLAMA, dp=2, zero_stage=2, num_microbatches=4).save(plan)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                           "-m", "executor", str(plan), "--steps", "3",
                           "--out", str(out_file)], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    (record,), problems = read_measurements(out_file)
    assert not problems and record.status == "ok" and len(record.losses) == 3
    assert record.environment["world_size"] == 2


def test_stages_follow_the_plans_uneven_split():
    counts = stage_layer_counts(ParallelPlan(pp=4), LLAMA5.num_layers)
    assert counts == [1, 1, 2, 1]
    assert [stage_layer_ids(counts, i) for i in range(4)] == [[0], [1], [2, 3], [4]]
    middle, last = build_stage(LLAMA5, 2, counts), build_stage(LLAMA5, 3, counts)
    assert list(middle.layers.keys()) == ["2", "3"] and middle.output is None and middle.tok_embeddings is None
    assert list(last.layers.keys()) == ["4"] and last.output is not None
    # Interleaving: rank 1 of pp=2, vpp=2 holds stages 1 and 3.
    counts = stage_layer_counts(ParallelPlan(pp=2, vpp=2), LLAMA.num_layers)
    assert [stage_layer_ids(counts, i) for i in stage_indices(1, 2, 2)] == [[1], [3]]
    # Uneven interleaving: 5 layers over 4 virtual stages; the last rank's first chunk takes the extra one.
    counts = stage_layer_counts(ParallelPlan(pp=2, vpp=2), LLAMA5.num_layers)
    assert counts == [1, 2, 1, 1]
    assert [stage_layer_ids(counts, i) for i in stage_indices(0, 2, 2)] == [[0], [3]]
    assert [stage_layer_ids(counts, i) for i in stage_indices(1, 2, 2)] == [[1, 2], [4]]
    assert build_stage(LLAMA5, 3, counts).output is not None and build_stage(LLAMA5, 2, counts).output is None


def test_searched_mixtral_plan_passes_the_torch_checks(monkeypatch):
    """What `autoplan search --model mixtral-8x7b --gpus 64` picks is accepted for 64 ranks, and so are
    expert parallelism with tp and with pipeline stages."""
    from autoplan.planning.planner import PlanRequest, plan_search
    from executor.torch_backend import check

    monkeypatch.setenv("WORLD_SIZE", "64")
    picked = plan_search(PlanRequest(model="mixtral-8x7b", num_gpus=64)).document
    check(picked, OPTIONS)
    for parallel in (dict(dp=32, tp=2, ep=8, sequence_parallel=True), dict(dp=32, pp=2, ep=8)):
        plan = ParallelPlan(**parallel, zero_stage=1, micro_batch_size=1, num_microbatches=32)
        check(PlanDocument(model=picked.model, training=picked.training, cluster=picked.cluster, parallel=plan),
              OPTIONS)


@pytest.mark.slow
def test_multi_plan_launch_survives_an_out_of_memory(monkeypatch, capsys):
    """A plan that runs out of memory is recorded with status "oom" and the plans after it still
    run: in the same process when it is alone (its model and optimizer freed first), in new
    processes when several ranks were running it (the others may be blocked in a collective).
    The OOM is a real torch.OutOfMemoryError raised inside the step (faults.py test hook)."""
    options = OPTIONS.replace(steps=2, warmup_steps=1)
    single = [plan_doc(LLAMA, micro_batch_size=8 // n, num_microbatches=n) for n in (8, 4, 2)]
    pair = [plan_doc(LLAMA, dp=2, zero_stage=z, num_microbatches=4) for z in (0, 3, 1)]
    monkeypatch.setenv("AUTOPLAN_TEST_INJECT_OOM", f"{single[1].plan_id}:1,{pair[1].plan_id}:1:1")
    first, oom, last = run_many(single, options.replace(nproc=1))
    assert [r.status for r in (first, oom, last)] == ["ok", "oom", "ok"]
    assert "simulated out-of-memory at step 1" in oom.error and oom.extra["memory_released"]
    assert last.extra["pid"] == first.extra["pid"] and len(last.losses) == 2  # the same process went on
    first, oom, last = run_many(pair, options.replace(nproc=2))
    assert [r.status for r in (first, oom, last)] == ["ok", "oom", "ok"], oom.error
    assert oom.extra["failed_rank"] == 1 and "blocked in a collective" in oom.extra["stopped_because"]
    assert last.extra["pid"] != first.extra["pid"] and len(last.losses) == 2  # new processes
    assert "starting new processes for the 1 plan(s) after it" in capsys.readouterr().err


@pytest.mark.slow
def test_compiled_blocks_train_like_eager_ones():
    """Per-block torch.compile (the CUDA default) under FSDP2's one-rank mixed precision and
    selective recompute: inductor's CPU backend gives the eager losses and gradient norms."""
    doc = plan_doc(LLAMA, num_microbatches=8, recompute="selective")
    (eager,) = run_many([doc], OPTIONS.replace(nproc=1))
    (compiled,) = run_many([doc], OPTIONS.replace(nproc=1, compile=True))
    assert compiled.status == "ok" and compiled.extra["runtime"]["compiled_blocks"], compiled.error
    assert not eager.extra["runtime"]["compiled_blocks"]
    assert eager.extra["runtime"]["fsdp"] and compiled.extra["runtime"]["fsdp"]  # fsdp_one_replica_on_cpu
    assert close_enough(compiled.losses, eager.losses, LOSS_RTOL)
    assert grad_norms_close(compiled.extra["grad_norms"], eager.extra["grad_norms"])
