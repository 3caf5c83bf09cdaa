"""How a MoE layer's tokens reach its experts (Framework.moe_dispatch; cost_model/layer_time.py
dispatch_times_s): each dispatcher's collectives, sized from worked examples, and the TP collectives a
MoE layer keeps under Megatron-Core's dispatchers."""
from dataclasses import replace

import pytest

from autoplan.specs import ModelSpec, get_framework
from autoplan.specs.framework_facts import MoEFacts
from cost_model import builtin_profile
from cost_model.layer_time import Rates, dispatch_times_s, layer_times
from cost_model.tables import ProfileTables

# Qwen3-235B-A22B's MoE shape: h 4096, 128 experts, top-8.
QWEN3 = ModelSpec(name="q3", num_layers=4, hidden_size=4096, num_heads=64, num_kv_heads=4, ffn_hidden_size=1536,
                  vocab_size=151936, head_dim=128, num_experts=128, num_experts_per_token=8,
                  moe_ffn_hidden_size=1536)
TABLES = ProfileTables(builtin_profile("h100-80gb"))
MIB = 2 ** 20
# 4096 tokens per micro-batch at tp 2: each rank routes its 2048 sequence-parallel tokens, 8 copies of
# 4096 bf16 values each: 2 x 2048 x 8 x 4096 B = 128 MiB.
ROUTED = 128 * MIB


def _collective(op, size, group, per_node):
    return TABLES.collective_time_s(op, size, group, per_node)


def test_megatron_alltoall_sends_the_routed_copies_then_gathers_them_over_expert_tp():
    # etp 1: one all-to-all each way over the 8 ep ranks (consecutive: 8 to a node).
    assert dispatch_times_s(QWEN3, TABLES, "alltoall", 4096, tp=2, ep=8, etp=1, gpus_per_node=8) == \
        pytest.approx((2 * _collective("all_to_all", ROUTED, 8, 8), 0.0))
    # etp 2: the ep ranks sit 2 apart (4 to a node); each rank then all-gathers its etp partner's
    # copies (2 x 128 MiB gathered) and reduce-scatters them back.
    routed_s, fixed_s = dispatch_times_s(QWEN3, TABLES, "alltoall", 4096, tp=2, ep=8, etp=2, gpus_per_node=8)
    assert routed_s == pytest.approx(2 * _collective("all_to_all", ROUTED, 8, 4)
                                     + _collective("all_gather", 2 * ROUTED, 2, 2)
                                     + _collective("reduce_scatter", 2 * ROUTED, 2, 2))
    assert fixed_s == 0.0
    # No expert parallelism, experts split over 4 ranks (tp 1: all 4096 tokens routed, 256 MiB): the
    # expert-TP gather is the whole of it.
    assert dispatch_times_s(QWEN3, TABLES, "alltoall", 4096, tp=1, ep=1, etp=4, gpus_per_node=8)[0] == \
        pytest.approx(_collective("all_gather", 4 * 2 * ROUTED, 4, 4) + _collective("reduce_scatter", 4 * 2 * ROUTED, 4, 4))


def test_megatron_allgather_moves_every_token_of_the_group_whatever_the_routing():
    # etp 2 x ep 4 = 8 ranks gather their 2048 tokens each: 8 x 2048 x 4096 x 2 B = 128 MiB, one
    # all-gather and one reduce-scatter; nothing scales with the routing.
    assert dispatch_times_s(QWEN3, TABLES, "allgather", 4096, tp=2, ep=4, etp=2, gpus_per_node=8) == \
        pytest.approx((0.0, _collective("all_gather", 128 * MIB, 8, 8) + _collective("reduce_scatter", 128 * MIB, 8, 8)))
    assert dispatch_times_s(QWEN3, TABLES, "allgather", 4096, tp=1, ep=1, etp=1, gpus_per_node=8) == (0.0, 0.0)


def test_tp_gathered_dispatch_is_one_all_to_all_of_the_gathered_copies():
    # The layer's input was gathered over tp: with the experts split over etp = tp = 2 ranks, a rank's
    # share of the routed copies is 2 x 128 MiB; its ep ranks sit 2 apart.
    assert dispatch_times_s(QWEN3, TABLES, "tp-gathered", 4096, tp=2, ep=8, etp=2, gpus_per_node=8) == \
        pytest.approx((2 * _collective("all_to_all", 2 * ROUTED, 8, 4), 0.0))


def _tp_bytes(model, dispatch):
    rates = Rates(gemm_dtype="bf16", matmul_scale=1.0, fp8_scale=1.0, attention_scale=1.0, memory_scale=1.0,
                  flash_attention=True, moe=MoEFacts(moe_dispatch=dispatch))
    return layer_times(model, TABLES, rates, 1, 4096, tp=4, cp=1, ep=8, sequence_parallel=True, gpus_per_node=8,
                       moe=True, etp=1).tp_bytes


def test_megatron_moe_layer_keeps_only_the_attention_blocks_tp_collectives():
    # With SP each pair is an all-gather and a reduce-scatter of the 4096 x 4096 x 2 B buffer; on the
    # wire (tp-1)/tp of it each: forward 2 per pair, backward 2 per pair.
    buffer = 4096 * 4096 * 2
    assert _tp_bytes(QWEN3, "tp-gathered") == pytest.approx(8 * 3 / 4 * buffer)   # attention + MLP pairs
    assert _tp_bytes(QWEN3, "alltoall") == pytest.approx(4 * 3 / 4 * buffer)      # attention pair only
    assert _tp_bytes(QWEN3, "allgather") == pytest.approx(4 * 3 / 4 * buffer)
    # A shared expert is a TP-split MLP on the sequence-parallel input: it keeps its pair.
    shared = replace(QWEN3, shared_expert_ffn_size=1536)
    assert _tp_bytes(shared, "alltoall") == pytest.approx(8 * 3 / 4 * buffer)


def test_megatron_core_costs_and_exports_the_alltoall_dispatcher():
    assert get_framework("megatron-core").moe_dispatch == "alltoall"
    assert get_framework("torchtitan").moe_dispatch == "alltoall-with-ep"


def test_megatron_export_without_expert_parallelism_passes_the_costed_dispatcher_megatron_accepts():
    """An ep 1 MoE plan is costed with the alltoall dispatcher's expert-TP gather; its export says so
    (Megatron's default would be the allgather dispatcher) and Megatron-Core's own config takes it."""
    from autoplan.exporters import export_plan
    from autoplan.specs import ClusterSpec, ParallelPlan, PlanDocument, TrainingSpec
    from tests.framework_acceptance import megatron_accepts
    from tests.test_export import MIXTRAL, export_megatron_args

    plan = ParallelPlan(dp=8, tp=2, ep=1, zero_stage=1, sequence_parallel=True, micro_batch_size=1,
                        num_microbatches=16)
    doc = PlanDocument(model=MIXTRAL, training=TrainingSpec(global_batch_size=128, seq_len=4096),
                       cluster=ClusterSpec(name="h100-80gb", num_gpus=16), parallel=plan, framework="megatron-core")
    assert export_megatron_args(doc)["--moe-token-dispatcher-type"] == "alltoall"
    assert megatron_accepts(export_plan(doc, "megatron").text, 16) == ""
