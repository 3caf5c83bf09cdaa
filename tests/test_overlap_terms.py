"""The overlap and fp8 terms of issue 20, from worked examples: Megatron-Core's TP comm overlap (the
plan's tp_comm_overlap knob, which the plan file, the estimate and the export carry), the fp8 weight casts of
Transformer Engine (once per step) against torchao (every micro-batch), the data-parallel chunking
of Megatron-Core's distributed optimizer, and the TP traffic torchtitan's selective recompute reruns."""
from types import SimpleNamespace

import pytest

from autoplan.inputs.catalog import resolve_model
from autoplan.specs import AutoplanError, ClusterSpec, ParallelPlan, TrainingSpec, get_framework
from cost_model import Estimator, load_constants
from cost_model.estimator import tp_overlap_switches
from cost_model.profiles import builtin_profile
from cost_model.step_time import tp_exposed_s
from cost_model.tables import ProfileTables


def _times(tp_fwd_s, gemm_fwd_s):
    return SimpleNamespace(tp_fwd_s=tp_fwd_s, tp_bwd_s=tp_fwd_s, gemm_fwd_s=gemm_fwd_s, gemm_bwd_s=2 * gemm_fwd_s)


def test_an_option_is_part_of_the_framework_name():
    framework = get_framework("Megatron-Core+flex-deepep")
    assert framework.name == "megatron-core+flex-deepep" and framework.moe_dispatch == "flex"
    assert not get_framework("megatron-core").tp_comm_gemm_overlap    # Megatron-LM's default: off
    with pytest.raises(AutoplanError, match="has no option 'overlap'; its options: megatron-core\\+overlap-moe"):
        get_framework("megatron-core+overlap")
    with pytest.raises(AutoplanError, match="has no option"):
        get_framework("torchtitan+tp-comm-overlap")
    # Fitted values are the base framework's.
    constants = load_constants()
    assert constants.framework("megatron-core+flex-deepep").gemm_efficiency == \
        constants.framework("megatron-core").gemm_efficiency


def test_pipelined_tp_traffic_shows_its_first_chunk_or_what_outlasts_the_gemms():
    # Megatron-Core as a plan with tp_comm_overlap runs it (Transformer Engine userbuffers).
    overlap = get_framework("megatron-core").with_overrides(**tp_overlap_switches(get_framework("megatron-core")))
    sp4 = ParallelPlan(tp=4, sequence_parallel=True)
    # Traffic 3 ms under a 10 ms forward GEMM: a quarter (the first of 4 chunks) shows, 0.75 ms; the
    # backward's 3 ms under 20 ms: 0.75 ms again.
    assert tp_exposed_s(sp4, overlap, _times(3e-3, 10e-3)) == pytest.approx(1.5e-3)
    # Traffic 20 ms over a 10 ms forward GEMM: 10 ms outlasts it (more than the 5 ms first chunk);
    # backward 20 ms under 20 ms of GEMMs: the first chunk, 5 ms.
    assert tp_exposed_s(sp4, overlap, _times(20e-3, 10e-3)) == pytest.approx(10e-3 + 5e-3)
    # Without SP Megatron refuses the overlap: every byte is exposed, as without it.
    no_sp = ParallelPlan(tp=4, sequence_parallel=False)
    assert tp_exposed_s(no_sp, overlap, _times(3e-3, 10e-3)) == pytest.approx(6e-3)
    assert tp_exposed_s(sp4, get_framework("megatron-core"), _times(3e-3, 10e-3)) == pytest.approx(6e-3)


def _estimate(model_name, framework, plan, dtype="bf16", num_gpus=8, global_batch=64):
    from autoplan.inputs.catalog import resolve_model

    model = resolve_model(model_name)
    training = TrainingSpec(global_batch_size=global_batch, seq_len=4096, dtype=dtype)
    cluster = ClusterSpec(name="h100-80gb", num_gpus=num_gpus, gpus_per_node=8, profile="builtin:h100-80gb")
    est = Estimator(model, training, cluster, builtin_profile("h100-80gb"),
                    framework=load_constants().framework(framework))
    return est.estimate(plan)


def test_fp8_weights_are_cast_once_per_step_by_transformer_engine_and_per_micro_batch_by_torchao():
    # Llama-3-8B on 8 GPUs, dp=8, 8 micro-batches of 1: the same layers, the same casts of one layer's
    # weights (3 B/weight). torchao casts for forward and backward in each of the 8 micro-batches
    # (16 casts); Transformer Engine once per step with the transpose (4/3 of a cast): 12x fewer bytes.
    plan = ParallelPlan(dp=8, micro_batch_size=1, num_microbatches=8, zero_stage=1)
    te = _estimate("llama-3-8b", "megatron-core", plan, "fp8").time_breakdown_s["weight_casts"]
    torchao = _estimate("llama-3-8b", "torchtitan", plan, "fp8").time_breakdown_s["weight_casts"]
    assert te > 0 and torchao / te == pytest.approx(16 / (4 / 3), rel=1e-6)
    assert _estimate("llama-3-8b", "megatron-core", plan, "bf16").time_breakdown_s.get("weight_casts", 0.0) == 0.0


def test_row_wise_fp8_casts_the_output_gradient_and_the_input_again_for_the_weight_gradient():
    # Llama-3-8B at tp 1, 8 micro-batches of 1 x 4096 tokens, no recompute. Its block's GEMMs, n + k
    # per token, those that read one input counted once (q/k/v and w1/w3 share their input's cast):
    # qkv 6144 + 4096, o 4096 + 4096, w1w3 28672 + 4096, w2 4096 + 14336: 69,632. Row-wise (torchao
    # "rowwise") backward casts each output gradient a second time (m x n) and the saved bf16 input
    # again (m x k), 3 B per element (read 2, write 1), in each of 32 layers and 8 micro-batches;
    # tensor-wise reuses the one cast of each. Row-wise also rescales the outputs of both backward GEMMs
    # in a kernel of their own (torchao addmm_float8_unwrapped, `output *= post_inverse_scale`): 2 B read
    # + 2 B written per element of each data gradient (m x k: k = 4096 + 4096 + 4096 + 14336 = 26,624 per
    # token) and each weight gradient (n x k: the block's 218,103,808 weights).
    from autoplan.inputs.catalog import resolve_model
    from cost_model.tables import ProfileTables

    plan = ParallelPlan(dp=8, micro_batch_size=1, num_microbatches=8, zero_stage=1)
    training = TrainingSpec(global_batch_size=64, seq_len=4096, dtype="fp8")
    cluster = ClusterSpec(name="h100-80gb", num_gpus=8, gpus_per_node=8, profile="builtin:h100-80gb")
    # torchtitan 0.3.0's float8 converter is row-wise only (what the export turns on): its entry says so.
    assert load_constants().framework("torchtitan").fp8_rowwise
    tensorwise = load_constants().framework("torchtitan").with_overrides(fp8_rowwise=False)

    def memory_bound_s(framework):
        est = Estimator(resolve_model("llama-3-8b"), training, cluster, builtin_profile("h100-80gb"), framework=framework)
        return est.estimate(plan).time_breakdown_s["memory_bound"]

    extra_bytes = 3 * 69632 * 4096 + 4 * (26624 * 4096 + 218_103_808)
    op_bytes = 2 * 4096 * 4096                    # one activation of the micro-batch, bf16
    rate = ProfileTables(builtin_profile("h100-80gb")).memory_bytes_per_s(op_bytes)
    extra_s = memory_bound_s(tensorwise.with_overrides(fp8_rowwise=True)) - memory_bound_s(tensorwise)
    assert extra_s == pytest.approx(32 * 8 * extra_bytes / rate, rel=1e-9)


def test_the_megatron_export_passes_the_overlap_the_plan_was_costed_with():
    from autoplan.exporters import export_plan
    from autoplan.planning.planner import PlanRequest, plan_search
    from autoplan.planning.space import Pins
    from tests.framework_acceptance import megatron_accepts

    flags = {}
    for overlap in (False, True):
        request = PlanRequest(model="llama-3-8b", num_gpus=16, framework="megatron-core", exhaustive=False,
                              pins=Pins(tp=4, pp=1, sequence_parallel=True, zero_stage=1, tp_comm_overlap=overlap))
        doc = plan_search(request).document
        assert doc.framework == "megatron-core" and doc.parallel.tp_comm_overlap is overlap
        text = export_plan(doc, "megatron").text
        assert megatron_accepts(text, 16) == ""
        flags[overlap] = ("--tp-comm-overlap" in text, "--overlap-grad-reduce" in text)
    assert flags == {False: (False, True), True: (True, True)}


def test_fsdp2_copies_and_fp32_reduce_scatter_from_a_worked_example():
    # Llama-3-8B on 8 GPUs, FSDP (ZeRO-3) over dp=8, 8 micro-batches of 1, no pipeline: every micro-batch
    # gathers the weights twice (forward, backward) and reduce-scatters the gradients once: 16 gathers
    # and 8 reductions of all P parameters. torchtitan (FSDP2, torch 2.9 _fsdp_collectives.py) copies
    # each gather's output into the bf16 parameters (read 2 + write 2 B) and the bf16 gradients into an
    # fp32 reduce-scatter input (read 2 + write 4 B): 16 x 4 + 8 x 6 = 112 B per parameter, at the
    # profile's copy rate. On the wire: 16 x 2 B gathered + 8 x 4 B reduced (fp32) = 64 B per parameter
    # for torchtitan; llm-foundry's FSDP1 (flat parameter, bf16 reduce) 16 x 2 + 8 x 2 = 48 B, no copies.
    plan = ParallelPlan(dp=8, micro_batch_size=1, num_microbatches=8, zero_stage=3)
    titan = _estimate("llama-3-8b", "torchtitan", plan)
    foundry = _estimate("llama-3-8b", "llm-foundry", plan)
    params = titan.details["dp_bytes_per_step"] / 64
    assert 7.9e9 < params < 8.1e9                                  # Llama-3-8B: 8.03B parameters
    assert foundry.details["dp_bytes_per_step"] == pytest.approx(48 * params, rel=1e-9)
    from cost_model.tables import ProfileTables

    tables = ProfileTables(builtin_profile("h100-80gb"))
    copy_bytes = 112 * params
    op_bytes = copy_bytes / (32 * 24)                              # a layer's share of one of 24 collectives
    assert titan.time_breakdown_s["sharded_copies"] == pytest.approx(
        copy_bytes / tables.memory_bytes_per_s(int(op_bytes)), rel=1e-9)
    assert foundry.time_breakdown_s.get("sharded_copies", 0.0) == 0.0
    # Without sharding (ZeRO-0: one replica per rank) there is nothing to copy.
    ddp = _estimate("llama-3-8b", "torchtitan", ParallelPlan(dp=8, micro_batch_size=1, num_microbatches=8))
    assert ddp.time_breakdown_s.get("sharded_copies", 0.0) == 0.0


def test_torchtitans_selective_recompute_gathers_the_sequence_parallel_inputs_again():
    # torchtitan's op-level selective AC keeps every other matmul's output, attention's and the
    # reduce-scatters', not the all-gathers': under SP each layer's two forward all-gathers (of the
    # b*s*h bf16 activation, over the tp ranks) run again in the backward to feed the matmuls.
    model = resolve_model("llama-3-8b")
    training = TrainingSpec(global_batch_size=8, seq_len=4096, dtype="bf16")
    cluster = ClusterSpec(name="h100-80gb", num_gpus=8, gpus_per_node=8, profile="builtin:h100-80gb")
    framework = load_constants().framework("torchtitan").with_overrides(tp_comm_overlap=0.0)
    est = Estimator(model, training, cluster, builtin_profile("h100-80gb"), framework=framework)
    plan = ParallelPlan(dp=4, tp=2, sequence_parallel=True, micro_batch_size=1, num_microbatches=2,
                        zero_stage=3, recompute="selective")
    tables = ProfileTables(builtin_profile("h100-80gb"))
    activation_bytes = 1 * 4096 * 4096 * 2
    gather_s = tables.collective_time_s("all_gather", activation_bytes, 2, 2)
    scatter_s = tables.collective_time_s("reduce_scatter", activation_bytes, 2, 2)
    lt = est.stage_costs(plan).layer
    assert lt.tp_fwd_s == pytest.approx(2 * gather_s + 2 * scatter_s, rel=1e-9)
    rerun_per_layer_s = 0.5 * lt.gemm_fwd_s + lt.memory_fwd_s + 2 * gather_s
    assert est.estimate(plan).time_breakdown_s["recompute"] == pytest.approx(2 * 32 * rerun_per_layer_s, rel=1e-9)
