"""--train-tokens and --gpu-hour-price: days, GPU-hours and cost on the plan and on every runner-up."""
import json
import re

import pytest

from autoplan.cli.argtypes import token_count
from autoplan.cli.main import main
from cost_model.budget import training_run

SMALL = ["--model", "llama-2-7b", "--gpus", "8", "--global-batch", "32", "--seq-len", "2048"]


def test_days_gpu_hours_and_cost_follow_from_the_predicted_throughput(tmp_path, capsys):
    plan = tmp_path / "plan.json"
    assert main(["search", *SMALL, "--train-tokens", "300B", "--gpu-hour-price", "2.5", "-o", str(plan)]) == 0
    out = capsys.readouterr().out
    doc = json.loads(plan.read_text())
    assert doc["train_budget"] == {"train_tokens": 300e9, "gpu_hour_price": 2.5}
    seconds = 300e9 / doc["prediction"]["tokens_per_s"]
    line = re.search(r"train 300\.0B tokens: ([\d,.]+) days on 8 GPUs, ([\d,]+) GPU-hours, \$([\d,]+) at \$2.50", out)
    days, gpu_hours, cost = (float(line.group(i).replace(",", "")) for i in (1, 2, 3))
    assert days == pytest.approx(seconds / 86400, abs=0.05)
    assert gpu_hours == pytest.approx(seconds * 8 / 3600, abs=0.5)
    assert cost == pytest.approx(gpu_hours * 2.5, abs=2)
    header = next(line for line in out.splitlines() if line.strip().startswith("#  plan"))
    assert "days" in header and "cost" in header
    rows = [line for line in out.split(header, 1)[1].splitlines() if re.match(r"\s+\d+\s+dp=", line)]
    assert len(rows) == len(doc["alternatives"])
    for alt, row in zip(doc["alternatives"], rows):  # every runner-up priced from its own throughput
        alt_days = 300e9 / alt["prediction"]["tokens_per_s"] / 86400
        assert f"{alt_days:,.1f}" in row


def test_price_without_tokens_and_bad_counts_are_one_line(capsys):
    assert main(["search", *SMALL, "--gpu-hour-price", "2"]) == 2
    assert "needs --train-tokens" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_:
        main(["search", *SMALL, "--train-tokens", "lots"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "2T or 300B" in err


def test_token_counts_and_the_formula():
    assert token_count("2T") == 2e12 and token_count("15m") == 15e6 and token_count("1e9") == 1e9
    run = training_run(tokens_per_s=1e6, num_gpus=100, train_tokens=86400e6, gpu_hour_price=2.0)
    assert run["days"] == pytest.approx(1.0) and run["gpu_hours"] == pytest.approx(2400) and run["cost"] == 4800
