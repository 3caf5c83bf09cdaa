"""MoE time terms (cost_model/moe_time.py): worked examples, and the published twins they separate."""
from dataclasses import replace

import pytest

from autoplan.specs import ClusterSpec, ModelSpec, ParallelPlan, TrainingSpec
from cost_model import Estimator, builtin_profile
from cost_model.constants import load_constants
from autoplan.specs.framework_facts import MoEFacts
from cost_model.moe_time import (
    DEFAULT_EXPERT_LOAD_IMBALANCE, expert_load_imbalance, moe_layer_times, moe_run_facts, permute_elems,
)
from cost_model.published_rows import load_published_runs
from cost_model.tables import ProfileTables

# Qwen3-235B-A22B's MoE shape: h 4096, 128 experts, top-8.
QWEN3 = ModelSpec(name="q3", num_layers=4, hidden_size=4096, num_heads=64, num_kv_heads=4, ffn_hidden_size=1536,
                  vocab_size=151936, head_dim=128, num_experts=128, num_experts_per_token=8,
                  moe_ffn_hidden_size=1536)


def test_permute_elements_worked_example():
    # 4096 tokens over tp 4: t = 1024 routed 8 ways. permute + unpermute: (3*8 + 1) * 1024 * 4096
    # = 104,857,600; with ep 8 and 16 local experts the received 1024*8 copies are sorted and
    # unsorted (read + write each): 4 * 1024 * 8 * 4096 = 134,217,728.
    assert permute_elems(QWEN3, 4096, tp=4, ep=8, etp=1) == 104_857_600 + 134_217_728
    assert permute_elems(QWEN3, 4096, tp=4, ep=1, etp=1) == 104_857_600
    # One local expert per rank (128 experts over ep 128): nothing to sort.
    assert permute_elems(QWEN3, 4096, tp=4, ep=128, etp=1) == 104_857_600
    # Expert TP 2 gathers twice the rows onto each rank before the sort.
    assert permute_elems(QWEN3, 4096, tp=4, ep=8, etp=2) == 104_857_600 + 2 * 134_217_728


def test_imbalance_only_with_expert_parallelism():
    assert expert_load_imbalance(0.0, ep=1) == 1.0
    assert expert_load_imbalance(0.0, ep=8) == DEFAULT_EXPERT_LOAD_IMBALANCE == 1.25
    assert expert_load_imbalance(1.0, ep=8) == 1.0
    assert expert_load_imbalance(1.4, ep=8) == 1.4


def test_layer_terms_worked_example():
    tables = ProfileTables(builtin_profile("h100-80gb"))
    common = dict(model=QWEN3, tables=tables, expert_gemm_fwd_s=2.0, expert_gemm_bwd_s=4.0, a2a_s=1.0,
                  other_fwd_s=2.0, other_bwd_s=1.0, tokens=4096, tp=4, ep=8, etp=1, memory_scale=1.0)
    t = moe_layer_times(**common, facts=MoEFacts(moe_load_imbalance=0.0, moe_a2a_overlap=False))
    # The busiest rank runs 1.25x the mean rank's expert rows and receives 1.25x its tokens.
    assert (t.imbalance_gemm_fwd_s, t.imbalance_gemm_bwd_s) == (0.5, 1.0)
    assert (t.a2a_fwd_s, t.a2a_bwd_s, t.a2a_hidden_s) == (1.25, 1.25, 0.0)
    # Overlap: the forward's 1.25 s runs under the other micro-batch's 1.0 s backward (0.25 s left);
    # the backward's 1.25 s fits under the 2.0 s forward.
    o = moe_layer_times(**common, facts=MoEFacts(moe_load_imbalance=0.0, moe_a2a_overlap=True))
    assert (o.a2a_fwd_s, o.a2a_bwd_s) == pytest.approx((0.25, 0.0))
    assert o.a2a_hidden_s == pytest.approx(2.25)
    # Forced balance: no imbalance terms, the mean all-to-all.
    b = moe_layer_times(**common, facts=MoEFacts(moe_load_imbalance=1.0, moe_a2a_overlap=False))
    assert (b.imbalance_gemm_fwd_s, b.a2a_fwd_s) == (0.0, 1.0)
    # The permutation is memory-bound bytes at the profile's copy bandwidth: 2 B per element.
    elems = permute_elems(QWEN3, 4096, 4, 8, 1)
    op_bytes = 2 * 1024 * 8 * 4096
    assert t.permute_fwd_s == pytest.approx(2 * elems / tables.memory_bytes_per_s(op_bytes))


@pytest.mark.parametrize("notes, facts", [
    ("Router: --moe-router-force-load-balancing (forced balanced routing, benchmark-only).",
     {"moe_load_imbalance": 1.0}),
    ("Router force balance assumed (script).", {"moe_load_imbalance": 1.0}),
    ("Router: normal aux-loss routing, dropless (no force-balance flag).", {}),
    ("A2A_OVERLAP=1 -> --overlap-moe-expert-parallel-comm --delay-wgrad-compute", {"moe_a2a_overlap": True}),
    ("No 1F1B A2A overlap.", {}),
    ("Dispatcher DeepEP (flex).", {"moe_dispatch": "flex"}),
    ("Dispatcher all-to-all (not DeepEP).", {}),
])
def test_run_facts_from_notes(notes, facts):
    assert moe_run_facts(notes) == facts


def _estimate(model, plan, **framework):
    constants = load_constants()
    fw = constants.framework("megatron-core").with_overrides(**framework)
    est = Estimator(model, TrainingSpec(global_batch_size=64, seq_len=4096),
                    ClusterSpec(name="h100-80gb", num_gpus=64), builtin_profile("h100-80gb"),
                    framework=fw, constants=constants)
    return est.estimate(plan)


def test_imbalance_slows_only_expert_parallel_plans():
    ep8 = ParallelPlan(dp=16, tp=4, pp=1, sequence_parallel=True, zero_stage=1, micro_batch_size=1,
                       num_microbatches=4, ep=8, etp=1)
    dropless, forced = _estimate(QWEN3, ep8), _estimate(QWEN3, ep8, moe_load_imbalance=1.0)
    assert dropless.time_breakdown_s["compute"] > forced.time_breakdown_s["compute"]
    assert dropless.time_breakdown_s["ep_comm"] == pytest.approx(1.25 * forced.time_breakdown_s["ep_comm"])
    ep1 = replace(ep8, ep=1, etp=0)
    assert _estimate(QWEN3, ep1).step_time_s == _estimate(QWEN3, ep1, moe_load_imbalance=1.0).step_time_s


def test_published_twins_rank_as_measured():
    """The Megatron MoE model zoo ran each long-context plan twice, forced-balance and dropless routing:
    the model must rank each pair as measured (balanced faster), from the routing fact alone."""
    from cost_model.validation import predict_runs
    runs = {r.id: r for r in load_published_runs() if r.id.startswith("MOEZOO-q3235b-1")}
    pred = {r.run.id: r.predicted_tokens_per_s_per_gpu for r in predict_runs(list(runs.values()))}
    for forced, dropless in (("11", "12"), ("13", "14"), ("15", "16"), ("17", "18")):
        f, d = f"MOEZOO-q3235b-{forced}", f"MOEZOO-q3235b-{dropless}"
        assert runs[f].measured_tokens_per_s_per_gpu > runs[d].measured_tokens_per_s_per_gpu
        assert pred[f] > pred[d], (f, pred[f], d, pred[d])


def test_expert_inputs_and_router_scores_are_stored():
    from cost_model.memory import activation_bytes_per_layer
    # 4096 tokens, tp 4 with SP, experts unsplit (etp 1): each rank's grouped GEMMs keep 4096*8/4
    # routed copies of h = 4096 in bf16; the router keeps fp32 scores over 128 experts for its
    # sequence share of 1024 tokens.
    parts = activation_bytes_per_layer(QWEN3, 1, 4096, 4, True, moe=True, etp=1)
    assert parts["expert_inputs"] == 2 * 4096 * 8 * 4096 / 4 == 67_108_864
    assert parts["router_scores"] == 4 * 1024 * 128
    # etp = tp (0): every TP rank holds all the micro-batch's routed copies.
    assert activation_bytes_per_layer(QWEN3, 1, 4096, 4, True, moe=True)["expert_inputs"] == 2 * 4096 * 8 * 4096
    assert "expert_inputs" not in activation_bytes_per_layer(QWEN3, 1, 4096, 4, True, moe=False)


def test_megatron_2024_keeps_the_weighted_expert_outputs():
    """Megatron-Core core_v0.6.0-v0.13 weigh the experts' outputs by the router's probabilities in the
    unpermutation (`unpermuted_local_hidden * scores`), which keeps the outputs: one more tensor of the
    experts' input rows x h (FlagPerf's rows ran that code: cost_model/source_facts.py)."""
    from cost_model.memory import activation_bytes_per_layer, selective_kept_bytes
    from cost_model.published_rows import load_published_runs
    parts = activation_bytes_per_layer(QWEN3, 1, 4096, 4, True, moe=True, etp=1, weighted_outputs_saved=True)
    assert parts["expert_outputs"] == 2 * 4096 * 8 * 4096 / 4 == 67_108_864
    assert "expert_outputs" not in activation_bytes_per_layer(QWEN3, 1, 4096, 4, True, moe=True, etp=1)
    # --recompute-modules moe frees the whole MoE block, the kept outputs with it.
    kept = selective_kept_bytes(parts, "attention", QWEN3, 1, 4096, 4, True, moe=True, modules=("moe",))
    without = dict(parts, expert_outputs=0.0)
    assert kept == selective_kept_bytes(without, "attention", QWEN3, 1, 4096, 4, True, moe=True, modules=("moe",))
    flagperf = [r for r in load_published_runs() if r.source == "flagperf"]
    assert flagperf and all(r.framework_facts().moe_weighted_outputs_saved for r in flagperf)
    from autoplan.specs import get_framework
    assert not get_framework("megatron-core").moe_weighted_outputs_saved  # core_v0.16.1: inside the activation


def test_expert_states_per_gpu_worked_example():
    from autoplan.inputs.catalog import catalog_model
    from cost_model.moe_memory import expert_state_bytes
    mixtral = catalog_model("mixtral-8x7b")
    constants = load_constants()
    est = Estimator(mixtral, TrainingSpec(global_batch_size=64, seq_len=4096), ClusterSpec(name="h100-80gb", num_gpus=16),
                    builtin_profile("h100-80gb"), framework=constants.framework("megatron-core"), constants=constants)
    # 32 layers x 8 experts x 3 x 4096 x 14336 over ep 8 x etp 2: 2,818,572,288 per GPU. The 16 ranks
    # regroup as etp 2 x ep 8 x edp 1, so ZeRO 1 shards nothing: 2 + 4 + 12 B per parameter.
    plan = ParallelPlan(dp=8, tp=2, sequence_parallel=True, zero_stage=1, micro_batch_size=1, num_microbatches=8, ep=8)
    per_gpu = 32 * 8 * 3 * 4096 * 14336 // 16
    assert expert_state_bytes(est, plan) == {"params": 2 * per_gpu, "grads": 4 * per_gpu, "optimizer": 12 * per_gpu}
    # etp 1: the experts unsplit (twice the parameters), edp 2 shards the optimizer states in half.
    folded = expert_state_bytes(est, plan.replace(etp=1))
    assert folded == {"params": 4 * per_gpu, "grads": 8 * per_gpu, "optimizer": 12 * per_gpu}
    dense = Estimator(catalog_model("llama-2-7b"), est.training, est.cluster, est.profile)
    assert expert_state_bytes(dense, ParallelPlan(dp=16, num_microbatches=4)) == {}


# Mixtral-8x7B's MoE shape: h 4096, 8 experts, top-2.
MIXTRAL = ModelSpec(name="mixtral", num_layers=32, hidden_size=4096, num_heads=32, num_kv_heads=8,
                    ffn_hidden_size=14336, vocab_size=32000, num_experts=8, num_experts_per_token=2,
                    moe_ffn_hidden_size=14336)


def test_megatron_v06_allgather_moves_the_gathered_tokens_worked_example():
    """Megatron-Core core_v0.6.0's allgather dispatcher permutes with torch.gather / scatter / scatter_add
    over the tokens gathered over the tensor x expert group (token_dispatcher.py lines 135-226), as
    FlagPerf's Mixtral on 4x8 H100 ran it: micro-batch 3 x 4096 tokens, tp 8 = etp, ep 1."""
    from cost_model.moe_dispatch_v06 import gather_scatter_rows
    from cost_model.moe_time import permute_times_s
    # Each rank gathers its group's 8 x 1536 = 12,288 tokens; with every expert local it moves all
    # 2 x 12,288 = 24,576 routed copies (L). Forward: gathers 2 L + 2 L, zeros + copy + scatter 5 L,
    # the probabilities' product 2 L, zeros(N) + copy + scatter_add 3 N + 3 L: 14 L + 3 N = 380,928 rows.
    # Backward: gather 2 L, the product's 2 L + 3 L + sum L, gather 2 L, zeros + scatter_add 4 L and
    # N + 3 L: 17 L + N = 430,080 rows.
    assert gather_scatter_rows(MIXTRAL, 3 * 4096, tp=8, ep=1, etp=8, rows_factor=1.0) == (380_928, 430_080)
    # FlagPerf's 8-layer cut on 2x8 A100: 2048 tokens, tp 2 = etp, ep 4: N = 1024 x 8 = 8192 gathered,
    # the busiest rank's copies L = 8192 x 2 / 4 x 1.25 = 5120: 14 L + 3 N = 96,256 and 17 L + N = 95,232.
    assert gather_scatter_rows(MIXTRAL, 2048, tp=2, ep=4, etp=2, rows_factor=1.25) == (96_256, 95_232)
    # tp 1, ep 1 (FlagPerf's Qwen1.5-MoE, lines 137-145 and 247-256): the same ops over the rank's own
    # 8192 tokens, N = 8192, L = 16,384: 14 L + 3 N = 253,952 and 17 L + N = 286,720.
    assert gather_scatter_rows(MIXTRAL, 8192, tp=1, ep=1, etp=1, rows_factor=1.0) == (253_952, 286_720)
    # Priced at the profile's copy rate for one op's output (L rows x h x 2 B), times the framework's
    # memory-bound bytes factor, as every memory-bound op of the layer.
    tables = ProfileTables(builtin_profile("h100-80gb"))
    facts = MoEFacts(moe_gather_scatter_permute=True)
    fwd_s, bwd_s = permute_times_s(MIXTRAL, tables, 3 * 4096, 8, 1, 8, 2.0, facts, 1.0)
    rate = tables.memory_bytes_per_s(2 * 4096 * 24_576)
    assert (fwd_s, bwd_s) == pytest.approx((2 * 4096 * 380_928 * 2.0 / rate, 2 * 4096 * 430_080 * 2.0 / rate))
    # Off (Megatron-Core's permute of the rank's own routed copies): t = 1536 tokens, (3k + 1) t h each way.
    plain = permute_times_s(MIXTRAL, tables, 3 * 4096, 8, 1, 8, 2.0, MoEFacts(), 1.0)
    assert plain[0] == plain[1] == pytest.approx(2 * 7 * 1536 * 4096 * 2.0 / tables.memory_bytes_per_s(2 * 1536 * 2 * 4096))


def test_megatron_v06_alltoall_trades_the_tp_shares_worked_example():
    """core_v0.6.0's alltoall dispatcher under tp > 1 (token_dispatcher.py lines 404-485, mappings.py),
    as Megatron-LM#756's Mixtral retest ran it: 2048 tokens, tp 2 = etp, ep 8 (one expert a rank)."""
    from cost_model.moe_dispatch_v06 import sp2hp_alltoall_elems
    from cost_model.moe_time import tp_exchange_time_s
    # e = t x h = 1024 x 4096 = 4,194,304; k 2, f 1.25: the rank receives T = etp k f = 5 e once gathered
    # to full h. Forward: sp2hp cat 2, permute 2k = 4, the last-dim gather's copy-out + cat 4T = 20, the
    # last-dim reduce-scatter's transposes 2T + 2T/etp = 15, unpermute 6k + 1 = 13, hp2sp cat 2: 56 e.
    # Backward: the two split-backward cats 4, unpermute 8k = 16, the gather and reduce-scatter swapped
    # 20 + 15, permute's zeros + index_add_ 1 + 3k = 7: 62 e.
    e = 1024 * 4096
    assert sp2hp_alltoall_elems(MIXTRAL, 2048, tp=2, ep=8, etp=2, rows_factor=1.25) == (56 * e, 62 * e)
    # tp 1 skips the tensor-parallel exchanges (world size 1); four local experts (ep 2) permute the
    # received copies and back: 8k + 1 + 7kf = 17 + 17.5 forward, 11k + 1 + 6kf = 23 + 15 backward.
    e1 = 4096 * 4096
    assert sp2hp_alltoall_elems(MIXTRAL, 4096, tp=1, ep=2, etp=1, rows_factor=1.25) == (34.5 * e1, 38 * e1)
    # Two tensor-parallel all-to-alls per pass of the rank's t x h share (2 B each).
    tables = ProfileTables(builtin_profile("h100-80gb"))
    on = MoEFacts(moe_sp2hp_alltoall=True)
    assert tp_exchange_time_s(MIXTRAL, tables, 2048, 2, 8, on) == pytest.approx(
        2 * tables.collective_time_s("all_to_all", 2 * 1024 * 4096, 2, 2))
    assert tp_exchange_time_s(MIXTRAL, tables, 2048, 2, 8, MoEFacts()) == 0.0
    assert tp_exchange_time_s(MIXTRAL, tables, 2048, 1, 8, on) == 0.0


def test_only_the_2024_rows_run_the_v06_dispatchers():
    """FlagPerf's Megatron rows (core_v0.6.0, and Pai's copy of its dispatcher) run its allgather
    dispatcher, Megatron-LM#756 its alltoall one; today's Megatron-Core and every other row neither."""
    from autoplan.specs import get_framework
    runs = load_published_runs()
    flagperf = [r for r in runs if r.source == "flagperf"]
    assert flagperf and all(r.framework_facts().moe_gather_scatter_permute for r in flagperf)
    assert not get_framework("megatron-core").moe_gather_scatter_permute
    others = [r for r in runs if r.model.is_moe and r.source != "flagperf"]
    assert others and not any(r.framework_facts().moe_gather_scatter_permute for r in others)
    # The alltoall dispatcher of core_v0.6.0: Megatron-LM#756's retest only (main ba773259).
    v06_alltoall = {r.id for r in runs if r.model.is_moe and r.framework_facts().moe_sp2hp_alltoall}
    assert v06_alltoall == {"MLMISSUE-mixtral8x7b-01"}
    assert not get_framework("megatron-core").moe_sp2hp_alltoall
