"""`autoplan validate`: runs on the shipped published runs, prints per-source figures, --json parses."""
import json

from autoplan.cli.main import main
from cost_model.published_rows import load_published_runs
from cost_model.validation import spearman


def test_validate_prints_every_source(capsys):
    assert main(["validate"]) == 0
    out = capsys.readouterr().out
    for source in ("narayanan2021", "bigscience", "llm-foundry", "torchtitan", "constant MFU"):
        assert source in out
    assert "MAPE" in out and "Spearman" in out


def test_validate_json_and_rows(capsys):
    assert main(["validate", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    a = doc["analytical"]
    for key in ("mape", "median", "max", "spearman_min", "per_source"):
        assert key in a
    assert 0 < a["median"] <= a["mape"] <= a["max"]
    moe = doc["out_of_sample"]["moe"]["all"]
    total = a["num_rows"] + len(doc["skipped"]) + moe["num_rows"] + moe["num_skipped"]
    assert total == len(load_published_runs())          # nothing silently dropped (MoE rows: their split)
    assert all(s["reason"] for s in doc["skipped"])
    assert main(["validate", "--rows"]) == 0
    assert "N21-T1-01" in capsys.readouterr().out


def test_validate_bad_runs_file_is_one_line_exit_2(capsys, tmp_path):
    assert main(["validate", "--runs", str(tmp_path / "missing.csv")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "does not exist" in err


def test_spearman_against_known_values():
    assert spearman([1, 2, 3, 4], [10, 20, 30, 40]) == 1.0
    assert spearman([1, 2, 3, 4], [4, 3, 2, 1]) == -1.0
    # one swap among four: 1 - 6*2/(4*15) = 0.8
    assert abs(spearman([1, 2, 3, 4], [1, 3, 2, 4]) - 0.8) < 1e-12


def test_validate_leads_with_out_of_sample_and_scores_the_h100_runs(capsys):
    assert main(["validate"]) == 0
    out = capsys.readouterr().out
    assert out.index("OUT OF SAMPLE") < out.index("IN SAMPLE") < out.index("profile-full.json")
    assert main(["validate", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    held, inside = doc["held_out"], doc["analytical"]
    assert set(held["per_source"]) == set(inside["per_source"]) and held["num_rows"] == inside["num_rows"]
    assert held["mape"] != inside["mape"]
    h100 = doc["h100_runs"]
    assert set(h100) == {"builtin:h100-80gb", "profile-full.json", "profile-quick.json"}
    assert all(h["num_runs"] == 10 and 0 < h["mape"] <= h["max"] for h in h100.values())


# Out-of-sample bounds per split, as `autoplan validate` measured them with the shipped refits
# (benchmarks/fit_constants.py, 2026-11-26; the figures are in the README's table) plus a margin of
# about one point: a change to a term or a constant that loses transfer to another source, GPU
# generation, scale or precision fails here. (split, precision) -> (max MAPE, min MFU rank correlation).
SPLIT_BOUNDS = {
    # Refits run to convergence (benchmarks/fit_constants.py): the figures before 2026-11-26's were
    # refits stopped after 250-300 evaluations near the full fit, which had seen the held-out rows
    # (the same code converged: 12.3%, 14.6%, 13.3%, 16.4%, 8.6%, 12.2%, 13.5% in this order).
    # With FSDP2's copies and torchtitan's fp32 reduce-scatter (sharded_copies), measured before -> after:
    # Then KempnerForge read as it ran (bf16 master states, one reduce-scatter per step, replicated
    # embedding, gathered logits: autoplan/specs/frameworks/torchtitan.py KEMPNERFORGE_FACTS), refitted: -> the third;
    # then torchao's row-wise fp8 backward casts, refitted: -> the fourth; then FSDP's fp32 gradient
    # accumulation under a pipeline (sharded_copies), refitted: -> the fifth. 2026-11-27: the DP wire
    # bytes as runs set them (bf16 gradient reduction, fp8 weight gathers), torchtitan's recompute of
    # the SP all-gathers, fms-fsdp read as FSDP1 on its network, hybrid sharding, refitted: -> the sixth;
    # then OLMo-core 32B's feed-forward-only recompute, refitted: -> the seventh; then DeepSpeed as its
    # code runs (no DP overlap below ZeRO-3 or under its pipeline engine, gradient accumulation outside
    # the GEMM) and torchao's float8 all-gather where torchtitan rows state it, refitted: -> the eighth;
    # then torch.compile's share of the memory-bound bytes derived (the minimal count), not fitted,
    # refitted: -> the ninth; 2026-11-28: torchao's float8 table as a source, its row-wise rescale pass,
    # KempnerForge's five input-gradient reductions, flash-attention's configured micro-batches and fused
    # loss, OLMo-core 32B on Augusta's network, and the two switches (async TP, row-wise fp8) measured
    # on their paired rows (benchmarks/paired_switches.py), refitted: -> the tenth; 2026-11-29: the
    # ZeRO-2/3 hooks' host cost per layer no longer fitted (benchmarks/fit_constants.py constants_from),
    # refitted: -> the eleventh; 2026-11-27: the built-in H100 fp8 GEMM table at the measured profile's
    # fp8 rate (0.64 of its peak, not bf16's 0.72: cost_model/profiles.py), refitted: -> the twelfth; then the
    # Hopper attention tables measured per kernel and occupancy, each framework on its own kernel
    # (cost_model/attention_tables.py), refitted: -> the thirteenth; then head_dim 64 at each kernel's
    # measured ratio (not an assumed 0.85), refitted: -> the fourteenth; 2026-11-28: the Hopper tables past
    # 16k tokens from the H200 long-sequence record (not extrapolated), refitted: -> the fifteenth; then
    # DeepSpeed v0.3.13's ZeRO-3 as its code runs for Narayanan's baseline (per-tensor collectives, gathers
    # the compute waits for, torch's copies around list collectives) and BloombergGPT on its EFA network
    # with SageMaker's own collectives, refitted: -> the sixteenth (by source and scale band the shared DeepSpeed
    # bandwidth scale now disagrees more between Narayanan's rows and BLOOM's: 0.24 vs 0.39 held out);
    # then BLOOM's data-parallel bandwidth measured on BigScience's one-vs-two-replica pairs (not fitted:
    # benchmarks/bigscience_network.py) and DeepSpeed's ZeRO-3 re-gathers under recompute, refitted: -> the
    # seventeenth (leaving Ampere out no longer leaves BLOOM's rows on an unfitted bandwidth scale of 1);
    # then KempnerForge's pipeline path re-gathering its weights after each forward (m + 1 all-gathers a
    # step, Framework.pp_reshard_after_forward), refitted: -> the eighteenth; then MLPerf v3.0/v3.1's and
    # FP8-LM's attention on flash-attn, as Transformer Engine before v1.2 ran it on Hopper (not cuDNN's fused
    # attention: cost_model/row_stack_facts.py _FLASH_ATTN_ROWS), refitted: -> the last. 2026-11-29 (third
    # session), InternEvo's Hybrid ZeRO as its code runs (gradients all-reduced over every DP rank in bf16,
    # weights broadcast inside its ZeRO group) and a full refit on the day's code (the refits shipped before
    # were of 2026-11-28's code): bf16 by source 7.3% -> 7.9%, by GPU generation 7.8% -> 8.5%, by scale band
    # 7.2% -> 7.4%; fp8 8.4% -> 9.0%, 8.1% -> 8.8%, 6.9% -> 7.4%, held out 8.1% -> 8.2%; the same refit
    # without the InternEvo change reads 7.2%, 8.0%, 7.1% (bf16).
    # 2026-11-29 (fourth session): ZeRO-3's window the whole busy time, refitted: 7.9% -> 7.9%; then BigScience's
    # synchronous kernel launches (CUDA_LAUNCH_BLOCKING=1, Framework.launch_blocking, a GPT layer's eager kernel
    # count), refitted: 7.9% -> 8.1%, all of it Narayanan's rows held out (12.0% -> 15.8%): refitted without
    # them, DeepSpeed's shared bandwidth scale rests on MT-NLG's 3 rows and GPT-NeoX's 1, and the pipeline
    # overhead that BLOOM's rows no longer need shrinks. 2026-11-29 (fifth session): the attention kernel each
    # row ran (flash-attn's Triton kernel for llm-foundry's and Megatron-DeepSpeed's rows, computing at its
    # power-of-two head width; FlashAttention-1 named), refitted: 8.1% -> 8.0%, by GPU generation 8.4% -> 8.1%.
    # 2026-11-30: the Triton kernel's own fraction of the FlashAttention-2 table that prices it
    # (Framework.triton_attention_efficiency), refitted: bf16 8.02% -> 8.00%, by GPU generation 8.14% -> 8.03%,
    # by scale band 7.19% -> 7.34%; fp8 8.95% -> 7.84%, 8.55% -> 7.87%, 7.41% -> 7.35%, held out 8.24% -> 7.99%.
    # 2026-11-30 (seventh session): BLOOM-PREQ-08, which its same-plan sibling -09 contradicts, out of every fit
    # and score (cost_model/row_checks.py), refitted: bf16 8.00% -> 8.02% (Narayanan's rows held out 17.5% ->
    # 18.4%: MT-NLG's 3 rows alone pin DeepSpeed's bandwidth scale there, 0.198 -> 0.181), by GPU generation
    # 8.03% -> 7.97%, by scale band 7.34% -> 7.24%; fp8 7.84% -> 7.86%, 7.87% -> 7.88%, 7.35% -> 7.34%.
    # 2026-11-30 (eighth session): MT-NLG's micro-batch of 2, solved from its own scale series and withheld
    # where its rows are held out (cost_model/source_facts.py MTNLG_MICRO_BATCH), refitted: bf16 8.02% ->
    # 7.48% (Narayanan's rows held out 18.4% -> 8.5%: DeepSpeed's bandwidth scale in that refit 0.181 ->
    # 0.52), by GPU generation 7.97% -> 7.92%, by scale band 7.24% -> 7.52%; fp8 7.86% -> 7.75%, 7.88% ->
    # 7.87%, 7.34% -> 7.49%, held out 8.00% -> 8.00%.
    ("source", "bf16_fp16"): (0.082, 0.88),          # 11.8% -> 11.4% -> 10.6% -> 10.6% -> 10.4% -> 9.5% -> 9.5% -> 9.6% -> 9.4% -> 9.1% -> 7.7% -> 7.7% -> 7.5% -> 7.5% -> 7.5% -> 7.9% -> 7.6% -> 7.4% -> 7.2%, +0.95
    # 2026-11-29 (issue 48): honest splits, BLOOM's network fraction (solved from BigScience's own step
    # times) withheld wherever BigScience's measurements are held out: by source 7.1% -> 7.3%, by GPU
    # generation 7.8% -> 8.5% (rank +0.95 -> +0.94), by scale band 6.9% -> 7.2%; fp8 unchanged.
    ("gpu_generation", "bf16_fp16"): (0.09, 0.88),    # 12.3% -> 12.3% -> 11.5% -> 11.5% -> 11.5% -> 11.3% -> 11.2% -> 10.9% -> 10.8% -> 10.7% -> 10.3% -> 10.3% -> 10.0% -> 10.0% -> 10.0% -> 9.0% -> 8.0% -> 7.9% -> 7.9%, +0.95
    ("scale", "bf16_fp16"): (0.078, 0.90),            # 8.4% -> 8.5% -> 8.0% -> 8.0% -> 8.0% -> 7.9% -> 7.9% -> 7.8% -> 7.9% -> 7.7% -> 7.9% -> 7.8% -> 7.4% -> 7.5% -> 7.3% -> 7.5% -> 7.2% -> 7.1% -> 7.0%, +0.95
    ("source", "fp8"): (0.095, 0.90),                 # 14.4% -> 14.9% -> 15.2% -> 14.8% -> 14.7% -> 13.3% -> 13.0% -> 12.7% -> 12.5% -> 11.8% -> 10.7% -> 10.6% -> 9.8% -> 9.8% -> 9.5% -> 9.5% -> 9.5% -> 9.5% -> 8.7%, +0.97
    ("gpu_generation", "fp8"): (0.103, 0.90),         # 16.6% -> 15.4% -> 15.4% -> 15.0% -> 14.9% -> 14.6% -> 14.4% -> 14.4% -> 12.6% -> 12.3% -> 12.4% -> 11.3% -> 10.2% -> 10.2% -> 9.8% -> 9.8% -> 9.9% -> 9.9% -> 9.4%, +0.97
    ("scale", "fp8"): (0.085, 0.91),                  # 11.9% -> 12.0% -> 12.3% -> 12.2% -> 12.0% -> 11.3% -> 11.2% -> 10.9% -> 10.7% -> 9.8% -> 9.6% -> 9.6% -> 8.4% -> 8.3% -> 8.3% -> 8.2% -> 8.3% -> 8.3% -> 7.5%, +0.97
    ("precision", "fp8"): (0.102, 0.91),              # 13.3% -> 13.8% -> 13.7% -> 13.4% -> 13.3% -> 12.5% -> 12.4% -> 12.3% -> 11.6% -> 11.9% -> 12.0% -> 11.0% -> 9.7% -> 9.6% -> 9.4% -> 9.4% -> 9.4% -> 9.4% -> 9.3%, +0.97
    # The MoE rows no fit ever saw (issue 25), 2026-12: far from issue 25's target (<= 10%, >= 0.8);
    # the bound keeps them from getting worse (68.3%, -0.09 before cost_model/moe_time.py; 63.9%, +0.11
    # with it on the constants of 77aeed0; 65.7%, -0.08 on the constants refitted with the DP buckets;
    # 60.0%, +0.42 with the zoo rows' --recompute-modules and KempnerForge's padded expert GEMM;
    # 60.5%, +0.42 on the constants refitted with the per-tensor and broadcast DP terms; 56.2%, +0.48
    # with FSDP2's copies; 55.9%, +0.47 with KempnerForge read as it ran; 56.2%, +0.47 after 2026-11-28's refit;
    # 55.8%, +0.45 after 2026-11-29's; 55.6%, +0.45 with the measured fp8 GEMM table; 48.1%, +0.81 with
    # the measured attention tables: Megatron-Core's long-sequence rows on cuDNN's fused attention; 48.2%,
    # +0.81 with head_dim 64 measured; 48.8%, +0.79 with the attention tables measured past 16k; 48.7%, +0.79
    # after DeepSpeed v0.3.13's ZeRO-3 was counted; 49.0%, +0.79 after BLOOM's network was measured, and after KempnerForge's pipeline re-gathers;
    # 49.4%, +0.79 after the refit with MLPerf v3.x's and FP8-LM's flash-attn; 49.4%, +0.80 with
    # Megatron-Core's alltoall and allgather dispatchers priced as they run, Framework.moe_dispatch; 49.0%,
    # +0.80 with cross-node all-to-alls at one NIC share and the DeepEP rows' flex dispatcher, issue 49;
    # 43.2%, +0.84 with the experts' activation on the busiest rank's rows; 40.5%, +0.89 with core_v0.6.0's
    # allgather dispatcher moving the gathered tokens (Framework.moe_gather_scatter_permute); 39.9%, +0.90
    # with its alltoall dispatcher's tensor-parallel exchanges (Framework.moe_sp2hp_alltoall); 40.7%, +0.87
    # with the expert gradients over the expert data-parallel group (MOEZOO-q3235b-03 -21% -> -49%); 40.3%,
    # +0.87 after 2026-11-29's full refit with InternEvo's Hybrid ZeRO; 38.8%, +0.89 with the Triton kernel's own
    # attention fraction, the shared one 0.575 -> 0.640: the model zoo's long-context rows); 37.5%, +0.90
    # with FlagPerf's A100 servers at the two NICs its own all-reduce measured (FLAGPERF-mixtral8L-01
    # +73% -> +44%, cost_model/source_facts.py FLAGPERF_A100_NICS_PER_NODE).
    ("moe", "bf16_fp16"): (0.40, 0.86),
}
MIN_GAIN_OVER_CONSTANT_MFU = {("moe", "bf16_fp16"): 1.25}
"""How much better than the constant-MFU guess a split must be (1.5x unless named here)."""

HONEST_EXTRAS_BOUNDS = {
    # Issue 48, 2026-11-29: (lowest 80 % interval coverage, highest median width, lowest share of plan
    # pairs within a problem in the measured order), a little below what holds, so they cannot get worse
    # unseen. The targets: coverage 75-85 % and within-problem rank >= 0.8 on every split.
    # Split-conformal intervals (|residuals| of rows held out the same way; cost_model/intervals.py),
    # measured as coverage (width), pairs: by source bf16 81 % (25 %), 83 %; fp8 86 % (34 %), 100 %; by GPU
    # generation bf16 79 % (23 %), 77 %, fp8 75 % (27 %), 87 %; by scale band bf16 81 % (22 %), 83 %,
    # fp8 81 % (26 %), 100 %; fp8 held out 69 % (21 %), 91 % (one group of its kind: it takes the bf16
    # rows' residuals held out by source); MoE 79 % (222 %: MoE MAPE is 44 %), 50 %. Before (percentiles
    # of signed residuals): 75 % (19 %), 77 % (28 %), 65 % (22 %), 54 % (22 %), 77 % (19 %), 75 % (24 %),
    # 68 % (21 %), 42 % (68 %).
    # 2026-11-30 (seventh session), BLOOM-PREQ-08 out (cost_model/row_checks.py), refitted: pairs by source
    # 85 % -> 86 %, by GPU generation 80 % -> 81 %, by scale band 87 % -> 87 %; coverage 77/82/80 % ->
    # 76/82/80 % (bf16), fp8 by source 86 % -> 85 %. Eighth session, MT-NLG's micro-batch solved from its
    # scale series (cost_model/source_facts.py), refitted: pairs 86/81/87 % -> 85/81/88 %; coverage
    # 76/82/80 % -> 78/82/80 % (bf16), fp8 by source 85 % -> 86 %. Ninth session, the intervals' quantile
    # Hyndman and Fan's type 6 (rank 0.8 (n + 1), interpolated; was ceil(0.8 (n + 1))): coverage by source
    # 78 % -> 78 % (bf16), 86 % -> 83 % (fp8); by GPU generation 82/79 % unchanged; by scale band 80 -> 79 %,
    # 78 -> 77 %; fp8 held out 79 %; MoE 83 % (width 211 % -> 193 %).
    ("source", "bf16_fp16"): (0.75, 0.28, 0.84),
    ("source", "fp8"): (0.78, 0.38, 0.95),
    # 2026-11-29 (third session): InternEvo's Hybrid ZeRO as its code runs and a full refit on the day's
    # code: by GPU generation bf16 82 % (28 %), 79 % of pairs; the width bound 0.27 -> 0.29.
    ("gpu_generation", "bf16_fp16"): (0.75, 0.29, 0.79),
    ("gpu_generation", "fp8"): (0.70, 0.31, 0.83),
    ("scale", "bf16_fp16"): (0.77, 0.25, 0.85),
    ("scale", "fp8"): (0.75, 0.30, 0.95),
    ("precision", "fp8"): (0.65, 0.25, 0.87),
    # MoE after issue 49 (inter-node all-to-all at the NIC share, DeepEP rows with flex dispatch): pairs
    # 50 % (was 62 %): the rows whose order moved are KempnerForge's and FlagPerf's, which are off by +54
    # to +256 % for reasons other than the network.
    ("moe", "bf16_fp16"): (0.75, 2.5, 0.48),
}

WITHIN_PROBLEM_RANK_BOUNDS = {
    # Issue 48's target: the mean Spearman correlation within problems (one campaign's plans of one
    # problem, three rows or more) >= 0.8 held out. 2026-11-30 (seventh session), with BLOOM-PREQ-08 out
    # (its problem read -1.0 on three rows: cost_model/row_checks.py) and refitted: by source +0.73 -> +0.87,
    # by GPU generation +0.68 -> +0.81, by scale band +0.80 -> +0.90 (14 -> 13 ranked problems). Eighth
    # session, MT-NLG's micro-batch solved from its scale series, refitted: +0.87 -> +0.85, +0.81 -> +0.81,
    # +0.90 -> +0.91. Bounds at the target, or a little below what holds where that is higher.
    ("source", "bf16_fp16"): 0.85,
    ("gpu_generation", "bf16_fp16"): 0.80,
    ("scale", "bf16_fp16"): 0.88,
}


def test_plans_of_one_problem_are_ordered_held_out():
    from cost_model.validation import out_of_sample

    doc = out_of_sample(load_published_runs())
    for (split, precision), bound in WITHIN_PROBLEM_RANK_BOUNDS.items():
        within = doc[split][precision]["within_problem"]
        assert within["num_ranked"] >= 13 and within["spearman_mean"] >= bound, (split, precision, within)


MOE_MEMORY_BOUNDS = {
    # Issue 25's memory target is within 10 % where published; both sources are far from it, all under
    # (2026-11-28): KempnerForge's allocated peak 37.9 % (median 0.62: routing collapsed from
    # initialisation, docs/cost_model.md Limits); FlagPerf's device memory (nvidia-smi, its "mem" column)
    # 29.6 % (median 0.72); 26.1 % (0.78) once the 2024 Megatron-Core code's weighted expert outputs were
    # counted (Framework.moe_weighted_outputs_saved). The bounds keep them from getting worse.
    "kempnerforge-moe": 0.40,
    "flagperf": 0.28,
}


def test_moe_peak_memory_is_scored_where_published_and_does_not_get_worse():
    from cost_model.validation import out_of_sample

    memory = out_of_sample(load_published_runs())["moe"]["peak_memory"]
    assert set(memory) == set(MOE_MEMORY_BOUNDS)
    for source, bound in MOE_MEMORY_BOUNDS.items():
        assert memory[source]["num_rows"] == 4 and memory[source]["mape"] <= bound, (source, memory[source])


def test_out_of_sample_holds_per_split_and_beats_the_constant_mfu_guess():
    from cost_model.validation import out_of_sample

    doc = out_of_sample(load_published_runs())
    for (split, precision), (max_mape, min_rank) in SPLIT_BOUNDS.items():
        s = doc[split][precision]
        assert s["num_rows"] > 0, (split, precision)
        assert s["mape"] <= max_mape, (split, precision, s["mape"], s["worst_row"])
        assert s["mfu_spearman"] >= min_rank, (split, precision, s["mfu_spearman"])
        # The one-number guess fitted on the same training rows does at least 1.5x worse on every split
        # (the MoE rows: 1.25x).
        gain = MIN_GAIN_OVER_CONSTANT_MFU.get((split, precision), 1.5)
        assert gain * s["mape"] < s["constant_mfu"]["mape"], (split, precision, s["mape"], s["constant_mfu"])
    for (split, precision), (min_cover, max_width, min_pairs) in HONEST_EXTRAS_BOUNDS.items():
        s = doc[split][precision]
        cover, within = s["interval"], s["within_problem"]
        assert cover["num_rows"] == s["num_rows"], (split, precision)
        assert cover["coverage"] >= min_cover and cover["median_width"] <= max_width, (split, precision, cover)
        assert within["pair_agreement"] >= min_pairs, (split, precision, within)
        if split != "moe":   # the old figure, beside the honest one, on the same rows
            assert doc[split]["before_withholding"][precision]["num_rows"] == s["num_rows"], (split, precision)


def test_moe_errors_are_told_by_source_and_gpu_from_the_rows_themselves():
    """Worked example: two made-up rows of one source at 1000 tokens/s/GPU measured, predicted 1100 and
    700 (|errors| 10 % and 30 %, MAPE 20 %), the guess 500 on both (50 %); one row of another source
    at 200 measured, 250 predicted (25 %), the guess 100 (50 %)."""
    from dataclasses import replace

    from cost_model.validation import RowResult, errors_by, out_of_sample

    runs = [r for r in load_published_runs() if r.id.startswith(("MCOREMOERM", "FLAGPERF-qwenmoe-01"))][:3]
    a1, a2, b = (replace(run, measured_tokens_per_s_per_gpu=m, source=s)
                 for run, m, s in zip(runs, (1000.0, 1000.0, 200.0), ("a", "a", "b")))
    rows = [RowResult(a1, 1100.0, baseline_tokens_per_s_per_gpu=500.0),
            RowResult(a2, 700.0, baseline_tokens_per_s_per_gpu=500.0),
            RowResult(b, 250.0, baseline_tokens_per_s_per_gpu=100.0)]
    by_source = errors_by(rows, lambda r: r.run.source)
    assert by_source["a"]["num_rows"] == 2 and abs(by_source["a"]["mape"] - 0.20) < 1e-12
    assert abs(by_source["a"]["constant_mfu_mape"] - 0.50) < 1e-12
    assert by_source["b"]["num_rows"] == 1 and abs(by_source["b"]["mape"] - 0.25) < 1e-12
    # The shipped MoE rows: every row in exactly one source and one GPU generation, and the per-source
    # MAPEs weigh back to the split's.
    moe = out_of_sample(load_published_runs())["moe"]
    for axis in ("per_source", "per_gpu_generation"):
        parts = moe[axis]
        assert sum(p["num_rows"] for p in parts.values()) == moe["all"]["num_rows"]
        weighted = sum(p["num_rows"] * p["mape"] for p in parts.values()) / moe["all"]["num_rows"]
        assert abs(weighted - moe["all"]["mape"]) < 1e-9, axis
    assert {"megatron-moe-modelzoo", "kempnerforge-moe", "flagperf"} <= set(moe["per_source"])


def test_skipped_rows_are_summarised_by_reason():
    """Issue 53: validate listed 61 skipped rows one by one; now one line per reason with its count."""
    from autoplan.cli.validate_cmd import skipped_lines

    skipped = [{"id": f"N{i}", "reason": "no_framework_facts: nanotron has no built-in framework entry"}
               for i in range(4)] + [{"id": "M0", "reason": "no_framework_facts: maxtext has no built-in entry"}]
    lines = skipped_lines(skipped).splitlines()
    assert lines[0].startswith("skipped 5 rows") and "by reason" in lines[0]
    assert lines[1:] == ["    4 rows: no_framework_facts: nanotron has no built-in framework entry",
                         "    1 row: no_framework_facts: maxtext has no built-in entry"]
    assert skipped_lines([]) == ""
