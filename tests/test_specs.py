"""The shared vocabulary: parameter counts, plan rules, JSON round trips."""
import dataclasses
import json

import pytest

from autoplan.specs import (
    AutoplanError,
    ClusterSpec, CostEstimate, InfeasiblePlan, Measurement, ModelSpec, ParallelPlan, PlanDocument,
    SchemaError, TrainingSpec, read_measurements,
)

LLAMA2_70B = ModelSpec(name="llama-2-70b", num_layers=80, hidden_size=8192, num_heads=64, num_kv_heads=8,
                       ffn_hidden_size=28672, vocab_size=32000)
GPT3 = ModelSpec(name="gpt3-175b", num_layers=96, hidden_size=12288, num_heads=96, num_kv_heads=96,
                 ffn_hidden_size=49152, vocab_size=50257, mlp="gelu", norm="layernorm", position="learned",
                 tied_embeddings=True, linear_bias=True, max_seq_len=2048)


def test_param_counts_match_published_sizes():
    assert LLAMA2_70B.num_params == pytest.approx(68.98e9, rel=0.002)  # Llama 2 paper: ~69.0B
    assert GPT3.num_params == pytest.approx(174.6e9, rel=0.003)  # Narayanan 2021 Table 2


def test_param_count_by_hand_for_a_tiny_model():
    m = ModelSpec(name="t", num_layers=2, hidden_size=8, num_heads=2, num_kv_heads=1, ffn_hidden_size=16,
                  vocab_size=10)
    # q 8x8, k/v 8x4 each, o 8x8; swiglu 3*8*16; two rmsnorms of 8 per layer
    per_layer = 64 + 32 + 32 + 64 + 384 + 16
    assert m.num_params == 10 * 8 + 2 * per_layer + 8 + 10 * 8


def test_moe_active_params_count_top_k_experts():
    m = ModelSpec(name="moe", num_layers=2, hidden_size=8, num_heads=2, num_kv_heads=2, ffn_hidden_size=16,
                  vocab_size=10, num_experts=4, num_experts_per_token=2)
    assert m.num_params - m.num_active_params == 2 * 2 * 3 * 8 * 16


def test_plan_rules_name_the_values():
    training = TrainingSpec(global_batch_size=64, seq_len=4096)
    cluster = ClusterSpec(name="h100-80gb", num_gpus=64)
    good = ParallelPlan(dp=2, tp=8, pp=4, micro_batch_size=1, num_microbatches=32, sequence_parallel=True)
    good.check(LLAMA2_70B, training, cluster)
    with pytest.raises(InfeasiblePlan, match=r"tp=3.*num_heads=64") as exc:
        ParallelPlan(dp=2, tp=3, pp=4, micro_batch_size=1, num_microbatches=32).check(
            LLAMA2_70B, training, ClusterSpec(name="x", num_gpus=24, gpus_per_node=3))
    assert exc.value.reason == "tp_divides_heads"
    with pytest.raises(InfeasiblePlan, match="= 32, num_gpus=64"):
        good.replace(dp=1).check(LLAMA2_70B, training, cluster)
    with pytest.raises(InfeasiblePlan, match="global_batch_size"):
        good.replace(num_microbatches=16).check(LLAMA2_70B, training, cluster)
    with pytest.raises(InfeasiblePlan, match="recompute_num_layers"):
        good.replace(recompute="full", recompute_num_layers=21).check(LLAMA2_70B, training, cluster)
    good.replace(recompute="full", recompute_num_layers=20).check(LLAMA2_70B, training, cluster)


@pytest.mark.parametrize("num_layers, pp, expected", [
    (126, 8, [15, 16, 16, 16, 16, 16, 16, 15]),      # Llama 3.1 405B on pp=8 (torchtitan)
    (70, 12, [5] + [6] * 10 + [5]),                   # BLOOM-176B on pp=12
    (9, 4, [2, 2, 3, 2]),                             # fewer extras than middle ranks: the later ones
    (11, 4, [2, 3, 3, 3]),                            # extras beyond the middle go to the last rank
    (3, 2, [1, 2]),
    (80, 4, [20, 20, 20, 20]),
])
def test_uneven_stages_load_the_middle_then_the_last(num_layers, pp, expected):
    plan = ParallelPlan(pp=pp)
    assert plan.stage_num_layers(num_layers) == expected
    assert plan.layers_per_stage(num_layers) == max(expected)


def test_uneven_pipeline_rules():
    training = TrainingSpec(global_batch_size=64, seq_len=4096)
    model = dataclasses.replace(LLAMA2_70B, num_layers=70)
    cluster = ClusterSpec(name="h100-80gb", num_gpus=96)
    plan = ParallelPlan(dp=1, tp=8, pp=12, micro_batch_size=1, num_microbatches=64)
    plan.check(model, training, cluster)
    # recompute_num_layers is bounded by the largest stage (6), not the smallest (5)
    plan.replace(recompute="full", recompute_num_layers=6).check(model, training, cluster)
    with pytest.raises(InfeasiblePlan, match=r"layers per stage \(6\)"):
        plan.replace(recompute="full", recompute_num_layers=7).check(model, training, cluster)
    # Interleaving with uneven virtual stages: 70 layers over pp=12, vpp=2 (24 chunks of 2 or 3 layers)
    # is a plan; every chunk needs a layer, so vpp=6 (72 chunks) is not.
    interleaved = plan.replace(vpp=2, num_microbatches=60, dp=1, micro_batch_size=1)
    interleaved.check(model, dataclasses.replace(training, global_batch_size=60), cluster)
    chunks = interleaved.chunk_num_layers(70)
    assert [sum(c) for c in chunks] == interleaved.stage_num_layers(70) and sum(map(sum, chunks)) == 70
    assert chunks[0] == [2, 3] and chunks[-1] == [3, 2]   # smaller chunk first, on the last rank last
    with pytest.raises(InfeasiblePlan, match=r"pp=12 \* vpp=6 = 72, num_layers=70") as exc:
        interleaved.replace(vpp=6).check(model, dataclasses.replace(training, global_batch_size=60), cluster)
    assert exc.value.reason == "pp_divides_layers"
    tiny = dataclasses.replace(LLAMA2_70B, num_layers=2)
    with pytest.raises(InfeasiblePlan, match="pp=4 > num_layers=2"):
        ParallelPlan(dp=2, tp=8, pp=4, micro_batch_size=1, num_microbatches=32).check(
            tiny, training, ClusterSpec(name="h100-80gb", num_gpus=64))


def test_interleaved_split_of_126_layers_is_megatrons_embedding_and_loss_split():
    """126 layers at pp=8, vpp=8 (how NVIDIA interleaves Llama 3.1 405B): ranks of 15 and 16 layers,
    chunks of 2 with one layer fewer where the embedding and the loss sit."""
    plan = ParallelPlan(pp=8, vpp=8)
    assert plan.stage_num_layers(126) == [15] + [16] * 6 + [15]
    assert plan.chunk_num_layers(126)[0] == [1] + [2] * 7 and plan.chunk_num_layers(126)[7] == [2] * 7 + [1]
    assert plan.virtual_stage_num_layers(126) == [1] + [2] * 62 + [1]
    # Even splits are unchanged: pp*vpp divides the layers.
    assert ParallelPlan(pp=4, vpp=5).virtual_stage_num_layers(80) == [4] * 20


def _estimate():
    return CostEstimate(time_breakdown_s={"compute": 1.0, "dp_comm": 0.25}, memory_breakdown_bytes={"params": 10, "activations": 5},
                        memory_capacity_bytes=100, tokens_per_step=1000, num_gpus=2, model_flops_per_step=1e12,
                        hardware_flops_per_step=1.2e12, peak_flops_per_s=1e12)


def test_estimate_totals_are_sums_of_parts():
    e = _estimate()
    assert e.step_time_s == 1.25 and e.peak_memory_bytes == 15 and e.fits
    assert e.mfu == pytest.approx(1e12 / (1.25 * 2 * 1e12))
    with pytest.raises(ValueError):
        CostEstimate(time_breakdown_s={"compute": -1.0}, memory_breakdown_bytes={}, memory_capacity_bytes=1,
                     tokens_per_step=1, num_gpus=1, model_flops_per_step=1, hardware_flops_per_step=1, peak_flops_per_s=1)


def test_plan_document_round_trips_and_keeps_unknown_keys(tmp_path):
    doc = PlanDocument(model=LLAMA2_70B, training=TrainingSpec(global_batch_size=64, seq_len=4096),
                       cluster=ClusterSpec(name="h100-80gb", num_gpus=64, profile="builtin:h100-80gb"),
                       parallel=ParallelPlan(dp=2, tp=8, pp=4, micro_batch_size=1, num_microbatches=32),
                       prediction=_estimate().to_prediction(), extra={"note": "kept"})
    path = tmp_path / "plan.json"
    doc.save(path)
    again = PlanDocument.load(path)
    assert again.to_dict() == doc.to_dict()
    assert again.plan_id == doc.plan_id and len(doc.plan_id) == 12
    assert json.loads(path.read_text())["schema"] == "autoplan.plan/v2"
    assert json.loads(path.read_text())["framework"] == "autoplan" and not again.assumed


def test_plan_file_v1_reads_as_made_for_autoplan_and_says_so(tmp_path):
    doc = PlanDocument(model=LLAMA2_70B, training=TrainingSpec(global_batch_size=64, seq_len=4096),
                       cluster=ClusterSpec(name="h100-80gb", num_gpus=64),
                       parallel=ParallelPlan(dp=2, tp=8, pp=4, micro_batch_size=1, num_microbatches=32),
                       framework="megatron-core")
    data = doc.to_dict()
    data["schema"] = "autoplan.plan/v1"
    del data["framework"]
    again = PlanDocument.from_dict(data)
    assert again.framework == "autoplan" and again.plan_id == doc.plan_id
    assert len(again.assumed) == 1 and "autoplan.plan/v1" in again.assumed[0] and "megatron-core" in again.assumed[0]
    data = doc.to_dict()
    assert PlanDocument.from_dict(data).framework == "megatron-core"
    data["framework"] = "jax"
    with pytest.raises(AutoplanError, match="unknown framework 'jax'; known: autoplan, autoplan-xla, megatron-core"):
        PlanDocument.from_dict(data)
    del data["framework"]
    with pytest.raises(AutoplanError, match="missing the field 'framework'"):
        PlanDocument.from_dict(data)


@pytest.mark.parametrize("text,match", [
    ('{"schema": "autoplan.plan/v0"}', "schema"),
    ('[1, 2]', "JSON object"),
    ('{"schema": "autoplan.plan/v1", "model": {}}', "model"),
    ('not json', "not valid JSON"),
])
def test_a_file_that_is_not_a_plan_is_one_clear_error(tmp_path, text, match):
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(AutoplanError, match=match):
        PlanDocument.load(path)


def test_measurements_skip_and_count_malformed_lines(tmp_path):
    m = Measurement(plan_id="abc", plan={}, prediction={}, backend="torch", status="ok", step_times_s=[1.0, 3.0, 2.0],
                    losses=[5.0], peak_memory_bytes=7, environment={"torch": "2.9.0"}, tokens_per_step=100)
    path = tmp_path / "runs.jsonl"
    path.write_text(m.to_json_line() + "{broken\n" + '{"schema": "autoplan.measurement/v1"}\n' + m.to_json_line())
    records, problems = read_measurements(path)
    assert len(records) == 2 and len(problems) == 2
    assert records[0].median_step_time_s == 2.0 and records[0].tokens_per_s == 50.0


def test_a_typo_in_the_parallel_block_is_refused_not_dropped():
    with pytest.raises(SchemaError, match=r"unknown field\(s\) 'tensor_parallel'.*dp, tp, pp"):
        ParallelPlan.from_dict({"dp": 2, "tensor_parallel": 8, "pp": 1, "micro_batch_size": 1, "num_microbatches": 1})


def test_divisors_are_exact_and_fast_for_huge_counts():
    from autoplan.planning.space import divisors

    for n in (1, 12, 16, 126, 97, 3600):
        assert divisors(n) == [d for d in range(1, n + 1) if n % d == 0]
    assert divisors(10**12)[-2:] == [5 * 10**11, 10**12]


def test_a_bad_recent_architecture_field_is_a_schema_error_not_a_name_error():
    """The recent families' rules (MLA here) raise the project's error: a merge once left SchemaError
    unimported in model.py, so this path raised NameError (a traceback) instead."""
    from autoplan.specs import SchemaError

    with pytest.raises(SchemaError, match="multi-head latent attention needs 0 < qk_rope_head_dim"):
        ModelSpec("x", 2, 64, 4, 2, 128, 256, kv_lora_rank=8, qk_rope_head_dim=0).check()
