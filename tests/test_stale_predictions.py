"""Issue 53: a plan file's stored prediction is used only while it belongs to the plan. The writer
stores a hash of the sections the prediction was computed from (`prediction_for`); every command
that reads the file through the one plan reader re-scores a prediction whose hash does not match
what the file says now (a hand edit) or that carries none (a file written before the hash), with one
note, as it scores a plan without a prediction. Real CLI calls on a small model."""
import json

import pytest

from autoplan.specs import PlanDocument
from tests.cli_run import run_cli

SMALL = ["--model", "llama-2-7b", "--gpus", "8", "--global-batch", "32", "--seq-len", "2048"]
PLAN_KEYS = ["schema", "plan_id", "framework", "model", "training", "cluster", "parallel", "prediction",
             "alternatives", "search", "provenance"]  # a plan file's keys before the hash (their order kept)


@pytest.fixture(scope="module")
def searched(tmp_path_factory):
    """`search -o`: a chosen plan with a prediction and ranked alternatives that carry theirs."""
    path = tmp_path_factory.mktemp("stale") / "A.json"
    from autoplan.cli.main import main

    assert main(["search", *SMALL, "-o", str(path)]) == 0
    return path


def edited(searched, tmp_path, change, name="B.json"):
    data = json.loads(searched.read_text())
    change(data)
    path = tmp_path / name
    path.write_text(json.dumps(data, indent=2))
    return path


def estimated(capsys, path) -> dict:
    """What `autoplan estimate PLAN` predicts for the file's plan today (the figures to expect)."""
    code, out, err = run_cli(capsys, "estimate", path, "--json")
    assert code in (0, 1), err
    return json.loads(out)["prediction"]


def compare_rows(out: str) -> dict:
    """compare's head table: {row: (A, B)} as printed."""
    rows = {}
    for line in out.split("time per step", 1)[0].splitlines():
        for label in ("step time (s)", "peak memory (GiB)"):
            if line.strip().startswith(label):
                a, b = line.strip()[len(label):].split()[:2]
                rows[label] = (float(a), float(b))
    return rows


def hand_edited_parallel(data):
    """A consistent hand edit of the degrees: tp 4, dp and micro-batches to match (the issue's case)."""
    par = data["parallel"]
    par.update(tp=4, dp=8 // (4 * par["pp"] * par["cp"]), num_microbatches=32 // (8 // (4 * par["pp"] * par["cp"])
                                                                                   * par["micro_batch_size"]))


def test_the_writer_adds_the_hash_after_the_prediction_and_keeps_every_other_key_in_place(searched):
    data = json.loads(searched.read_text())
    assert list(data) == PLAN_KEYS[:8] + ["prediction_for"] + PLAN_KEYS[8:]
    assert all(len(alt["prediction_for"]) == 16 for alt in data["alternatives"] if alt.get("prediction"))
    assert PlanDocument.load(searched).prediction_current


def test_compare_re_scores_a_hand_edited_plan_and_says_so(capsys, searched, tmp_path):
    b = edited(searched, tmp_path, hand_edited_parallel)
    stored = json.loads(b.read_text())["prediction"]
    today = estimated(capsys, b)
    assert abs(today["step_time_s"] - stored["step_time_s"]) > 1e-3  # the edit changes the prediction
    code, out, err = run_cli(capsys, "compare", searched, b)
    assert code == 0, err
    rows = compare_rows(out)
    assert rows["step time (s)"][1] == pytest.approx(today["step_time_s"], abs=6e-4)
    assert rows["peak memory (GiB)"][1] == pytest.approx(today["peak_memory_bytes"] / 2**30, abs=0.06)
    notes = err.strip().splitlines()
    assert len(notes) == 1 and "B.json" in notes[0] and "made for another plan" in notes[0], err


def test_a_plan_written_before_the_hash_is_read_and_re_scored(capsys, searched, tmp_path):
    def legacy(data):
        data.pop("prediction_for")
        for alt in data["alternatives"]:
            alt.pop("prediction_for", None)
        data["prediction"]["step_time_s"] *= 2  # as if an older cost model had said so
        data["prediction"]["time_breakdown_s"] = {k: 2 * v for k, v in data["prediction"]["time_breakdown_s"].items()}
    old = edited(searched, tmp_path, legacy, "old.json")
    code, out, err = run_cli(capsys, "compare", searched, old)
    assert code == 0, err
    a, b = compare_rows(out)["step time (s)"]
    assert a == b  # the same plan: today's figures, not the doubled ones
    assert "without the hash" in err and "alternative(s)" in err and len(err.strip().splitlines()) == 2, err
    assert PlanDocument.load(old).plan_id == json.loads(searched.read_text())["plan_id"]  # its id still reads


def test_an_untouched_file_is_read_without_a_note(capsys, searched):
    code, _, err = run_cli(capsys, "compare", searched, searched)
    assert code == 0 and err == "", err


@pytest.mark.parametrize("target,framework", [("megatron", "megatron-core"), ("torchtitan", "torchtitan"),
                                              ("deepspeed", "deepspeed")])
def test_export_refuses_a_hand_edited_plan_that_no_longer_fits(capsys, tmp_path, target, framework):
    """A plan made for the target's own framework (so export does not re-score it for another one):
    the stored prediction said it fits; the edited plan (no ZeRO, no TP, no recompute) does not."""
    made = tmp_path / "made.json"
    code, _, err = run_cli(capsys, "search", *SMALL, "--framework", framework, "-o", made)
    assert code == 0, err

    def unsharded(data):
        data["parallel"].update(tp=1, pp=1, cp=1, dp=8, zero_stage=0, micro_batch_size=1, num_microbatches=4,
                                recompute="none", recompute_num_layers=0, sequence_parallel=False, vpp=1)
        data["parallel"].pop("tp_comm_overlap", None)  # a plan without TP overlaps none (the search may pick it)
    path = edited(made, tmp_path, unsharded, "big.json")
    assert json.loads(path.read_text())["prediction"]["fits"] is True
    assert estimated(capsys, path)["fits"] is False
    code, out, err = run_cli(capsys, "export", path, "--to", target)
    assert code == 2 and "does not fit" in err and not out, err


def test_an_edited_training_section_re_scores_the_alternatives_too(capsys, searched, tmp_path):
    path = edited(searched, tmp_path, lambda d: d["training"].update(seq_len=4096), "seq.json")
    doc_err = run_cli(capsys, "compare", path, path)[2]
    assert "made for another plan" in doc_err and "alternative(s)" in doc_err, doc_err
    from autoplan.planning.planfiles import load_plan

    doc = load_plan(path)
    capsys.readouterr()
    assert doc.prediction_current and all(doc.alternative_current(alt) for alt in doc.alternatives)


def test_writing_back_a_stale_prediction_keeps_it_stale(searched, tmp_path):
    """A reader that does not re-score (the executor's) must not bless what it writes back."""
    path = edited(searched, tmp_path, hand_edited_parallel)
    doc = PlanDocument.load(path)
    assert not doc.prediction_current
    doc.save(tmp_path / "again.json")
    assert not PlanDocument.load(tmp_path / "again.json").prediction_current
