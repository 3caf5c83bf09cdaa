"""Issue 48: an fp8 forward GEMM runs cuBLASLt's fast accumulation (Transformer Engine `_2X_ACC_FPROP =
False`, torchao `gemm_config_output` use_fast_accum=True) while the profile's fp8 table times `_scaled_mm`
with split accumulation, as the backward GEMMs run (cost_model/layer_time.py FP8_FPROP_FAST_ACCUM_SPEEDUP).

Worked example: one GEMM of Llama-3-8B's MLP (4096 tokens x 4096 -> 14336, tp 1) priced straight from
the H100 table's fp8 rate at that shape, forward divided by the speed-up, backward (dgrad and wgrad, the
same FLOPs each) at the table's rate; bf16 untouched."""
import pytest

from cost_model.flops import Gemm
from cost_model.layer_time import FP8_FPROP_FAST_ACCUM_SPEEDUP, Rates, gemms_time_s
from cost_model.profiles import builtin_profile
from cost_model.tables import ProfileTables

TABLES = ProfileTables(builtin_profile("h100-80gb"))
RATES = dict(matmul_scale=0.9, fp8_scale=1.1, attention_scale=1.0, memory_scale=1.0, flash_attention=True)


def test_fp8_forward_gemms_run_fast_accumulation_and_backward_does_not():
    assert 1.1 <= FP8_FPROP_FAST_ACCUM_SPEEDUP <= 1.2      # pytorch/ao issue 2377: 1.1-1.2x
    up = Gemm("mlp_in", 4096, 14336, 4096)
    flops = 2 * 4096 * 14336 * 4096
    fp8_rate = TABLES.matmul_flops_per_s(4096, 14336, 4096, "fp8") * 0.9 * 1.1
    fwd_s, bwd_s = gemms_time_s(TABLES, [up], Rates(gemm_dtype="fp8", **RATES))
    assert fwd_s == pytest.approx(flops / (fp8_rate * FP8_FPROP_FAST_ACCUM_SPEEDUP), rel=1e-3)
    # dgrad (4096 x 4096 x 14336) and wgrad (4096 x 14336 x 4096): the table's rate at their own shapes.
    dgrad = flops / (TABLES.matmul_flops_per_s(4096, 4096, 14336, "fp8") * 0.9 * 1.1)
    wgrad = flops / (TABLES.matmul_flops_per_s(4096, 14336, 4096, "fp8") * 0.9 * 1.1)
    assert bwd_s == pytest.approx(dgrad + wgrad, rel=1e-3)
    bf16_fwd_s, _ = gemms_time_s(TABLES, [up], Rates(gemm_dtype="bf16", **RATES))
    assert bf16_fwd_s == pytest.approx(flops / (TABLES.matmul_flops_per_s(4096, 14336, 4096, "bf16") * 0.9), rel=1e-3)


def test_a_norm_that_writes_fp8_leaves_its_linears_nothing_to_cast():
    """Transformer Engine's LayerNormLinear (Framework.fp8_norm_writes_fp8): the norm writes the fused QKV's and
    the MLP input's fp8 input, 1 B per element instead of bf16's 2 (no 3 B cast), and the backward transposes
    it for the weight gradient (1 B read + 1 B written). Llama-3-8B, one sequence of 4096 tokens, tp 1: both
    GEMMs read 4096 x 4096 inputs."""
    from dataclasses import replace

    from autoplan.inputs.catalog import catalog_model
    from cost_model.layer_time import layer_times, memory_time_s

    model = catalog_model("llama-3-8b")
    shape = dict(micro_batch=1, seq_len=4096, tp=1, cp=1, ep=1, sequence_parallel=False, gpus_per_node=8)
    rates = Rates(gemm_dtype="fp8", **RATES)
    casts, fused = layer_times(model, TABLES, rates, **shape), \
        layer_times(model, TABLES, replace(rates, fp8_norm_writes_fp8=True), **shape)
    elements = 2 * 4096 * 4096                             # qkv's and mlp_in's inputs
    op_bytes = 2 * 4096 * 4096                             # one bf16 activation: the memory table's op size
    assert casts.memory_fwd_s - fused.memory_fwd_s == pytest.approx(memory_time_s(TABLES, 4.0 * elements, op_bytes))
    assert fused.memory_bwd_s - casts.memory_bwd_s == pytest.approx(memory_time_s(TABLES, 2.0 * elements, op_bytes))
    assert fused.gemm_fwd_s == casts.gemm_fwd_s
