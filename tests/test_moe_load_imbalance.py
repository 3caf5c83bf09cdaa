"""Issue 25: a user's measured routed-token imbalance (--moe-load-imbalance, TrainingSpec.moe_load_imbalance)
over the framework's default.

Expected values are worked by hand: the bound from the routing's counting argument, the step time's
linearity in the load factor from how the busiest rank paces a layer (cost_model/moe_time.py), not read
back from the code's output."""
import json

import pytest

from autoplan.cli.main import main
from autoplan.inputs.catalog import catalog_model
from autoplan.specs import ClusterSpec, ParallelPlan, PlanDocument, SchemaError, TrainingSpec
from cost_model import Estimator
from cost_model.constants import load_constants
from cost_model.moe_time import busiest_load_bound
from cost_model.profiles import builtin_profile

MIXTRAL = catalog_model("mixtral-8x7b")   # 8 experts, top-2
QWEN3 = catalog_model("qwen3-235b-a22b")  # 128 experts, top-8


def test_the_busiest_rank_holds_at_most_every_routed_token_it_can_receive():
    # A token's k copies go to k distinct experts: an expert gets at most every token, E/k x the mean.
    assert busiest_load_bound(MIXTRAL, 1) == 8 / 2 == busiest_load_bound(MIXTRAL, 8, padded=True)
    # Mixtral at ep 8: one expert per rank, so a rank too gets at most every token: 8 x min(2, 1) / 2 = 4.
    assert busiest_load_bound(MIXTRAL, 8) == 4
    # ep 2: 4 experts per rank take both copies of every token, the whole routed load of the group: 2x.
    assert busiest_load_bound(MIXTRAL, 2) == 2
    # Qwen3-235B at ep 32: 4 experts per rank, at most 4 of a token's 8 copies: 32 x 4 / 8 = 16.
    assert busiest_load_bound(QWEN3, 32) == 16
    assert busiest_load_bound(QWEN3, 128) == 16  # 1 expert per rank: 128 x 1 / 8


def _step_s(load: float, ep: int) -> float:
    training = TrainingSpec(global_batch_size=64, seq_len=4096, moe_load_imbalance=load)
    est = Estimator(MIXTRAL, training, ClusterSpec("h100-80gb", 16), builtin_profile("h100-80gb"),
                    framework=load_constants().framework("megatron-core"))
    return est.estimate(ParallelPlan(dp=8, tp=2, ep=ep, sequence_parallel=True, zero_stage=1, micro_batch_size=1,
                                     num_microbatches=8)).step_time_s


def test_a_measured_load_paces_every_moe_layer_linearly_up_to_its_bound():
    # Megatron-Core's dropless layer without the all-to-all overlap: the busiest rank runs f x the mean
    # rank's expert GEMMs and receives f x its tokens, so the step is linear in f ...
    t1, t2, t3 = _step_s(1.0, 8), _step_s(2.0, 8), _step_s(3.0, 8)
    assert t1 < t2 < t3 and t3 - t2 == pytest.approx(t2 - t1, rel=1e-9)
    # ... up to what the busiest of 2 ranks can hold (2x the mean, above), where more is read as the bound;
    assert _step_s(3.0, 2) == pytest.approx(_step_s(2.0, 2), rel=1e-12)
    assert _step_s(2.0, 2) > _step_s(1.5, 2)
    # 0 is the framework's default, 1.25 (cost_model/moe_time.py DEFAULT_EXPERT_LOAD_IMBALANCE).
    assert _step_s(0.0, 8) == pytest.approx(_step_s(1.25, 8), rel=1e-12)


def test_the_plan_file_keeps_a_measured_load_and_plans_without_one_are_unchanged(tmp_path, capsys):
    assert "moe_load_imbalance" not in TrainingSpec(64, 4096).to_dict()  # so old plan ids stay as they were
    with pytest.raises(SchemaError, match="moe_load_imbalance"):
        TrainingSpec.from_dict({"global_batch_size": 64, "seq_len": 4096, "moe_load_imbalance": 0.5})
    plan = tmp_path / "plan.json"
    problem = ["--model", "mixtral-8x7b", "--gpus", "16", "--global-batch", "64", "--seq-len", "4096",
               "--framework", "megatron-core", "--tp", "2", "--ep", "8", "--sequence-parallel", "--zero", "1",
               "--micro-batch", "1"]
    assert main(["estimate", *problem, "--moe-load-imbalance", "2", "-o", str(plan)]) == 0
    out = capsys.readouterr().out
    assert "MoE load 2x the mean on the busiest" in out and "set --moe-load-imbalance" not in out
    # Without it, the default is said as one (with its source and the flag to change it).
    assert main(["estimate", *problem]) == 0
    out = capsys.readouterr().out
    assert "default  MoE load 1.25x the mean on the busiest expert-parallel rank" in out and "Switch Transformer" in out
    doc = PlanDocument.load(plan)
    assert doc.training.moe_load_imbalance == 2.0
    assert doc.prediction["step_time_s"] == pytest.approx(_step_s(2.0, 8), rel=1e-9)
    # Re-scored with another measured load, the file's plan is costed with it.
    assert main(["estimate", str(plan), "--moe-load-imbalance", "1", "--json"]) == 0
    rescored = json.loads(capsys.readouterr().out)
    assert rescored["training"]["moe_load_imbalance"] == 1.0
    assert rescored["prediction"]["step_time_s"] == pytest.approx(_step_s(1.0, 8), rel=1e-9)


@pytest.mark.parametrize("argv, message", [
    (["estimate", "--model", "qwen-72b", "--gpus", "8", "--moe-load-imbalance", "2"], "qwen-72b has no experts"),
    (["search", "--model", "mixtral-8x7b", "--gpus", "16", "--moe-load-imbalance", "0.5"], "must be at least 1"),
    (["memory", "--model", "mixtral-8x7b", "--gpus", "16", "--moe-load-imbalance", "nan"], "a load factor >= 1"),
    (["cluster", "--model", "qwen-72b", "--train-tokens", "1B", "--deadline-days", "30", "--gpus-max", "16",
      "--moe-load-imbalance", "2"], "qwen-72b has no experts"),
])
def test_bad_load_factors_are_one_line_and_exit_2(capsys, argv, message):
    with pytest.raises(SystemExit) as stop:
        code = main(argv)
        raise SystemExit(code)
    err = capsys.readouterr().err
    assert stop.value.code == 2 and message in err and len(err.strip().splitlines()) == 1, err
