"""The report's per-run table read back from the page it writes: a CPU run's memory compared like
with like (the allocated peak against the RSS growth, or said why not), and both MFU columns against
one named peak. The runs are records made here from a shipped CPU run, not a training run."""
import json
import shutil
from html.parser import HTMLParser
from pathlib import Path

import pytest

from autoplan.cli.main import main

DATA = Path(__file__).resolve().parents[1] / "notebooks" / "data"
MIB = 2**20
TITLE = "Measured vs predicted, per run"


class _Tables(HTMLParser):
    """Each table's rows of cell texts, by the h2 title above it."""

    def __init__(self):
        super().__init__()
        self.tables, self.title, self.cell, self.tag = {}, "", None, None

    def handle_starttag(self, tag, attrs):
        self.tag = tag
        if tag == "table":
            self.tables[self.title] = []
        elif tag == "tr":
            self.tables[self.title].append([])
        elif tag in ("td", "th"):
            self.cell = ""

    def handle_endtag(self, tag):
        if tag in ("td", "th"):
            self.tables[self.title][-1].append(self.cell)
            self.cell = None
        self.tag = None

    def handle_data(self, data):
        if self.tag == "h2":
            self.title = data
        elif self.cell is not None:
            self.cell += data


def _record(base: dict, plan_id: str, growth_bytes) -> dict:
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
    return r


@pytest.fixture(scope="module")
def table(tmp_path_factory):
    folder = tmp_path_factory.mktemp("cpu-report")
    for name in ("cpu-profile.json", "cpu-profile.json.samples.csv"):
        shutil.copy(DATA / name, folder / name)
    base = next(r for r in map(json.loads, (DATA / "runs.jsonl").read_text().splitlines()) if r["status"] == "ok")
    runs = [_record(base, "withgrowth01", 40 * MIB), _record(base, "nogrowth0002", None)]
    (folder / "runs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in runs))
    assert main(["report", str(folder / "runs.jsonl"), "-o", str(folder / "report")]) == 0
    parser = _Tables()
    parser.feed((folder / "report" / "index.html").read_text())
    header, *rows = parser.tables[TITLE]
    return base, [dict(zip(_unique(header), row)) for row in rows]


def _unique(header: list) -> list:
    """'measured' and 'error' repeat under each quantity: name them by the column before."""
    names, quantity = [], ""
    for h in header:
        if h.endswith("predicted"):
            quantity = h.rsplit(" ", 1)[0]
        names.append(f"{quantity} {h}" if h in ("measured", "error", "measured (median)") else h)
    return names


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
    for row in rows:
        assert row["step time error"] == "-20.0%"  # predicted / median (1.25 x predicted) - 1
        assert row["MFU peak (source)"] == f"{peak / 1e12:,.3g} TFLOP/s ({profile['sources']['peak_flops_per_s']})"
        predicted = base["prediction"]["mfu"]
        assert row["MFU predicted"] == f"{predicted:.1%}"
        assert row["MFU measured"] == f"{predicted / 1.25:.1%}"  # same FLOPs and peak, 1.25x the time
