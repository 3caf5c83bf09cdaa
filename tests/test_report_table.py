"""The report's per-run table read back from the page it writes: a CPU run's memory compared like
with like (the allocated peak against the RSS growth, or said why not), and both MFU columns against
one named peak. The runs are records made here from a shipped CPU run, not a training run."""
import json
import shutil
from pathlib import Path

import pytest

from autoplan.cli.main import main
from tests.report_page import per_run_rows

DATA = Path(__file__).resolve().parents[1] / "notebooks" / "data"
MIB = 2**20
PAGE = {}  # the fixture's report page, for the tests that read its other tables


def _record(base: dict, plan_id: str, growth_bytes, wait_share=None) -> dict:
    """The shipped run with a prediction of round numbers: 48 MiB allocated (10 + 10 + 20 + 8; the
    512 MiB CUDA context and 1 MiB cached block it predicted are no CPU memory), a measured median
    step 1.25x the predicted one."""
    r = json.loads(json.dumps(base))
    r["plan_id"] = plan_id
    pred = r["prediction"]
    pred["memory_breakdown_bytes"] = {"params": 10 * MIB, "grads": 10 * MIB, "optimizer": 20 * MIB,
                                      "activations": 8 * MIB, "allocator_overhead": MIB, "cuda_context": 512 * MIB}
    pred["peak_memory_bytes"] = 561 * MIB
    r["step_times_s"] = [pred["step_time_s"] * f for f in (1.0, 1.25, 1.5)]
    r["peak_memory_bytes"] = 700 * MIB  # the RSS high water: interpreter and libraries included
    r["peak_memory_kind"] = "cpu_rss_high_water"
    if growth_bytes is None:
        r.pop("cpu_rss_growth_bytes", None)
    else:
        r["cpu_rss_growth_bytes"] = growth_bytes
    if wait_share is not None:  # the share of the timed steps the ranks waited for a CPU others held
        r["cpu_wait_share"] = wait_share
    return r


@pytest.fixture(scope="module")
def table(tmp_path_factory):
    folder = tmp_path_factory.mktemp("cpu-report")
    for name in ("cpu-profile.json", "cpu-profile.json.samples.csv"):
        shutil.copy(DATA / name, folder / name)
    base = next(r for r in map(json.loads, (DATA / "runs.jsonl").read_text().splitlines()) if r["status"] == "ok")
    runs = [_record(base, "withgrowth01", 40 * MIB), _record(base, "nogrowth0002", None),
            _record(base, "quietcpu0003", 40 * MIB, wait_share=0.05), _record(base, "sharedcpu004", 40 * MIB, wait_share=0.5)]
    (folder / "runs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in runs))
    assert main(["report", str(folder / "runs.jsonl"), "-o", str(folder / "report")]) == 0
    PAGE["index"] = folder / "report" / "index.html"
    return base, per_run_rows(PAGE["index"])


def test_cpu_memory_is_the_allocated_peak_against_the_rss_growth(table):
    _, rows = table
    row = rows[0]
    assert row["peak memory predicted"] == "48.0 MiB"  # the CUDA context and cached block left out
    assert row["peak memory measured"] == "40.0 MiB"
    assert row["peak memory error"] == "+20.0%"      # (48 - 40) / 40
    assert "RSS growth" in row["memory compared"] and "allocated" in row["memory compared"]


def test_a_cpu_record_without_the_rss_growth_says_why_it_is_not_compared(table):
    _, rows = table
    row = rows[1]
    assert row["peak memory error"] == "n/a"
    assert row["peak memory measured"] == "700.0 MiB RSS"
    assert row["memory compared"].startswith("not compared") and "interpreter" in row["memory compared"]


def test_both_mfus_divide_by_the_one_peak_the_table_names(table):
    base, rows = table
    profile = json.loads((DATA / "cpu-profile.json").read_text())
    peak = profile["peak_flops_per_s"][base["plan"]["training"]["dtype"]]
    for row in rows[:3]:
        assert row["step time error"] == "-20.0%"  # predicted / median (1.25 x predicted) - 1
        assert row["MFU peak (source)"] == f"{peak / 1e12:,.3g} TFLOP/s ({profile['sources']['peak_flops_per_s']})"
        predicted = base["prediction"]["mfu"]
        assert row["MFU predicted"] == f"{predicted:.1%}"
        assert row["MFU measured"] == f"{predicted / 1.25:.1%}"  # same FLOPs and peak, 1.25x the time


def test_a_cpu_step_time_is_compared_only_when_the_ranks_had_the_cpu(table):
    """A wall step time on a CPU that other processes held measures them too: over the limit
    (10% of the timed steps waiting on a run queue) the row says so instead of an error."""
    _, rows = table
    assert rows[0]["time compared"] == "median wall step; CPU contention not recorded"
    assert rows[2]["time compared"] == "median wall step" and rows[2]["step time error"] == "-20.0%"
    shared = rows[3]
    assert shared["step time error"] == "n/a" and shared["step time measured (median)"].endswith("of 3")
    assert shared["time compared"].startswith("not compared: the run's ranks waited for a CPU other processes held 50%")


def test_a_run_whose_step_time_is_not_compared_is_left_out_of_the_scores(table):
    """Issue 53: the per-run table said "not compared" and the accuracy table then scored the same run.
    The four runs: three compared (median 1.25x the prediction), one on a shared CPU left out."""
    from tests.report_page import Tables

    parser = Tables()
    parser.feed(PAGE["index"].read_text())
    header, *rows = parser.tables["Measured vs predicted step time, all rows"]
    analytical = dict(zip(header, next(r for r in rows if r[0] == "analytical")))
    assert analytical["rows"] == "3", analytical


def test_runs_none_of_whose_step_times_is_compared_still_get_their_table(tmp_path):
    """A single run on a loaded CPU (the README tour's, 2 ranks on 2 cores under a test suite): its step
    time is not compared, so nothing scores the cost model, but the report is written and its per-run
    table says why (it was refused as "no usable measured rows", exit 2)."""
    from tests.report_page import Tables

    for name in ("cpu-profile.json", "cpu-profile.json.samples.csv"):
        shutil.copy(DATA / name, tmp_path / name)
    base = next(r for r in map(json.loads, (DATA / "runs.jsonl").read_text().splitlines()) if r["status"] == "ok")
    (tmp_path / "runs.jsonl").write_text(json.dumps(_record(base, "sharedcpu005", 40 * MIB, wait_share=0.5)) + "\n")
    assert main(["report", str(tmp_path / "runs.jsonl"), "-o", str(tmp_path / "report")]) == 0
    (row,) = per_run_rows(tmp_path / "report" / "index.html")
    assert row["time compared"].startswith("not compared: the run's ranks waited for a CPU")
    parser = Tables()
    parser.feed((tmp_path / "report" / "index.html").read_text())
    assert "Measured vs predicted step time, all rows" not in parser.tables  # nothing to score
    # a failed or malformed file is still refused: only rows left out for contention are reported so
    (tmp_path / "bad.jsonl").write_text(json.dumps({**base, "status": "error", "error": "boom"}) + "\n")
    assert main(["report", str(tmp_path / "bad.jsonl"), "-o", str(tmp_path / "report2")]) == 2
