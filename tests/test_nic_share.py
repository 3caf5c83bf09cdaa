"""Issue 49: traffic that leaves a node is priced at the NIC share it crosses.

A ring (all-reduce, all-gather, reduce-scatter) runs one ring per NIC and reaches the node's NIC total
(8 x 45 GB/s on a DGX H100). An all-to-all sends each GPU's off-node share through that GPU's own NIC
and cannot aggregate several (NVIDIA/nccl-tests issues #130 and #267), and a pipeline send is one pair
over one NIC: both run at one NIC share, 45 GB/s (0.9 x 400 Gb/s; DeepEP's measured 43-58 GB/s of RDMA
per CX7 NIC). Every expected figure below is worked by hand from those bandwidths, not read back.
"""
from pathlib import Path

import pytest

from autoplan.inputs.catalog import catalog_model, resolve_model
from autoplan.specs import ClusterSpec, CollectiveSample, HardwareProfile, ParallelPlan, TrainingSpec
from cost_model import Estimator
from cost_model.constants import load_constants
from cost_model.layer_time import dispatch_times_s
from cost_model.moe_time import remote_nodes_per_token
from cost_model.profiles import builtin_profile
from cost_model.tables import ProfileTables

MIB = 2 ** 20
NIC_SHARE = 0.9 * 50e9        # one 400 Gb/s NIC at 90 % of line rate
NVLINK_A2A = 370e9            # all-to-all bus bandwidth inside an 8 x H100 node (nccl-tests' ~370 GB/s)
QWEN3_30B = resolve_model(str(Path(__file__).parent / "fixtures" / "hf_configs" / "qwen3-30b-a3b.json"))


def _ep_comm_s(ep: int) -> float:
    est = Estimator(QWEN3_30B, TrainingSpec(global_batch_size=1024, seq_len=4096), ClusterSpec("h100-80gb", 64),
                    builtin_profile("h100-80gb"), framework=load_constants().framework("megatron-core"))
    plan = ParallelPlan(dp=64, tp=1, pp=1, ep=ep, zero_stage=1, micro_batch_size=1, num_microbatches=16)
    return est.estimate(plan).time_breakdown_s["ep_comm"]


def test_qwen3_30b_all_to_all_across_two_nodes_runs_at_one_nic_share():
    # Qwen3-30B-A3B (h 2048, 128 experts top-8, 48 layers) on 64 H100, megatron-core tp1 pp1 zero1,
    # 1024 x 4096 tokens: 16 micro-batches of 4096 tokens per replica. Each all-to-all moves a rank's
    # routed copies, 2 B x 4096 tokens x 8 x 2048 = 128 MiB; a layer runs dispatch + combine in the
    # forward and again in the backward: 48 x 16 x 4 = 3072 all-to-alls, paced by the busiest rank's
    # 1.25x the mean load (the framework's default).
    size = 2 * 4096 * 8 * 2048
    assert size == 128 * MIB
    count = 48 * 16 * 4 * 1.25
    # ep 8, one node: 7/8 of the buffer over NVLink at 370 GB/s, + NCCL's 8 us.
    ep8 = count * (size * 7 / 8 / NVLINK_A2A + 8e-6)
    # ep 16 over two nodes: half of every GPU's buffer leaves the node through its own NIC, at 45 GB/s,
    # + one network hop of 15 us x (1 + log2(16/8)/4); the 7/16 on NVLink meanwhile takes 0.16 ms, not
    # the 1.5 ms the NIC does, so the NIC binds.
    ep16 = count * (size / 2 / NIC_SHARE + 15e-6 * 1.25)
    assert size * 7 / 16 / NVLINK_A2A < size / 2 / NIC_SHARE / 5
    assert _ep_comm_s(8) == pytest.approx(ep8, rel=0.02)         # 1.25 s
    assert _ep_comm_s(16) == pytest.approx(ep16, rel=0.02)       # 5.80 s (the node's NIC total gave 1.43 s)
    assert _ep_comm_s(16) / _ep_comm_s(8) >= 3                   # 4.6x: the bar


def test_a_pipeline_send_across_nodes_crosses_one_nic():
    # Qwen3-8B (h 4096) on 16 H100 at tp 8 pp 2: the two stages sit on two nodes. Each micro-batch sends
    # its activation forward and its gradient back, 2 B x 4096 tokens x 4096 / tp 8 = 4 MiB with
    # Megatron's scatter/gather, each through one GPU's NIC share, + the network hop (18.75 us).
    est = Estimator(catalog_model("qwen3-8b"), TrainingSpec(global_batch_size=16, seq_len=4096),
                    ClusterSpec("h100-80gb", 16), builtin_profile("h100-80gb"),
                    framework=load_constants().framework("megatron-core"))
    plan = ParallelPlan(dp=1, tp=8, pp=2, sequence_parallel=True, zero_stage=1, micro_batch_size=1,
                        num_microbatches=16)
    send_s = 4 * MIB / NIC_SHARE + 15e-6 * 1.25
    assert est.estimate(plan).time_breakdown_s["pp_comm"] == pytest.approx(16 * 2 * send_s, rel=0.02)
    tables = ProfileTables(builtin_profile("h100-80gb"))
    # Inside a node the same send rides NVLink (80 % of 450 GB/s, + 8 us): 3.6x faster here.
    assert tables.collective_time_s("send_recv", 4 * MIB, 2, 2) == pytest.approx(4 * MIB / 360e9 + 8e-6, rel=0.02)


def test_rings_across_nodes_keep_the_nodes_nic_total():
    # An all-gather of 1 GiB over 16 ranks on two nodes: (n-1)/n of it over 8 NICs at 45 GB/s each, + NCCL's
    # ring latency (8.4 us + 14 NVLink steps x 3.4 us + 1 network step x 14 us = 70 us).
    tables = ProfileTables(builtin_profile("h100-80gb"))
    gib = 2 ** 30
    ring_s = gib * 15 / 16 / (8 * NIC_SHARE) + 70e-6
    assert tables.collective_time_s("all_gather", gib, 16, 8) == pytest.approx(ring_s, rel=0.01)


def _measured(collectives: tuple) -> HardwareProfile:
    base = builtin_profile("h100-80gb")
    return HardwareProfile(
        name="two-nodes", device_name=base.device_name, gpus_per_node=8, memory_capacity_bytes=base.memory_capacity_bytes,
        memory_bandwidth_bytes_per_s=base.memory_bandwidth_bytes_per_s, peak_flops_per_s=dict(base.peak_flops_per_s),
        intra_node_bandwidth_bytes_per_s=450e9, inter_node_bandwidth_bytes_per_s=NIC_SHARE, measured=True,
        matmul=base.matmul, memory_ops=base.memory_ops, collectives=collectives, num_nodes=2)


def test_a_measured_all_to_all_is_read_by_the_bytes_that_left_the_node():
    gib = 2 ** 30
    intra = CollectiveSample("all_to_all", "intra_node", 8, gib, NVLINK_A2A, ranks_per_node=8)
    # nccl-tests' alltoall over 2 full nodes reports bus bandwidth (n-1)/n x S / t, where t is the NIC's
    # S/2 at 45 GB/s: 15/16 x 90 = 84.4 GB/s, "2x the network bandwidth per GPU" (issue #130).
    full = CollectiveSample("all_to_all", "inter_node", 16, gib, 15 / 16 * 2 * NIC_SHARE, ranks_per_node=8)
    # The one-rank-per-node groups of `autoplan profile` send all of it off the node: bus bandwidth = NIC.
    one = CollectiveSample("all_to_all", "inter_node", 2, gib, NIC_SHARE, ranks_per_node=1)
    ring = CollectiveSample("all_reduce", "inter_node", 16, gib, 8 * NIC_SHARE, ranks_per_node=8)
    for rows in ((intra, full, ring), (intra, one, ring)):
        tables = ProfileTables(_measured(rows))
        # 64 ranks on 8 nodes: 56/64 of each GPU's buffer leaves its node through its NIC.
        assert tables.collective_time_s("all_to_all", gib, 64, 8) == pytest.approx(gib * 56 / 64 / NIC_SHARE, rel=0.01)
    # A profile with only ring samples across nodes answers an all-to-all with its own NIC share
    # (inter_node_bandwidth_bytes_per_s), never the ring's node total.
    tables = ProfileTables(_measured((intra, ring)))
    assert tables.collective_time_s("all_to_all", gib, 16, 8) == pytest.approx(gib / 2 / NIC_SHARE, rel=0.01)
    assert tables.collective_time_s("send_recv", gib, 2, 1) == pytest.approx(gib / NIC_SHARE, rel=0.01)


def test_a_profiles_samples_say_how_many_ranks_shared_a_node():
    profile = builtin_profile("h100-80gb")
    inter = {(s.op, s.ranks_per_node) for s in profile.collectives if s.scope == "inter_node"}
    assert {rpn for _, rpn in inter} == {8}
    assert all(s.ranks_per_node == s.group_size for s in profile.collectives if s.scope == "intra_node")
    again = HardwareProfile.from_dict(profile.to_dict())
    assert again.collectives == profile.collectives
    # A profile written before the field reads as groups that fill their nodes.
    old = profile.to_dict()
    for row in old["collectives"]:
        del row["ranks_per_node"]
    assert HardwareProfile.from_dict(old).collectives[0].ranks_per_node == 0


# -- Hierarchical dispatch: Megatron-Core's flex dispatcher on DeepEP (megatron-core+flex-deepep) ---------

QWEN3_235B = catalog_model("qwen3-235b-a22b")  # h 4096, 128 experts top-8


def test_a_token_reaches_fewer_nodes_than_it_has_copies():
    # 128 experts on 4 nodes, 32 each; a token's 8 distinct experts miss a given node with probability
    # (96 x 95 x ... x 89) / (128 x 127 x ... x 121) = 0.0927, so it reaches 3 x 0.907 = 2.72 of the
    # 3 other nodes, where the alltoall dispatcher sends 8 x 3/4 = 6 copies across the network.
    missed = 1.0
    for i in range(8):
        missed *= (96 - i) / (128 - i)
    assert missed == pytest.approx(0.0927, abs=1e-4)
    assert remote_nodes_per_token(128, 8, 4) == pytest.approx(3 * (1 - missed))
    assert remote_nodes_per_token(128, 8, 1) == 0.0
    # 256 experts (DeepSeek-V3) over 32 nodes of 8: a node is missed with probability (248 x ... x 241) /
    # (256 x ... x 249) = 0.773, so a token reaches 31 x 0.227 = 7.04 other nodes: nearly one per copy,
    # so little to save without node-limited routing.
    assert remote_nodes_per_token(256, 8, 32) == pytest.approx(7.04, abs=0.01)


def test_deepep_sends_a_token_once_per_node_where_alltoall_sends_every_copy():
    # Qwen3-235B at tp 2, ep 32 over 4 nodes: each rank routes its 2048 sequence-parallel tokens.
    # alltoall: 8 copies x 4096 x 2 B each, 128 MiB, 3/4 of it through the NIC at 45 GB/s.
    # flex/DeepEP: each token once per remote node it reaches, 2048 x 2.72 x 8 KiB = 45.7 MB at 45 GB/s,
    # its 7/8 of the copies forwarded over NVLink meanwhile (0.3 ms, not binding).
    tables = ProfileTables(builtin_profile("h100-80gb"))
    alltoall_s, _ = dispatch_times_s(QWEN3_235B, tables, "alltoall", 4096, tp=2, ep=32, etp=1, gpus_per_node=8)
    flex_s, _ = dispatch_times_s(QWEN3_235B, tables, "flex", 4096, tp=2, ep=32, etp=1, gpus_per_node=8)
    copies = 2 * 2048 * 8 * 4096
    assert alltoall_s == pytest.approx(2 * copies * 3 / 4 / NIC_SHARE, rel=0.02)
    nic_bytes = 2 * 2048 * 4096 * remote_nodes_per_token(128, 8, 4)
    assert flex_s == pytest.approx(2 * nic_bytes / NIC_SHARE, rel=0.02)
    assert alltoall_s / flex_s == pytest.approx(6 / 2.72, rel=0.03)
    # Inside one node (ep 8) DeepEP's exchange is the NVLink all-to-all the alltoall dispatcher runs.
    assert dispatch_times_s(QWEN3_235B, tables, "flex", 4096, tp=2, ep=8, etp=1, gpus_per_node=8) == \
        pytest.approx(dispatch_times_s(QWEN3_235B, tables, "alltoall", 4096, tp=2, ep=8, etp=1, gpus_per_node=8))


def test_the_flex_option_is_refused_without_expert_ranks_and_exported_with_its_flags():
    from autoplan.exporters import export_plan
    from autoplan.specs import InfeasiblePlan, PlanDocument, get_framework
    from tests.framework_acceptance import megatron_accepts
    from tests.test_export import export_megatron_args

    flex = get_framework("megatron-core+flex-deepep")
    assert flex.moe_dispatch == "flex"
    training = TrainingSpec(global_batch_size=256, seq_len=4096)
    with pytest.raises(InfeasiblePlan, match="flex"):
        flex.check(QWEN3_235B, training, ParallelPlan(dp=16, tp=1, ep=1, zero_stage=1, micro_batch_size=1,
                                                      num_microbatches=16))
    plan = ParallelPlan(dp=16, tp=2, ep=32, etp=1, sequence_parallel=True, zero_stage=1, micro_batch_size=1,
                        num_microbatches=16, pp=2)
    flex.check(QWEN3_235B, training, plan)
    doc = PlanDocument(model=QWEN3_235B, training=training, cluster=ClusterSpec(name="h100-80gb", num_gpus=64),
                       parallel=plan, framework="megatron-core+flex-deepep")
    args = export_megatron_args(doc)
    assert (args["--moe-token-dispatcher-type"], args["--moe-flex-dispatcher-backend"]) == ("flex", "deepep")
    assert megatron_accepts(export_plan(doc, "megatron").text, 64) == ""


def test_node_limited_routing_caps_the_nodes_a_token_reaches():
    # DeepSeek-V3: 256 experts in 8 groups of 32, each token picks its 8 experts from 4 groups (n_group 8,
    # topk_group 4). At ep 64 over 8 nodes a node holds one group: it is open to a token with
    # probability 4/8, and then holds 32 of the 128 open experts, missed with probability
    # (96 x ... x 89) / (128 x ... x 121) = 0.0927: 8 x 1/2 x 0.9073 = 3.63 nodes reached, 7/8 of them
    # remote, 3.18. Without the groups: 7 x (1 - (224 x ... x 217) / (256 x ... x 249)) = 4.63.
    missed_open, missed_all = 1.0, 1.0
    for i in range(8):
        missed_open *= (96 - i) / (128 - i)
        missed_all *= (224 - i) / (256 - i)
    assert remote_nodes_per_token(256, 8, 8, 8, 4) == pytest.approx(8 * 0.5 * (1 - missed_open) * 7 / 8)
    assert remote_nodes_per_token(256, 8, 8) == pytest.approx(7 * (1 - missed_all))
    assert remote_nodes_per_token(256, 8, 8, 8, 4) == pytest.approx(3.18, abs=0.01)
    # Two nodes of 4 groups each: the token's 4 groups all land on one node with probability
    # 2 x C(4,4)/C(8,4) = 1/35; otherwise both nodes are open.
    two = remote_nodes_per_token(256, 8, 2, 8, 4)
    assert remote_nodes_per_token(256, 8, 2) > two > 0.5 * (1 - 2 / 70)


def test_deepseek_v3_carries_its_group_limited_routing_to_megatron():
    from autoplan.exporters import export_plan
    from autoplan.inputs.hf_config import load_hf_config
    from autoplan.specs import PlanDocument
    from tests.framework_acceptance import megatron_accepts
    from tests.test_export import export_megatron_args

    fixtures = Path(__file__).parent / "fixtures" / "hf_configs"
    v3 = catalog_model("deepseek-v3")
    assert (v3.moe_router_num_groups, v3.moe_router_group_topk) == (8, 4)
    read = load_hf_config(fixtures / "deepseek-v3.json")
    assert (read.moe_router_num_groups, read.moe_router_group_topk) == (8, 4)
    v2 = load_hf_config(fixtures / "deepseek-v2.json")  # group_limited_greedy, device-limited: 3 of 8
    assert (v2.moe_router_num_groups, v2.moe_router_group_topk) == (8, 3)
    plan = ParallelPlan(dp=32, tp=2, pp=16, ep=64, etp=1, sequence_parallel=True, zero_stage=1, micro_batch_size=1,
                        num_microbatches=64, recompute="full", recompute_num_layers=4)
    doc = PlanDocument(model=v3, training=TrainingSpec(global_batch_size=2048, seq_len=4096),
                       cluster=ClusterSpec(name="h100-80gb", num_gpus=1024), parallel=plan,
                       framework="megatron-core+flex-deepep")
    args = export_megatron_args(doc)
    assert (args["--moe-router-num-groups"], args["--moe-router-group-topk"]) == ("8", "4")
    assert megatron_accepts(export_plan(doc, "megatron").text, 1024) == ""


def test_a_learned_all_to_all_table_learns_the_nic_share():
    # Two nodes of 8: one-rank-per-node groups (n 2) report bus bandwidth = the NIC share, 45 GB/s; the
    # full 16 ranks report 15/16 x 90 = 84.4 GB/s for the same NIC. A regressor over raw bus bandwidth
    # would average the two; learned as NIC shares they agree, and the rows it writes read back as 45 GB/s.
    from dataclasses import replace

    from cost_model.learned.ops import learned_rows, fit_op_models

    rows = tuple(CollectiveSample("all_to_all", "inter_node", n, 2 ** e, busbw, ranks_per_node=rpn)
                 for e in (20, 24, 28, 30) for n, rpn, busbw in ((2, 1, NIC_SHARE), (16, 8, 15 / 16 * 2 * NIC_SHARE)))
    profile = _measured(rows + (CollectiveSample("all_to_all", "intra_node", 8, 2 ** 30, NVLINK_A2A, ranks_per_node=8),))
    (fit,) = [f for f in fit_op_models(profile) if f.group == ("all_to_all", "inter_node")]
    learned = learned_rows(fit, profile.peak)
    assert all(s.ranks_per_node == 1 for s in learned)
    tables = ProfileTables(replace(profile, collectives=tuple(learned) + profile.collectives[-1:]))
    gib = 2 ** 30
    assert tables.collective_time_s("all_to_all", gib, 16, 8) == pytest.approx(gib / 2 / NIC_SHARE, rel=0.02)
