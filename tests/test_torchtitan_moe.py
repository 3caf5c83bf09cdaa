"""torchtitan's mixture of experts as 0.3.0 runs it (Framework.experts_whole_with_ep, moe_dispatch
"alltoall-with-ep"): with expert parallelism every routed expert is whole on its rank and the EP group
borrows the tensor-parallel ranks (ep divides dp*cp*tp, parallel_dims.py efsdp); without it the experts
are split over tp and the layer's input is replicated over TP. Expected values are worked out from the
collectives' sizes, not read from the code."""
import pytest

from autoplan.inputs.catalog import catalog_model
from autoplan.planning.planner import PlanRequest, plan_search
from autoplan.planning.space import Pins, SearchSpace
from autoplan.specs import ClusterSpec, InfeasiblePlan, ParallelPlan, TrainingSpec, get_framework
from autoplan.specs.framework_facts import MoEFacts
from cost_model import builtin_profile
from cost_model.layer_time import Rates, dispatch_in_effect, dispatch_times_s, layer_times
from cost_model.tables import ProfileTables
from tests.test_moe_dispatch import QWEN3

TORCHTITAN, MEGATRON = get_framework("torchtitan"), get_framework("megatron-core")
QWEN3_MOE = catalog_model("qwen3-235b-a22b")
TRAINING = TrainingSpec(global_batch_size=64, seq_len=4096)
TABLES = ProfileTables(builtin_profile("h100-80gb"))


def _plan(**degrees):
    return ParallelPlan(**{"dp": 8, "tp": 2, "zero_stage": 1, "sequence_parallel": True, "micro_batch_size": 1,
                           "num_microbatches": 8, **degrees})


def test_torchtitan_keeps_experts_whole_under_expert_parallelism():
    TORCHTITAN.check(QWEN3_MOE, TRAINING, _plan(ep=8, etp=1))
    TORCHTITAN.check(QWEN3_MOE, TRAINING, _plan(ep=1))  # etp = tp: the experts split over tp
    with pytest.raises(InfeasiblePlan, match=r"got ep=8, etp=0, tp=2; plan with --etp 1"):
        TORCHTITAN.check(QWEN3_MOE, TRAINING, _plan(ep=8))
    with pytest.raises(InfeasiblePlan, match=r"got ep=1, etp=1, tp=2; plan without --etp"):
        TORCHTITAN.check(QWEN3_MOE, TRAINING, _plan(ep=1, etp=1))


def test_megatron_core_trains_moe_under_tp_only_with_sequence_parallelism():
    # megatron/core/transformer/moe/moe_layer.py core_v0.16.1 lines 379-383 raise ValueError otherwise.
    MEGATRON.check(QWEN3_MOE, TRAINING, _plan(ep=8, etp=1))
    with pytest.raises(InfeasiblePlan, match="only with sequence parallelism, got tp=2 with sequence_parallel=false"):
        MEGATRON.check(QWEN3_MOE, TRAINING, _plan(ep=8, etp=1, sequence_parallel=False))
    TORCHTITAN.check(QWEN3_MOE, TRAINING, _plan(ep=8, etp=1, sequence_parallel=False))  # torchtitan runs it


def test_the_search_space_derives_torchtitans_expert_tp_from_ep():
    cluster = ClusterSpec(name="h100-80gb", num_gpus=16)
    space = SearchSpace(QWEN3_MOE, TRAINING, cluster, framework=TORCHTITAN)
    assert space.domains["etp"] == (0,)  # not a knob of its own
    knobs = dict(tp=4, pp=1, cp=1, vpp=1, micro_batch_size=1, zero_stage=1, recompute="full",
                 sequence_parallel=True)
    assert space.plan({**knobs, "ep": 8}).etp == 1
    assert space.plan({**knobs, "ep": 1}).etp == 0
    # The space of any framework without expert TP of its own keeps etp = tp, where ep 8 needs dp*cp = 4
    # to divide: refused.
    with pytest.raises(InfeasiblePlan, match="ep must divide dp\\*cp=4"):
        SearchSpace(QWEN3_MOE, TRAINING, cluster).plan({**knobs, "ep": 8})


def test_torchtitan_search_folds_expert_parallelism_over_tensor_parallel_ranks():
    # 128 GPUs at tp 4 leave dp 32; ep 64 runs only with the EP group borrowing the TP ranks (64 divides
    # dp*tp = 128), as torchtitan 0.3.0 does (efsdp = 32*4/64 = 2). Before, the torchtitan entry split the
    # experts over tp and needed ep to divide dp = 32: no plan.
    pins = Pins(tp=4, pp=1, cp=1, ep=64, micro_batch_size=1, zero_stage=1, recompute="full")
    outcome = plan_search(PlanRequest(model="qwen3-235b-a22b", num_gpus=128, global_batch_size=256, seq_len=4096,
                                      framework="torchtitan", pins=pins, exhaustive=True))
    assert {s.plan.etp for s in outcome.result.ranked} == {1}


def test_torchtitan_dispatch_is_alltoall_with_ep_and_tp_gathered_without():
    assert dispatch_in_effect("alltoall-with-ep", 8) == "alltoall"
    assert dispatch_in_effect("alltoall-with-ep", 1) == "tp-gathered"
    assert dispatch_in_effect("alltoall", 1) == "alltoall"
    # ep 8, etp 1, tp 2: each rank sends its 2048 sequence-parallel tokens' 8 routed copies of 4096 bf16
    # values (128 MiB) in one all-to-all each way over its 8 ep ranks (one node): no expert-TP gather.
    routed = 2 * 2048 * 8 * 4096
    assert dispatch_times_s(QWEN3, TABLES, "alltoall-with-ep", 4096, tp=2, ep=8, etp=1, gpus_per_node=8) == \
        pytest.approx((2 * TABLES.collective_time_s("all_to_all", routed, 8, 8), 0.0))
    # ep 1: the input was gathered over tp and the experts split over it: nothing moves between experts.
    assert dispatch_times_s(QWEN3, TABLES, "alltoall-with-ep", 4096, tp=2, ep=1, etp=2, gpus_per_node=8) == (0.0, 0.0)


def _tp_bytes(ep, sequence_parallel, etp):
    rates = Rates(gemm_dtype="bf16", matmul_scale=1.0, fp8_scale=1.0, attention_scale=1.0, memory_scale=1.0,
                  flash_attention=True, moe=MoEFacts(moe_dispatch="alltoall-with-ep"))
    return layer_times(QWEN3, TABLES, rates, 1, 4096, tp=4, cp=1, ep=ep, sequence_parallel=sequence_parallel,
                       gpus_per_node=8, moe=True, etp=etp).tp_bytes


def test_torchtitan_moe_layer_tp_collectives():
    # The 4096 x 4096 x 2 B buffer; (tp-1)/tp = 3/4 of it on the wire per all-gather or reduce-scatter,
    # twice that per all-reduce.
    buffer = 4096 * 4096 * 2
    # EP with SP: the experts take the sequence shard as it is; the attention's pair only (AG + RS forward,
    # AG + RS backward).
    assert _tp_bytes(8, True, 1) == pytest.approx(4 * 3 / 4 * buffer)
    # EP without SP: the replicated input is sliced and the outputs all-reduced: the MLP block's pair too
    # (2 all-reduces forward, 2 backward).
    assert _tp_bytes(8, False, 1) == pytest.approx(2 * 4 * 3 / 4 * buffer)
    # No EP: the input gathered over TP like a dense MLP's: attention and MLP pairs.
    assert _tp_bytes(1, True, 0) == pytest.approx(8 * 3 / 4 * buffer)


def test_estimate_and_memory_give_torchtitan_plans_the_expert_tp_it_runs(capsys):
    """Without --etp, estimate and memory take the framework's expert TP (Framework.default_etp): whole
    experts under EP for torchtitan, etp = tp for the others."""
    import json

    from tests.cli_run import run_cli

    problem = ["--model", "qwen3-235b-a22b", "--gpus", 256, "--tp", 4, "--ep", 64, "--zero", 3, "--recompute", "full",
               "--sequence-parallel"]
    code, out, err = run_cli(capsys, "estimate", *problem, "--framework", "torchtitan", "--json")
    assert code == 0, err
    assert json.loads(out)["parallel"]["etp"] == 1
    code, out, err = run_cli(capsys, "memory", *problem, "--framework", "torchtitan")
    assert code == 0 and "ep=64 etp=1 sp (from the flags)" in out, err
    # megatron-core's etp stays tp unless named: ep 64 then needs dp*cp = 64 to divide, which holds here.
    code, out, err = run_cli(capsys, "estimate", *problem, "--framework", "megatron-core", "--json")
    assert code == 0 and json.loads(out)["parallel"].get("etp", 0) == 0, err
    assert TORCHTITAN.default_etp(QWEN3_MOE, 64) == 1 and TORCHTITAN.default_etp(QWEN3_MOE, 1) == 0
    assert MEGATRON.default_etp(QWEN3_MOE, 64) == 0
