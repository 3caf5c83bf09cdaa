"""The shipped H100 runs (cost_model/data/h100_runs) re-predicted, and what the fit may hold.

The runs are the project's own executor on one H100 SXM (framework `autoplan`); none of their step
times was fitted. Hardware comes from the profile, software from the framework, so the GPU's own
measured profile must predict them as well as the built-in one.
"""
from __future__ import annotations

import json

from cost_model.constants import CONSTANTS_PATH, load_constants
from cost_model.measured_runs import H100_RUNS_DIR, h100_summary, load_profile, predict_measurements
from cost_model.profiles import BUILTIN_PROFILE_NAMES
from cost_model.published_rows import load_published_runs
from cost_model.splits import SPLITS, fit_rows, refit_key, split_groups
from cost_model.validation import held_out_results, predict_runs


def test_measured_profile_predicts_every_h100_run_within_10_percent():
    preds = predict_measurements(H100_RUNS_DIR / "runs.jsonl", load_profile(str(H100_RUNS_DIR / "profile-full.json")))
    trained = [p for p in preds if p.status == "ok"]
    assert len(trained) == 10 and len(preds) == 14  # 4 records ran out of memory
    worst = max(trained, key=lambda p: abs(p.step_error))
    assert abs(worst.step_error) <= 0.10, (worst.label, worst.measured_step_time_s, worst.predicted_step_time_s)


def test_a_measured_profile_predicts_as_well_as_the_builtin_one():
    s = h100_summary()
    # Since 2026-11-27 the built-in H100 attention table is itself measured on an H100 (per kernel, batch x
    # heads 8-512, seq 1k-16k: cost_model/data/kernels), on a finer grid than the sweep's attention (seq 1k,
    # 4k, 16k; these runs are at 2k): the two agree within half a point (4.0% and 4.3% at 2026-11-27).
    assert s["profile-full.json"]["mape"] <= s["builtin:h100-80gb"]["mape"] + 0.005
    # The quick sweep (54 GEMM shapes, memory ops at two sizes only) interpolates more: within 10%.
    assert s["profile-quick.json"]["mape"] <= 0.10
    # The executor's own costs are counted: every term of the framework shows in the breakdown.
    preds = predict_measurements(H100_RUNS_DIR / "runs.jsonl", load_profile("builtin:h100-80gb"))
    assert all(p.predicted_step_time_s > 0 for p in preds)


def test_no_fitted_constant_is_keyed_to_a_gpu_type():
    def keys(node):
        if isinstance(node, dict):
            for k, v in node.items():
                yield k
                yield from keys(v)

    data = json.loads(CONSTANTS_PATH.read_text())
    gpu_words = set(BUILTIN_PROFILE_NAMES) | {"a100", "h100", "h200"}
    assert not [k for k in keys(data) if any(w in k.lower() for w in gpu_words)]
    assert set(data) == {"frameworks", "provenance", "held_out"}


def test_out_of_sample_uses_the_refits_without_the_held_out_group():
    """Every group of every split has its refit, fitted on exactly the rows outside it (so a CSV
    changed without rerunning benchmarks/fit_constants.py fails here), and predicting with it
    differs from predicting in sample."""
    constants = load_constants()
    runs = fit_rows(load_published_runs())   # the MoE rows are validation-only: no refit saw them
    expected = {refit_key(split, group) for split in SPLITS for group in split_groups(runs, split)}
    assert set(constants.held_out) == expected
    for split in SPLITS:
        key = SPLITS[split][0]
        for group in split_groups(runs, split):
            provenance = constants.held_out[refit_key(split, group)]["provenance"]
            assert (provenance["split"], provenance["held_out"]) == (split, group)
            assert provenance["training_rows"] == sum(1 for r in runs if key(r) != group), (split, group)
    torchtitan = [r for r in runs if r.source == "torchtitan"][:6]
    held = held_out_results(torchtitan, constants)
    inside = predict_runs(torchtitan, constants)
    assert [r.run.id for r in held] == [r.run.id for r in inside]
    assert any(h.predicted_tokens_per_s_per_gpu != i.predicted_tokens_per_s_per_gpu
               for h, i in zip(held, inside) if not h.skipped)
