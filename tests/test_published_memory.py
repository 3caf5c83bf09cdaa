"""The loss torchtitan ran in each published row: from 2025-04-02 (bbb1b616e) `training.compile` compiles
the loss too, so the backward holds the bf16 logits and their bf16 gradient (4 B per logit); before it,
F.cross_entropy over the fp32-cast logits (10 B per logit).

Worked example, Llama 3.1 8B at micro-batch 2 x 8192 tokens, vocabulary 128,256, tp 1:
2 * 8192 * 128256 = 2,101,346,304 logits, 4 B each = 8,405,385,216 B; 10 B each = 21,013,463,040 B.
"""
from __future__ import annotations

import pytest

from cost_model import Estimator
from cost_model.constants import load_constants
from cost_model.published_rows import load_published_runs
from cost_model.validation import predict_runs

LOGITS = 2 * 8192 * 128256


def _runs(prefix: str) -> list:
    return [r for r in load_published_runs() if r.id.startswith(prefix)]


def _logits_bytes(run) -> float:
    est = Estimator(run.model, run.training, run.cluster, run.profile(),
                    framework=run.framework_facts(load_constants()), allow_tp_across_nodes=True)
    return est.estimate(run.plan).memory_breakdown_bytes["logits"]


def test_compiled_loss_rows_hold_four_bytes_per_logit():
    rows = _runs("TORCHTITAN-H200-")
    assert len(rows) == 2 and all(r.compiled for r in rows)
    for run in rows:
        assert _logits_bytes(run) == pytest.approx(4 * LOGITS, rel=1e-12)


def test_reported_peaks_of_the_compiled_loss_rows():
    """The H200 benchmark's reported peaks (47.96 and 46.97 GiB): 1.32 and 1.30 of them before the
    compiled loss was counted, within 8% now."""
    for r in predict_runs(_runs("TORCHTITAN-H200-")):
        assert 0.95 <= r.predicted_peak_memory_bytes / r.run.reported_peak_memory_bytes <= 1.08


def test_rows_before_the_loss_was_compiled_keep_the_fp32_logits():
    # December 2024 (the torchtitan paper's rows): the loss was not compiled, whatever the blocks were.
    run = next(r for r in _runs("TORCHTITAN-2412-") if r.training.seq_len == 8192 and r.plan.tp == 1
               and r.model.num_layers == 32)
    b, s, v = run.plan.micro_batch_size, run.training.seq_len, run.model.vocab_size
    assert _logits_bytes(run) == pytest.approx(10 * b * s * v, rel=1e-12)
