"""A hostile user's inputs to every command: each is one stderr line with the key words of what is
wrong, exit code 2, never a traceback, and a file the user already had is left untouched.
In-process through `autoplan.cli.main.main`; nothing here trains or profiles."""
import csv
import hashlib
import json

import pytest

from autoplan.cli.main import main
from cost_model.published_rows import PUBLISHED_RUNS_PATH

SMALL = ["--model", "llama-2-7b", "--gpus", "8", "--global-batch", "32", "--seq-len", "2048"]
BINARY = bytes(range(128, 256)) * 8  # not UTF-8


def run(capsys, *argv):
    try:
        code = main([str(a) for a in argv])
    except SystemExit as exc:  # argparse usage errors
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


def assert_one_line_error(code, err, words):
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    for word in words:
        assert word in lines[0], lines[0]


def digest(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """A scratch folder: a real plan file, a folder, a binary file, a measurement-like JSONL and a
    published-runs CSV with one bad cell."""
    d = tmp_path_factory.mktemp("bad")
    assert main(["search", *SMALL, "--trials", "20", "-o", str(d / "plan.json"), "--json"]) == 0
    (d / "folder").mkdir()
    run_line = json.dumps({"schema": "autoplan.measurement/v1", "plan_id": "x"})
    (d / "runs.jsonl").write_text(run_line + "\n" + run_line + "\n")
    (d / "one_run.jsonl").write_text(run_line + "\n")
    (d / "binary.jsonl").write_bytes(BINARY)
    (d / "empty.bin").write_bytes(b"")
    (d / "binary.csv").write_bytes(BINARY)
    with open(PUBLISHED_RUNS_PATH, newline="") as f:
        reader = csv.DictReader(f)
        row = next(reader)
        fields = reader.fieldnames
    for name, key, value in (("bad_number.csv", "tokens_per_s_per_gpu", "fast"), ("bad_int.csv", "tp", "2.5"),
                             ("zero_gpus.csv", "num_gpus", "0")):
        with open(d / name, "w", newline="") as f:
            writer = csv.DictWriter(f, fields)
            writer.writeheader()
            writer.writerow({**row, key: value})
    return d


# (argv with {d} for the scratch folder, words the one stderr line must hold)
CASES = [
    # numbers: negative, beyond any cluster or batch (these used to hang enumerating divisors)
    (["search", *SMALL, "--seed", "-1"], ["--seed", "0 to 4294967295", "-1"]),
    (["search", *SMALL, "--seed", str(2**40)], ["--seed", str(2**40)]),
    (["search", *SMALL[:4], "--global-batch", str(10**20)], ["--global-batch", "at most", "sequences"]),
    (["search", "--model", "llama-2-7b", "--gpus", str(8 * 10**12)], ["--gpus", "at most", "GPUs"]),
    (["estimate", *SMALL[:6], "--seq-len", str(10**20)], ["--seq-len", "at most", "tokens"]),
    # storage URLs that SQLAlchemy cannot parse or SQLite cannot open
    (["search", *SMALL, "--storage", "plans.db"], ["--storage 'plans.db'", "not a database URL", "sqlite:///"]),
    (["search", *SMALL, "--storage", "sqlite:///{d}/missing/plans.db"], ["--storage", "missing", "does not exist"]),
    # empty or folder names where a file goes
    (["search", *SMALL, "--gpu", ""], ["unknown GPU type ''", "h100-80gb"]),
    (["search", *SMALL, "-o", ""], ["-o/--output", "empty"]),
    (["search", *SMALL, "-o", "{d}/folder"], ["-o/--output", "folder", "give a file name"]),
    (["estimate", *SMALL, "-o", "{d}/folder"], ["-o/--output", "folder"]),
    (["export", "{d}/plan.json", "--to", "megatron", "-o", ""], ["-o/--output", "empty"]),
    (["export", "{d}/plan.json", "--to", "megatron", "-o", "{d}/folder"], ["-o/--output", "folder"]),
    (["calibrate", "--published", "-o", "{d}/folder"], ["-o/--output", "folder"]),
    (["calibrate", "--published", "-o", "{d}/missing/c.json"], ["-o/--output", "missing", "does not exist"]),
    # a plan file plus flags that describe a plan: refused, not silently ignored
    (["estimate", "{d}/plan.json", "--zero", "3"], ["--zero", "not both"]),
    (["estimate", "{d}/plan.json", "--allow-tp-across-nodes"], ["--allow-tp-across-nodes", "not both"]),
    (["estimate", "{d}/plan.json", "--seq-len", "1024", "--dtype", "fp8"], ["--seq-len", "--dtype", "not both"]),
    # measurements that are a folder or binary
    (["calibrate", "{d}/folder", "-o", "{d}/c.json"], ["measurements path", "folder", "JSONL"]),
    (["calibrate", "{d}/binary.jsonl", "-o", "{d}/c.json"], ["cannot read measurements", "binary.jsonl"]),
    (["report", "{d}/binary.jsonl", "-o", "{d}/report"], ["cannot read measurements", "binary.jsonl"]),
    # a published-runs CSV that is a folder, binary, or has a bad cell
    (["validate", "--runs", "{d}/folder"], ["--runs", "folder", "CSV"]),
    (["validate", "--runs", "{d}/binary.csv"], ["--runs", "not a text CSV"]),
    (["validate", "--runs", "{d}/bad_number.csv"], ["--runs", "malformed row", "'fast'"]),
    (["validate", "--runs", "{d}/bad_int.csv"], ["--runs", "malformed row", "'2.5'"]),
    (["validate", "--runs", "{d}/bad_int.csv", "--calibrated"], ["--calibrated", "shipped", "drop one"]),
    (["validate", "--runs", "{d}/zero_gpus.csv"], ["--runs", "row 'N21-T1-01'", "num_gpus", "got 0"]),
    # a file written by another command: named for what it is, not called outdated
    (["estimate", "{d}/runs.jsonl"], ["runs.jsonl'", "one JSON value per line", "not a single plan"]),
    (["run", "{d}/one_run.jsonl"], ["is a measurement", "not a plan file", "autoplan search -o"]),
    (["profile", "--compare", "{d}/plan.json", "builtin:h200"], ["is a plan file", "not a hardware profile"]),
    (["search", *SMALL, "--calibration", "{d}/plan.json"], ["is a plan file", "not a calibration file"]),
    # run: output that is a folder; a 7B model in fp32 on 8 CPU processes (refused before any start)
    (["run", "{d}/plan.json", "--out", "{d}/folder"], ["--out", "is a folder", "runs.jsonl"]),
    (["run", "{d}/plan.json", "--data", "{d}/empty.bin"], ["--data", "is empty", "synthetic"]),
    (["run", "{d}/plan.json", "--checkpoint-dir", "{d}/plan.json", "--checkpoint-every", "1"],
     ["--checkpoint-dir", "is a file", "folder"]),
    # run: every step count bounded (an extra zero must not train for weeks), rates finite
    (["run", "{d}/plan.json", "--steps", "10000000"], ["--steps must be at most 1,048,576 steps", "got 10,000,000"]),
    (["run", "{d}/plan.json", "--steps", "30", "--warmup-steps", "2000000"], ["--warmup-steps must be at most 1,048,576"]),
    (["run", "{d}/plan.json", "--lr-warmup", "99999999"], ["--lr-warmup must be at most 1,048,576"]),
    (["run", "{d}/plan.json", "--log-every", "2000000"], ["--log-every must be at most 1,048,576"]),
    (["run", "{d}/plan.json", "--checkpoint-dir", "{d}/ck", "--checkpoint-every", "2000000"],
     ["--checkpoint-every must be at most 1,048,576"]),
    (["run", "{d}/plan.json", "--seed", str(2**40)], ["--seed must be at most 4,294,967,295"]),
    (["run", "{d}/plan.json", "--loss-chunk-tokens", str(2**40)], ["--loss-chunk-tokens must be at most 2,147,483,648"]),
    (["run", "{d}/plan.json", "--lr", "inf"], ["lr (finite)", "lr=inf"]),
    (["run", "{d}/plan.json", "--grad-clip", "nan"], ["--grad-clip must be a finite number", "got nan"]),
]




def _edited(files, name: str, source: str, edit) -> str:
    """A copy of a scratch JSON file with `edit(doc)` applied; returns its path."""
    doc = json.loads((files / source).read_text())
    edit(doc)
    (files / name).write_text(json.dumps(doc))
    return str(files / name)


LLAMA_CONFIG = {"model_type": "llama", "num_hidden_layers": 4, "hidden_size": 256, "num_attention_heads": 8,
                "num_key_value_heads": 4, "intermediate_size": 512, "vocab_size": 1024}


def _config(files, name: str, **changes) -> str:
    (files / name).write_text(json.dumps({**LLAMA_CONFIG, **changes}))
    return str(files / name)


def test_issue_15_inputs_are_refused_with_file_field_value_and_rule(capsys, files):
    """Each input of issue 15 that used to be a traceback, a silent exit 0 or a hang."""
    deep = files / "deep.json"
    deep.write_text("[" * 100000)
    plan = lambda name, edit: _edited(files, name, "plan.json", edit)  # noqa: E731
    cases = [
        (["estimate", deep], ["plan file", "deep.json", "nested deeper than 64 levels"]),
        (["profile", "--compare", deep, "builtin:h100-80gb"], ["hardware profile", "nested deeper"]),
        (["estimate", "--model", deep, "--gpus", "8"], ["config.json", "nested deeper"]),
        (["export", plan("alt.json", lambda d: d.update(alternatives=[1, "x"])), "--to", "torchtitan"],
         ["alternatives[0] must be a JSON object", "got 1", "alternatives[1]"]),
        (["estimate", plan("prof5.json", lambda d: d["cluster"].update(profile=5))],
         ["prof5.json", "cluster.profile must be a string, got 5"]),
        (["estimate", plan("seq.json", lambda d: d["training"].update(seq_len=10**9))],
         ["training.seq_len must be from 1 to 16,777,216", "got 1000000000"]),
        (["estimate", plan("ctx.json", lambda d: d["training"].update(seq_len=8192))],
         ["training.seq_len must be at most the model's context model.max_seq_len=4096", "got 8192"]),
        (["estimate", plan("gpn.json", lambda d: d["cluster"].update(gpus_per_node=3, num_gpus=128))],
         ["cluster.num_gpus must be a whole number of nodes", "gpus_per_node=3", "got 128"]),
        (["estimate", plan("hd0.json", lambda d: d["model"].update(head_dim=0))],
         ["model.head_dim must be from 1 to 8,192", "got 0"]),
        (["export", plan("altx.json", lambda d: d.update(alternatives="x")), "--to", "megatron"],
         ["alternatives must be a JSON list", "got 'x'"]),
        # head_dim 128 = 8200 // 64 is the derived value, rounded down: not a head_dim given on purpose
        (["estimate", plan("h8200.json", lambda d: d["model"].update(hidden_size=8200, num_heads=64))],
         ["num_heads must divide hidden_size unless head_dim is given", "hidden_size=8200", "num_heads=64"]),
        (["estimate", plan("many.json", lambda d: (d["model"].pop("num_heads"), d["model"].pop("vocab_size"),
                                                   d["model"].update(num_layers=10**30)))],
         ["missing fields model.num_heads, model.vocab_size", "model.num_layers must be from 1 to 1,000", "1e+30"]),
        (["estimate", "--model", _config(files, "div.json", hidden_size=100, num_attention_heads=6,
                                         num_key_value_heads=6), "--gpus", "8"],
         ["div.json", "num_heads must divide hidden_size", "hidden_size=100, num_heads=6"]),
        (["estimate", "--model", _config(files, "hd7.json", head_dim=7), "--gpus", "8"],
         ["head_dim must be even with rotary position embeddings", "got 7"]),
        (["search", "--model", _config(files, "huge.json", num_hidden_layers=10**30), "--gpus", "8"],
         ["huge.json", "'num_hidden_layers' must be at most 1,000", "1e+30"]),
        (["estimate", "--model", _config(files, "huge_h.json", hidden_size=2**40), "--gpus", "8"],
         ["'hidden_size' must be at most 131,072"]),
        (["estimate", "--model", "m" * 5000, "--gpus", "8"], ["unknown model 'mmmm", "..."]),
        # the census's remaining silent acceptances (session 2): an empty cluster name
        (["export", plan("cname.json", lambda d: d["cluster"].update(name="")), "--to", "megatron"],
         ["cluster.name must name the GPU type or cluster", "got ''"]),
    ]
    incomplete = files / "incomplete.json"
    incomplete.write_text(json.dumps({"model_type": "llama", "hidden_size": 96}))
    cases.append((["estimate", "--model", incomplete, "--gpus", "8"],
                  ["missing fields 'num_attention_heads', 'num_hidden_layers', 'intermediate_size', 'vocab_size'"]))
    for argv, words in cases:
        code, _, err = run(capsys, *argv)
        assert_one_line_error(code, err or f"exit {code} for {argv}", words)


def test_profiles_with_impossible_figures_or_foreign_sample_paths_are_refused(capsys, files):
    from cost_model import builtin_profile

    base = builtin_profile("h100-80gb").to_dict()
    for name, edit, words in [
        ("zero_bw.json", {"inter_node_bandwidth_bytes_per_s": 0}, ["inter_node_bandwidth_bytes_per_s must be above 0"]),
        ("neg_lat.json", {"intra_node_latency_s": -1e-6}, ["intra_node_latency_s must be above 0"]),
        ("nodes0.json", {"num_nodes": 0}, ["num_nodes must be from 1"]),
        ("peak0.json", {"peak_flops_per_s": {"bf16": 0}}, ["peak_flops_per_s.bf16 must be above 0"]),
        ("no_mm.json", {"matmul": []}, ["matmul must hold the measured matmul samples"]),
        ("no_coll.json", {"collectives": []}, ["collectives must hold collective samples for 8 GPUs per node"]),
        ("up.json", {"raw_samples": "../../etc/passwd"}, ["raw_samples must be a file name beside the profile"]),
        ("abs.json", {"raw_samples": "/etc/passwd"}, ["raw_samples must be a file name beside the profile"]),
        ("dtype5.json", {"matmul": [{**base["matmul"][0], "dtype": 5}]}, ["matmul[0].dtype must be a string"]),
        # the census's remaining silent acceptances (session 2): sample names and times
        ("fp33.json", {"matmul": [{**base["matmul"][0], "dtype": "fp33"}]},
         ["matmul[0].dtype must be one of bf16, fp16, fp8, fp32, got 'fp33'"]),
        ("op.json", {"memory_ops": [{"op": "", "num_bytes": 2**26, "bytes_per_s": 1e12}]},
         ["memory_ops[0].op must be one of copy, add, activation, norm, got ''"]),
        ("t30.json", {"collectives": [{**base["collectives"][0], "time_s": 1e30}]},
         ["collectives[0].time_s must be at least 0 and at most 3600, got 1e+30"]),
    ]:
        (files / name).write_text(json.dumps({**base, **edit}))
        for argv in (["profile", "--compare", files / name, "builtin:h100-80gb"],
                     ["calibrate", "--profile", files / name, "-o", files / "never.json"]):
            code, _, err = run(capsys, *argv)
            assert_one_line_error(code, err, [name, *words])
    assert not (files / "never.json").exists()


@pytest.mark.parametrize("key, value, words", [
    ("memory_correction", "x", ["memory_correction must be a JSON object, got 'x'"]),  # was an AttributeError
    ("memory_correction", [1], ["memory_correction must be a JSON object, got [1]"]),
    ("correction", {}, ["correction must be null (no correction) or the fitted correction"]),
    ("cost_model", 5, ["cost_model must be a string, got 5"]),
    ("cost_model", "fp33", ["cost_model must name the learned model that wrote the file", "got 'fp33'"]),
])
def test_calibration_sections_of_the_wrong_kind_are_refused(capsys, files, key, value, words):
    calibration = files / "ridge.json"
    if not calibration.exists():
        assert main(["calibrate", "--published", "--kind", "ridge", "-o", str(calibration)]) == 0
        capsys.readouterr()
    doc = {**json.loads(calibration.read_text()), key: value}
    (files / "cal_edit.json").write_text(json.dumps(doc))
    code, _, err = run(capsys, "search", *SMALL, "--trials", "5", "--calibration", files / "cal_edit.json")
    assert_one_line_error(code, err, ["cal_edit.json", *words])


def test_measurement_lines_of_the_wrong_type_are_skipped_and_counted(capsys, files):
    good = json.loads((files / "plan.json").read_text())
    line = {"schema": "autoplan.measurement/v1", "plan_id": "x", "plan": good, "prediction": {}, "backend": "torch",
            "status": "ok", "step_times_s": ["1.0"], "losses": [], "peak_memory_bytes": "big", "environment": {}}
    (files / "typed.jsonl").write_text(json.dumps(line) + "\n")
    code, _, err = run(capsys, "calibrate", files / "typed.jsonl", "-o", files / "never.json")
    assert code == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    from autoplan.specs import read_measurements
    records, problems = read_measurements(files / "typed.jsonl")
    assert not records and "step_times_s[0] must be a finite number of seconds" in problems[0]
    assert "peak_memory_bytes must be an integer, got 'big'" in problems[0]


def _record(plan: dict, **prediction_edits) -> dict:
    """A successful run's record of `plan`, its embedded prediction edited as given."""
    prediction = {**plan["prediction"], **prediction_edits}
    return {"schema": "autoplan.measurement/v1", "plan_id": plan["plan_id"], "plan": plan, "prediction": prediction,
            "backend": "torch", "status": "ok", "step_times_s": [1.0, 1.1], "losses": [10.0, 9.0],
            "peak_memory_bytes": 2**34, "environment": {"device": "cuda"}, "num_warmup_steps": 1,
            "tokens_per_step": 65536, "num_gpus": 8}


@pytest.mark.parametrize("edit, words", [
    ({"peak_memory_bytes": 1e30}, ["prediction.peak_memory_bytes must be above 0 and at most", "got 1e+30"]),
    ({"step_time_s": -1.0}, ["prediction.step_time_s must be above 0, got -1.0"]),
    ({"mfu": "high"}, ["prediction.mfu must be a number, got 'high'"]),
    ({"fits": 3}, ["prediction.fits must be true or false, got 3"]),
    ({"time_breakdown_s": {"compute": float("inf")}}, ["prediction.time_breakdown_s.compute must be a finite number"]),
    ({"memory_breakdown_bytes": {f"t{i}": 1 for i in range(100_000)}},
     ["prediction.memory_breakdown_bytes must hold at most 64 terms", "got 100,000"]),
])
def test_an_edited_prediction_in_a_measurement_line_is_refused_by_the_plan_files_rules(capsys, files, edit, words):
    """The prediction a run record carries is checked by the plan file's prediction rules (one
    function): the same edit is refused in both, naming the field, the value and the rule."""
    plan = json.loads((files / "plan.json").read_text())
    (files / "edited.jsonl").write_text(json.dumps(_record(plan, **edit)) + "\n")
    from autoplan.specs import read_measurements
    records, problems = read_measurements(files / "edited.jsonl")
    assert not records and len(problems) == 1
    for word in words:
        assert word in problems[0], problems[0]
    (files / "edited_plan.json").write_text(json.dumps({**plan, "prediction": {**plan["prediction"], **edit}}))
    code, _, err = run(capsys, "estimate", files / "edited_plan.json")
    assert_one_line_error(code, err, words)


def test_report_refuses_a_measurement_file_with_a_malformed_line(capsys, files, monkeypatch):
    """A shared report must not lack a run without a word: the file is refused, naming the line."""
    import autoplan.report.build as build

    monkeypatch.setattr(build, "plan_sections", lambda *a, **k: [])  # never reached; keeps a regression fast
    plan = json.loads((files / "plan.json").read_text())
    lines = [_record(plan), _record(plan, fits=3)]
    (files / "mixed.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    code, _, err = run(capsys, "report", files / "mixed.jsonl", "-o", files / "mixed_report")
    assert_one_line_error(code, err, ["1 malformed measurement line(s), the first: mixed.jsonl:2: measurement record: "
                                      "prediction.fits must be true or false, got 3", "fix or remove"])
    assert not (files / "mixed_report").exists()


def test_a_killed_search_keeps_its_trials_in_the_storage_and_says_so_on_resume(capsys, files, tmp_path):
    """Trials reach the stored study in small batches while the search runs, so an interrupted
    search (here: interrupted after 45 scored trials) resumes with them."""
    import autoplan.planning.search as search

    db = tmp_path / "study.db"
    argv = ["search", *SMALL, "--trials", "200", "--storage", f"sqlite:///{db}"]
    original, seen = search.TrialStore.__call__, []

    def interrupt_after_45(self, study=None, trial=None):
        original(self, study, trial)
        seen.append(1)
        if len(seen) == 45:
            raise KeyboardInterrupt
    search.TrialStore.__call__ = interrupt_after_45
    try:
        code, _, err = run(capsys, *argv)
    finally:
        search.TrialStore.__call__ = original
    assert code == 130 and err.strip() == "autoplan search: interrupted"
    import optuna
    (summary,) = optuna.get_all_study_summaries(f"sqlite:///{db}")
    assert summary.n_trials == 45  # every finished trial, the last ones written on the way out
    code, out, err = run(capsys, *argv[:-4], "--trials", "5", *argv[-2:])
    assert code == 0 and "45 scored trials found" in err and "45 resumed trials" in out, (out, err)


@pytest.mark.parametrize("argv, words", CASES, ids=[" ".join(a[:3]) + "|" + w[0] for a, w in CASES])
def test_bad_input_is_one_line_and_exit_2(capsys, files, argv, words):
    code, _, err = run(capsys, *(a.format(d=files) for a in argv))
    assert_one_line_error(code, err, [w.format(d=files) for w in words])


def test_cpu_run_of_a_model_larger_than_host_memory_is_refused(capsys, files, monkeypatch):
    import autoplan.specs.compat as compat

    plan = files / "zero0.json"
    # dp=8 tp=1 pp=1; it does not fit an H100 either: exit 1, the answer, with the plan file written
    assert main(["estimate", *SMALL, "--zero", "0", "-o", str(plan), "--json"]) == 1
    capsys.readouterr()
    monkeypatch.setattr(compat, "available_host_bytes", lambda: 16 * 2**30)
    code, _, err = run(capsys, "run", plan, "--out", files / "measured.jsonl")
    # llama-2-7b has 6,738,415,616 parameters; unsharded fp32 weights + grads + AdamW moments are
    # 16 bytes each, in each of 8 processes: 803.3 GiB.
    assert_one_line_error(code, err, ["needs at least 803.3 GiB of host memory", "8 CPU devices",
                                      "16.0 GiB is available", "--device cuda"])
    assert not (files / "measured.jsonl").exists()


@pytest.mark.parametrize("argv", [
    ["search", *SMALL, "--tp", "3", "-o", "{out}"],
    ["search", *SMALL, "--storage", "nonsense", "-o", "{out}"],
    ["estimate", *SMALL, "--pp", "3", "-o", "{out}"],
    ["export", "{d}/folder", "--to", "deepspeed", "-o", "{out}"],
    ["calibrate", "{d}/binary.jsonl", "-o", "{out}"],
])
def test_failed_command_leaves_an_existing_output_untouched(capsys, files, tmp_path, argv):
    out = tmp_path / "precious.json"
    out.write_text('{"keep": "me"}\n')
    before = digest(out)
    code, _, err = run(capsys, *(a.format(d=files, out=out) for a in argv))
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert digest(out) == before and sorted(p.name for p in tmp_path.iterdir()) == ["precious.json"]


def test_ctrl_c_during_search_is_one_line_130_and_keeps_the_plan_file(capsys, files, tmp_path, monkeypatch):
    import autoplan.planning.planner

    def interrupted(request):
        raise KeyboardInterrupt
    monkeypatch.setattr(autoplan.planning.planner, "plan_search", interrupted)
    out = tmp_path / "plan.json"
    out.write_text((files / "plan.json").read_text())
    before = digest(out)
    code, stdout, err = run(capsys, "search", *SMALL, "-o", out)
    assert code == 130 and err.strip() == "autoplan search: interrupted" and not stdout
    assert digest(out) == before


def test_estimate_of_a_plan_file_still_works_without_flags(capsys, files):
    code, out, err = run(capsys, "estimate", files / "plan.json")
    assert code == 0 and "plan: dp=" in out and not err


def test_search_help_names_megatron_flags_and_defaults(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "400")  # argparse wraps long words at their hyphens
    code, out, _ = run(capsys, "search", "--help")
    assert code == 0
    for text in ("--tensor-model-parallel-size", "--pipeline-model-parallel-size", "--context-parallel-size",
                 "--micro-batch-size", "--global-batch-size", "(default: bf16)", "(default: 0)",
                 "(default: h100-80gb)", "--tp N", "--seq-len TOKENS"):
        assert text in " ".join(out.split()), text
