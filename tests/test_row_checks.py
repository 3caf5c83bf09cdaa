"""A published row that its own sibling contradicts is left out of every fit and score, and the list of
such rows is held to the check that finds them (cost_model/row_checks.py).

Worked example: BigScience tr11 chronicles-prequel.md, "GBS Variations" (02-25), the 181B model (72 layers
of 14336, vocabulary 250880, sequence 2048) on 384 A100s at tp8 pp6 dp8 mbs4: GBS 1568 (49 micro-batches)
in 113.01 s, GBS 2048 (64) in 114.11 s. The 480 extra sequences are 983,040 tokens; at the Narayanan et al.
2021 count without recompute, 72*l*h^2*(1 + s/(6h) + V/(16*l*h)) = 1.1070e12 FLOPs per token, they need
1.0882e18 FLOPs, 9.08 s over 384 GPUs at 312 TFLOP/s (A100 dense fp16). The measured difference is 1.10 s.
"""
from __future__ import annotations

from dataclasses import replace

import pytest

from cost_model.published_rows import load_published_runs
from cost_model.row_checks import (EXCLUDED_ROWS, contradicting_pairs, excluded_reason, pair_check, step_time_s,
                                   unexplained)
from cost_model.splits import fit_rows
from cost_model.validation import held_out_results, predict_runs


@pytest.fixture(scope="module")
def runs():
    return load_published_runs()


def _row(runs, run_id):
    return next(r for r in runs if r.id == run_id)


def test_the_worked_example_bound(runs):
    layers, hidden, seq, vocab = 72, 14336, 2048, 250880
    per_token = 72 * layers * hidden ** 2 * (1 + seq / (6 * hidden) + vocab / (16 * layers * hidden))
    expected_s = 480 * seq * per_token / (384 * 312e12)
    assert expected_s == pytest.approx(9.08, abs=0.01)
    check = pair_check(_row(runs, "BLOOM-PREQ-08"), _row(runs, "BLOOM-PREQ-09"))
    assert check.extra_micro_batches == 15
    assert step_time_s(_row(runs, "BLOOM-PREQ-08")) == pytest.approx(113.01, abs=0.02)
    assert check.step_difference_s == pytest.approx(114.11 - 113.01, abs=0.03)
    # The library's FLOP count adds what the paper's formula leaves out (well under 1 %).
    assert check.min_difference_s == pytest.approx(expected_s, rel=0.01)
    assert check.contradicts


def test_a_consistent_pair_passes_and_the_same_pair_made_inconsistent_is_caught(runs):
    # -11 and -12: tp8 pp12 dp4 mbs4 at 98 and 128 micro-batches, 92.75 s and 117.07 s (24.3 s apart,
    # at least 9.1 s at peak).
    fewer, more = _row(runs, "BLOOM-PREQ-11"), _row(runs, "BLOOM-PREQ-12")
    assert not pair_check(fewer, more).contradicts
    # Planted: -11 timed at 116 s, 1.1 s under -12, as -08 was under -09.
    slow = replace(fewer, measured_tokens_per_s_per_gpu=fewer.measured_tokens_per_s_per_gpu * 92.75 / 116.0)
    assert pair_check(slow, more).contradicts


def test_every_contradiction_has_one_excluded_row_and_every_exclusion_a_contradiction(runs):
    assert [(p.fewer, p.more) for p in contradicting_pairs(runs)] == [("BLOOM-PREQ-08", "BLOOM-PREQ-09")]
    assert unexplained(runs) == []


def test_the_contract_fails_without_the_exclusion_or_with_a_groundless_one(runs):
    assert "neither is excluded" in unexplained(runs, {})[0]
    both = {"BLOOM-PREQ-08": EXCLUDED_ROWS["BLOOM-PREQ-08"], "BLOOM-PREQ-09": ("BLOOM-PREQ-08", "")}
    assert "both are excluded" in unexplained(runs, both)[0]
    groundless = {"BLOOM-PREQ-12": ("BLOOM-PREQ-11", "")}
    assert any("BLOOM-PREQ-12 is excluded but BLOOM-PREQ-11 does not contradict it" in p
               for p in unexplained(runs, groundless))


def test_no_fit_and_no_score_uses_an_excluded_row(runs):
    assert "BLOOM-PREQ-08" not in {r.id for r in fit_rows(runs)}
    assert "BLOOM-PREQ-09" in {r.id for r in fit_rows(runs)}
    [result] = predict_runs([_row(runs, "BLOOM-PREQ-08")])
    assert result.skipped == excluded_reason("BLOOM-PREQ-08")
    assert result.skipped.startswith("inconsistent_measurement: BLOOM-PREQ-09")
    bigscience = [r for r in runs if r.source == "bigscience"]
    scored = {r.run.id for r in held_out_results(bigscience, split="source")}
    assert "BLOOM-PREQ-09" in scored and "BLOOM-PREQ-08" not in scored


def test_the_pairs_script_prints_every_pair_and_fails_on_an_unexcluded_contradiction(capsys, monkeypatch):
    import importlib.util
    from pathlib import Path

    import cost_model.row_checks as row_checks

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "row_pairs.py"
    spec = importlib.util.spec_from_file_location("row_pairs", path)
    row_pairs = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(row_pairs)

    assert row_pairs.main([]) == 0
    out = capsys.readouterr().out
    assert out.startswith("7 pairs") and "CONTRADICTS; excluded: BLOOM-PREQ-08" in out
    monkeypatch.setattr(row_checks, "EXCLUDED_ROWS", {})
    monkeypatch.setattr(row_pairs, "EXCLUDED_ROWS", {})
    monkeypatch.setattr(row_pairs, "unexplained", lambda runs: row_checks.unexplained(runs, {}))
    assert row_pairs.main([]) == 1
    assert "PROBLEM: BLOOM-PREQ-08 and BLOOM-PREQ-09 contradict" in capsys.readouterr().out
