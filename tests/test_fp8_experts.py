"""Issue 25: in an fp8 plan, whether the routed experts' GEMMs run in fp8 is the framework's
(Framework.fp8_expert_gemms): Transformer Engine's grouped linear does (megatron-core); a converter of
nn.Linear only leaves them bf16 (torchtitan 0.3.0's Float8LinearConverter as exported, the `autoplan`
executor's torchao Float8Linear).

Expected values are worked from the layer's own GEMM list: the experts priced on the bf16 table, the
rest on the fp8 one, and the fp8 casts (3 B per element of each fp8 GEMM's input) left out for the experts."""
from dataclasses import replace

import pytest

from autoplan.inputs.catalog import catalog_model
from autoplan.specs import get_framework
from cost_model.flops import layer_gemms
from cost_model.layer_time import EXPERT_GEMMS, Rates, gemms_time_s, layer_times, memory_time_s
from cost_model.profiles import builtin_profile
from cost_model.tables import ProfileTables

MIXTRAL = catalog_model("mixtral-8x7b")
TABLES = ProfileTables(builtin_profile("h100-80gb"))
FP8 = Rates(gemm_dtype="fp8", matmul_scale=1.0, fp8_scale=1.0, attention_scale=1.0, memory_scale=1.0,
            flash_attention=True)
SHAPE = dict(micro_batch=1, seq_len=4096, tp=2, cp=1, ep=4, sequence_parallel=True, gpus_per_node=8, moe=True)


def test_the_frameworks_say_where_fp8_reaches_the_experts():
    assert get_framework("megatron-core").fp8_expert_gemms          # TEGroupedMLP under fp8_autocast
    assert not get_framework("torchtitan").fp8_expert_gemms         # Float8LinearConverter: Linear configs only
    assert not get_framework("autoplan").fp8_expert_gemms           # executor/fp8.py: nn.Linear only


def test_bf16_experts_are_priced_on_the_bf16_table_and_cast_nothing():
    fp8_experts = layer_times(MIXTRAL, TABLES, FP8, **SHAPE)
    bf16_experts = layer_times(MIXTRAL, TABLES, replace(FP8, fp8_expert_gemms=False), **SHAPE)
    gemms = layer_gemms(MIXTRAL, 4096, 2, 4, True, 2)
    experts = [g for g in gemms if g.name in EXPERT_GEMMS]
    assert len(experts) == 2
    on_fp8 = gemms_time_s(TABLES, experts, FP8)
    on_bf16 = gemms_time_s(TABLES, experts, replace(FP8, gemm_dtype="bf16"))
    assert on_bf16[0] > on_fp8[0]  # the H100 table's fp8 GEMMs are faster at these shapes
    # The layer's GEMM time moves by exactly the experts' bf16-over-fp8 difference (imbalance included:
    # the busiest rank runs 1.25x the mean rank's experts, cost_model/moe_time.py).
    load = 1.25
    assert bf16_experts.gemm_fwd_s - fp8_experts.gemm_fwd_s == pytest.approx(load * (on_bf16[0] - on_fp8[0]), rel=1e-9)
    assert bf16_experts.gemm_bwd_s - fp8_experts.gemm_bwd_s == pytest.approx(load * (on_bf16[1] - on_fp8[1]), rel=1e-9)
    # The casts of the experts' inputs (3 B per element, forward) are gone; the attention's remain.
    op_bytes = 2 * 4096 * MIXTRAL.hidden_size / 2
    everything = memory_time_s(TABLES, sum(3.0 * g.m * g.k * g.count for g in gemms), op_bytes)
    no_experts = memory_time_s(TABLES, sum(3.0 * g.m * g.k * g.count for g in gemms if g not in experts), op_bytes)
    assert fp8_experts.memory_fwd_s - bf16_experts.memory_fwd_s == pytest.approx(everything - no_experts, rel=1e-9)
    # A bf16 plan is the same either way.
    bf16 = replace(FP8, gemm_dtype="bf16")
    assert layer_times(MIXTRAL, TABLES, bf16, **SHAPE) == layer_times(MIXTRAL, TABLES, replace(bf16, fp8_expert_gemms=False),
                                                                     **SHAPE)
