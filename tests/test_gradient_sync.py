"""FSDP's gradient sync between micro-batches, and the TP layout of the embedding and the loss, from
worked examples: what a framework that reduces once per step (KempnerForge: FSDP2 with
set_requires_gradient_sync(False) on all but the last micro-batch) sends, copies and holds, against
one that reduce-scatters every micro-batch (torchtitan)."""
import pytest

from autoplan.inputs.catalog import resolve_model
from autoplan.specs import ClusterSpec, ParallelPlan, TrainingSpec
from cost_model import Estimator, load_constants
from cost_model.profiles import builtin_profile
from cost_model.published_rows import load_published_runs
from cost_model.tables import ProfileTables

LLAMA3_8B_PARAMS = 8_030_261_248     # Llama-3-8B: 32 layers of h 4096, ffn 14336, GQA 8 of 32 heads, vocab 128256
LLAMA3_8B_EMBEDDING = 128256 * 4096


def _estimate(plan, **facts):
    framework = load_constants().framework("torchtitan").with_overrides(loss_chunks=1, **facts)
    training = TrainingSpec(global_batch_size=64, seq_len=4096, dtype="bf16")
    cluster = ClusterSpec(name="h100-80gb", num_gpus=8, gpus_per_node=8, profile="builtin:h100-80gb")
    est = Estimator(resolve_model("llama-3-8b"), training, cluster, builtin_profile("h100-80gb"), framework=framework)
    return est, est.estimate(plan)


FSDP8 = ParallelPlan(dp=8, micro_batch_size=1, num_microbatches=8, zero_stage=3)


def test_reducing_once_per_step_sends_fewer_bytes_and_pays_the_fp32_accumulation():
    # Llama-3-8B, FSDP over dp=8, 8 micro-batches of 1. Every micro-batch gathers the weights for
    # forward and again for backward (16 gathers of 2 B per parameter). torchtitan reduce-scatters
    # each micro-batch's gradients in fp32: 8 x 4 B; with sync off until the last micro-batch one
    # reduce-scatter of the fp32 accumulator: 1 x 4 B. On the wire: 32 + 32 = 64 against 32 + 4 = 36 B.
    _, every = _estimate(FSDP8)
    _, once = _estimate(FSDP8, zero3_reduce_every_microbatch=False)
    assert every.details["dp_bytes_per_step"] == pytest.approx(64 * LLAMA3_8B_PARAMS, rel=1e-9)
    assert once.details["dp_bytes_per_step"] == pytest.approx(36 * LLAMA3_8B_PARAMS, rel=1e-9)
    # Copies on the compute stream, per parameter: 16 gathers x 4 B (split_with_sizes_copy) + 1 x 6 B
    # (chunk_cat of bf16 gradients into the fp32 input) + the accumulation: the first micro-batch
    # casts its bf16 gradient to fp32 (2 + 4), each of the 7 others adds into it (2 + 4 read, 4 write).
    copy_bytes = (16 * 4 + 6 + (2 + 4) + 7 * (2 + 4 + 4)) * LLAMA3_8B_PARAMS
    tables = ProfileTables(builtin_profile("h100-80gb"))
    op_bytes = copy_bytes / (32 * 17)              # a layer's share of one of 16 + 1 rounds
    assert once.time_breakdown_s["sharded_copies"] == pytest.approx(
        copy_bytes / tables.memory_bytes_per_s(int(op_bytes)), rel=1e-9)


def test_reducing_once_per_step_holds_every_unsharded_gradient_in_fp32_instead_of_the_sharded_ones():
    # torch 2.9 FSDP2 keeps the unsharded gradient of every parameter, cast to the reduce dtype (fp32),
    # from the first backward on; the sharded fp32 gradients (4 B / 8 ranks) replace them only layer
    # by layer in the last backward, so they are not held besides.
    _, every = _estimate(FSDP8)
    _, once = _estimate(FSDP8, zero3_reduce_every_microbatch=False)
    held = once.memory_breakdown_bytes["comm_buffers"] - every.memory_breakdown_bytes["comm_buffers"]
    assert held == pytest.approx(4 * LLAMA3_8B_PARAMS, rel=1e-9)
    assert every.memory_breakdown_bytes["grads"] == pytest.approx(4 * LLAMA3_8B_PARAMS / 8, rel=1e-9)
    assert once.memory_breakdown_bytes.get("grads", 0.0) == 0.0
    # One micro-batch: nothing accumulates, the two agree.
    single = ParallelPlan(dp=8, micro_batch_size=8, num_microbatches=1, zero_stage=3)
    assert _estimate(single)[1].peak_memory_bytes == \
        _estimate(single, zero3_reduce_every_microbatch=False)[1].peak_memory_bytes


def test_a_replicated_embedding_and_gathered_logits_are_held_on_every_tp_rank():
    tp4 = ParallelPlan(dp=2, tp=4, micro_batch_size=1, num_microbatches=32, sequence_parallel=True)
    est, split = _estimate(tp4)
    first = est.params.local(tp4, 32, first=True, last=True)[0]
    est_rep, gathered = _estimate(tp4, embedding_tp_sharded=False, loss_gathers_logits=True, loss_bytes_per_logit=8.0)
    replicated = est_rep.params.local(tp4, 32, first=True, last=True)[0]
    # The whole embedding (128256 x 4096) on each of the 4 TP ranks instead of a quarter.
    assert replicated - first == pytest.approx(LLAMA3_8B_EMBEDDING * 3 / 4, rel=1e-9)
    # The loss over all 128256 logits of 4096 tokens on every TP rank, 8 B each (bf16 logits, the
    # log-softmax output, their gradients), against a vocab-parallel fp32 loss's 10 B over a quarter.
    assert gathered.memory_breakdown_bytes["logits"] == pytest.approx(8 * 4096 * 128256, rel=1e-9)
    assert split.memory_breakdown_bytes["logits"] == pytest.approx(10 * 4096 * 128256 / 4, rel=1e-9)


def test_kempnerforge_rows_read_as_kempnerforge_ran():
    run = next(r for r in load_published_runs() if r.id == "KEMPNER-ws-70b-0160")
    framework = run.framework_facts()
    # bf16 master weights, gradients and AdamW moments (kempnerforge/distributed/parallel.py casts
    # the model to bf16), one reduce-scatter per step, the embedding whole on each TP rank, the
    # logits gathered for F.cross_entropy.
    assert {name: term.bytes_per_param for name, term in framework.states.items()} == \
        {"params": 2, "grads": 2, "optimizer": 4}
    assert not framework.zero3_reduce_every_microbatch and not framework.embedding_tp_sharded
    assert framework.loss_gathers_logits
    # Its "Mem/GPU 82.9 GB" is torch.cuda.max_memory_allocated / 1024**3: GiB, and what tensors held,
    # so it is compared with the predicted peak less the allocator's slack and the CUDA context.
    assert run.reported_peak_memory_bytes == pytest.approx(82.9 * 2 ** 30)
    assert run.reported_memory_is_allocated
    from cost_model.validation import predict_runs

    row = predict_runs([run])[0]
    estimate = Estimator(run.model, run.training, run.cluster, run.profile(), framework=framework,
                         allow_tp_across_nodes=True).estimate(run.plan)
    device = estimate.memory_breakdown_bytes["allocator_overhead"] + estimate.memory_breakdown_bytes["cuda_context"]
    assert row.predicted_peak_memory_bytes == pytest.approx(estimate.peak_memory_bytes - device, rel=1e-9)
    # torchtitan's own rows keep torchtitan's facts.
    titan = next(r for r in load_published_runs() if r.source == "torchtitan").framework_facts()
    assert titan.zero3_reduce_every_microbatch and titan.embedding_tp_sharded and not titan.loss_gathers_logits


def test_zero2_over_sharded_weights_holds_the_gathered_copy_and_under_a_pipeline_the_fp32_gradients():
    # Llama-3-8B, dp 8 with torchtitan's FSDP2 at ZeRO-2 (no resharding after forward): every local
    # parameter's bf16 copy is gathered from forward to backward, 2 B x 8.03B. Megatron-Core's ZeRO-1
    # shards only optimizer states: its bf16 weights are the states themselves, no copy.
    zero2 = ParallelPlan(dp=8, micro_batch_size=1, num_microbatches=8, zero_stage=2)
    _, fsdp = _estimate(zero2)
    assert fsdp.memory_breakdown_bytes["weight_copies"] == pytest.approx(2 * LLAMA3_8B_PARAMS, rel=1e-9)
    megatron = load_constants().framework("megatron-core")
    training = TrainingSpec(global_batch_size=64, seq_len=4096, dtype="bf16")
    cluster = ClusterSpec(name="h100-80gb", num_gpus=8, gpus_per_node=8, profile="builtin:h100-80gb")
    est = Estimator(resolve_model("llama-3-8b"), training, cluster, builtin_profile("h100-80gb"), framework=megatron)
    zero1 = est.estimate(ParallelPlan(dp=8, micro_batch_size=1, num_microbatches=8, zero_stage=1))
    assert zero1.memory_breakdown_bytes.get("weight_copies", 0.0) == 0.0
    # Under a pipeline (pp 2, dp 4), torch.distributed.pipelining turns FSDP's gradient sync off until
    # the last backward: each stage holds its unsharded gradients in fp32 (4 B each) instead of the
    # sharded ones. Stage 0 of 2 holds 16 layers and the embedding.
    pipe = ParallelPlan(dp=4, pp=2, micro_batch_size=1, num_microbatches=16, zero_stage=2)
    est, piped = _estimate(pipe)
    from cost_model.stage_memory import stage_memory

    first = stage_memory(est, pipe, 0, "none", 0, 16)
    local = est.params.local(pipe, 16, first=True, last=False)[0]
    assert first["comm_buffers"] == pytest.approx(4 * local, rel=1e-9)
    assert first.get("grads", 0.0) == 0.0 and first["weight_copies"] == pytest.approx(2 * local, rel=1e-9)


def test_a_source_printing_rank_0s_memory_is_compared_with_the_first_stage():
    from cost_model.stage_memory import allocated_peak_bytes, stage_memory
    from cost_model.validation import predict_runs

    # KempnerForge logs from rank 0 only: with pp 2 that is the first stage, whose 20 of 40 layers hold
    # no head and no logits (the last stage, 4 x 4096 x 128256 bf16 logits, is the larger).
    run = next(r for r in load_published_runs() if r.id == "KEMPNER-cv-13b-32gpu-tp4-pp2")
    assert run.reported_memory_of_rank0 and run.plan.pp == 2
    est = Estimator(run.model, run.training, run.cluster, run.profile(), framework=run.framework_facts(),
                    allow_tp_across_nodes=True)
    first = allocated_peak_bytes(stage_memory(est, run.plan, 0, "full", 20, 20))
    last = allocated_peak_bytes(stage_memory(est, run.plan, 1, "full", 20, 20))
    assert first < last
    assert predict_runs([run])[0].predicted_peak_memory_bytes == pytest.approx(first, rel=1e-9)


def test_a_pipeline_over_sharded_weights_pays_the_fp32_accumulation_each_micro_batch():
    # Llama-3-8B, dp 4 x pp 2, torchtitan's FSDP2 at ZeRO-2, 16 micro-batches: per step one gather of
    # the weights (4 B copy) and one reduce-scatter (6 B copy-in), and the gradients accumulate
    # unsharded in fp32 under torch.distributed.pipelining: the first micro-batch casts (2 + 4 B), the
    # 15 others add (2 + 4 read, 4 write): 4 + 6 + 6 + 15 x 10 = 166 B per parameter of the last stage
    # (16 layers and the head), whose copies run a layer at a time over 2 rounds.
    pipe = ParallelPlan(dp=4, pp=2, micro_batch_size=1, num_microbatches=16, zero_stage=2)
    est, estimate = _estimate(pipe)
    local = sum(est.params.local(pipe, 16, first=False, last=True))
    copy_bytes = 166 * local
    rate = ProfileTables(builtin_profile("h100-80gb")).memory_bytes_per_s(int(copy_bytes / (16 * 2)))
    assert estimate.time_breakdown_s["sharded_copies"] == pytest.approx(copy_bytes / rate, rel=1e-9)
