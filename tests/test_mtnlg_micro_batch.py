"""MT-NLG's micro-batch, solved from its own scale series (benchmarks/mtnlg_micro_batch.py), against a
solve worked by hand from the paper's three iteration times."""
import importlib.util
from pathlib import Path

import pytest

PATH = Path(__file__).resolve().parents[1] / "benchmarks" / "mtnlg_micro_batch.py"


@pytest.fixture(scope="module")
def solver():
    spec = importlib.util.spec_from_file_location("mtnlg_micro_batch", PATH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_solve_worked_by_hand(solver):
    """Smith et al. 2022 sec. 2.4: 60.1, 50.2, 44.4 s at 8, 10, 12 replicas, PP 35, batch 1920. Against
    x = 1 / replicas: mean x = (1/8 + 1/10 + 1/12) / 3 = 0.102778, mean step = 154.7 / 3 = 51.5667 s;
    Sxx = 0.0222222^2 + 0.0027778^2 + 0.0194444^2 = 8.7963e-4, Sxy = 0.0222222 * 8.5333
    - 0.0027778 * -1.3667 - 0.0194444 * -7.1667 = 0.332778, so the slope is 378.32 s and the intercept
    51.5667 - 378.32 * 0.102778 = 12.684 s. At d = 0 the fill and drain, 34 t_b with t_b = b * 378.32 /
    1920 = 0.19704 b s, equal the intercept at b = 12.684 / (34 * 0.19704) = 1.893. Micro-batches that
    divide 240, 192 and 160, up to twice the solve: 1, 2, 4 (3 does not divide 160); the nearest is 2, which leaves
    d = 12.684 - 13.399 = -0.71 s; 1 would leave +5.99 s. It stays 2 while d < 12.684 - 1.5 * 6.699 = 2.64 s."""
    s = solver.solve_micro_batch([(8, 60.1), (10, 50.2), (12, 44.4)], pp=35, global_batch=1920)
    assert s["slope_s"] == pytest.approx(378.32, abs=0.01)
    assert s["intercept_s"] == pytest.approx(12.684, abs=0.001)
    assert s["solved"] == pytest.approx(1.893, abs=0.001)
    assert s["admissible"] == [1, 2, 4]
    assert s["micro_batch"] == 2
    assert s["intercept_s"] - s["fill_s"][2] == pytest.approx(-0.71, abs=0.01)
    assert s["intercept_s"] - s["fill_s"][1] == pytest.approx(5.99, abs=0.01)
    assert s["holds_below_s"] == pytest.approx(2.64, abs=0.01)


def test_a_series_with_no_fixed_cost_beyond_the_bubble_gives_its_micro_batch(solver):
    """Made up: t_b = 0.4 s at b = 4, p = 9, batch 1024, d = 0 -> step = (1024 / (4 dp) + 8) * 0.4."""
    points = [(dp, (1024 / (4 * dp) + 8) * 0.4) for dp in (2, 4, 8)]
    s = solver.solve_micro_batch(points, pp=9, global_batch=1024)
    assert s["solved"] == pytest.approx(4.0) and s["micro_batch"] == 4


def test_the_shipped_fact_is_the_solve(solver, capsys):
    """The benchmark exits 0 while cost_model/source_facts.py holds what the published rows give."""
    assert solver.main() == 0
    assert "nearest admissible micro-batch: 2" in capsys.readouterr().out
