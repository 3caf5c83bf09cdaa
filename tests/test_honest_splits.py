"""Issue 48: honest splits (facts chosen by a source's measured rows are withheld where those
measurements are held out), the rank within problems, and prediction intervals from residuals that
never saw the row. Worked examples on made-up rows; the shipped rows only where a fact is named."""
import math
import random
from dataclasses import replace

import pytest

from cost_model.intervals import MIN_STRATUM_ROWS, coverage, interval_of, interval_quantile, pooled_residuals
from cost_model.published_rows import load_published_runs
from cost_model.source_facts import BLOOM_NETWORK, MTNLG_MICRO_BATCH, ROW_DERIVED_FACTS
from cost_model.splits import SPLITS, Where, stratum, withhold
from cost_model.validation import RowResult, held_out_results, within_problem_rank


@pytest.fixture(scope="module")
def runs():
    return load_published_runs()


def test_every_row_derived_fact_names_its_source_and_where_it_was_measured():
    for fact in ROW_DERIVED_FACTS:
        assert fact.source and fact.how and fact.evidence
        assert all(isinstance(w, Where) and w.source == fact.source for w in fact.evidence)


def test_bloom_network_is_withheld_exactly_where_its_measurements_are_held_out(runs):
    """BigScience's 0.265 was solved from its 200B pairs on 80 and 160 A100s: held out by source
    (bigscience), GPU generation (ampere) or scale band (65-1024 GPUs) its rows lose it; a group that
    holds none of those measurements (Hopper, > 1024 GPUs, fp8) keeps it."""
    bloom = next(r for r in runs if r.id == "BLOOM-PREQ-01")
    assert dict(bloom.framework_then)["dp_bandwidth_scale"] == BLOOM_NETWORK.value
    for split, group, kept in (("source", "bigscience", False), ("gpu_generation", "ampere", False),
                               ("scale", "65-1024 GPUs", False), ("gpu_generation", "hopper", True),
                               ("scale", ">1024 GPUs", True), ("precision", "fp8", True)):
        [after] = withhold([bloom], split, group)
        assert ("dp_bandwidth_scale" in dict(after.framework_then)) is kept, (split, group)
    # Withheld, the row takes the refit's DeepSpeed bandwidth scale, and its prediction moves.
    honest = held_out_results([bloom], split="source")[0]
    seen = held_out_results([bloom], split="source", honest=False)[0]
    assert honest.predicted_tokens_per_s_per_gpu != seen.predicted_tokens_per_s_per_gpu
    refit = held_out_results.__globals__["load_constants"]().refit_without("source:bigscience")
    assert bloom.withholding(lambda w: True).framework_facts(refit).dp_bandwidth_scale == \
        refit.frameworks["megatron-deepspeed"]["dp_bandwidth_scale"]


def test_mtnlg_micro_batch_is_withheld_exactly_where_its_measurements_are_held_out(runs):
    """MT-NLG's micro-batch (2) was solved from its own three step times (2,240-3,360 A100s, bf16): held out
    by source (mt-nlg), GPU generation (ampere) or scale band (> 1024 GPUs) its rows take the default
    rule's 1, so 1920 / 8 = 240 micro-batches on 8 replicas instead of 120, and their prediction moves; a
    group that holds none of those measurements keeps it."""
    row = next(r for r in runs if r.id == "MTNLG-530B-01")
    assert MTNLG_MICRO_BATCH.on_plan and MTNLG_MICRO_BATCH in row.derived_facts
    assert (row.plan.micro_batch_size, row.plan.num_microbatches) == (2, 120)
    for split, group, kept in (("source", "mt-nlg", False), ("gpu_generation", "ampere", False),
                               ("scale", ">1024 GPUs", False), ("source", "narayanan2021", True),
                               ("gpu_generation", "hopper", True), ("scale", "65-1024 GPUs", True),
                               ("precision", "fp8", True)):
        [after] = withhold([row], split, group)
        assert (after.plan.micro_batch_size, after.plan.num_microbatches) == ((2, 120) if kept else (1, 240)), \
            (split, group)
        assert (MTNLG_MICRO_BATCH in after.derived_facts) is kept
        assert after.framework_then == row.framework_then
    honest = held_out_results([row], split="source")[0]
    seen = held_out_results([row], split="source", honest=False)[0]
    assert honest.predicted_tokens_per_s_per_gpu != seen.predicted_tokens_per_s_per_gpu


def test_the_refits_train_without_the_facts_of_their_held_out_group():
    """benchmarks/fit_constants.py fits each refit on the training rows as validate sees them."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "fit_constants.py"
    spec = importlib.util.spec_from_file_location("fit_constants", path)
    fit_constants = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fit_constants)
    bloom = [r for r in load_published_runs() if r.source == "bigscience"][:2]
    # A held-out group that holds none of the evidence: the training rows keep the fact.
    train, held = fit_constants._held_out(bloom, "source", "no-such-source")
    assert all("dp_bandwidth_scale" in dict(r.framework_then) for r in train) and not held
    key = SPLITS["gpu_generation"][0]
    train, held = fit_constants._held_out(bloom, "gpu_generation", "ampere")
    assert not train and all(key(r) == "ampere" and "dp_bandwidth_scale" not in dict(r.framework_then) for r in held)


def _rows(run, measured_predicted: list, group: str = "g", same_plan: bool = False) -> list:
    """Made-up rows of `run`'s problem, each its own plan (a different recompute count) unless `same_plan`."""
    return [RowResult(replace(run, id=f"{run.id}-{group}{i}", measured_tokens_per_s_per_gpu=m,
                              plan=run.plan if same_plan else replace(run.plan, recompute_num_layers=i)), p, group=group)
            for i, (m, p) in enumerate(measured_predicted)]


def test_within_problem_rank_worked_example(runs):
    """One problem, four plans measured 100, 200, 300, 400, predicted 150, 120, 310, 500: predicted ranks
    2, 1, 3, 4 against 1, 2, 3, 4, so Spearman = 1 - 6*(1+1)/(4*15) = 0.8; of the 6 pairs only (1, 2)
    is out of order: 5/6; the predicted best (500) is the measured best. A second problem of two plans
    (another GPU count) predicted the wrong way round: 0 of 1 pair, its best missed. A third, one plan
    measured twice (no choice to rank), is left out."""
    base = next(r for r in runs if r.id == "BLOOM-PREQ-01")
    one = _rows(base, [(100, 150), (200, 120), (300, 310), (400, 500)])
    other = replace(base, cluster=replace(base.cluster, num_gpus=base.cluster.num_gpus * 2))
    two = _rows(other, [(100, 200), (200, 100)])
    again = replace(base, cluster=replace(base.cluster, num_gpus=base.cluster.num_gpus * 4))
    twice = _rows(again, [(100, 100), (110, 100)], same_plan=True)
    w = within_problem_rank(one + two + twice)
    assert w["num_problems"] == 2 and w["num_rows"] == 6 and w["num_ranked"] == 1
    assert w["spearman_mean"] == pytest.approx(0.8)
    assert w["num_pairs"] == 7 and w["pair_agreement"] == pytest.approx(5 / 7)
    assert w["best_picked"] == pytest.approx(0.5)
    # The mis-ordered pairs, the measured-faster plan first: (200 vs 100, predicted 120 vs 150) and the
    # second problem's (200 vs 100, predicted 100 vs 200).
    assert [(m["measured_gain"], m["predicted_gain"]) for m in w["misordered"]] == \
        [(pytest.approx(1.0), pytest.approx(-0.2)), (pytest.approx(1.0), pytest.approx(-0.5))]
    assert w["misordered"][0]["faster"] == one[1].run.id and w["misordered"][0]["slower"] == one[0].run.id
    # Another document of the same source (another stack or date) is another problem.
    later = [replace(r, run=replace(r.run, id=r.run.id.replace("PREQ", "LATER"))) for r in two[:1]]
    assert within_problem_rank(one + two[1:] + later)["num_problems"] == 1
    # So is the same document measured on another day: BigScience timed tp8 pp12 mb4 at 88.3 tokens/s/GPU
    # on 02-21 and 93.3 on 02-25, after "PCI-Express/NUMA was improved today ... do not compare today's
    # numbers to yesterday's" (chronicles-prequel.md, "GBS Variations").
    next_day = [replace(r, run=replace(r.run, session="02-25")) for r in two[:1]]
    assert within_problem_rank(one + two[1:] + next_day)["num_problems"] == 1


def test_a_rows_session_is_the_date_or_commit_its_citation_names(runs):
    by_id = {r.id: r for r in runs}
    assert (by_id["BLOOM-PREQ-03"].session, by_id["BLOOM-PREQ-12"].session) == ("02-21", "02-25")
    assert by_id["OLMOCORE-1B-04"].session == "2024-09-26" and by_id["OLMOCORE-1B-12"].session == "2024-11-05"
    assert {r.session for r in runs if r.id.startswith("INTERNEVO-thr")} == {"34fc28d760"}


def test_a_misordered_pair_names_the_terms_that_order_it(runs):
    """Plan a measured 10 % faster than plan b, predicted slower: a's step is priced 0.2 s more compute
    and 0.4 s less data-parallel time than b's, pipeline sends equal: the compute term is what makes it
    look slower, the data-parallel one pulls the other way, the equal term is neither."""
    from cost_model.validation import misordered_pair

    base = next(r for r in runs if r.id == "BLOOM-PREQ-01")
    a, b = _rows(base, [(110.0, 95.0), (100.0, 100.0)])
    a = replace(a, time_breakdown_s=(("compute", 1.0), ("dp_comm", 0.5), ("pp_comm", 0.1)))
    b = replace(b, time_breakdown_s=(("compute", 0.8), ("dp_comm", 0.9), ("pp_comm", 0.1)))
    m = misordered_pair(a, b)
    assert (m["faster"], m["slower"]) == (a.run.id, b.run.id)
    assert m["measured_gain"] == pytest.approx(0.1) and m["predicted_gain"] == pytest.approx(-0.05)
    assert m["terms_against_s"] == {"compute": pytest.approx(0.2)}
    assert m["terms_for_s"] == {"dp_comm": pytest.approx(-0.4)}


def test_interval_quantile_and_pooling():
    """Hyndman and Fan's type 6 at level 0.8: rank 0.8 (n + 1), interpolated. Of the 20 scores 1..20 the
    rank is 16.8: 16 + 0.8 x (17 - 16) = 16.8 (split-conformal's ceil(16.8) = 17th would be 17); of 10
    scores 1..10, 8.8. Of 9 scores 1..9 the rank is exactly 8; of 4 scores it is 4, the largest; of 3 it
    is 3.2 > 3, so the largest; of 1 score, 1.6: that one."""
    assert interval_quantile([float(v) for v in range(20, 0, -1)], 0.8) == pytest.approx(16.8)
    assert interval_quantile([float(v) for v in range(1, 11)], 0.8) == pytest.approx(8.8)
    assert interval_quantile([9.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0], 0.8) == pytest.approx(8.0)
    assert interval_quantile([0.4, 0.1, 0.3, 0.2], 0.8) == 0.4
    assert interval_quantile([0.1, 0.3, 0.2], 0.8) == 0.3
    assert interval_quantile([0.7], 0.8) == 0.7
    # Over many draws of 21 exchangeable scores, the type-6 quantile of the first 20 holds the 21st in
    # 80 % of them (k / (n + 1) at rank k); the rank-17 order statistic would hold it in 17 / 21 = 81 %.
    rng = random.Random(7)
    draws = [[rng.random() for _ in range(21)] for _ in range(40000)]
    held = sum(d[20] <= interval_quantile(d[:20], 0.8) for d in draws) / len(draws)
    assert held == pytest.approx(0.80, abs=0.005)
    where = {"generation": "hopper", "scale": "<=64 GPUs", "family": "megatron", "precision": "fp8", "moe": False}
    few = [(dict(where), 0.0)] * (MIN_STRATUM_ROWS - 1)
    other_family = [(dict(where, family="pytorch"), -0.1)] * 5
    moe = [(dict(where, moe=True), 5.0)] * 50
    values, pooled = pooled_residuals(few + other_family + moe, where)
    # Too few in the stratum: the framework family is pooled away first; MoE residuals never join.
    assert pooled == ("family",) and len(values) == MIN_STRATUM_ROWS - 1 + 5
    # 24 scores |r|: 19 zeros and five 0.1; rank 25 * 0.8 = 20 is the first 0.1. The interval is
    # symmetric in log space though every residual leans one way (its sign does not transfer).
    iv = interval_of(1000.0, few + other_family + moe, where)
    assert iv.pooled == "family" and iv.num_residuals == len(values) and iv.transfer == "new source"
    assert iv.low == pytest.approx(1000.0 * math.exp(-0.1)) and iv.high == pytest.approx(1000.0 * math.exp(0.1))


def test_coverage_takes_no_residual_from_the_rows_own_group(runs):
    """Two groups of 20 rows each. Group a: predicted exactly (residual 0); group b: every row 50 % too
    fast (|residual| log 1.5). Each row's interval comes from the other group only: a's rows get b's
    interval, predicted x [2/3, 3/2], and are inside; b's rows get a's, 150 x [1, 1], and are outside:
    coverage 1/2, median width (3/2 - 2/3 on a, 0 on b) the mean of the two. A leak of the row's own
    group would make every pool 39 scores, whose rank 40 x 0.8 = 32 is log 1.5: every row covered."""
    base = next(r for r in runs if r.id == "BLOOM-PREQ-01")
    a = _rows(base, [(100.0, 100.0)] * 20, group="a")
    b = _rows(base, [(100.0, 150.0)] * 20, group="b")
    c = coverage(a + b)
    assert c["num_rows"] == 40 and c["coverage"] == 0.5
    assert c["median_width"] == pytest.approx((1.5 - 2 / 3) / 2)
    assert stratum(base)["family"] == "megatron"


def test_coverage_takes_no_row_its_own_residual_under_another_split(runs):
    """The fp8 rows held out by precision take residuals held out by source: a pool holding the row itself
    (the same run, another group) must not lend it its own miss. The row: predicted 160, measured 100
    (group fp8). The pool: another run predicted exactly, and the row itself predicted 200 under its
    source's group. Its own |log(100/200)| would widen the interval to 160 x [1/2, 2] and cover it; without
    it the one score left is 0 and 100 lies outside [160, 160]."""
    base = next(r for r in runs if r.id == "BLOOM-PREQ-01")
    run = replace(base, measured_tokens_per_s_per_gpu=100.0)
    row, itself = RowResult(run, 160.0, group="fp8"), RowResult(run, 200.0, group="bigscience")
    other = RowResult(replace(run, id="OTHER-RUN"), 100.0, group="bigscience")
    c = coverage([row], pool=[other, itself])
    assert c["num_rows"] == 1 and c["coverage"] == 0.0 and c["median_width"] == pytest.approx(0.0)


def test_estimate_carries_the_interval_after_the_existing_keys(capsys, tmp_path):
    """`estimate --json` keeps CostEstimate.to_prediction's keys in their order and appends the interval;
    the interval is the shipped residuals' for the plan's stratum, and `estimate` prints it."""
    import json

    from autoplan.cli.main import main
    from autoplan.planning.prediction import INTERVAL_KEY
    from cost_model.shipped_intervals import prediction_interval

    assert main(["estimate", "--model", "llama-3-8b", "--gpus", "8", "--zero", "3", "--recompute", "full", "--json"]) == 0
    prediction = json.loads(capsys.readouterr().out)["prediction"]
    keys = list(prediction)
    assert keys[keys.index("cost_model") + 1:] == [INTERVAL_KEY, "interval_80"]
    predicted = prediction["tokens_per_s_per_gpu"]
    expected = prediction_interval(predicted, "h100-80gb", 8, "autoplan", "bf16")
    assert prediction[INTERVAL_KEY] == pytest.approx(expected.to_list())
    assert expected.low < predicted < expected.high and "hopper, <=64 GPUs, pytorch" in expected.stratum
    assert main(["estimate", "--model", "llama-3-8b", "--gpus", "8", "--zero", "3", "--recompute", "full"]) == 0
    assert prediction["interval_80"]["transfer"] == expected.transfer == "new source"
    assert f"tokens/s/GPU {predicted:,.0f} (80 %, new source: {expected.low:,.0f}-{expected.high:,.0f})" in \
        capsys.readouterr().out
    # A hand-edited interval that is not a range: one line, exit 2.
    assert main(["estimate", "--model", "llama-3-8b", "--gpus", "8", "--zero", "3", "--recompute", "full", "-o", str(tmp_path / "p.json")]) == 0
    capsys.readouterr()
    doc = json.loads((tmp_path / "p.json").read_text())
    doc["prediction"][INTERVAL_KEY] = [2.0, 1.0]
    (tmp_path / "p.json").write_text(json.dumps(doc))
    assert main(["estimate", str(tmp_path / "p.json")]) == 2
    err = capsys.readouterr().err
    assert INTERVAL_KEY in err and "0 < low <= high" in err and "Traceback" not in err


def test_each_constant_names_the_sources_whose_rows_chose_it(runs):
    """fit_constants --provenance: async TP's overlap moves only the rows that ran async TP, the pipeline
    engine's per-micro-batch cost only Megatron-DeepSpeed's pipeline rows (BLOOM's here), the GEMM
    efficiency every row."""
    import importlib.util
    from pathlib import Path

    from cost_model.constants import load_constants

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "fit_constants.py"
    spec = importlib.util.spec_from_file_location("fit_constants", path)
    fit_constants = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fit_constants)
    picked = [r for r in runs if r.id in ("TORCHTITAN-2506-8B-bf16-vanillaTP", "TORCHTITAN-2506-8B-bf16-asyncTP",
                                          "BLOOM-PREQ-01")]
    assert len(picked) == 3
    values = load_constants().provenance["parameters"]
    evidence = fit_constants.constant_evidence(picked, values)
    assert evidence["async_tp_overlap"] == {"torchtitan": 1}
    assert evidence["pipe_microbatch_overhead_s"] == {"bigscience": 1}
    assert evidence["gemm_efficiency"] == {"bigscience": 1, "torchtitan": 2}


def test_median_signed_error_tells_the_direction(runs):
    """Three rows measured 100, predicted 110, 80 and 105: signed errors +10 %, -20 %, +5 %, median +5 %
    (the MAPE, 11.7 %, hides which way they lean)."""
    from cost_model.validation import split_summary

    base = next(r for r in runs if r.id == "BLOOM-PREQ-01")
    rows = [replace(r, baseline_tokens_per_s_per_gpu=50.0)
            for r in _rows(base, [(100.0, 110.0), (100.0, 80.0), (100.0, 105.0)])]
    s = split_summary(rows)
    assert s["median_signed_error"] == pytest.approx(0.05) and s["mape"] == pytest.approx(0.35 / 3)


def test_a_plan_interval_names_the_transfer_its_residuals_measured():
    """Across a new GPU generation the same prediction takes the residuals held out by generation (another
    pool, so another interval) and says so; a transfer that is not a plan's is one clear error."""
    from autoplan.specs import AutoplanError
    from cost_model.shipped_intervals import prediction_interval

    source = prediction_interval(1000.0, "h100-80gb", 64, "megatron-core", "bf16")
    generation = prediction_interval(1000.0, "h100-80gb", 64, "megatron-core", "bf16", transfer="gpu_generation")
    assert (source.transfer, generation.transfer) == ("new source", "new GPU generation")
    assert source.to_list() != generation.to_list()
    with pytest.raises(AutoplanError, match="interval transfer must be one of source, gpu_generation, scale"):
        prediction_interval(1000.0, "h100-80gb", 64, "megatron-core", "bf16", transfer="precision")
