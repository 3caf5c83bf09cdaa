"""`autoplan compare A.json B.json`: side by side, term by term, B - A adds up, and the verdict."""
import json

from autoplan.cli.main import main

SMALL = ["--model", "llama-2-7b", "--gpus", "8", "--global-batch", "32", "--seq-len", "2048"]


def test_compare_two_plans_term_by_term_and_names_the_winner(tmp_path, capsys):
    fast, slow = tmp_path / "fast.json", tmp_path / "slow.json"
    assert main(["search", *SMALL, "-o", str(fast)]) == 0
    assert main(["estimate", *SMALL, "--tp", "8", "-o", str(slow)]) == 0
    capsys.readouterr()
    assert main(["compare", str(slow), str(fast)]) == 0
    out = capsys.readouterr().out
    a, b = (json.loads(p.read_text())["prediction"] for p in (slow, fast))
    section = out.split("time per step (", 1)[1].split("memory per GPU", 1)[0]
    scale = 1.0 if section.startswith("s)") else 1e-3
    rows = {line.split()[0]: [float(x) for x in line.split()[1:]] for line in section.splitlines()[2:] if line.strip()}
    for term, value in a["time_breakdown_s"].items():
        if value:
            assert abs(rows[term][0] * scale - value) < 1e-3 * max(1.0, value)
    assert abs(rows["total"][2] * scale - (b["step_time_s"] - a["step_time_s"])) < 2e-3 * max(1.0, a["step_time_s"])
    winner = "B" if b["step_time_s"] < a["step_time_s"] else "A"
    assert f"verdict: {winner} wins by" in out and "step time" in out.splitlines()[-1]


def test_compare_a_non_plan_is_one_line(tmp_path, capsys):
    bogus = tmp_path / "x.json"
    bogus.write_text("{}")
    assert main(["compare", str(bogus), str(bogus)]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1
