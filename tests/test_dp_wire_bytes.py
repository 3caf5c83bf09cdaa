"""What the data-parallel collectives put on the wire, from worked examples: the main gradients'
reduce dtype at ZeRO 0-2 (fp32 by Megatron-LM's default with --bf16, bf16 where a run sets NeMo's
grad_sync_dtype) and the weights' all-gather in fp8 (Megatron-Core --fp8-param-gather, NeMo
fp8_params), and that the published MLPerf rows carry the settings their configs state."""
import pytest

from autoplan.inputs.catalog import resolve_model
from autoplan.specs import ClusterSpec, ParallelPlan, TrainingSpec
from cost_model import Estimator, load_constants
from cost_model.profiles import builtin_profile
from cost_model.published_rows import load_published_runs

LLAMA3_8B_PARAMS = 8_030_261_248
# Llama-3-8B's linears per layer: q and o 4096 x 4096, k and v 4096 x 1024, three MLP matrices
# 4096 x 14336; 32 layers. The rest (embedding, head, norms) stays bf16 in an fp8 run.
LLAMA3_8B_LINEARS = 32 * (2 * 4096 * 4096 + 2 * 4096 * 1024 + 3 * 4096 * 14336)
ZERO1 = ParallelPlan(dp=8, micro_batch_size=1, num_microbatches=8, zero_stage=1)


def _wire_bytes(dtype: str, plan: ParallelPlan = ZERO1, **facts) -> float:
    framework = load_constants().framework("megatron-core").with_overrides(**facts)
    training = TrainingSpec(global_batch_size=64, seq_len=4096, dtype=dtype)
    cluster = ClusterSpec(name="h100-80gb", num_gpus=8, gpus_per_node=8, profile="builtin:h100-80gb")
    est = Estimator(resolve_model("llama-3-8b"), training, cluster, builtin_profile("h100-80gb"), framework=framework)
    return est.estimate(plan).details["dp_bytes_per_step"]


def test_the_distributed_optimizer_reduces_fp32_main_grads_unless_the_run_reduces_in_bf16():
    # ZeRO-1 over 8 ranks, once per step: a reduce-scatter of the gradients and an all-gather of the
    # updated bf16 weights, each counted as the buffer's bytes: 4 + 2 B per parameter, 2 + 2 in bf16.
    assert _wire_bytes("bf16") == pytest.approx(6 * LLAMA3_8B_PARAMS, rel=1e-9)
    assert _wire_bytes("bf16", main_grad_reduce_bytes=2.0) == pytest.approx(4 * LLAMA3_8B_PARAMS, rel=1e-9)


def test_fp8_params_gather_the_linears_in_one_byte_and_the_rest_in_bf16():
    # fp8 with --fp8-param-gather: the 6.98e9 linear weights come back in 1 B, the embedding, head
    # and norms (1.05e9) in 2 B; the fp32 reduce-scatter is unchanged.
    gathered = 2 * LLAMA3_8B_PARAMS - LLAMA3_8B_LINEARS
    assert _wire_bytes("fp8", fp8_param_gather=True) == pytest.approx(4 * LLAMA3_8B_PARAMS + gathered, rel=1e-9)
    # Without the flag, or in a bf16 run, every weight is gathered in bf16.
    assert _wire_bytes("fp8") == pytest.approx(6 * LLAMA3_8B_PARAMS, rel=1e-9)
    assert _wire_bytes("bf16", fp8_param_gather=True) == pytest.approx(6 * LLAMA3_8B_PARAMS, rel=1e-9)


def test_fp8_gathers_are_faster_and_keep_no_weight_workspace():
    framework = load_constants().framework("megatron-core")
    training = TrainingSpec(global_batch_size=64, seq_len=4096, dtype="fp8")
    cluster = ClusterSpec(name="h100-80gb", num_gpus=64, gpus_per_node=8, profile="builtin:h100-80gb")
    plan = ParallelPlan(dp=64, micro_batch_size=1, num_microbatches=1, zero_stage=1)

    def estimate(**facts):
        est = Estimator(resolve_model("llama-3-8b"), training, cluster, builtin_profile("h100-80gb"),
                        framework=framework.with_overrides(**facts))
        return est.estimate(plan)
    plain, fp8_params = estimate(), estimate(fp8_param_gather=True)
    assert fp8_params.details["dp_comm_total_s"] < plain.details["dp_comm_total_s"]
    # The weights are fp8 themselves: Transformer Engine keeps no cast fp8 weight and transpose beside
    # them (2 B per linear weight, tests/test_fp8_memory.py); every other term is unchanged.
    saved = plain.memory_breakdown_bytes["weight_copies"] - fp8_params.memory_breakdown_bytes["weight_copies"]
    assert saved == pytest.approx(2 * LLAMA3_8B_LINEARS, rel=1e-9)
    assert {k: v for k, v in fp8_params.memory_breakdown_bytes.items() if k != "weight_copies"} == \
        {k: v for k, v in plain.memory_breakdown_bytes.items() if k != "weight_copies"}


def test_mlperf_rows_read_as_their_configs_state():
    runs = {r.id: dict(r.framework_then) for r in load_published_runs() if r.id.startswith("MLPERF")}
    # NVIDIA's v4.0 GPT-3 (conf/optim/distributed_fused_adam.yaml: grad_sync_dtype bf16; FP8_PARAMS=True).
    assert runs["MLPERF-v40-nv-n1344-01"]["fp8_param_gather"] is True
    assert runs["MLPERF-v40-nv-n1344-01"]["main_grad_reduce_bytes"] == 2.0
    # Llama 3.1 405B of v5.0 states FP8_PARAMS=True; its NeMo 2 implementation (pretrain.py, issue 47)
    # sets grad_reduce_in_fp32=False: bf16 main gradients, kept and reduced in 2 B.
    assert runs["MLPERF-v50-nv405-n256-01"]["fp8_param_gather"] is True
    assert runs["MLPERF-v50-nv405-n256-01"]["main_grad_reduce_bytes"] == 2.0
    assert runs["MLPERF-v50-nv405-n256-01"]["states"]["grads"].bytes_per_param == 2
    # HPE's Llama 3.1 8B states no fp8 parameters; it runs the same implementation's bf16 gradients.
    assert "fp8_param_gather" not in runs["MLPERF-v51-hpe8b-n8-01"]
    assert runs["MLPERF-v51-hpe8b-n8-01"]["main_grad_reduce_bytes"] == 2.0


def test_fms_fsdp_rows_read_as_fsdp1_in_bf16_on_their_network():
    # fms-fsdp: FSDP1's flat parameter (gathered and reduced in place, no copies) with its bfSixteen
    # policy (reduce in bf16), on the network its README states per 8-GPU node (800 Gbps for H100).
    run = next(r for r in load_published_runs() if r.id == "FMS-v3-70b-h100")
    est = Estimator(run.model, run.training, run.cluster, run.profile(), framework=run.framework_facts(),
                    allow_tp_across_nodes=True)
    estimate = est.estimate(run.plan)
    params = est.params.local(run.plan, run.model.num_layers, first=True, last=True)[0]
    # One micro-batch: a gather for forward and one for backward in bf16, one bf16 reduce-scatter.
    assert run.plan.num_microbatches == 1
    assert estimate.details["dp_bytes_per_step"] == pytest.approx((2 + 2 + 2) * params, rel=1e-9)
    assert estimate.time_breakdown_s.get("sharded_copies", 0.0) == 0.0
    assert run.profile().inter_node_bandwidth_bytes_per_s == 800e9 / 8 / 8


def test_olmo_core_32b_recomputes_its_feed_forward_only():
    # OLMo-core's script checkpoints blocks.*.feed_forward (selected_modules): each layer reruns its
    # MLP forward in the backward, not torchtitan's every-other-matmul policy.
    run = next(r for r in load_published_runs() if r.id == "OLMOCORE-32B-15")
    assert run.plan.recompute == "selective" and run.plan.recompute_modules == ("mlp",)
    est = Estimator(run.model, run.training, run.cluster, run.profile(), framework=run.framework_facts(),
                    allow_tp_across_nodes=True)
    lt = est.stage_costs(run.plan).layer
    expected_s = run.plan.num_microbatches * run.model.num_layers * lt.mlp_fwd_s
    assert est.estimate(run.plan).time_breakdown_s["recompute"] == pytest.approx(expected_s, rel=1e-9)


def test_torchtitan_rows_that_state_the_float8_all_gather_gather_their_linears_in_one_byte():
    # Trainy's H200 run launches torchtitan with --quantize.linear.float8.enable_fsdp_float8_all_gather:
    # FSDP2 gathers the linears as torchao float8 tensors. The Dec-2024 H100 tables do not say so.
    runs = {r.id: r for r in load_published_runs() if r.id.startswith(("TORCHTITAN-H200", "TORCHTITAN-2412"))}
    assert runs["TORCHTITAN-H200-4n"].framework_facts().fp8_weight_copy_bytes == 1.0
    assert runs["TORCHTITAN-2412-T1c"].framework_facts().fp8_weight_copy_bytes == 0.0
    run = runs["TORCHTITAN-H200-4n"]
    # Llama-3.1-8B, FSDP over 32 ranks, one micro-batch of 2: ZeRO-3 gathers the weights for forward
    # and again for backward, and reduce-scatters the gradients once in fp32 (torchtitan's
    # mixed_precision_reduce). With the float8 all-gather the linears come back in 1 B, the rest in 2.
    assert (run.plan.dp, run.plan.zero_stage, run.plan.num_microbatches) == (32, 3, 1)
    est = Estimator(run.model, run.training, run.cluster, run.profile(), framework=run.framework_facts(),
                    allow_tp_across_nodes=True)
    assert est.params.dense_per_layer * 32 + 2 * 128256 * 4096 + 4096 == LLAMA3_8B_PARAMS
    gathered = 2 * (1 * LLAMA3_8B_LINEARS + 2 * (LLAMA3_8B_PARAMS - LLAMA3_8B_LINEARS))
    assert est.estimate(run.plan).details["dp_bytes_per_step"] == pytest.approx(gathered + 4 * LLAMA3_8B_PARAMS,
                                                                                rel=1e-9)
