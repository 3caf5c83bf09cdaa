"""flash-attn's Triton kernel pads the head width to a power of two and runs at its own fraction of the
table that prices it, and the published rows that ran it, or FlashAttention-1, say so.

The worked example is Megatron-DeepSpeed's long-sequence GPT-30B (examples_deepspeed/deepspeed4science/
megatron_long_seq_support, --use-flash-attn-triton): 64 heads of 96, TP 32, one sequence of 256k tokens.
flash_attn/flash_attn_triton.py (flash-attn v1.0.4, what the example's README installs) sets BLOCK_HEADDIM =
max(triton.next_power_of_2(d), 16): 128 at d = 96, so the kernel's dot products compute 128/96 of the useful
FLOPs, at the rate of a 128-wide kernel (FlashAttention-2's, its stand-in). Expected values are written out from those numbers and the A100 table's own rates, not from
layer_terms.
"""
from __future__ import annotations

import pytest

from autoplan.specs import ModelSpec
from cost_model import builtin_profile
from cost_model.estimator import Estimator
from cost_model.layer_terms import Rates, attention_core_times, tile_head_dim
from cost_model.published_rows import load_published_runs
from cost_model.tables import ProfileTables

SEQ, TP, HEADS, HEAD_DIM = 262144, 32, 64, 96


def _gpt30b() -> ModelSpec:
    return ModelSpec(name="gpt-30b", num_layers=64, hidden_size=HEADS * HEAD_DIM, num_heads=HEADS,
                     num_kv_heads=HEADS, ffn_hidden_size=4 * HEADS * HEAD_DIM, vocab_size=53248, mlp="gelu",
                     norm="layernorm", position="learned")


def _rates(kernel: str) -> Rates:
    return Rates(gemm_dtype="fp16", matmul_scale=1.0, fp8_scale=1.0, attention_scale=0.5, memory_scale=1.0,
                 flash_attention=True, attention_kernel=kernel)


@pytest.mark.parametrize("head_dim,tile", [(96, 128), (128, 128), (64, 64), (80, 128), (8, 16), (40, 64)])
def test_the_triton_tiles_are_the_next_power_of_two(head_dim, tile):
    assert tile_head_dim("flash-triton", head_dim) == tile
    assert tile_head_dim("flash2", head_dim) == head_dim


def test_a_triton_forward_and_backward_compute_the_padded_width_at_its_rate():
    tables = ProfileTables(builtin_profile("a100-40gb"))
    times = attention_core_times(_gpt30b(), tables, _rates("flash-triton"), 1, SEQ, TP, 1, 0)
    # causal: s^2/2 query-key pairs, 2 FLOPs per pair per width for QK^T and again for AV, 2 heads a GPU
    useful = 2.0 * 1 * (SEQ * SEQ / 2.0) * (HEADS // TP) * (2 * HEAD_DIM)
    assert times.flops == pytest.approx(useful)
    padded = useful * 128 / 96
    # no built-in table times the Triton kernel: FlashAttention-2's prices it (ATTENTION_KERNEL_STAND_IN)
    fwd_rate = tables.attention_flops_per_s(SEQ, HEADS // TP, 128, "fp16", "fwd", "flash2")
    bwd_rate = tables.attention_flops_per_s(SEQ, HEADS // TP, 128, "fp16", "bwd", "flash2")
    assert times.fwd_s == pytest.approx(padded / (fwd_rate * 0.5))
    assert times.bwd_s == pytest.approx(2.5 * padded / (bwd_rate * 0.5))


def test_flash2_computes_the_width_it_is_given():
    tables = ProfileTables(builtin_profile("a100-40gb"))
    times = attention_core_times(_gpt30b(), tables, _rates("flash2"), 1, SEQ, TP, 1, 0)
    rate = tables.attention_flops_per_s(SEQ, HEADS // TP, HEAD_DIM, "fp16", "fwd", "flash2")
    assert times.fwd_s == pytest.approx(times.flops / (rate * 0.5))


def test_the_long_sequence_rows_that_ran_it_read_the_triton_kernel():
    runs = {r.id: r for r in load_published_runs() if r.id.startswith("MDS-30B-")}
    new = {i for i, r in runs.items() if dict(r.framework_then).get("attention_kernel") == "flash-triton"}
    old = {i for i, r in runs.items() if r.flash_attention is False}
    # the README's "New Megatron-DeepSpeed" rows (8, --use-flash-attn-triton) and its two "Old" rows,
    # from before the rebase added FlashAttention, which ran the fused softmax
    assert len(new) == 8 and old == {"MDS-30B-02", "MDS-30B-04"}


def test_llm_foundrys_benchmark_rows_read_the_kernel_their_script_passed():
    runs = [r for r in load_published_runs() if r.id.startswith("LLMFOUNDRY-")]
    kernel = {r.id: dict(r.framework_then).get("attention_kernel") for r in runs}
    flash2 = {r.model.name for r in runs if kernel[r.id] == "flash2"}
    # sweep.py's --attn_impl flash: the large-scale table's 1b, 3b, 7b and 70b, three GPU counts each
    assert sum(k == "flash2" for k in kernel.values()) == 12 and len(flash2) == 4
    assert sum(k == "flash-triton" for k in kernel.values()) == len(runs) - 12


def test_the_rows_that_ran_flashattention_1_read_it():
    runs = {r.id: dict(r.framework_then).get("attention_kernel") for r in load_published_runs()}
    # FlashAttention-2's Table 1 baselines and the training README's GPT3 rows; MLPerf v3.0's TE v0.8
    assert {i for i, k in runs.items() if k == "flash1" and i.startswith("FA2-")} == {
        "FA2-1.3B-02", "FA2-1.3B-05", "FA2-2.7B-08", "FA2-2.7B-11", "FA2-125M-13", "FA2-355M-14", "FA2-760M-15"}
    assert all(k == "flash1" for i, k in runs.items() if i.startswith("MLPERF-v30-") and k)
    assert all(k == "flash2" for i, k in runs.items() if i.startswith("MLPERF-v31-") and k)


@pytest.mark.parametrize("kernel", ["flash1", "flash-triton"])
def test_on_hopper_the_untimed_kernels_read_flashattention_2_not_the_profiles_own_sdpa(kernel):
    # the H100 profile holds FlashAttention-2, cuDNN and "sdpa" (= cuDNN's rows); the fallback alone would
    # answer with "sdpa", ~1.7x FlashAttention-2 at long sequences (ATTENTION_KERNEL_STAND_IN)
    tables = ProfileTables(builtin_profile("h100-80gb"))
    for pass_ in ("fwd", "bwd"):
        rate = tables.attention_flops_per_s(16384, 32, 128, "bf16", pass_, kernel)
        assert rate == tables.attention_flops_per_s(16384, 32, 128, "bf16", pass_, "flash2")
        assert rate < 0.8 * tables.attention_flops_per_s(16384, 32, 128, "bf16", pass_, "sdpa")


def _attention_scale(run, **facts) -> float:
    framework = run.framework_facts().with_overrides(**facts)
    est = Estimator(run.model, run.training, run.cluster, run.profile(), framework=framework,
                    allow_tp_across_nodes=True)
    return est.rates.attention_scale


@pytest.mark.parametrize("kernel,scale", [("flash-triton", 0.6 * 0.5), ("flash1", 0.6), ("flash2", 0.6),
                                          ("cudnn", 0.6)])
def test_the_triton_kernel_runs_at_its_own_fraction_of_the_table_that_prices_it(kernel, scale):
    # Worked example: a framework whose attention runs at 0.6 of its kernel's table, and whose Triton
    # kernel at half of the FlashAttention-2 table that prices it: 0.3. Every other kernel keeps 0.6,
    # FlashAttention-1 too, though FlashAttention-2's table prices it as well.
    run = next(r for r in load_published_runs() if r.id.startswith("LLMFOUNDRY-"))
    assert _attention_scale(run, attention_kernel=kernel, attention_efficiency=0.6,
                            triton_attention_efficiency=0.5) == pytest.approx(scale)
