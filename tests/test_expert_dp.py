"""The expert parameters' gradients sync over the expert data-parallel group, not the dense one, from a
worked example: Megatron-Core keeps them in a buffer of their own over tp*cp*dp / (etp*ep) ranks that sit
etp*ep apart (expert rank order tp-ep-dp), so a small group spread over the nodes pays one NIC share per
rank where the dense group's ranks share their node's NICs."""
import math
from types import SimpleNamespace

import pytest

from autoplan.specs import ParallelPlan, get_framework
from cost_model.dp_time import dp_groups, dp_time
from cost_model.profiles import builtin_profile, nccl_inter_node_latency_s
from cost_model.tables import ProfileTables

NO_OVERLAP = SimpleNamespace(gemm_bwd_s=0.0, attn_bwd_s=0.0, gemm_fwd_s=0.0, attn_fwd_s=0.0)

# Mixtral 8x7B: 32 layers of 8 experts, each three 4096 x 14336 matrices (SwiGLU).
MIXTRAL_EXPERTS_PER_LAYER = 8 * 3 * 4096 * 14336          # 1,409,286,144


def _megatron_est(profile, **overrides):
    """Megatron-Core with one collective per buffer (the bytes, not the buckets' latency, are the test)."""
    framework = get_framework("megatron-core").with_overrides(dp_bucket_params=math.inf, **overrides)
    return SimpleNamespace(tables=ProfileTables(profile), framework=framework, gpus_per_node=8,
                           training=SimpleNamespace(dtype="bf16"))


def test_mixtral_expert_gradients_cross_the_network_at_one_nic_share_per_rank():
    # Mixtral 8x7B at tp 2, ep 4 (etp = tp = 2), dp 8 on two 8-GPU nodes, distributed optimizer (ZeRO-1).
    plan = ParallelPlan(dp=8, tp=2, ep=4, zero_stage=1)
    profile = builtin_profile("h100-80gb")
    est = _megatron_est(profile)
    # A rank holds 32 layers' experts over ep x etp = 8 ranks: 5,637,144,576 parameters.
    expert = 32 * MIXTRAL_EXPERTS_PER_LAYER / (4 * 2)
    assert expert == 5_637_144_576
    # The expert data-parallel group: tp*dp / (etp*ep) = 16 / 8 = 2 ranks, 8 apart: one per node.
    _, experts = dp_groups(est, plan, 32, 1e9, expert)
    assert (experts.params, experts.group, experts.ranks_per_node) == (expert, 2, 1)
    # Its reduce-scatter of fp32 main gradients (4 B) and all-gather of bf16 weights (2 B): each rank sends
    # (n-1)/n = 1/2 of the buffer through its own NIC, one of the node's 8 shares. The built-in table's
    # node-wide ring figure for buffers past its largest sample (4 GiB over 16 ranks: 8 NICs of 400 Gb/s
    # at 90 %, behind NCCL's 16-rank ring latency) is 357.7 GB/s: 44.7 GB/s per NIC share.
    largest = 2 ** 32 * 15 / 16
    node_bus = largest / (nccl_inter_node_latency_s("reduce_scatter", 16) + largest / (8 * 50e9 * 0.90))
    assert profile.inter_node_bandwidth_bytes_per_s == 50e9
    assert ProfileTables(profile).bus_bandwidth("reduce_scatter", "inter_node", 2, 4 * expert) == pytest.approx(node_bus)
    reduce_s = 4 * expert / 2 / (node_bus / 8)
    gather_s = 2 * expert / 2 / (node_bus / 8)
    assert reduce_s + gather_s == pytest.approx(0.3782, rel=1e-3)
    # No dense parameters: the step's data-parallel seconds are the expert buffer's alone (within the ring
    # latency of 2 nodes, microseconds).
    assert dp_time(est, plan, 32, 0.0, expert, NO_OVERLAP, 0.0, 1)[1] == pytest.approx(reduce_s + gather_s, rel=2e-3)


def test_the_dense_buffer_is_priced_on_its_own_group_beside_the_experts():
    # The dense group: dp = 8 ranks tp = 2 apart, 4 per node; a ring over the two nodes at 4 of a node's
    # 8 NIC shares (180 GB/s) for its bytes, of which each rank sends (n-1)/n = 7/8.
    plan = ParallelPlan(dp=8, tp=2, ep=4, zero_stage=1)
    profile = builtin_profile("h100-80gb")
    est = _megatron_est(profile)
    dense, expert = 1e9, 32 * MIXTRAL_EXPERTS_PER_LAYER / 8
    four_nics = 4 * profile.inter_node_bandwidth_bytes_per_s * 0.90
    dense_s = (4 + 2) * dense * 7 / 8 / four_nics
    expert_s = dp_time(est, plan, 32, 0.0, expert, NO_OVERLAP, 0.0, 1)[1]
    # Within 1 %: the table's figures at 2-4 GB still carry its 16-rank ring latency (0.6 %, see above).
    dense_only_s = dp_time(est, plan, 32, dense, 0.0, NO_OVERLAP, 0.0, 1)[1]
    assert dense_only_s == pytest.approx(dense_s, rel=1e-2)
    # Both buffers: each on its own group, summed.
    assert dp_time(est, plan, 32, dense, expert, NO_OVERLAP, 0.0, 1)[1] == pytest.approx(dense_only_s + expert_s, rel=1e-9)


@pytest.mark.parametrize("plan, dense_group, expert_group", [
    # Qwen3-235B-A22B as Megatron-MoE-ModelZoo ran it with FSDP: tp 2, ep 8, etp 1, dp 128 (256 GPUs). The
    # 32 expert replicas sit ep = 8 apart, one per node; the dense ranks 2 apart, 4 per node.
    (ParallelPlan(dp=128, tp=2, ep=8, etp=1, zero_stage=3), (128, 4), (32, 1)),
    # tp 1, ep 2 on 16 GPUs: 8 expert replicas 2 apart, 4 per node.
    (ParallelPlan(dp=16, ep=2, zero_stage=1), (16, 8), (8, 4)),
    # Experts split over tp 4 ranks at etp 1, ep 2, no data parallelism: the two expert replicas are TP
    # ranks of the dense layers and still reduce, inside the node.
    (ParallelPlan(dp=1, tp=4, ep=2, etp=1, zero_stage=1), None, (2, 2)),
    # ep = dp at tp 1: every expert lives on one rank, nothing to reduce.
    (ParallelPlan(dp=8, ep=8, zero_stage=1), (8, 8), None),
])
def test_each_buffer_syncs_over_its_own_group(plan, dense_group, expert_group):
    est = _megatron_est(builtin_profile("h100-80gb"))
    groups = dp_groups(est, plan, 4, 1e8, 1e9)
    want = [g for g in (dense_group, expert_group) if g]
    assert [(g.group, g.ranks_per_node) for g in groups] == want
    assert [g.params for g in groups] == [p for p, g in ((1e8, dense_group), (1e9, expert_group)) if g]


def test_without_expert_parallelism_the_experts_stay_in_the_dense_buffer():
    # ep = 1: Megatron-Core marks expert weights allreduce = not expert_parallel = True, torchtitan keeps
    # them in the block's FSDP unit: one buffer over the dense group.
    est = _megatron_est(builtin_profile("h100-80gb"))
    groups = dp_groups(est, ParallelPlan(dp=8, tp=2, zero_stage=1), 4, 1e8, 1e9)
    assert [(g.params, g.group) for g in groups] == [(1e8 + 1e9, 8)]

