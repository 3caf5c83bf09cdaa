"""`autoplan validate`: runs on the shipped published runs, prints per-source figures, --json parses."""
import json

from autoplan.cli.main import main
from cost_model.published import load_published_runs
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
    total = a["num_rows"] + len(doc["skipped"])
    assert total == len(load_published_runs())          # nothing silently dropped
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
