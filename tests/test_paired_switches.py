"""A switch's effect (async TP, row-wise fp8) is measured on rows published in pairs (benchmarks/paired_switches.py)."""
import importlib.util
import math
import sys
from pathlib import Path

import pytest

from cost_model.constants import load_constants
from cost_model.published_rows import load_published_runs
from cost_model.splits import fit_rows
from cost_model.validation import predict_runs

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def _load(name: str):
    sys.path.insert(0, str(BENCHMARKS))
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def runs():
    return fit_rows(load_published_runs())


def test_pairs_are_the_published_twins_and_never_cross_documents(runs):
    paired = _load("paired_switches")
    asyncs = {(off.id, on.id) for off, on in paired.switch_pairs(runs, "async_tp_overlap")}
    # torchtitan's async-TP table (6 twins), its 2024 paper's 70B Float8 pair, the 405B docs pair.
    assert asyncs == {
        *{(f"TORCHTITAN-2506-{m}-{d}-vanillaTP", f"TORCHTITAN-2506-{m}-{d}-asyncTP")
          for m in ("8B", "70B") for d in ("bf16", "float8-tensorwise", "float8-rowwise")},
        ("TORCHTITAN-2412-T4a", "TORCHTITAN-2412-T4b"), ("TTDOCS-405B-10", "TTDOCS-405B-11")}
    # TORCHTITAN-2412-T4b and TORCHTITAN-2506-70B-float8-tensorwise-vanillaTP share every knob the
    # model reads (70B, 256 GPUs, TP 8, 16 x 8192, fp8): only the document tells them apart.
    assert ("TORCHTITAN-2506-70B-float8-tensorwise-vanillaTP", "TORCHTITAN-2412-T4b") not in asyncs
    rowwise = {(off.id, on.id) for off, on in paired.switch_pairs(runs, "fp8_rowwise_efficiency")}
    assert rowwise == {
        *{(f"TORCHTITAN-2506-{m}-float8-tensorwise-{tp}", f"TORCHTITAN-2506-{m}-float8-rowwise-{tp}")
          for m in ("8B", "70B") for tp in ("vanillaTP", "asyncTP")},
        ("TORCHAO-8B-fp8-tensorwise", "TORCHAO-8B-fp8-rowwise")}


def test_the_shipped_switch_values_reproduce_the_published_pair_ratios(runs):
    # The fit ends by measuring each switch on its pairs: with the shipped constants, the predicted
    # on/off ratios multiply up to the published ones (the bisection's tolerance: 2^-30 of the range).
    paired = _load("paired_switches")
    constants = load_constants()
    assert set(paired.SWITCHES) <= set(constants.provenance["parameters"])
    for switch in paired.SWITCHES:
        pairs = paired.switch_pairs(runs, switch)
        predicted = {r.run.id: r.predicted_tokens_per_s_per_gpu for r in predict_runs([r for p in pairs for r in p], constants)}
        gap = sum(math.log(predicted[on.id] / predicted[off.id])
                  - math.log(on.measured_tokens_per_s_per_gpu / off.measured_tokens_per_s_per_gpu) for off, on in pairs)
        assert abs(gap) < 1e-4, (switch, gap)


def test_a_refit_without_pairs_leaves_the_switch_at_its_default(runs):
    fit_constants = _load("fit_constants")
    no_pairs = [r for r in runs if not (r.async_tp or r.fp8_rowwise)]
    start = load_constants().provenance["parameters"]
    assert fit_constants._switch_values(no_pairs, start) == {}
    one = [r for r in runs if r.id in ("TTDOCS-405B-10", "TTDOCS-405B-11")]
    value = fit_constants._switch_values(one, start)["async_tp_overlap"]
    assert 0.0 <= value <= 1.0
