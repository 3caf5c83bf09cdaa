"""megatron-core+overlap-moe-expert-parallel-comm: costed, checked and exported together."""
import pytest

from autoplan.exporters import export_plan
from autoplan.specs import ClusterSpec, InfeasiblePlan, ParallelPlan, PlanDocument, TrainingSpec, get_framework
from cost_model import Estimator, builtin_profile, load_constants
from tests.framework_acceptance import megatron_accepts
from tests.test_export import MIXTRAL, export_megatron_args

OPTION = "megatron-core+overlap-moe-expert-parallel-comm"
TRAINING, CLUSTER = TrainingSpec(global_batch_size=256, seq_len=4096), ClusterSpec(name="h100-80gb", num_gpus=64)
PLAN = ParallelPlan(dp=16, tp=2, pp=2, vpp=2, ep=8, zero_stage=1, sequence_parallel=True, micro_batch_size=1,
                    num_microbatches=16)


def test_option_hides_the_all_to_all_under_compute():
    constants = load_constants()
    times = {name: Estimator(MIXTRAL, TRAINING, CLUSTER, builtin_profile("h100-80gb"), framework=constants.framework(name),
                             constants=constants).estimate(PLAN).time_breakdown_s for name in ("megatron-core", OPTION)}
    assert times["megatron-core"]["ep_comm"] > 0 and times[OPTION]["ep_comm"] < times["megatron-core"]["ep_comm"]
    assert times[OPTION]["compute"] == times["megatron-core"]["compute"]


@pytest.mark.parametrize("change", [dict(recompute="full", recompute_num_layers=16), dict(vpp=1)])
def test_option_refuses_what_megatron_refuses(change):
    with pytest.raises(InfeasiblePlan, match="overlaps the expert all-to-all"):
        get_framework(OPTION).check(MIXTRAL, TRAINING, PLAN.replace(**change))


def test_export_passes_the_flags_megatron_accepts():
    doc = PlanDocument(model=MIXTRAL, training=TRAINING, cluster=CLUSTER, parallel=PLAN, framework=OPTION)
    args = export_megatron_args(doc)
    assert args["--moe-token-dispatcher-type"] == "alltoall"
    assert args["--overlap-moe-expert-parallel-comm"] is True and args["--delay-wgrad-compute"] is True
    assert megatron_accepts(export_plan(doc, "megatron").text, 64) == ""
    plain = PlanDocument(model=MIXTRAL, training=TRAINING, cluster=CLUSTER, parallel=PLAN, framework="megatron-core")
    assert "--overlap-moe-expert-parallel-comm" not in export_megatron_args(plain)
    # Without the overlap too: the dispatcher the plan was costed with (Framework.moe_dispatch), not
    # Megatron's default allgather one.
    assert export_megatron_args(plain)["--moe-token-dispatcher-type"] == "alltoall"
