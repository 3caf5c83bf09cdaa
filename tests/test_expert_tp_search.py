"""The search explores expert TP (etp) jointly with tp and ep where the framework runs it."""
from autoplan.inputs.catalog import catalog_model
from autoplan.planning.planner import PlanRequest, plan_search
from autoplan.planning.space import Pins, SearchSpace
from autoplan.specs import ClusterSpec, TrainingSpec

MIXTRAL = catalog_model("mixtral-8x7b")
TRAINING, CLUSTER = TrainingSpec(global_batch_size=32, seq_len=2048), ClusterSpec(name="h100-80gb", num_gpus=16)


def test_etp_domain_only_where_the_framework_has_expert_tp():
    # 0 = tp, and every divisor of the node's 8 GPUs that divides Mixtral's expert width 14336.
    assert SearchSpace(MIXTRAL, TRAINING, CLUSTER, expert_tp=True).domains["etp"] == (0, 1, 2, 4, 8)
    assert SearchSpace(MIXTRAL, TRAINING, CLUSTER).domains["etp"] == (0,)


def test_etp_equal_to_tp_is_the_default_plan():
    space = SearchSpace(MIXTRAL, TRAINING, CLUSTER, expert_tp=True)
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
