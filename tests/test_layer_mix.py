"""Dense and MoE layers priced per pipeline rank (cost_model/layer_mix.py)."""
import pytest

from autoplan.specs import ClusterSpec, ModelSpec, ParallelPlan, TrainingSpec
from cost_model import Estimator, builtin_profile
from cost_model.constants import load_constants
from cost_model.layer_mix import rank_layer_kinds
from cost_model.layer_time import layer_times, mean_layer_times

# DeepSeek-style: 8 layers, the first 3 dense, 8 experts top-2 of width 512 plus one shared expert.
MIXED = ModelSpec(name="mixed", num_layers=8, hidden_size=1024, num_heads=8, num_kv_heads=8, ffn_hidden_size=4096,
                  vocab_size=32000, num_experts=8, num_experts_per_token=2, moe_ffn_hidden_size=512,
                  shared_expert_ffn_size=512, num_dense_layers=3)
DENSE, MOE = (False, 0), (True, 0)


def test_rank_kinds_worked_example():
    # pp 2: rank 0 holds layers 0-3 (0-2 dense), rank 1 layers 4-7.
    assert rank_layer_kinds(MIXED, ParallelPlan(pp=2)) == [((DENSE, 3), (MOE, 1)), ((MOE, 4),)]
    # pp 2, vpp 2: virtual stages of 2 layers in pipeline order go to ranks 0, 1, 0, 1:
    # rank 0 holds 0, 1 (dense) and 4, 5; rank 1 holds 2 (dense), 3 and 6, 7.
    assert rank_layer_kinds(MIXED, ParallelPlan(pp=2, vpp=2)) == [((DENSE, 2), (MOE, 2)), ((DENSE, 1), (MOE, 3))]


def _layer(plan):
    constants = load_constants()
    est = Estimator(MIXED, TrainingSpec(global_batch_size=16, seq_len=2048), ClusterSpec(name="h100-80gb", num_gpus=8),
                    builtin_profile("h100-80gb"), framework=constants.framework("megatron-core"), constants=constants)
    est.estimate(plan)
    return est, est._layer(plan)


def test_the_pipeline_is_paced_by_its_moe_only_rank():
    plan = ParallelPlan(dp=4, pp=2, zero_stage=1, micro_batch_size=1, num_microbatches=4, ep=4)
    est, lt = _layer(plan)
    args = (MIXED, est.tables, est.rates, 1, 2048, 1, 1, 4, False, 8)
    moe_only = layer_times(*args, moe=True)
    assert lt.gemm_fwd_s == pytest.approx(moe_only.gemm_fwd_s)
    assert lt.ep_fwd_s == pytest.approx(moe_only.ep_fwd_s)
    # Without a pipeline the one rank holds the model's mix: 3 dense + 5 MoE layers.
    _, whole = _layer(plan.replace(dp=8, pp=1, num_microbatches=2))
    dense = layer_times(*args, moe=False)
    assert whole.gemm_fwd_s == pytest.approx((3 * dense.gemm_fwd_s + 5 * moe_only.gemm_fwd_s) / 8)
    assert whole == mean_layer_times(*args)
