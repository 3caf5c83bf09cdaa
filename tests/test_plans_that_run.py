"""Plans that run (issue 47): what a plan is costed as is what its export turns on, and the facts
behind published runs that trained are the frameworks' own (so none is predicted not to fit)."""
import pytest

from autoplan.exporters import export_plan
from autoplan.planning.planner import PlanRequest, plan_search, score_one
from autoplan.planning.space import Pins
from autoplan.specs import get_framework
from cost_model.memory import BYTES_ACT, activation_bytes_per_layer, full_recompute_layer_bytes
from cost_model.published_rows import load_published_runs

GIB = 2 ** 30


def megatron_zero_stage_exported(text: str) -> int:
    """The ZeRO stage a Megatron-LM command line runs, read from its flags: Megatron-FSDP's sharding
    strategy, else the distributed optimizer (which keeps every gradient: ZeRO-1), else plain DDP."""
    command = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
    flags = command.replace("\\\n", " ").split()
    if "--use-megatron-fsdp" in flags:
        return {"optim_grads": 2, "optim_grads_params": 3}[flags[flags.index("--data-parallel-sharding-strategy") + 1]]
    return 1 if "--use-distributed-optimizer" in flags else 0


@pytest.mark.parametrize("model, gpu, zero", [("qwen-72b", None, None), ("llama-3-70b", "a100-80gb", None),
                                              ("qwen-72b", None, 2)])
def test_megatron_picks_fit_as_exported(model, gpu, zero):
    request = PlanRequest(model=model, num_gpus=128, gpu=gpu, framework="megatron-core", pins=Pins(zero_stage=zero))
    outcome = plan_search(request)
    doc = outcome.document
    exported = megatron_zero_stage_exported(export_plan(doc, "megatron").text)
    assert exported == doc.parallel.zero_stage
    as_run = score_one(doc.model, doc.training, doc.cluster, _profile(doc), doc.parallel.replace(zero_stage=exported),
                       framework="megatron-core")
    assert as_run.estimate.fits, as_run.reason
    # and with the margin the search kept: the pick leaves the default headroom free
    pred = doc.prediction
    assert pred["peak_memory_bytes"] + pred["memory_headroom_bytes"] <= pred["memory_capacity_bytes"]
    assert pred["memory_headroom_bytes"] == round(0.07 * pred["memory_capacity_bytes"])


def _profile(doc):
    from autoplan.inputs.clusters import cluster_for_plan_file
    return cluster_for_plan_file(doc.cluster, None)


def test_zero2_is_costed_with_one_reduce_scatter_per_micro_batch_where_the_framework_runs_it_so():
    # Megatron-FSDP optim_grads and FSDP2 (torchtitan) reduce each micro-batch's gradients into their
    # shard; the same plan on a framework that keeps them whole until the last micro-batch reduces once.
    from cost_model.dp_time import dp_rounds
    from autoplan.specs import ParallelPlan
    plan = ParallelPlan(dp=8, tp=1, zero_stage=2, num_microbatches=4)
    assert dp_rounds(plan, 4, get_framework("megatron-core")) == (1, 4)
    assert dp_rounds(plan, 4, get_framework("deepspeed")) == (1, 1)
    assert dp_rounds(plan.replace(zero_stage=1), 4, get_framework("megatron-core")) == (1, 1)


def test_megatron_sequence_parallel_backward_holds_the_sharded_layer_and_one_gathered_input():
    # Korthikanti et al. 2022 sec. 4.2.2: Megatron's sequence-parallel linears save their sharded input
    # and gather it again in backward. The Megatron-DeepSpeed 30B long-sequence row (262,144 tokens,
    # tp 32, full recompute) is the case: its backward working set is the layer's SP-sharded tensors
    # plus one gathered input and its gradient (2 x s x b x h bf16), and the recomputed layer adds what
    # the layer stores without recompute (SP-sharded) -- not two unsharded copies of the layer.
    run = next(r for r in load_published_runs() if r.id == "MDS-30B-10")
    m, b, s, t = run.model, 1, 262144, 32
    sharded = sum(activation_bytes_per_layer(m, b, s, t, True, True).values())
    unsharded = sum(activation_bytes_per_layer(m, b, s, t, False, True).values())
    expected = min(unsharded, sharded + 2 * BYTES_ACT * b * s * m.hidden_size) + sharded
    from cost_model.estimator import Estimator
    from cost_model.constants import load_constants
    constants = load_constants()
    est = Estimator(m, run.training, run.cluster, run.profile(), framework=run.framework_facts(constants),
                    constants=constants, allow_tp_across_nodes=True)
    working = est.estimate(run.plan).memory_breakdown_bytes["activation_working"]
    assert working == pytest.approx(expected, rel=1e-9)
    assert expected < 2 * unsharded  # the two unsharded copies counted before
    assert full_recompute_layer_bytes(m, b, s, t, True) < sharded


def test_the_nvidia_mlperf_llama31_runs_keep_bf16_main_gradients():
    # training_results_v5.0 .../llama31_405b/implementations/*_nemo/pretrain.py: grad_reduce_in_fp32=False
    runs = {r.id: r for r in load_published_runs() if r.id.startswith("MLPERF")}
    llama = [r for r in runs.values() if "llama31" in r.model.name or "Llama-3.1" in r.model.name]
    gpt3 = [r for r in runs.values() if "GPT-3" in r.model.name]
    assert llama and gpt3
    for run in llama:
        fw = run.framework_facts()
        assert fw.states["grads"].bytes_per_param == 2 and fw.main_grad_reduce_bytes == 2
    for run in gpt3:  # their NeMo 1.x stack is not that file: Megatron-LM's fp32 main gradients
        assert run.framework_facts().states["grads"].bytes_per_param == 4
