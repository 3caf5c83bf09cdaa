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


def test_compare_warns_and_names_each_field_when_the_plans_answer_different_problems(tmp_path, capsys):
    """Issue 53: a verdict between two jobs (other model, GPU count, GPU type, training shape) is
    given with a warning naming every field that differs; one problem, no warning."""
    a, b, c = tmp_path / "a.json", tmp_path / "b.json", tmp_path / "c.json"
    assert main(["estimate", *SMALL, "--tp", "2", "-o", str(a)]) == 0
    other = ["--model", "llama-2-13b", "--gpus", "16", "--gpu", "a100-80gb", "--global-batch", "64",
             "--seq-len", "2048", "--tp", "2"]
    assert main(["estimate", *other, "-o", str(b)]) in (0, 1)  # 1: answered, does not fit
    assert main(["estimate", *SMALL, "--tp", "4", "-o", str(c)]) == 0
    capsys.readouterr()
    assert main(["compare", str(a), str(b)]) == 0
    warning = [line for line in capsys.readouterr().out.splitlines() if line.startswith("warning:")]
    assert len(warning) == 1, warning
    for field in ("model llama-2-7b vs llama-2-13b", "GPU count 8 vs 16", "GPU type h100-80gb vs a100-80gb",
                  "training global_batch_size 32 vs 64"):
        assert field in warning[0], warning[0]
    assert "seq_len" not in warning[0]  # only the fields that differ
    assert main(["compare", str(a), str(c)]) == 0
    assert "warning" not in capsys.readouterr().out
