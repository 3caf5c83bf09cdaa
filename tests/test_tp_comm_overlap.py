"""Issue 48: overlapping TP communication is a knob of the plan (ParallelPlan.tp_comm_overlap), offered
where the framework has it (Framework.tp_comm_overlap_kind): Megatron-Core's --tp-comm-overlap
(Transformer Engine userbuffers, with sequence parallelism) and torchtitan's async TP (under
torch.compile). It is costed, searched, exported and refused where a framework has none.

The exposed TP time is worked by hand: userbuffers pipeline each pass's collective in tp chunks under
its GEMM (the first chunk, or what outlasts the GEMM, shows); async TP hides the fitted share."""
from types import SimpleNamespace

import pytest

from autoplan.inputs.catalog import resolve_model
from autoplan.specs import ClusterSpec, InfeasiblePlan, ParallelPlan, TrainingSpec, get_framework
from autoplan.specs.choices import TP_COMM_OVERLAP_KINDS
from cost_model import Estimator, load_constants
from cost_model.profiles import builtin_profile
from cost_model.step_time import tp_exposed_s
from tests.cli_run import run_cli

CONSTANTS = load_constants()
LLAMA_70B = resolve_model("llama-3-70b")
TRAINING = TrainingSpec(global_batch_size=64, seq_len=8192)
CLUSTER = ClusterSpec("h100", 64)
# 64 H100s, tp 8 x pp 4 x dp 2, 32 micro-batches of one 8k sequence, 20 layers per pipeline rank.
PLAN = ParallelPlan(dp=2, tp=8, pp=4, sequence_parallel=True, zero_stage=1, micro_batch_size=1, num_microbatches=32)


def _estimator(framework: str) -> Estimator:
    return Estimator(LLAMA_70B, TRAINING, CLUSTER, builtin_profile("h100-80gb"),
                     framework=CONSTANTS.framework(framework))


def test_the_exposed_tp_time_from_hand_figures():
    # One layer: 4 ms of TP traffic under a 10 ms forward GEMM, 8 ms under a 5 ms backward, tp 8.
    layer = SimpleNamespace(tp_fwd_s=4e-3, tp_bwd_s=8e-3, gemm_fwd_s=10e-3, gemm_bwd_s=5e-3)
    plan = ParallelPlan(tp=8, sequence_parallel=True)
    off = get_framework("megatron-core")
    assert tp_exposed_s(plan, off, layer) == pytest.approx(12e-3)             # nothing hidden
    # userbuffers: forward 4/8 = 0.5 ms (the first chunk), backward 8 - 5 = 3 ms (outlasts its GEMM).
    assert tp_exposed_s(plan, off.with_overrides(tp_comm_gemm_overlap=True), layer) == pytest.approx(3.5e-3)
    # async TP hiding 35 % of the traffic: 0.65 x 12 ms.
    assert tp_exposed_s(plan, off.with_overrides(tp_comm_overlap=0.35), layer) == pytest.approx(7.8e-3)


@pytest.mark.parametrize("framework", ["megatron-core", "torchtitan"])
def test_a_plan_with_overlap_is_costed_its_frameworks_way(framework):
    est = _estimator(framework)
    plan = PLAN.replace(sequence_parallel=framework == "megatron-core")
    off, on = est.estimate(plan), est.estimate(plan.replace(tp_comm_overlap=True))
    layer = est.stage_costs(plan).layer
    m, layers = 32, 20
    assert off.time_breakdown_s["tp_comm"] == pytest.approx(m * layers * (layer.tp_fwd_s + layer.tp_bwd_s), rel=1e-9)
    if framework == "megatron-core":
        pipelined = sum(max(comm - gemm, comm / 8) for comm, gemm in ((layer.tp_fwd_s, layer.gemm_fwd_s),
                                                                      (layer.tp_bwd_s, layer.gemm_bwd_s)))
        assert on.time_breakdown_s["tp_comm"] == pytest.approx(m * layers * pipelined, rel=1e-9)
        assert on.time_breakdown_s["memory_bound"] == off.time_breakdown_s["memory_bound"]
    else:
        fw = CONSTANTS.framework("torchtitan")
        hidden = fw.async_tp_overlap
        assert 0 < hidden < 1
        assert on.time_breakdown_s["tp_comm"] == pytest.approx((1 - hidden) * off.time_breakdown_s["tp_comm"], rel=1e-9)
        # async TP needs torch.compile: its layers move the compiled share of the elementwise bytes.
        compiled = est.for_plan(plan.replace(tp_comm_overlap=True)).stage_costs(plan).layer
        assert compiled.memory_fwd_s == pytest.approx(fw.compiled_elementwise_factor * layer.memory_fwd_s, rel=1e-9)
    assert on.step_time_s < off.step_time_s
    assert on.time_breakdown_s["compute"] == off.time_breakdown_s["compute"]


def test_the_frameworks_say_how_they_overlap_and_the_others_refuse():
    kinds = {name: get_framework(name).tp_comm_overlap_kind for name in ("megatron-core", "torchtitan", "deepspeed",
                                                                         "megatron-deepspeed", "autoplan")}
    assert kinds == {"megatron-core": "userbuffers", "torchtitan": "async-tp", "deepspeed": "",
                     "megatron-deepspeed": "", "autoplan": ""}
    assert set(kinds.values()) <= set(TP_COMM_OVERLAP_KINDS)
    with pytest.raises(InfeasiblePlan, match="framework deepspeed cannot overlap tensor-parallel communication"):
        get_framework("deepspeed").check(LLAMA_70B, TRAINING, PLAN.replace(tp_comm_overlap=True))
    with pytest.raises(InfeasiblePlan, match="only with sequence parallelism.*--sequence-parallel"):
        get_framework("megatron-core").check(LLAMA_70B, TRAINING,
                                             PLAN.replace(sequence_parallel=False, tp_comm_overlap=True))
    with pytest.raises(InfeasiblePlan, match="tp_comm_overlap needs tp > 1"):
        ParallelPlan(dp=64, tp=1, tp_comm_overlap=True, num_microbatches=1).check(LLAMA_70B, TRAINING, CLUSTER)


def test_old_plan_files_load_with_overlap_off_and_keep_their_form():
    old = {k: v for k, v in PLAN.to_dict().items()}
    assert "tp_comm_overlap" not in old                    # plan files and ids without it stay as they were
    assert ParallelPlan.from_dict(old).tp_comm_overlap is False
    on = PLAN.replace(tp_comm_overlap=True).to_dict()
    assert on["tp_comm_overlap"] is True and ParallelPlan.from_dict(on) == PLAN.replace(tp_comm_overlap=True)


def _export(framework: str, target: str, overlap: bool) -> str:
    from autoplan.exporters import export_plan
    from autoplan.planning.planner import PlanRequest, plan_search
    from autoplan.planning.space import Pins

    sp = framework == "megatron-core"
    request = PlanRequest(model="llama-3-8b", num_gpus=16, framework=framework, exhaustive=False,
                          pins=Pins(tp=4, pp=1, sequence_parallel=sp, zero_stage=1, tp_comm_overlap=overlap))
    doc = plan_search(request).document
    assert doc.parallel.tp_comm_overlap is overlap
    return doc, export_plan(doc, target).text


@pytest.mark.parametrize("framework,target,flags", [
    ("megatron-core", "megatron", ("--tp-comm-overlap",)),
    ("torchtitan", "torchtitan", ("CompileConfig(enable=True, enable_async_tensor_parallel=True)",)),
    ("torchtitan", "torchtitan-0.2", ("enable_async_tensor_parallel = true", "[compile]")),
])
def test_what_is_costed_is_exported_and_nothing_else(framework, target, flags):
    """Costed but not exported, or exported but not costed, fails here: the overlap must move both the
    prediction and the exported configuration, and the configuration by the framework's own switch."""
    off_doc, off_text = _export(framework, target, False)
    on_doc, on_text = _export(framework, target, True)
    assert on_doc.prediction["step_time_s"] < off_doc.prediction["step_time_s"]
    for flag in flags:
        assert flag in on_text and flag not in off_text


def test_search_explores_overlap_where_offered_and_refuses_it_elsewhere(capsys):
    code, out, err = run_cli(capsys, "search", "--model", "llama-3-70b", "--gpus", "64", "--framework",
                             "megatron-core", "--json")
    assert code == 0, err
    import json
    assert json.loads(out)["parallel"].get("tp_comm_overlap") is True   # hides most of tp=8's traffic
    code, out, err = run_cli(capsys, "search", "--model", "llama-3-8b", "--gpus", "16", "--framework", "deepspeed",
                             "--tp-comm-overlap")
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert "cannot overlap tensor-parallel communication" in err and "--no-tp-comm-overlap" in err
    code, out, err = run_cli(capsys, "estimate", "--model", "llama-3-8b", "--gpus", "16", "--framework",
                             "megatron-core", "--tp", "4", "--tp-comm-overlap")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "--sequence-parallel" in err


def test_an_export_to_a_framework_without_overlap_is_refused_with_its_rule():
    from autoplan.exporters import export_plan
    from tests.export_plans import LLAMA3_8B, export_doc

    doc = export_doc(LLAMA3_8B, 16, 64, dp=4, tp=4, sequence_parallel=True, zero_stage=1, micro_batch_size=1,
                     num_microbatches=16, tp_comm_overlap=True)
    with pytest.raises(InfeasiblePlan, match="framework deepspeed cannot overlap tensor-parallel communication"):
        export_plan(doc, "deepspeed")
    assert "--tp-comm-overlap" in export_plan(doc, "megatron").text


# -- one name for one switch: the former framework option megatron-core+tp-comm-overlap is the plan knob ------

def _old_spelling(new: dict) -> dict:
    """A plan file as the option wrote it (before 2026-11-29): framework "megatron-core+tp-comm-overlap", no
    tp_comm_overlap in any plan, and each prediction stamped with that spelling (PlanDocument.to_dict)."""
    from autoplan.specs.planfile import prediction_hash

    name, sections = "megatron-core+tp-comm-overlap", [new["model"], new["training"], new["cluster"]]

    def spelled(part: dict) -> dict:
        parallel = {k: v for k, v in part["parallel"].items() if k != "tp_comm_overlap"}
        return {**part, "parallel": parallel, "prediction_for": prediction_hash(*sections, parallel, name)}

    return {**spelled(new), "framework": name, "alternatives": [spelled(a) for a in new["alternatives"]]}


def test_an_old_plan_file_naming_the_option_reads_to_the_same_estimate_as_the_knob(tmp_path, capsys):
    import json

    from autoplan.planning.planner import PlanRequest, plan_search
    from autoplan.planning.space import Pins
    from autoplan.specs import PlanDocument

    request = PlanRequest(model="llama-3-8b", num_gpus=16, framework="megatron-core", exhaustive=False,
                          pins=Pins(tp=4, pp=1, sequence_parallel=True, zero_stage=1, tp_comm_overlap=True))
    new = plan_search(request).document.to_dict()
    assert new["parallel"]["tp_comm_overlap"] is True and new["alternatives"]
    (tmp_path / "new.json").write_text(json.dumps(new))
    (tmp_path / "old.json").write_text(json.dumps(_old_spelling(new)))
    doc = PlanDocument.load(tmp_path / "old.json")
    assert doc.framework == "megatron-core" and doc.parallel.tp_comm_overlap is True
    assert doc.prediction_current          # the prediction it carries was made for this very plan
    assert [a["parallel"] for a in doc.alternatives] == [a["parallel"] for a in new["alternatives"]]
    assert all(doc.alternative_current(a) for a in doc.alternatives)
    outputs = {}
    for name in ("new", "old"):
        code, out, err = run_cli(capsys, "estimate", tmp_path / f"{name}.json")
        assert code == 0, err
        outputs[name] = out
    assert outputs["old"] == outputs["new"]   # the same plan, framework, prediction and re-scored estimate
    assert "prediction: the plan file's and now" in outputs["old"]
    assert "megatron-core+tp-comm-overlap" not in outputs["old"]


def test_the_option_turns_the_knob_on_only_where_it_acted():
    """The option pipelined TP collectives only with tp > 1 and sequence parallelism; a plan without SP read
    from an old file keeps the knob off (Megatron-Core would refuse it there), and is still read."""
    from autoplan.specs import PlanDocument
    from tests.export_plans import LLAMA3_8B, export_doc

    doc = export_doc(LLAMA3_8B, 16, 64, dp=4, tp=4, sequence_parallel=False, zero_stage=1, micro_batch_size=1,
                     num_microbatches=16)
    old = {**doc.to_dict(), "framework": "megatron-core+tp-comm-overlap"}
    read = PlanDocument.from_dict(old)
    assert read.framework == "megatron-core" and read.parallel == doc.parallel
    assert len(read.assumed) == 1 and "read as 'megatron-core'" in read.assumed[0]
    get_framework("megatron-core").check(read.model, read.training, read.parallel)


def test_the_cli_names_the_flag_that_replaced_the_option(capsys):
    for command in ("search", "estimate"):
        code, out, err = run_cli(capsys, command, "--model", "llama-3-8b", "--gpus", "16", "--framework",
                                 "megatron-core+tp-comm-overlap")
        assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
        assert "use --framework megatron-core --tp-comm-overlap" in err
    assert "tp-comm-overlap" not in get_framework("megatron-core").options


def test_published_rows_that_ran_the_overlap_carry_the_plan_knob():
    """The CSV's tp_comm_overlap column sets the plan's knob on the Megatron-Core rows (the only framework
    whose userbuffers it states), and the overlap is priced through the plan, not the framework facts."""
    import csv

    from cost_model.published_rows import PUBLISHED_RUNS_PATH, load_published_runs

    with PUBLISHED_RUNS_PATH.open(newline="") as f:
        stated = {r["id"] for r in csv.DictReader(f) if r["tp_comm_overlap"].strip().lower() == "true"}
    runs = load_published_runs()
    knob = {r.id for r in runs if r.plan.tp_comm_overlap}
    assert knob == {r.id for r in runs if r.id in stated and r.framework == "megatron-core"} and knob
    run = next(r for r in runs if r.id in knob)
    facts = run.framework_facts()
    assert not facts.tp_comm_gemm_overlap
    est = Estimator(run.model, run.training, run.cluster, run.profile(), framework=facts, allow_tp_across_nodes=True)
    on, off = est.estimate(run.plan), est.estimate(run.plan.replace(tp_comm_overlap=False))
    assert on.time_breakdown_s["tp_comm"] < off.time_breakdown_s["tp_comm"]
