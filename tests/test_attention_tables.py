"""The built-in attention tables are the GPU records, per kernel, and each framework reads its own kernel.

Expected values come from the records' JSON entries directly (a rate, or two timings and the backward's
2.5x FLOP count), not from cost_model.attention_tables.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from autoplan.specs import ClusterSpec, HardwareProfile, ModelSpec, SchemaError, TrainingSpec
from cost_model import Estimator, builtin_profile, load_constants
from cost_model.tables import ProfileTables

RECORDS = Path(__file__).resolve().parents[1] / "cost_model" / "data" / "kernels"


def _entry(record: str, backend: str, batch: int, heads: int, seq_len: int, passes: str) -> dict:
    entries = json.loads((RECORDS / record).read_text())["entries"]
    wanted = dict(kind="attention", backend=backend, batch=batch, heads=heads, seq_len=seq_len, head_dim=128,
                  passes=passes)
    (hit,) = [e for e in entries if all(e.get(k) == v for k, v in wanted.items())]
    return hit


def _rate(profile: str, kernel: str, seq_len: int, batch_heads: int, pass_: str) -> float:
    tables = ProfileTables(builtin_profile(profile))
    return tables.attention_flops_per_s(seq_len, batch_heads, 128, "bf16", pass_, kernel)


@pytest.mark.parametrize("profile,record", [("h100-80gb", "kernel_rates-h100.json"), ("h200", "kernel_rates-h200.json")])
@pytest.mark.parametrize("kernel,backend", [("cudnn", "cudnn"), ("flash2", "flash")])
def test_a_hopper_table_holds_the_record_at_its_measured_shapes(profile, record, kernel, backend):
    for batch, heads, seq_len in ((1, 8, 2048), (1, 32, 16384), (4, 32, 4096)):
        fwd = _entry(record, backend, batch, heads, seq_len, "fwd")
        both = _entry(record, backend, batch, heads, seq_len, "fwd+bwd")
        # the forward's FLOPs over the backward's time alone (both timed minus forward), x2.5 FLOPs
        fwd_flops = 2.0 * batch * heads * seq_len * seq_len * 128
        bwd = 2.5 * fwd_flops / (both["seconds"] - fwd["seconds"])
        assert _rate(profile, kernel, seq_len, batch * heads, "fwd") == pytest.approx(fwd["flops_per_s"], rel=1e-9)
        assert _rate(profile, kernel, seq_len, batch * heads, "bwd") == pytest.approx(bwd, rel=1e-9)


LONG_RECORD = "kernel_rates-h200-long.json"  # 32k-128k tokens, 8 and 32 heads, on the H200
LONG_SHAPES = [(heads, seq_len) for heads in (8, 32) for seq_len in (32768, 65536, 131072)]


def _fwd_bwd(record: str, backend: str, heads: int, seq_len: int) -> tuple:
    """(forward, backward) FLOP/s of one batch-1 shape: the backward's 2.5x FLOPs over its time alone."""
    fwd = _entry(record, backend, 1, heads, seq_len, "fwd")
    both = _entry(record, backend, 1, heads, seq_len, "fwd+bwd")
    fwd_flops = 2.0 * heads * seq_len * seq_len * 128
    return fwd["flops_per_s"], 2.5 * fwd_flops / (both["seconds"] - fwd["seconds"])


@pytest.mark.parametrize("kernel,backend", [("cudnn", "cudnn"), ("flash2", "flash")])
def test_past_16k_the_h200_table_is_the_long_record(kernel, backend):
    for heads, seq_len in LONG_SHAPES:
        fwd, bwd = _fwd_bwd(LONG_RECORD, backend, heads, seq_len)
        assert _rate("h200", kernel, seq_len, heads, "fwd") == pytest.approx(fwd, rel=1e-9)
        assert _rate("h200", kernel, seq_len, heads, "bwd") == pytest.approx(bwd, rel=1e-9)


@pytest.mark.parametrize("kernel,backend", [("cudnn", "cudnn"), ("flash2", "flash")])
def test_past_16k_the_h100_table_is_the_long_record_at_the_h100s_16k_ratio(kernel, backend):
    for heads, seq_len in LONG_SHAPES:
        fwd, bwd = _fwd_bwd(LONG_RECORD, backend, heads, seq_len)
        h100_fwd, h100_bwd = _fwd_bwd("kernel_rates-h100.json", backend, heads, 16384)
        h200_fwd, h200_bwd = _fwd_bwd("kernel_rates-h200.json", backend, heads, 16384)
        assert _rate("h100-80gb", kernel, seq_len, heads, "fwd") == pytest.approx(fwd * h100_fwd / h200_fwd, rel=1e-9)
        assert _rate("h100-80gb", kernel, seq_len, heads, "bwd") == pytest.approx(bwd * h100_bwd / h200_bwd, rel=1e-9)


def test_both_kernels_keep_their_16k_rate_to_128k_and_the_ampere_table_stops_at_16k():
    # the measured fact the long rows carry: past 16k no rate falls more than 9% below its 16k rate, and
    # at 8 heads (the fewest CTAs) both kernels' forward still climbs (+4% to +17%)
    for backend in ("cudnn", "flash"):
        for heads, seq_len in LONG_SHAPES:
            long_rates = _fwd_bwd(LONG_RECORD, backend, heads, seq_len)
            rates_16k = _fwd_bwd("kernel_rates-h200.json", backend, heads, 16384)
            assert all(r > 0.91 * r16 for r, r16 in zip(long_rates, rates_16k))
            if heads == 8:
                assert long_rates[0] > 1.03 * rates_16k[0]
    # no Ampere kernel was timed past 16k: its tables keep the 1k-16k grid
    assert max(s.seq_len for s in builtin_profile("a100-80gb").attention) == 16384


def test_cudnn_outruns_flash2_at_long_sequences_and_both_fall_at_few_heads():
    # H100 record, 16k tokens x 32 heads: cuDNN 632, FlashAttention-2 319 TFLOP/s forward
    assert _rate("h100-80gb", "cudnn", 16384, 32, "fwd") / _rate("h100-80gb", "flash2", 16384, 32, "fwd") > 1.7
    # 8 heads (64 at TP 8) and 2k tokens: FlashAttention-2 forward 112 of its 337 plateau
    assert _rate("h100-80gb", "flash2", 2048, 8, "fwd") < 0.4 * _rate("h100-80gb", "flash2", 16384, 512, "fwd")


def _fwd_bwd_h100(batch: int, heads: int, seq_len: int) -> tuple:
    """(forward, backward, forward+backward) FlashAttention-2 rates of the H100 record, from its two timings."""
    fwd = _entry("kernel_rates-h100.json", "flash", batch, heads, seq_len, "fwd")
    both = _entry("kernel_rates-h100.json", "flash", batch, heads, seq_len, "fwd+bwd")
    fwd_flops = fwd["flops_per_s"] * fwd["seconds"]
    return (fwd["flops_per_s"], 2.5 * fwd_flops / (both["seconds"] - fwd["seconds"]), 3.5 * fwd_flops / both["seconds"])


def test_the_a100_table_is_flash_attention_2s_published_a100_figure():
    # Worked example. FlashAttention-2's A100 figure (flash-attention assets/flash2_a100_fwd_bwd_benchmark.png,
    # panel d: causal, head_dim 128, hidden 2048, 16k tokens): 173 TFLOP/s forward+backward at 4k tokens,
    # i.e. batch 4 x 16 heads = 64 = the H100 record's batch 2 x 32 heads.
    published = json.loads((RECORDS / "a100_published.json").read_text())["flash_attention_2"]
    assert published["causal_fwd_bwd_tflops"]["128"]["4096"] == 173
    ratio = 173e12 / _fwd_bwd_h100(2, 32, 4096)[2]
    fwd, bwd = (_rate("a100-80gb", "flash2", 4096, 64, p) for p in ("fwd", "bwd"))
    assert 3.5 / (1 / fwd + 2.5 / bwd) == pytest.approx(173e12, rel=1e-9)
    # other batch x heads at that length: the H100's FlashAttention-2 rate times the same ratio
    few_fwd, few_bwd, _ = _fwd_bwd_h100(1, 8, 4096)
    assert _rate("a100-80gb", "flash2", 4096, 8, "fwd") == pytest.approx(few_fwd * ratio, rel=1e-9)
    assert _rate("a100-80gb", "flash2", 4096, 8, "bwd") == pytest.approx(few_bwd * ratio, rel=1e-9)
    # no cuDNN record for Ampere: Transformer Engine's pick there is flash-attn, and so is the table's answer
    assert _rate("a100-80gb", "cudnn", 2048, 8, "fwd") == _rate("a100-80gb", "flash2", 2048, 8, "fwd")


def test_a_measured_profile_answers_every_kernel_with_its_own_sdpa_samples():
    base = builtin_profile("h100-80gb").to_dict()
    base["attention"] = [{"batch": 1, "seq_len": s, "num_heads": 32, "head_dim": 128, "dtype": "bf16",
                          "pass": p, "flops_per_s": 1e14 * (2 if p == "fwd" else 1)}
                         for s in (1024, 4096) for p in ("fwd", "bwd")]  # no kernel field: a profile of v1
    tables = ProfileTables(HardwareProfile.from_dict(base))
    for kernel in ("sdpa", "flash2", "cudnn"):
        assert tables.attention_flops_per_s(1024, 32, 128, "bf16", "fwd", kernel) == 2e14
        assert tables.attention_flops_per_s(4096, 32, 128, "bf16", "bwd", kernel) == 1e14


def test_an_unknown_kernel_in_a_profile_is_refused_by_name():
    data = builtin_profile("h100-80gb").to_dict()
    data["attention"][0]["kernel"] = "flash9"
    with pytest.raises(SchemaError, match="kernel"):
        HardwareProfile.from_dict(data)


@pytest.mark.parametrize("framework,kernel", [("megatron-core", "cudnn"), ("torchtitan", "flash2"),
                                              ("llm-foundry", "flash2"), ("autoplan", "sdpa")])
def test_each_framework_prices_attention_on_its_kernel(framework, kernel):
    from cost_model.layer_time import layer_times

    model = ModelSpec(name="llama-3-8b", num_layers=32, hidden_size=4096, num_heads=32, num_kv_heads=8,
                      ffn_hidden_size=14336, vocab_size=128256)
    fw = load_constants().framework(framework)
    assert fw.attention_kernel == kernel
    est = Estimator(model, TrainingSpec(global_batch_size=8, seq_len=8192), ClusterSpec(name="h100-80gb", num_gpus=8),
                    builtin_profile("h100-80gb"), framework=fw)
    lt = layer_times(model, est.tables, est.rates, 1, 8192, 1, 1, 1, False, 8)
    flops = 2.0 * 32 * 8192 * 8192 * 128  # causal forward of one 8k sequence: 4bhs^2d halved, 32 heads of 128
    expected_fwd_s = flops / (_rate("h100-80gb", kernel, 8192, 32, "fwd") * fw.attention_efficiency)
    assert lt.attn_fwd_s == pytest.approx(expected_fwd_s, rel=1e-6)
    expected_bwd_s = 2.5 * flops / (_rate("h100-80gb", kernel, 8192, 32, "bwd") * fw.attention_efficiency)
    assert lt.attn_bwd_s == pytest.approx(expected_bwd_s, rel=1e-6)


@pytest.mark.parametrize("kernel,backend", [("cudnn", "cudnn"), ("flash2", "flash")])
def test_head_dim_64_is_the_variants_records_median_ratio(kernel, backend):
    entries = json.loads((RECORDS / "kernel_rates-h100-variants.json").read_text())["entries"]
    timed = {(e["batch"], e["heads"], e["seq_len"], e["head_dim"], e["passes"]): e["seconds"]
             for e in entries if e["backend"] == backend and e["kv_heads"] == e["heads"]}
    ratios = []
    for (b, h, s, d, passes) in timed:
        if d == 64 and passes == "fwd":
            # FLOPs scale with head_dim, so a rate ratio is (64 / 128) x the time ratio the other way
            fwd = 0.5 * timed[(b, h, s, 128, "fwd")] / timed[(b, h, s, 64, "fwd")]
            bwd_128 = timed[(b, h, s, 128, "fwd+bwd")] - timed[(b, h, s, 128, "fwd")]
            bwd_64 = timed[(b, h, s, 64, "fwd+bwd")] - timed[(b, h, s, 64, "fwd")]
            ratios.append((fwd, 0.5 * bwd_128 / bwd_64))
    assert len(ratios) == 4
    tables = ProfileTables(builtin_profile("h100-80gb"))
    for i, pass_ in enumerate(("fwd", "bwd")):
        median = sorted(r[i] for r in ratios)
        expected = (median[1] + median[2]) / 2
        got = (tables.attention_flops_per_s(4096, 128, 64, "bf16", pass_, kernel)
               / tables.attention_flops_per_s(4096, 128, 128, "bf16", pass_, kernel))
        assert got == pytest.approx(expected, rel=1e-9)
    # what the record says of torch 2.11's own pick on an H100: the reason "sdpa" reads cuDNN's rows
    env = json.loads((RECORDS / "kernel_rates-h100-variants.json").read_text())["environment"]
    assert env["sdpa_choice"] == "CUDNN_ATTENTION"


def test_every_framework_names_a_kernel_a_profile_can_hold():
    from autoplan.specs.choices import ATTENTION_KERNELS
    from autoplan.specs.frameworks import FRAMEWORKS

    assert {name: fw.attention_kernel for name, fw in FRAMEWORKS.items()
            if fw.attention_kernel not in ATTENTION_KERNELS} == {}
