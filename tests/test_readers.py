"""Issue 27: one reader per file kind, the rules applied everywhere, numbers with bounds. A plan file
is read the same way by estimate, export, compare, tune and run: the same refusal (word for word
after the command's name) for a file that breaks a rule, and a prediction made with today's cost
model for a file that carries none. Real CLI calls; the input file is byte-identical afterwards."""
import copy
import json

import pytest

from autoplan.cli.main import main
from tests.cli_run import run_cli

SMALL = ["--model", "llama-2-7b", "--gpus", "8", "--global-batch", "32", "--seq-len", "2048"]
READERS = {  # every command that reads a plan file, as a user would call it (nothing trains)
    "estimate": lambda p, q: ["estimate", p],
    "export": lambda p, q: ["export", p, "--to", "megatron"],
    "compare": lambda p, q: ["compare", p, q],
    "compare B": lambda p, q: ["compare", q, p],
    "run --print-launch": lambda p, q: ["run", p, "--print-launch", "torchrun"],
    "tune": lambda p, q: ["tune", p, "--device", "cpu", "--nproc", "999"],
}


def run(capsys, *argv):
    return run_cli(capsys, *argv)


def refusal(code, err) -> str:
    """The one line of a refusal, without the `autoplan <command>: error: ` prefix."""
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, err
    return lines[0].split(": error: ", 1)[1]


@pytest.fixture(scope="module")
def good(tmp_path_factory):
    path = tmp_path_factory.mktemp("readers") / "good.json"
    assert main(["estimate", *SMALL, "--tp", "2", "--zero", "1", "-o", str(path)]) == 0
    return path


def edited(tmp_path, good, change):
    doc = json.loads(good.read_text())
    change(doc)
    path = tmp_path / "edited.json"
    path.write_text(json.dumps(doc))
    return path


BAD = {
    "degrees do not multiply to the GPU count": (lambda d: d["parallel"].update(dp=2), "dp*tp*pp*cp must equal"),
    "tokens/s per GPU 0": (lambda d: d["prediction"].update(tokens_per_s_per_gpu=0), "tokens_per_s_per_gpu"),
    "MFU 5.0": (lambda d: d["prediction"].update(mfu=5.0), "prediction.mfu must be above 0 and at most 1"),
    "MFU 0": (lambda d: d["prediction"].update(mfu=0), "prediction.mfu"),
    "tokens/s per GPU 1e30": (lambda d: d["prediction"].update(tokens_per_s_per_gpu=1e30),
                              "prediction.tokens_per_s_per_gpu"),
    "HFU 0": (lambda d: d["prediction"].update(hfu=0), "prediction.hfu"),
    "alternative off the GPU count": (lambda d: d["alternatives"].append(
        {"parallel": {**d["parallel"], "tp": 4}}), "alternatives[0].parallel dp*tp*pp*cp"),
}


@pytest.mark.parametrize("label", list(BAD))
def test_every_reader_gives_the_same_refusal(capsys, tmp_path, good, label):
    change, words = BAD[label]
    path = edited(tmp_path, good, change)
    before = path.read_bytes()
    answers = {}
    for command, argv in READERS.items():
        code, out, err = run(capsys, *argv(path, good))
        answers[command] = refusal(code, err)
        assert words in answers[command], (command, answers[command])
    assert len(set(answers.values())) == 1, answers
    assert path.read_bytes() == before


@pytest.mark.parametrize("empty", [None, {}])
def test_a_plan_without_a_prediction_is_scored_everywhere(capsys, tmp_path, good, empty):
    path = edited(tmp_path, good, lambda d: d.update(prediction=empty) if empty is not None else d.pop("prediction"))
    before = path.read_bytes()
    code, out, err = run(capsys, "compare", path, good)
    assert code == 0, err
    assert "verdict: A and B tie" in out  # the same plan, scored the same way
    assert "carries no prediction" in err
    code, out, err = run(capsys, "export", path, "--to", "torchtitan")
    assert code == 0, err
    from autoplan.planning.planfiles import load_plan

    doc = load_plan(path)
    capsys.readouterr()
    assert doc.prediction["step_time_s"] == json.loads(good.read_text())["prediction"]["step_time_s"]
    assert path.read_bytes() == before


def test_compare_reads_a_prediction_without_breakdowns(capsys, tmp_path, good):
    def strip(d):
        del d["prediction"]["time_breakdown_s"], d["prediction"]["memory_breakdown_bytes"]
    path = edited(tmp_path, good, strip)
    code, out, err = run(capsys, "compare", path, good)
    assert code == 0, err
    assert "verdict" in out


def test_tune_scores_alternatives_without_a_prediction():
    from autoplan.planning import tune
    from autoplan.specs import PlanDocument

    doc = PlanDocument.from_dict(json.loads(json.dumps(_plan_with_alternative())))
    scored = []
    found = tune.plans_of(doc, score=lambda plan: scored.append(plan) or _with_prediction(plan))
    assert len(scored) == 1 and all(p[3] == 1.0 for p in found)


def _plan_with_alternative():
    from autoplan.planning.planfiles import load_plan  # noqa: F401 (the module the CLI reads with)
    from autoplan.planning.planner import score_one  # noqa: F401

    base = {"schema": "autoplan.plan/v2", "framework": "autoplan",
            "model": {"name": "m", "num_layers": 4, "hidden_size": 256, "num_heads": 8, "num_kv_heads": 8,
                      "ffn_hidden_size": 512, "vocab_size": 1024},
            "training": {"global_batch_size": 8, "seq_len": 128}, "cluster": {"name": "h100-80gb", "num_gpus": 8},
            "parallel": {"dp": 8, "tp": 1, "pp": 1, "micro_batch_size": 1, "num_microbatches": 1},
            "prediction": {"step_time_s": 1.0, "peak_memory_bytes": 1.0, "tokens_per_s_per_gpu": 1.0, "mfu": 0.5}}
    base["alternatives"] = [{"parallel": {**base["parallel"], "dp": 4, "tp": 2, "num_microbatches": 2}}]
    return base


def _with_prediction(plan):
    plan.prediction = {"step_time_s": 1.0}
    return plan


def test_a_plan_that_does_not_fit_is_exported_or_tuned_only_with_force(capsys, tmp_path, good):
    # not fitting as a plan scored with a headroom that leaves less than its peak says it (fits follows)
    path = edited(tmp_path, good, lambda d: d["prediction"].update(
        fits=False, memory_headroom_bytes=d["prediction"]["memory_capacity_bytes"] - 1))
    code, out, err = run(capsys, "export", path, "--to", "megatron")
    assert "--force" in refusal(code, err) and "the plan does not fit" in err
    code, out, err = run(capsys, "export", path, "--to", "megatron", "--force")
    assert code == 0 and "the plan is predicted NOT to fit in memory; exported because of --force" in err
    code, out, err = run(capsys, "tune", path, "--device", "cpu")
    assert "predicted not to fit" in refusal(code, err) and "--force" in err


def test_deepspeed_refuses_moe_with_zero3_everywhere(capsys, tmp_path):
    moe = ["--model", "mixtral-8x7b", "--gpus", "64", "--zero", "3", "--ep", "8"]
    code, _, err = run(capsys, "estimate", *moe, "--framework", "deepspeed")
    assert "mixtures of experts with ZeRO stage 3" in refusal(code, err)
    plan = tmp_path / "moe.json"
    code, _, err = run(capsys, "estimate", *moe, "--framework", "autoplan", "-o", plan)
    assert code in (0, 1), err
    code, _, err = run(capsys, "export", plan, "--to", "deepspeed", "--force")
    assert "mixtures of experts with ZeRO stage 3" in refusal(code, err)
    from autoplan.specs import get_framework

    assert "MoE not supported with Stage 3" in get_framework("deepspeed").sources["max_zero_with_moe"]


def test_search_with_zero3_on_moe_names_the_moe_rule_not_the_pipeline_one(capsys):
    # Without --ep the space holds pp > 1 plans too: the refusal must still be the rule that holds
    # whatever the degrees (DeepSpeed: "MoE not supported with Stage 3"), not ZeRO-with-pipeline.
    code, _, err = run(capsys, "search", "--model", "mixtral-8x7b", "--gpus", "16", "--framework", "deepspeed",
                       "--zero", "3")
    line = refusal(code, err)
    assert "mixtures of experts with ZeRO stage 3" in line and "pipeline" not in line, line


def test_export_to_a_framework_under_which_the_plan_does_not_fit_needs_force(capsys, tmp_path, good):
    """The file's prediction was made for another framework: the target's re-score decides, as the
    file's own "fits" does (here Megatron-Core's ZeRO-1, the distributed optimizer, keeps the whole fp32
    main-grad buffer where torchtitan's FSDP2 shards the gradients: 56.3 against 34.0 GiB, with 39.1 GiB
    usable under a 40 GiB margin)."""
    path = tmp_path / "zero1.json"
    assert main(["estimate", *SMALL, "--tp", "1", "--zero", "1", "--framework", "torchtitan",
                 "--memory-headroom", "40GiB", "-o", str(path)]) == 0
    code, _, err = run(capsys, "export", path, "--to", "megatron")
    line = refusal(code, err)
    assert "does NOT fit" in line and "--force" in line, line
    code, out, err = run(capsys, "export", path, "--to", "megatron", "--force")
    assert code == 0 and "NOT to fit in memory under megatron-core; exported because of --force" in err


def test_a_measurement_line_with_an_absurd_peak_is_refused_by_report(capsys, tmp_path, good):
    plan = json.loads(good.read_text())
    line = {"schema": "autoplan.measurement/v1", "plan_id": plan["plan_id"], "plan": plan,
            "prediction": plan["prediction"], "backend": "torch", "status": "ok", "step_times_s": [1.0, 1.1],
            "losses": [10.0, 9.5], "peak_memory_bytes": 2**34, "environment": {"device": "cuda"},
            "num_warmup_steps": 1, "tokens_per_step": 65536, "num_gpus": 8, "peak_flops_per_s": 1e30, "error": ""}
    runs = tmp_path / "runs.jsonl"
    runs.write_text(json.dumps(line) + "\n")
    code, _, err = run(capsys, "report", runs, "-o", tmp_path / "report")
    assert "peak_flops_per_s must be" in refusal(code, err) and not (tmp_path / "report").exists()


@pytest.mark.parametrize("flag,shown", [("--sequence-parallel", " sp "), ("--no-sequence-parallel", " no-sp ")])
def test_memory_honours_the_sequence_parallel_flag_without_a_layout(capsys, flag, shown):
    code, out, err = run(capsys, "memory", "--model", "llama-2-70b", "--gpus", "64", flag, "--json")
    assert code == 0, err
    assert shown in f" {json.loads(out)['layout']} "


@pytest.mark.parametrize("argv,words", [
    (["cluster", "--model", "llama-2-7b", "--train-tokens", "2T", "--budget", "1,5M", "--gpu-hour-price", "2"],
     ["--budget", "thousands separators", "'1,5M'"]),
    (["cluster", "--model", "llama-2-7b", "--train-tokens", "2T", "--budget", "1_5M", "--gpu-hour-price", "2"],
     ["--budget", "'1_5M'"]),
    (["search", *SMALL, "--train-tokens", "1e300"], ["--train-tokens", "at most 1e+15"]),
    (["estimate", *SMALL, "--train-tokens", "2T", "--gpu-hour-price", "1e308"], ["--gpu-hour-price", "at most 10000"]),
    (["cluster", "--model", "llama-2-7b", "--train-tokens", "2T", "--budget", "1e30", "--gpu-hour-price", "2"],
     ["--budget", "at most 1e+12"]),
    (["cluster", "--model", "llama-2-7b", "--train-tokens", "2T", "--deadline-days", "1e300"],
     ["--deadline-days", "at most"]),
    (["cluster", "--model", "llama-2-7b", "--train-tokens", "2T", "--deadline-days", "30", "--seq-len", "32768"],
     ["training.seq_len", "max_seq_len=4096", "got 32768"]),
])
def test_numbers_are_refused_with_their_bound(capsys, argv, words):
    line = refusal(*run(capsys, *argv)[::2])
    for word in words:
        assert word in line, line


def test_amounts_parse_one_documented_way():
    from autoplan.cli.argtypes import money, token_count

    assert money("1.5M") == 1.5e6 and money("$250K") == 2.5e5 and money("1500000") == 1.5e6
    assert token_count("2T") == 2e12 and token_count("300B") == 3e11


def test_the_plan_checker_is_the_reader_of_alternatives_too(good):
    from autoplan.specs import AutoplanError, PlanDocument

    data = json.loads(good.read_text())
    bad = copy.deepcopy(data)
    bad["prediction"]["mfu"] = 1.5
    with pytest.raises(AutoplanError, match="mfu"):
        PlanDocument.from_dict(bad)


def test_a_symlink_loop_or_a_dangling_link_is_not_called_missing(capsys, tmp_path):
    """Issue 53: the reader says what is wrong with the path, not "does not exist" for a link loop."""
    (tmp_path / "a.json").symlink_to(tmp_path / "b.json")
    (tmp_path / "b.json").symlink_to(tmp_path / "a.json")
    (tmp_path / "dangling.json").symlink_to(tmp_path / "gone.json")
    line = refusal(*run(capsys, "estimate", tmp_path / "a.json")[::2])
    assert "symbolic links" in line and "does not exist" not in line, line
    line = refusal(*run(capsys, "compare", tmp_path / "dangling.json", tmp_path / "a.json")[::2])
    assert "is a symbolic link to" in line and "gone.json" in line, line
    (tmp_path / "c.jsonl").symlink_to(tmp_path / "d.jsonl")
    (tmp_path / "d.jsonl").symlink_to(tmp_path / "c.jsonl")
    line = refusal(*run(capsys, "report", tmp_path / "c.jsonl", "-o", tmp_path / "report")[::2])
    assert "symbolic links" in line, line  # before: a RuntimeError traceback from the output check
