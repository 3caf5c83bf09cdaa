"""Hybrid sharding (HSDP, ParallelPlan.zero_shard) from a worked example: Llama-3-8B on 8 nodes of 8
H100s, FSDP (ZeRO-3) within each node and 8 replicas across, against FSDP over all 64 ranks; the plan
rules, the frameworks that run it, and the published rows that state it."""
import json
import re

import pytest

from autoplan.inputs.catalog import resolve_model
from autoplan.specs import ClusterSpec, InfeasiblePlan, ParallelPlan, TrainingSpec, get_framework
from cost_model import Estimator, load_constants
from cost_model.profiles import builtin_profile
from cost_model.published_rows import load_published_runs
from cost_model.tables import ProfileTables

LLAMA3_8B_PARAMS = 8_030_261_248
MODEL = resolve_model("llama-3-8b")
TRAINING = TrainingSpec(global_batch_size=64, seq_len=4096, dtype="bf16")
CLUSTER = ClusterSpec(name="h100-80gb", num_gpus=64, gpus_per_node=8, profile="builtin:h100-80gb")


def _estimate(zero_shard: int):
    est = Estimator(MODEL, TRAINING, CLUSTER, builtin_profile("h100-80gb"),
                    framework=load_constants().framework("torchtitan"))
    return est.estimate(ParallelPlan(dp=64, micro_batch_size=1, num_microbatches=1, zero_stage=3,
                                     zero_shard=zero_shard))


def test_states_shard_over_the_group_and_the_shards_gradients_cross_the_replicas():
    fsdp, hsdp = _estimate(0), _estimate(8)
    # torchtitan's FSDP2 states: fp32 parameters 4 B, fp32 gradients 4 B, AdamW moments 8 B per
    # parameter, divided by the ranks that share them: 64, or the 8 of a shard group.
    for name, bytes_per_param in (("params", 4), ("grads", 4), ("optimizer", 8)):
        assert fsdp.memory_breakdown_bytes[name] == pytest.approx(bytes_per_param * LLAMA3_8B_PARAMS / 64, rel=1e-9)
        assert hsdp.memory_breakdown_bytes[name] == pytest.approx(bytes_per_param * LLAMA3_8B_PARAMS / 8, rel=1e-9)
    # On the wire, per parameter: a bf16 gather for forward and one for backward and an fp32
    # reduce-scatter (2 + 2 + 4 B); HSDP adds the all-reduce of each rank's eighth over the 8
    # replicas in fp32 (2 x 4 / 8 B).
    assert fsdp.details["dp_bytes_per_step"] == pytest.approx(8 * LLAMA3_8B_PARAMS, rel=1e-9)
    assert hsdp.details["dp_bytes_per_step"] == pytest.approx(9 * LLAMA3_8B_PARAMS, rel=1e-9)


def test_the_shard_groups_collectives_stay_in_the_node_and_one_rank_per_node_all_reduces():
    # FSDP wraps each of the 32 blocks (the embedding and head ride in the layer buckets): per block
    # a forward and a backward all-gather of 2 B and a reduce-scatter of 4 B per parameter over the 8
    # GPUs of a node, then the all-reduce of its eighth over 8 replicas, one GPU per node.
    tables = ProfileTables(builtin_profile("h100-80gb"))
    per_block = LLAMA3_8B_PARAMS / 32
    expected_s = 32 * (2 * tables.collective_time_s("all_gather", 2 * per_block, 8, 8)
                       + tables.collective_time_s("reduce_scatter", 4 * per_block, 8, 8)
                       + tables.collective_time_s("all_reduce", 4 * per_block / 8, 8, 1))
    assert _estimate(8).details["dp_comm_total_s"] == pytest.approx(expected_s, rel=1e-9)


@pytest.mark.parametrize("zero_shard, zero_stage, cp, says", [
    (7, 3, 1, "divides dp*cp"), (64, 3, 1, "two or more shard groups"), (8, 0, 1, "zero_stage=0 shards none"),
    (3, 3, 2, "multiple of cp"),
])
def test_the_plan_refuses_shard_groups_that_cannot_be(zero_shard, zero_stage, cp, says):
    plan = ParallelPlan(dp=64 // cp, cp=cp, micro_batch_size=1, num_microbatches=64 * cp // 64, zero_stage=zero_stage,
                        zero_shard=zero_shard)
    with pytest.raises(InfeasiblePlan, match=re.escape(says)):
        plan.check(MODEL, TrainingSpec(global_batch_size=64 // cp, seq_len=4096), CLUSTER)


def test_only_the_frameworks_that_shard_in_groups_take_it():
    def plan(zero_stage):
        return ParallelPlan(dp=64, micro_batch_size=1, num_microbatches=1, zero_stage=zero_stage, zero_shard=8)
    for name, zero_stage in (("torchtitan", 2), ("torchtitan", 3), ("megatron-core", 1), ("llm-foundry", 2),
                             ("autoplan", 3)):
        get_framework(name).check(MODEL, TRAINING, plan(zero_stage))
    for name, zero_stage, says in (("autoplan-xla", 3, "every data-parallel rank, got"),
                                   ("deepspeed", 3, "every data-parallel rank, got"),
                                   ("megatron-core", 2, "hybrid sharding at ZeRO stages 1 only")):
        with pytest.raises(InfeasiblePlan, match=re.escape(says)):
            get_framework(name).check(MODEL, TRAINING, plan(zero_stage))


def test_published_rows_that_state_a_shard_group_plan_with_it():
    runs = {r.id: r for r in load_published_runs()}
    assert runs["FMS-v3-7b-h100"].plan.zero_shard == 8        # "HSDP shard group 8"
    assert runs["FMS-v3-70b-h100"].plan.zero_shard == 0       # FULL_SHARD over all 96
    assert runs["OLMOCORE-32B-15"].plan.zero_shard == 256     # num_replicas=4 of 1024
    bloomberg = runs["BBGPT-50B-01"]                          # SageMaker's MiCS over 128 GPUs
    assert bloomberg.plan.zero_shard == 128 and 3 in bloomberg.framework_facts().hsdp_zero_stages


def test_a_pinned_shard_group_reaches_the_plan_file_and_back(tmp_path, capsys):
    from tests.cli_run import run_cli

    path = tmp_path / "plan.json"
    args = ("--model", "llama-3-8b", "--gpus", "64", "--global-batch", "256", "--framework", "torchtitan")
    code, _, err = run_cli(capsys, "search", *args, "--zero", "3", "--zero-shard", "8", "-o", path)
    assert code == 0, err
    saved = json.loads(path.read_text())["parallel"]
    assert saved["zero_shard"] == 8 and saved["zero_stage"] == 3
    code, out, err = run_cli(capsys, "estimate", path)       # re-scored from the file as saved
    assert code == 0 and "zero=3/shard8" in out, err
    # A plan file without the field is plain ZeRO and keeps its id; a bad value is one line, exit 2.
    assert "zero_shard" not in ParallelPlan(dp=64, zero_stage=3).to_dict()
    code, _, err = run_cli(capsys, "estimate", *args, "--zero", "3", "--zero-shard", "48")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "zero_shard=48" in err
    code, _, err = run_cli(capsys, "estimate", *args, "--zero", "3", "--zero-shard", "8", "--framework", "deepspeed")
    assert code == 2 and "framework deepspeed shards ZeRO states over every data-parallel rank" in err
