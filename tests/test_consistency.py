"""What every command shares: one spelling of the output flag, "did you mean" for GPU names,
search counts that add up, lines that fit 120 columns, and a progress line on slow work."""
import io
import re
import time

import pytest

from autoplan.cli.main import build_parser, main
from autoplan.cli.progress import Progress

SMALL = ["--model", "llama-2-7b", "--gpus", "8", "--global-batch", "32", "--seq-len", "2048"]


@pytest.mark.parametrize("command,extra", [("run", ["plan.json"]), ("profile", [])])
def test_run_and_profile_write_with_o_and_keep_out_as_a_hidden_alias(command, extra):
    parser = build_parser()
    for flag in ("-o", "--output", "--out"):
        assert parser.parse_args([command, *extra, flag, "x.jsonl"]).out == "x.jsonl"
    sub = parser._subparsers._group_actions[0].choices[command]
    help_text = sub.format_help()
    assert "-o PATH, --output PATH" in help_text and "--out " not in help_text


@pytest.mark.parametrize("typed,suggested", [("H100", "h100-80gb"), ("a100", "a100-80gb"), ("h10-80gb", "h100-80gb"),
                                             ("h100-sxm", "h100-80gb"), ("H100 SXM5", "h100-80gb"),
                                             ("a100-sxm4-40gb", "a100-40gb")])
def test_a_mistyped_gpu_gets_a_did_you_mean(capsys, typed, suggested):
    assert main(["search", *SMALL, "--gpu", typed]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "did you mean" in err and suggested in err.split("known:")[0]


def test_search_counts_add_up_and_every_line_fits_120_columns(capsys):
    assert main(["search", *SMALL]) == 0
    out = capsys.readouterr().out
    tally = re.search(r"([\d,]+) distinct plans tried = ([\d,]+) scored and fit \+ ([\d,]+) rejected:(.*)", out, re.S)
    tried, ran, rejected = (int(tally.group(i).replace(",", "")) for i in (1, 2, 3))
    reasons = sum(int(n.replace(",", "")) for n in re.findall(r"([\d,]+) [a-z_]+", tally.group(4)))
    assert tried == ran + rejected and rejected == reasons and ran > 0
    search_lines = out[out.index("search   "):].splitlines()
    assert all(len(line) <= 120 for line in search_lines), max(search_lines, key=len)


def test_progress_is_quiet_for_fast_work_and_speaks_for_slow_work(monkeypatch):
    monkeypatch.setenv("AUTOPLAN_PROGRESS", "1")
    fast = io.StringIO()
    with Progress("report", delay_s=5, stream=fast) as progress:
        progress.stage("quick")
    assert fast.getvalue() == ""
    slow = io.StringIO()
    with Progress("report", delay_s=0.05, stream=slow) as progress:
        progress.stage("scoring the plan space")
        time.sleep(0.3)
        progress.stage("scaling")
    lines = slow.getvalue().splitlines()
    assert lines[0].startswith("autoplan report: scoring the plan space (") and lines[-1].startswith(
        "autoplan report: scaling (")
    monkeypatch.setenv("AUTOPLAN_PROGRESS", "0")
    silent = io.StringIO()
    with Progress("report", delay_s=0, stream=silent) as progress:
        progress.stage("anything")
        time.sleep(0.05)
    assert silent.getvalue() == ""


def test_search_output_fits_120_columns_except_the_term_glossary(capsys):
    assert main(["search", "--model", "qwen-72b", "--gpus", "128", "--train-tokens", "2T", "--gpu-hour-price", "2"]) == 0
    out = capsys.readouterr().out
    # The one exception is a row of the memory-term glossary (cost_model/terms.py's wording).
    too_wide = [line for line in out.splitlines() if len(line) > 120 and "what it is" not in line
                and not line.lstrip().startswith(("optimizer ", "grads ", "params "))]
    assert not too_wide, too_wide
    assert "why not: " in out


def test_run_steps_1_measures_its_one_step_without_a_warmup_flag():
    from executor.options import options_from_args

    parser = build_parser()
    assert options_from_args(parser.parse_args(["run", "plan.json", "--steps", "1"])).warmup_steps == 0
    assert options_from_args(parser.parse_args(["run", "plan.json", "--steps", "2"])).warmup_steps == 1
    assert options_from_args(parser.parse_args(["run", "plan.json"])).warmup_steps == 2


@pytest.mark.parametrize("model,total_b,active_b", [
    ("qwen3-235b-a22b", 235, 22),  # the name: 235B total, 22B activated ("A22B")
    ("deepseek-v3", 671, 37),  # DeepSeek-V3 technical report (arXiv 2412.19437): 671B total, 37B activated per token
])
def test_a_moe_header_gives_active_parameters_beside_the_total(capsys, model, total_b, active_b):
    """Issue 53: what MoE users compare is the parameters a token passes through."""
    assert main(["estimate", "--model", model, "--gpus", "256", "--ep", "8"]) in (0, 1)
    header = capsys.readouterr().out.splitlines()[0]
    found = re.search(r": ([\d.]+)B params \(([\d.]+)B active\),", header)
    assert found and len(header) <= 120, header
    assert abs(float(found.group(1)) - total_b) < 1 and abs(float(found.group(2)) - active_b) < 1, header
    assert main(["estimate", *SMALL, "--tp", "2"]) in (0, 1)
    assert "active" not in capsys.readouterr().out.splitlines()[0]  # a dense model: every parameter is active
