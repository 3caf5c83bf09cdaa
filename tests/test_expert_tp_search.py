"""The search explores expert TP (etp) jointly with tp and ep where the framework runs it."""
from autoplan.inputs.catalog import catalog_model
from autoplan.planning.planner import PlanRequest, plan_search
from autoplan.planning.space import Pins, SearchSpace
from autoplan.specs import ClusterSpec, TrainingSpec, get_framework

MIXTRAL = catalog_model("mixtral-8x7b")
MEGATRON = get_framework("megatron-core")
TRAINING, CLUSTER = TrainingSpec(global_batch_size=32, seq_len=2048), ClusterSpec(name="h100-80gb", num_gpus=16)


def test_etp_domain_only_where_the_framework_has_expert_tp():
    # 0 = tp, and every divisor of the node's 8 GPUs that divides Mixtral's expert width 14336.
    assert SearchSpace(MIXTRAL, TRAINING, CLUSTER, framework=MEGATRON).domains["etp"] == (0, 1, 2, 4, 8)
    assert SearchSpace(MIXTRAL, TRAINING, CLUSTER).domains["etp"] == (0,)


def test_etp_equal_to_tp_is_the_default_plan():
    space = SearchSpace(MIXTRAL, TRAINING, CLUSTER, framework=MEGATRON)
    knobs = dict(tp=2, pp=1, cp=1, vpp=1, ep=8, micro_batch_size=1, zero_stage=1, recompute="none",
                 sequence_parallel=True)
    assert space.plan({**knobs, "ep": 4, "etp": 2}).etp == 0
    # ep 8 over dp 8 and tp 2 needs the experts unsplit (ep * etp = 8 divides tp * dp = 16).
    assert space.plan({**knobs, "etp": 1}).etp == 1


def test_megatron_search_folds_expert_parallelism_over_tensor_parallel_ranks():
    # 16 GPUs at tp 4 leave dp 4: ep 8 with the experts split over tp (etp 4) would need 32 ranks, so
    # only an expert TP of its own (etp 1 or 2) runs it; a search that did not explore etp finds none.
    pins = Pins(tp=4, pp=1, cp=1, ep=8, micro_batch_size=1, zero_stage=1, recompute="none")
    outcome = plan_search(PlanRequest(model="mixtral-8x7b", num_gpus=16, global_batch_size=32, seq_len=2048,
                                      framework="megatron-core", pins=pins, exhaustive=True))
    assert outcome.best.plan.etp in (1, 2)
    assert {s.plan.etp for s in outcome.result.ranked} == {1, 2}


def test_etp_is_a_pin_of_search_estimate_and_memory(capsys):
    """--etp (Megatron --expert-tensor-parallel-size) fixes the expert TP in each command; the default
    search honours the pin too (its branch and bound enumerates etp with tp and ep)."""
    import json

    from tests.cli_run import run_cli

    problem = ["--model", "mixtral-8x7b", "--gpus", 16, "--global-batch", 32, "--seq-len", 2048,
               "--framework", "megatron-core"]
    code, out, err = run_cli(capsys, "search", *problem, "--tp", 2, "--etp", 1, "--json")
    assert code == 0, err
    assert json.loads(out)["parallel"]["etp"] == 1
    # (exit 0: the plan fits; estimate exits 1 for one that does not)
    code, out, _ = run_cli(capsys, "estimate", *problem, "--tp", 2, "--pp", 2, "--ep", 8, "--etp", 1, "--zero", 1,
                           "--sequence-parallel", "--json")
    assert code == 0 and json.loads(out)["parallel"]["etp"] == 1
    code, out, _ = run_cli(capsys, "memory", *problem, "--tp", 2, "--ep", 8, "--etp", 1)
    assert code == 0 and "ep=8 etp=1 sp (from the flags)" in out
    # A plan Megatron-Core cannot run: one line, exit 2.
    code, out, err = run_cli(capsys, "estimate", *problem, "--tp", 2, "--ep", 8, "--etp", 3)
    assert code == 2 and "ep*etp must divide tp*cp*dp" in err and len(err.strip().splitlines()) == 1
