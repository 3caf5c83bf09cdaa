"""Issue 25: Megatron-Core's MoE parallel folding (expert TP of its own, EP spanning TP ranks) in the
plan, the framework rules, the Megatron export and the cost model; and the published MoE runs, read
with their architecture and kept out of every fit.

The expectations are worked by hand from the sources (Megatron-Core core_v0.16.1, the models'
published sizes), not read back from the code."""
import pytest

from autoplan.exporters import export_plan
from autoplan.specs import ClusterSpec, InfeasiblePlan, ModelSpec, ParallelPlan, PlanDocument, TrainingSpec
from autoplan.specs.frameworks import get_framework
from cost_model.constants import load_constants
from cost_model.flops import layer_gemms
from cost_model.published_rows import load_published_runs
from cost_model.splits import fit_rows, validation_only
from tests.framework_acceptance import megatron_accepts

# Qwen3-235B-A22B (config.json: 94 layers, h 4096, 64 heads x 128, 4 KV heads, 128 experts top-8 of
# 1536, vocab 151936, untied, q/k RMSNorm).
QWEN3_235B = ModelSpec(name="qwen3-235b-a22b", num_layers=94, hidden_size=4096, num_heads=64, num_kv_heads=4,
                       ffn_hidden_size=12288, vocab_size=151936, head_dim=128, qk_norm="head", num_experts=128,
                       num_experts_per_token=8, moe_ffn_hidden_size=1536)
TRAINING = TrainingSpec(global_batch_size=2048, seq_len=4096, dtype="bf16")
CLUSTER = ClusterSpec(name="h100-80gb", num_gpus=256)
# The Megatron-MoE-ModelZoo H100 baseline (best_practice/Qwen3/run_235b.sh): TP2 x PP8 x DP16, EP32, ETP1.
FOLDED = ParallelPlan(dp=16, tp=2, pp=8, vpp=4, ep=32, etp=1, sequence_parallel=True, zero_stage=1,
                      micro_batch_size=1, num_microbatches=128, recompute="selective")


def test_megatron_rule_ep_times_etp_divides_tp_cp_dp():
    FOLDED.check(QWEN3_235B, TRAINING, CLUSTER)            # 32 * 1 divides 2 * 1 * 16 = 32
    assert FOLDED.expert_tp == 1 and FOLDED.expert_dp == 1  # 32 ranks = etp 1 x ep 32 x edp 1
    # ETP 2 x EP 32 = 64 ranks do not fit in the stage's 32.
    with pytest.raises(InfeasiblePlan) as exc:
        FOLDED.replace(etp=2).check(QWEN3_235B, TRAINING, CLUSTER)
    assert exc.value.reason == "ep_divides" and "tp*cp*dp=2*1*16=32" in str(exc.value)
    # The default (etp = tp, as Megatron when --expert-tensor-parallel-size is absent) keeps the old
    # rule: ep must divide dp*cp = 16.
    with pytest.raises(InfeasiblePlan) as exc:
        FOLDED.replace(etp=0).check(QWEN3_235B, TRAINING, CLUSTER)
    assert exc.value.reason == "ep_divides" and "ep must divide dp*cp=16" in str(exc.value)
    FOLDED.replace(etp=0, ep=16).check(QWEN3_235B, TRAINING, CLUSTER)
    # EP over context-parallel ranks too: TP2 x CP4 x DP4 holds EP 16 at ETP 2 (2*16 = 32 = 2*4*4).
    ParallelPlan(dp=4, tp=2, pp=8, cp=4, ep=16, etp=2, sequence_parallel=True, zero_stage=1,
                 micro_batch_size=1, num_microbatches=512).check(QWEN3_235B, TRAINING, CLUSTER)
    dense = ModelSpec(name="dense", num_layers=4, hidden_size=64, num_heads=4, num_kv_heads=4,
                      ffn_hidden_size=128, vocab_size=100)
    with pytest.raises(InfeasiblePlan, match="mixture-of-experts") as exc:
        ParallelPlan(dp=4, tp=2, etp=1, micro_batch_size=1, num_microbatches=2).check(
            dense, TrainingSpec(global_batch_size=8, seq_len=128), ClusterSpec(name="h100-80gb", num_gpus=8))


def test_only_megatron_core_runs_its_own_expert_tp():
    get_framework("megatron-core").check(QWEN3_235B, TRAINING, FOLDED)
    flat = FOLDED.replace(pp=1, vpp=1, dp=128, sequence_parallel=False, num_microbatches=16)  # EP32 over TP2 x DP16
    with pytest.raises(InfeasiblePlan) as exc:
        get_framework("deepspeed").check(QWEN3_235B, TRAINING, flat)
    assert exc.value.reason == "framework_expert_tp"
    # torchtitan 0.3.0 keeps experts whole under EP (tests/test_torchtitan_moe.py): etp 1 is its only
    # expert TP with ep > 1, and etp = tp is refused there.
    get_framework("torchtitan").check(QWEN3_235B, TRAINING, flat)
    with pytest.raises(InfeasiblePlan) as exc:
        get_framework("torchtitan").check(QWEN3_235B, TRAINING, flat.replace(etp=0))
    assert exc.value.reason == "framework_expert_tp"


def test_ep_group_ranks_are_etp_apart_in_megatron_core():
    """The cost model prices the all-to-all over ep ranks etp apart (NVLink while ep*etp fits a node);
    megatron-core's own RankGenerator (expert order tp-cp-ep-dp-pp) says the same."""
    from megatron.core.parallel_state import RankGenerator

    ranks = RankGenerator(tp=1, ep=32, dp=1, pp=8, cp=1, order="tp-cp-ep-dp-pp").get_ranks("ep")
    assert ranks[0] == list(range(32))              # ETP 1: 32 neighbours, 4 nodes of 8
    ranks = RankGenerator(tp=2, ep=4, dp=4, pp=1, cp=1, order="tp-cp-ep-dp-pp").get_ranks("ep")
    assert ranks[0] == [0, 2, 4, 6]                 # ETP 2: EP ranks two apart


def test_expert_gemms_split_by_etp():
    """Qwen3-235B, 4096 tokens per micro-batch, TP2 (each rank brings 2048 tokens under SP).
    ETP1 x EP32: 4 local experts; the 32 EP ranks share 32 * 2048 tokens x 8 routed copies over 128
    experts = 4096 rows each, and each rank holds the whole expert (3072 = 2 x 1536 gate+up columns).
    ETP2 x EP16: 8 local experts; the 16 x 2 ranks holding one copy of the experts share 32 * 2048 tokens
    x 8 copies over 128 experts = 4096 rows per expert, and each rank computes half its columns (1536)."""
    folded = {g.name: g for g in layer_gemms(QWEN3_235B, 4096, tp=2, ep=32, moe=True, etp=1)}
    assert (folded["mlp_in"].m, folded["mlp_in"].n, folded["mlp_in"].k, folded["mlp_in"].count) == (4096, 3072, 4096, 4)
    assert (folded["mlp_out"].m, folded["mlp_out"].n, folded["mlp_out"].k) == (4096, 4096, 1536)
    plain = {g.name: g for g in layer_gemms(QWEN3_235B, 4096, tp=2, ep=16, moe=True, etp=2)}
    assert (plain["mlp_in"].m, plain["mlp_in"].n, plain["mlp_in"].count) == (4096, 1536, 8)
    # Either way a rank does its 2048 tokens' share: 2048 x 8 x 3 x 1536 x 4096 multiply-adds.
    for gemms in (folded, plain):
        assert gemms["mlp_in"].flops + gemms["mlp_out"].flops == 2 * 2048 * 8 * 3 * 1536 * 4096


def test_folded_plan_is_estimated_and_folding_moves_the_all_to_all():
    from cost_model.estimator import Estimator
    from cost_model.profiles import builtin_profile

    est = Estimator(QWEN3_235B, TRAINING, CLUSTER, builtin_profile("h100-80gb"),
                    framework=load_constants().framework("megatron-core"))
    folded = est.estimate(FOLDED)
    assert folded.step_time_s > 0 and folded.time_breakdown_s["ep_comm"] > 0
    # Experts per GPU: 128/32 whole experts, each 3 x 4096 x 1536 -> 94 layers / 8 stages (12 on the
    # largest rank) x 4 x 18.9M = 906M expert parameters, held whole (edp = 1: the optimizer state
    # shards over one replica).
    dense, expert = est.params.local(FOLDED, 12, first=False, last=False)
    assert expert == pytest.approx(12 * 4 * 3 * 4096 * 1536, rel=1e-9)
    # The same experts split by tp (ETP2 x EP16): half the experts' columns per GPU, twice the experts.
    unfolded = FOLDED.replace(etp=0, ep=16)
    assert est.params.local(unfolded, 12, False, False)[1] == pytest.approx(expert)
    # Routed bytes per rank: its 2048 SP tokens x 8 copies (ETP1) vs gathered over ETP2 (4096 x 8).
    lt_folded, lt_plain = est.stage_costs(FOLDED).layer, est.stage_costs(unfolded).layer
    assert lt_folded.ep_fwd_s != lt_plain.ep_fwd_s


def test_megatron_export_carries_etp_and_megatron_accepts_it():
    doc = PlanDocument(model=QWEN3_235B, training=TRAINING, cluster=CLUSTER, parallel=FOLDED, framework="megatron-core")
    text = export_plan(doc, "megatron").text
    assert "--expert-tensor-parallel-size 1" in text and "--expert-model-parallel-size 32" in text
    assert megatron_accepts(text, 256) == ""
    # Without etp the flag is absent (Megatron takes tp), and a plan breaking the rule is refused by
    # megatron-core's own check as the harness transcribes it.
    plain = PlanDocument(model=QWEN3_235B, training=TRAINING, cluster=CLUSTER,
                         parallel=FOLDED.replace(etp=0, ep=16), framework="megatron-core")
    assert "--expert-tensor-parallel-size" not in export_plan(plain, "megatron").text
    assert "expert_tensor_model_pipeline" in megatron_accepts(text.replace("--expert-tensor-parallel-size 1",
                                                                           "--expert-tensor-parallel-size 4"), 256)


def test_plan_file_carries_etp_and_old_plans_keep_their_id():
    doc = PlanDocument(model=QWEN3_235B, training=TRAINING, cluster=CLUSTER, parallel=FOLDED, framework="megatron-core")
    again = PlanDocument.from_dict(doc.to_dict())
    assert again.parallel.etp == 1 and again.parallel == FOLDED
    assert "etp" not in FOLDED.replace(etp=0).to_dict()     # plans without etp: the same dict, the same id
    assert ParallelPlan.from_dict({**FOLDED.replace(etp=0).to_dict()}).etp == 0


def test_published_moe_runs_read_with_their_architecture_and_plan():
    runs = {r.id: r for r in load_published_runs()}
    q = runs["MOEZOO-q3235b-01"]
    # Qwen3-235B-A22B: 235B parameters, 22B active (its name; the model card: 235B total, 22B activated).
    assert q.model.num_params == pytest.approx(235e9, rel=0.01)
    assert q.model.num_active_params == pytest.approx(22e9, rel=0.03)
    assert (q.plan.tp, q.plan.dp, q.plan.pp, q.plan.ep, q.plan.expert_tp) == (2, 16, 8, 32, 1)
    m = runs["MCOREMOERM-mixtral8x7b-01"]
    # Mixtral 8x7B: 46.7B parameters, 12.9B active (Mistral AI's release notes).
    assert m.model.num_params == pytest.approx(46.7e9, rel=0.01)
    assert m.model.num_active_params == pytest.approx(12.9e9, rel=0.01)
    assert (m.plan.ep, m.plan.expert_tp, m.plan.sequence_parallel) == (8, 1, False)  # SP is off at TP 1
    assert runs["FLAGPERF-mixtral8x7b-01"].plan.expert_tp == 8                     # ETP = TP in core 0.6
    assert runs["FLAGPERF-qwenmoe-01"].model.qkv_bias and not runs["FLAGPERF-qwenmoe-01"].model.linear_bias


def test_moe_rows_are_validation_only_and_folding_rows_are_predicted():
    from cost_model.validation import moe_results

    runs = load_published_runs()
    moe = [r for r in runs if validation_only(r)]
    assert len(moe) == 24 and not any(validation_only(r) for r in fit_rows(runs))
    # No constant saw them: the full fit's rows per source name none of their sources.
    assert not {r.source for r in moe} & set(load_constants().provenance["rows_per_source"])
    results = {r.run.id: r for r in moe_results(runs)}
    for folded in ("MOEZOO-q3235b-01", "MOEZOO-q3235b-02", "MOEZOO-q3235b-04"):  # EP beyond dp*cp
        assert results[folded].skipped == "" and results[folded].predicted_tokens_per_s_per_gpu > 0
    assert all(r.skipped == "" and r.group == "moe" and r.baseline_tokens_per_s_per_gpu for r in results.values())
