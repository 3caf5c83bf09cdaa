"""Data-parallel collectives at scale, from worked examples: how many collectives a framework issues
per gradient reduction (its buckets) and what each costs in latency across nodes (NCCL's own model),
so that a plan at a thousand GPUs pays the ring's n-1 steps once per bucket, not once per step."""
import math
from types import SimpleNamespace

import pytest

from autoplan.specs import ParallelPlan, get_framework
from cost_model.profiles import builtin_profile, nccl_inter_node_latency_s
from cost_model.dp_time import dp_collective_calls
from cost_model.tables import ProfileTables

BF16 = SimpleNamespace(dtype="bf16")
"""The training the stand-in estimators carry: a bf16 run (no weights gathered in fp8)."""


def test_nccl_ring_and_tree_latencies_follow_its_tuning_model():
    # NCCL src/graph/tuning.cc, Simple protocol: baseLat 8.4 us; a ring step 3.4 us over NVLink and
    # 14 us over the network; a tree step 4.0 us over NVLink and 14 us over the network.
    # 1,024 ranks on 128 nodes: the ring takes 1,023 steps, 127 of them across nodes.
    assert nccl_inter_node_latency_s("all_gather", 1024) == pytest.approx((8.4 + 896 * 3.4 + 127 * 14.0) * 1e-6)
    assert nccl_inter_node_latency_s("reduce_scatter", 16) == pytest.approx((8.4 + 14 * 3.4 + 1 * 14.0) * 1e-6)
    # The tree all-reduce: 7 NVLink hops and log2(128) = 7 network hops, down and up.
    assert nccl_inter_node_latency_s("all_reduce", 1024) == pytest.approx((8.4 + 2 * (7 * 4.0 + 7 * 14.0)) * 1e-6)


def test_the_builtin_profile_prices_a_small_all_gather_at_its_latency():
    # 4 KiB over 1,024 ranks: the bytes are nothing, the 1,023 ring steps are everything (within the
    # table's interpolation between its sampled sizes).
    tables = ProfileTables(builtin_profile("h100-80gb"))
    t = tables.collective_time_s("all_gather", 4096, 1024, 8)
    assert t == pytest.approx(nccl_inter_node_latency_s("all_gather", 1024), rel=0.02)
    # Within a node the ring does not pay network steps: two orders of magnitude less.
    assert tables.collective_time_s("all_gather", 4096, 8, 8) < t / 100


def test_a_group_with_fewer_ranks_per_node_pays_the_latency_of_the_nodes_it_spans():
    # 1,024 ranks, 2 per node (tp 4 on 8-GPU nodes): the ring spans 512 nodes, 512 NVLink steps and 511
    # network steps: (8.4 + 512 x 3.4 + 511 x 14) us = 8.90 ms for a latency-bound 4 KiB all-gather, not
    # the filled-node ring's 4.83 ms (128 nodes) nor 4 x it (the bytes' slowdown applied to the latency).
    tables = ProfileTables(builtin_profile("h100-80gb"))
    latency_s = (8.4 + 512 * 3.4 + 511 * 14.0) * 1e-6
    assert tables.collective_time_s("all_gather", 4096, 1024, 2) == pytest.approx(latency_s, rel=0.02)
    # The bytes run over 2 of the node's 8 NIC shares: 4x the filled-node ring's bandwidth time.
    size = 2 ** 30
    filled_s = tables.collective_time_s("all_gather", size, 1024, 8)
    bytes_s = filled_s - tables.collective_time_s("all_gather", 4096, 1024, 8)
    assert tables.collective_time_s("all_gather", size, 1024, 2) == pytest.approx(4 * bytes_s + latency_s, rel=0.02)


def _fw(bucket, per_rank=0.0):
    return SimpleNamespace(dp_bucket_params=bucket, dp_bucket_params_per_rank=per_rank)


def test_buckets_per_framework():
    megatron = get_framework("megatron-core")
    # Megatron-Core: bucket = max(40M, 1M x dp) parameters. A 7B-parameter rank at dp=8: 40M buckets,
    # ceil(7e9 / 4e7) = 175 of them; at dp=1,024 the bucket is 1.024e9: ceil(7e9 / 1.024e9) = 7.
    assert dp_collective_calls(megatron, 1, 8, 7e9, 32) == 175
    assert dp_collective_calls(megatron, 1, 1024, 7e9, 32) == 7
    # DeepSpeed ZeRO-1/2: reduce_bucket_size 5e8 elements: 14 buckets for 7B.
    assert dp_collective_calls(get_framework("deepspeed"), 2, 64, 7e9, 32) == 14
    # Megatron-LM 2021: one all-reduce of the contiguous buffer, however large.
    assert dp_collective_calls(get_framework("megatron-2021"), 0, 64, 7e9, 32) == 1
    # FSDP (torchtitan, llm-foundry) wraps each block: one collective per layer of the stage, and so
    # does every framework at ZeRO-3.
    assert dp_collective_calls(get_framework("torchtitan"), 1, 64, 7e9, 32) == 32
    assert dp_collective_calls(megatron, 3, 64, 7e9, 20) == 20
    assert dp_collective_calls(_fw(math.inf), 3, 64, 7e9, 0) == 1


def test_a_bucketed_reduction_at_a_thousand_ranks_pays_latency_per_bucket():
    from cost_model.dp_time import dp_time

    profile = builtin_profile("h100-80gb")
    tables = ProfileTables(profile)
    plan = ParallelPlan(dp=1024, zero_stage=1)
    lt = SimpleNamespace(gemm_bwd_s=0.0, attn_bwd_s=0.0, gemm_fwd_s=0.0, attn_fwd_s=0.0)
    framework = get_framework("megatron-core").with_overrides(
        dp_bucket_params=2 ** 22, dp_bucket_params_per_rank=0.0, dp_param_gather_overlap=False)
    est = SimpleNamespace(tables=tables, framework=framework, gpus_per_node=8, training=BF16)
    # 100 buckets of 2^22 parameters: a reduce-scatter of 16 MiB of fp32 gradients and an all-gather of
    # 8 MiB of bf16 weights each. Each collective: NCCL's ring latency at 1,024 ranks plus its bytes
    # x (n-1)/n over the node's eight NICs at the built-in 90% of line rate.
    node_bytes_per_s = 8 * profile.inter_node_bandwidth_bytes_per_s * 0.90

    def ring_s(op, num_bytes):
        wire = 2.0 if op == "all_reduce" else 1.0   # an all-reduce moves each byte out and back
        return nccl_inter_node_latency_s(op, 1024) + wire * num_bytes * 1023 / 1024 / node_bytes_per_s

    expected = 100 * (ring_s("reduce_scatter", 2 ** 24) + ring_s("all_gather", 2 ** 23))
    # 16 MiB is a sampled size of the built-in table; 8 MiB lies between two (log-log interpolation).
    assert dp_time(est, plan, 32, 100 * 2 ** 22, 0.0, lt, 0.0, 1)[1] == pytest.approx(expected, rel=2e-3)
    # The same bytes in one collective pay the latency once: ~0.95 s less.
    one = get_framework("megatron-core").with_overrides(dp_bucket_params=math.inf, dp_param_gather_overlap=False)
    single = dp_time(SimpleNamespace(tables=tables, framework=one, gpus_per_node=8, training=BF16), plan, 32, 100 * 2 ** 22,
                      0.0, lt, 0.0, 1)[1]
    assert expected - single > 0.9 * 99 * (nccl_inter_node_latency_s("reduce_scatter", 1024)
                                            + nccl_inter_node_latency_s("all_gather", 1024))


def test_interleaved_virtual_stages_hide_their_reductions_under_each_other():
    from cost_model.dp_time import interleaved_window_factor

    megatron = get_framework("megatron-core")
    # p = 6, v = 8, m = 6 (GPT-3 175B in MLPerf v4.0): virtual stages 7..1 reduce under the backward of
    # the ones after them, over the last 6 micro-batches: 7/8 x 6 + 1/8 = 5.375 micro-batches of compute.
    assert interleaved_window_factor(megatron, 6, 8, 6) == pytest.approx(7 / 8 * 6 + 1 / 8)
    # Fewer micro-batches than stages: only m of them follow.
    assert interleaved_window_factor(megatron, 8, 2, 4) == pytest.approx(1 / 2 * 4 + 1 / 2)
    # No interleaving, or a framework that syncs the whole rank at once: one micro-batch, as before.
    assert interleaved_window_factor(megatron, 8, 1, 64) == 1.0
    assert interleaved_window_factor(get_framework("torchtitan"), 8, 2, 64) == 1.0


def test_zero3_gathering_each_tensor_pays_a_latency_per_tensor():
    from cost_model.dp_time import dp_time

    from autoplan.specs import ModelSpec

    # GPT-3 style (Megatron's GPT: fused QKV, biases, LayerNorm): per layer the QKV and output
    # projections, the two MLP matrices (4 weights + 4 biases) and two LayerNorms (weight + bias):
    # 12 tensors. Llama style (SwiGLU, no biases, RMSNorm): 2 + 3 matrices and 2 norm weights: 7.
    gpt = ModelSpec(name="gpt", num_layers=4, hidden_size=1024, num_heads=16, num_kv_heads=16, ffn_hidden_size=4096,
                    vocab_size=50304, mlp="gelu", norm="layernorm", linear_bias=True)
    llama = ModelSpec(name="llama", num_layers=4, hidden_size=1024, num_heads=16, num_kv_heads=16, ffn_hidden_size=2816,
                      vocab_size=32000, mlp="swiglu", norm="rmsnorm", linear_bias=False)
    assert gpt.dense_param_tensors_per_layer == 12
    assert llama.dense_param_tensors_per_layer == 7

    # DeepSpeed of 2021 at ZeRO-3 over 1,024 ranks, 4 layers of 2^22 parameters, one micro-batch:
    # forward and backward each gather every tensor (2 x 48 all-gathers) and the gradients reduce
    # once per tensor (48 reduce-scatters): 144 ring latencies where per-layer calls pay 12.
    tables = ProfileTables(builtin_profile("h100-80gb"))
    plan = ParallelPlan(dp=1024, zero_stage=3)
    lt = SimpleNamespace(gemm_bwd_s=0.0, attn_bwd_s=0.0, gemm_fwd_s=0.0, attn_fwd_s=0.0)
    per_layer = get_framework("deepspeed").with_overrides(dp_bandwidth_scale=1.0)
    per_tensor = per_layer.with_overrides(zero3_gather_per_tensor=True)

    def total_s(framework):
        est = SimpleNamespace(tables=tables, framework=framework, gpus_per_node=8, model=gpt, training=BF16)
        return dp_time(est, plan, 4, 4 * 2 ** 22, 0.0, lt, 0.0, 1)[1]

    gather_latency = nccl_inter_node_latency_s("all_gather", 1024)
    reduce_latency = nccl_inter_node_latency_s("reduce_scatter", 1024)
    # Same bytes, 2 x (48 - 4) more gathers and 48 - 4 more reduce-scatters: the difference is their
    # latency (the bytes per call shrink 12-fold but their sum is the same, up to the table's
    # interpolation).
    assert total_s(per_tensor) - total_s(per_layer) == pytest.approx(
        2 * 44 * gather_latency + 44 * reduce_latency, rel=0.03)


def _gpt(layers):
    from autoplan.specs import ModelSpec

    return ModelSpec(name="gpt", num_layers=layers, hidden_size=1024, num_heads=16, num_kv_heads=16,
                     ffn_hidden_size=4096, vocab_size=50304, mlp="gelu", norm="layernorm", linear_bias=True)


def test_deepspeed_2021_zero3_waits_for_its_gathers_and_pays_torchs_copies_around_list_collectives():
    from cost_model.dp_time import dp_time

    # DeepSpeed v0.3.13 at ZeRO-3 over 1,024 ranks (h100 built-in profile), 4 GPT layers of
    # 3 x 2^24 parameters, one micro-batch, per-tensor collectives (12 tensors a layer, 48 calls of
    # each kind per round). The compute is long enough to hide anything that can hide (overlap 1,
    # contention 0), so what shows is what cannot.
    profile = builtin_profile("h100-80gb")
    tables = ProfileTables(profile)
    plan = ParallelPlan(dp=1024, zero_stage=3)
    lt = SimpleNamespace(gemm_bwd_s=0.0, attn_bwd_s=0.0, gemm_fwd_s=0.0, attn_fwd_s=0.0)
    dense = 4 * 3 * 2 ** 24
    base = get_framework("deepspeed").with_overrides(
        dp_bandwidth_scale=1.0, dp_comm_overlap=1.0, overlap_contention=0.0, zero3_gather_per_tensor=True)

    def exposed_s(framework):
        est = SimpleNamespace(tables=tables, framework=framework, gpus_per_node=8, model=_gpt(4), training=BF16)
        return dp_time(est, plan, 4, dense, 0.0, lt, 1000.0, 1)[0]

    # bf16 weights: 2 B x 3 x 2^26 = 384 MiB a round, 8 MiB a call; gradients reduce in bf16 too.
    call_bytes = 2 * dense / 48
    gathers_s = 2 * 48 * tables.collective_time_s("all_gather", call_bytes, 1024, 8)
    reduces_s = 48 * tables.collective_time_s("reduce_scatter", call_bytes, 1024, 8)
    # Overlapped: only the last layer's share stays out, a quarter of everything.
    assert exposed_s(base) == pytest.approx((gathers_s + reduces_s) / 4, rel=1e-6)
    # Blocking gathers (stage3.py fetch_sub_module): every gather shows; the reductions still hide.
    blocking = base.with_overrides(zero3_gather_blocking=True)
    assert exposed_s(blocking) == pytest.approx(gathers_s + reduces_s / 4, rel=1e-6)
    # torch's list collectives: each call copies one 8 KiB share per rank (2^23 B / 1,024), read and
    # written, each copy one kernel: on the built-in table 2 us + 16 KiB at 90% of 3.35 TB/s.
    copy_s = 2e-6 + 2 ** 14 / (0.9 * 3.35e12)
    gather_copies_s = 2 * 48 * 1024 * copy_s
    reduce_copies_s = 48 * 1024 * copy_s
    copies = blocking.with_overrides(collective_list_copies=True)
    assert exposed_s(copies) == pytest.approx(gathers_s + gather_copies_s + (reduces_s + reduce_copies_s) / 4,
                                              rel=1e-6)


def _gpt_wide(hidden, layers=8):
    from autoplan.specs import ModelSpec

    return ModelSpec(name="gpt", num_layers=layers, hidden_size=hidden, num_heads=hidden // 128, num_kv_heads=hidden // 128,
                     ffn_hidden_size=4 * hidden, vocab_size=51200, mlp="gelu", norm="layernorm", linear_bias=True)


def test_deepspeed_zero3_regathers_what_it_releases_between_recompute_and_backward():
    from cost_model.dp_time import dp_time, recompute_regathered_share

    deepspeed = get_framework("deepspeed")
    assert deepspeed.zero3_recompute_reuse_params == 1e9            # stage3_max_reuse_distance default
    full = ParallelPlan(dp=64, zero_stage=3, recompute="full", recompute_num_layers=8)
    # GPT layer of width h: QKV 3h^2, projection h^2, MLP 4h^2 and 4h^2 (12h^2 in all). A linear stays
    # gathered from its recompute to its backward when twice the parameters after it (run in between,
    # in the recompute and again in the backward) stay under 1e9.
    # 530B (h = 20480, h^2 = 419.4M): the second MLP matrix has nothing after it and stays; the first
    # has 2 x 4h^2 = 3.4e9 after it and goes, and so do the projection and QKV: 8h^2 of 12h^2.
    assert recompute_regathered_share(_gpt_wide(20480), full, deepspeed, 8) == pytest.approx(2 / 3)
    # 175B over TP 2 (h = 12288, h^2/2 = 75.5M a rank): the first MLP matrix has 2 x 4h^2/2 = 0.60e9
    # after it and stays; the projection (2 x 8h^2/2 = 1.21e9) and QKV go: 4h^2 of 12h^2.
    assert recompute_regathered_share(_gpt_wide(12288), full.replace(tp=2), deepspeed, 8) == pytest.approx(1 / 3)
    # 13B (h = 5120): QKV has 2 x 9h^2 = 0.47e9 after it: everything stays.
    assert recompute_regathered_share(_gpt_wide(5120), full, deepspeed, 8) == 0.0
    # Half the layers recomputed: half the share. No recompute, or FSDP's one gather: nothing.
    assert recompute_regathered_share(_gpt_wide(20480), full.replace(recompute_num_layers=4), deepspeed, 8) == \
        pytest.approx(1 / 3)
    assert recompute_regathered_share(_gpt_wide(20480), ParallelPlan(dp=64, zero_stage=3), deepspeed, 8) == 0.0
    assert recompute_regathered_share(_gpt_wide(20480), full, get_framework("torchtitan"), 8) == 0.0

    # In the step: 8 layers of 3 x 2^24 parameters at 64 ranks, one micro-batch, everything exposed
    # (no overlap). Per round the weights are gathered 2 + 2/3 times, not 2, and reduced once.
    tables = ProfileTables(builtin_profile("h100-80gb"))
    lt = SimpleNamespace(gemm_bwd_s=0.0, attn_bwd_s=0.0, gemm_fwd_s=0.0, attn_fwd_s=0.0)
    framework = deepspeed.with_overrides(dp_bandwidth_scale=1.0, dp_comm_overlap=0.0)
    dense = 8 * 3 * 2 ** 24
    est = SimpleNamespace(tables=tables, framework=framework, gpus_per_node=8, model=_gpt_wide(20480), training=BF16)
    call_bytes = 2 * dense / 8
    gather_s = 8 * tables.collective_time_s("all_gather", call_bytes, 64, 8)
    reduce_s = 8 * tables.collective_time_s("reduce_scatter", call_bytes, 64, 8)
    assert dp_time(est, full, 8, dense, 0.0, lt, 0.0, 1)[1] == pytest.approx((2 + 2 / 3) * gather_s + reduce_s,
                                                                             rel=1e-6)


def test_a_pipeline_whose_fsdp_reshards_after_forward_gathers_once_more_than_its_micro_batches():
    from cost_model.dp_time import dp_rounds, dp_time

    # 1F1B on the first of 2 stages, 4 micro-batches: F1 F2 B1 F3 B2 F4 B3 B4. With the weights freed
    # after each forward and kept from a backward to the next forward, F1, F2 and every backward that
    # follows a forward gather (B1, B2, B3): 5 = m + 1. The last stage (F1 B1 F2 B2 ...) gathers at F1
    # and at each backward: 5 too. One reduce-scatter, at the last backward.
    plan = ParallelPlan(dp=4, tp=4, pp=2, zero_stage=2, num_microbatches=4)
    kempnerforge = get_framework("torchtitan").with_overrides(pp_reshard_after_forward=True,
                                                              zero2_reduce_every_microbatch=False)
    torchtitan = get_framework("torchtitan")
    assert dp_rounds(plan, 4, kempnerforge) == (5, 1)
    assert dp_rounds(plan, 4, torchtitan) == (1, 1)
    assert dp_rounds(plan.replace(pp=1), 4, kempnerforge) == (1, 1)        # no pipeline, no re-gathers
    # torchtitan keeps FSDP2's gradient sync on: without a pipeline each of the 4 backwards reduces
    assert dp_rounds(plan.replace(pp=1), 4, torchtitan) == (1, 4)

    # In the step, nothing hidden: one reduce-scatter (fp32 gradients, 4 B) and 5 all-gathers (bf16
    # weights, 2 B) of 4 layers' 2^24 parameters over 4 ranks, each per layer (FSDP's unit).
    tables = ProfileTables(builtin_profile("h100-80gb"))
    lt = SimpleNamespace(gemm_bwd_s=0.0, attn_bwd_s=0.0, gemm_fwd_s=0.0, attn_fwd_s=0.0)
    framework = kempnerforge.with_overrides(dp_comm_overlap=0.0)
    est = SimpleNamespace(tables=tables, framework=framework, gpus_per_node=4, model=_gpt(8), training=BF16)
    dense = 4 * 2 ** 24
    calls = 4
    gather_s = calls * tables.collective_time_s("all_gather", 2 * dense / calls, 4, 1)
    reduce_s = calls * tables.collective_time_s("reduce_scatter", 4 * dense / calls, 4, 1)
    assert dp_time(est, plan, 4, dense, 0.0, lt, 0.0, 4)[1] == pytest.approx(reduce_s + 5 * gather_s, rel=1e-6)


def test_zero1_weights_synced_by_one_broadcast_per_rank_pay_a_ring_each_and_stay_exposed():
    from cost_model.dp_time import dp_time

    profile = builtin_profile("h100-80gb")
    tables = ProfileTables(profile)
    plan = ParallelPlan(dp=1024, zero_stage=1)
    # Backward long enough to hide every bucketed collective, so only what cannot hide shows.
    lt = SimpleNamespace(gemm_bwd_s=1.0, attn_bwd_s=0.0, gemm_fwd_s=0.0, attn_fwd_s=0.0)
    node_bytes_per_s = 8 * profile.inter_node_bandwidth_bytes_per_s * 0.90

    def ring_s(op, num_bytes):
        wire = 2.0 if op == "all_reduce" else 1.0   # an all-reduce moves each byte out and back
        return nccl_inter_node_latency_s(op, 1024) + wire * num_bytes * 1023 / 1024 / node_bytes_per_s

    # InternEvo's Hybrid ZeRO over 1,024 ranks: the 100 gradient buckets are all-reduced over every
    # rank (16 MiB of fp32 each here); the 800 MiB of bf16 weights come back as 1,024 broadcasts of
    # 800 KiB, each a ring over the 1,024 ranks, after the step: none of them hidden.
    framework = get_framework("megatron-core").with_overrides(
        dp_bucket_params=2 ** 22, dp_bucket_params_per_rank=0.0, dp_param_gather_overlap=False,
        dp_comm_overlap=1.0, overlap_contention=0.0, zero1_broadcast_sync=True)
    est = SimpleNamespace(tables=tables, framework=framework, gpus_per_node=8, training=BF16)
    exposed, total, _ = dp_time(est, plan, 32, 100 * 2 ** 22, 0.0, lt, 0.0, 1)
    broadcasts = 1024 * ring_s("all_gather", 2 * 100 * 2 ** 22 / 1024)
    assert total == pytest.approx(100 * ring_s("all_reduce", 2 ** 24) + broadcasts, rel=5e-3)
    # The all-reduces hide under the backward but their last bucket; the broadcasts all show.
    assert exposed == pytest.approx(ring_s("all_reduce", 2 ** 24) + broadcasts, rel=5e-3)
    # 1,024 ring latencies: about 3 s at this scale, where one bucketed all-gather hides under compute.
    assert broadcasts > 1024 * nccl_inter_node_latency_s("all_gather", 1024) > 3.0


def test_zero1_weights_broadcast_inside_the_node_when_its_zero_group_is_the_node():
    from cost_model.dp_time import dp_time

    profile = builtin_profile("h100-80gb")
    tables = ProfileTables(profile)
    # InternEvo zero1=8 on 64 GPUs (8 nodes, dp = 64): the optimizer states shard over the 8 ranks of a
    # node (ParallelPlan.zero_shard), the gradients are still all-reduced over all 64 ranks
    # (hybrid_zero_optim.py reduces over ParallelMode.DATA), and the weights come back as 8 broadcasts
    # over NVLink, not 64 over the network, and no extra all-reduce over the 8 replicas of a shard.
    plan = ParallelPlan(dp=64, zero_stage=1, zero_shard=8)
    lt = SimpleNamespace(gemm_bwd_s=10.0, attn_bwd_s=0.0, gemm_fwd_s=0.0, attn_fwd_s=0.0)
    framework = get_framework("megatron-core").with_overrides(
        dp_bucket_params=2 ** 23, dp_bucket_params_per_rank=0.0, dp_param_gather_overlap=False,
        dp_comm_overlap=1.0, overlap_contention=0.0, zero1_broadcast_sync=True, main_grad_reduce_bytes=2.0)
    est = SimpleNamespace(tables=tables, framework=framework, gpus_per_node=8, training=BF16)
    params = 100 * 2 ** 23
    _, total, wire = dp_time(est, plan, 32, params, 0.0, lt, 0.0, 1)
    node_bytes_per_s = 8 * profile.inter_node_bandwidth_bytes_per_s * 0.90
    all_reduce_s = nccl_inter_node_latency_s("all_reduce", 64) + 2.0 * 2 ** 24 * 63 / 64 / node_bytes_per_s
    broadcasts_s = 8 * tables.collective_time_s("all_gather", 2 * params / 8, 8, 8)
    assert total == pytest.approx(100 * all_reduce_s + broadcasts_s, rel=5e-3)
    # On the wire per rank: the bf16 gradients out and back, and the bf16 weights once.
    assert wire == pytest.approx(2 * 2 * params + 2 * params)
    # The broadcasts stay inside the node: a fifth of the same over the 64 ranks, or less.
    assert broadcasts_s < 64 * tables.collective_time_s("all_gather", 2 * params / 64, 64, 8) / 5
