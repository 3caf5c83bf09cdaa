"""Issue 25: Megatron-Core's --recompute-modules and --moe-expert-capacity-factor as plan knobs.

Expected values are worked by hand from the sources (transformer_config.py and moe_utils.py of
Megatron-Core core_v0.16.1, the tensors of activation_bytes_per_layer), not read back from the code."""
import pytest

from autoplan.exporters import export_plan
from autoplan.specs import (
    ClusterSpec, InfeasiblePlan, ModelSpec, ParallelPlan, PlanDocument, SchemaError, TrainingSpec,
)
from autoplan.specs.frameworks import get_framework
from cost_model import Estimator
from cost_model.constants import load_constants
from cost_model.memory import activation_bytes_per_layer, selective_kept_bytes
from cost_model.moe_time import DEFAULT_EXPERT_LOAD_IMBALANCE, expert_load_imbalance
from cost_model.profiles import builtin_profile
from cost_model.published_rows import load_published_runs

# A small MoE: h 1024, 8 heads, 16 experts of 512 (gated), top-2, every layer MoE.
MOE = ModelSpec(name="moe-knobs", num_layers=8, hidden_size=1024, num_heads=8, num_kv_heads=8,
                ffn_hidden_size=512, vocab_size=32000, num_experts=16, num_experts_per_token=2,
                moe_ffn_hidden_size=512)
TRAINING = TrainingSpec(global_batch_size=64, seq_len=2048, dtype="bf16")
CLUSTER = ClusterSpec(name="h100-80gb", num_gpus=16)
PLAN = ParallelPlan(dp=8, tp=2, ep=8, sequence_parallel=True, zero_stage=1, micro_batch_size=1,
                    num_microbatches=8, recompute="selective")


def estimator():
    return Estimator(MOE, TRAINING, CLUSTER, builtin_profile("h100-80gb"),
                     framework=load_constants().framework("megatron-core"))


def test_freed_bytes_per_module_worked_by_hand():
    # b=1, s=2048, h=1024, tp=2 with SP: each norm output (the QKV and MLP inputs) is 2 B x 2048 x 1024 / 2.
    parts = activation_bytes_per_layer(MOE, 1, 2048, 2, True, moe=True)
    stored = sum(parts.values())
    keep = lambda *mods: selective_kept_bytes(parts, "attention", MOE, 1, 2048, 2, True, moe=True, modules=mods)
    assert stored - keep("layernorm") == 2 * (2 * 2048 * 1024 / 2)
    # moe_act drops the gated product: 1 of the 3 stored widths of 2 routed copies of 512, over tp.
    assert stored - keep("moe_act") == 2 * 2048 * 512 * 2 / 2
    # moe drops the whole block but its input: 3 x 512 x 2 widths over tp, the routed copies of the
    # tokens (2 x h x etp/tp = 2h), the fp32 router scores over 16 experts (SP share).
    assert stored - keep("moe") == 2 * 2048 * (3 * 512 * 2 / 2 + 2 * 1024) + 4 * 2048 * 16 / 2
    # Flash attention stores no scores: core_attn (Megatron's default module) frees nothing.
    assert keep("core_attn") == stored


def test_recompute_time_is_the_named_modules_forward():
    est = estimator()
    lt = est.stage_costs(PLAN).layer
    per_stage = 8
    base = est.estimate(PLAN.replace(recompute="none")).time_breakdown_s
    # Megatron's default module list is ["core_attn"] (transformer_config.py lines 1193-1194): the
    # same cost as the plan's plain "selective".
    assert est.estimate(PLAN.replace(recompute_modules=("core_attn",))).time_breakdown_s == \
        est.estimate(PLAN).time_breakdown_s
    # The two norms read and write h per token each, over tp under SP (2 B), at the profile's rate.
    tokens, h = 2048, 1024
    norm_bytes = 2 * (2 * 2 * h / 2) * tokens * est.rates.memory_scale
    norm_s = norm_bytes / est.tables.memory_bytes_per_s(int(2 * tokens * h / 2))
    assert lt.norm_fwd_s == pytest.approx(norm_s, rel=1e-12)
    m = PLAN.num_microbatches
    ln = est.estimate(PLAN.replace(recompute_modules=("layernorm",))).time_breakdown_s
    assert ln["recompute"] == pytest.approx(m * per_stage * norm_s, rel=1e-9)
    assert ln["compute"] == base["compute"]
    # "moe" reruns the whole MoE block, its activation included: moe_act adds nothing on top of it.
    both = est.estimate(PLAN.replace(recompute_modules=("moe", "moe_act"))).time_breakdown_s
    moe = est.estimate(PLAN.replace(recompute_modules=("moe",))).time_breakdown_s
    assert both["recompute"] == moe["recompute"] > ln["recompute"]


def test_capacity_factor_caps_the_busiest_rank():
    assert expert_load_imbalance(0.0, 8) == DEFAULT_EXPERT_LOAD_IMBALANCE == 1.25
    assert expert_load_imbalance(0.0, 8, 1.1) == 1.1          # min(1.25, 1.1): tokens above 1.1x dropped
    assert expert_load_imbalance(0.0, 8, 2.0) == 1.25         # a capacity above the load drops nothing
    assert expert_load_imbalance(0.0, 1, 0.5) == 0.5          # ep 1: every expert capped at half the mean
    est = estimator()
    dropless = est.estimate(PLAN.replace(recompute="none")).time_breakdown_s
    capped = est.estimate(PLAN.replace(recompute="none", moe_capacity_factor=1.0)).time_breakdown_s
    # The all-to-all the busiest rank receives scales with its load: 1.0 / 1.25 of the dropless one.
    assert capped["ep_comm"] == pytest.approx(dropless["ep_comm"] / 1.25, rel=1e-12)
    assert capped["compute"] < dropless["compute"]


def test_rules_and_refusals():
    for bad, reason in ((PLAN.replace(recompute="none", recompute_modules=("moe",)), "recompute_modules"),
                        (PLAN.replace(recompute_modules=("mla_up_proj",)), "recompute_modules"),
                        (PLAN.replace(moe_capacity_factor=-1.0), "moe_capacity_factor")):
        with pytest.raises(InfeasiblePlan) as exc:
            bad.check(MOE, TRAINING, CLUSTER)
        assert exc.value.reason == reason
    for name, plan in (("recompute_modules", PLAN.replace(recompute_modules=("moe",))),
                       ("moe_capacity_factor", PLAN.replace(moe_capacity_factor=1.0))):
        get_framework("megatron-core").check(MOE, TRAINING, plan)
        with pytest.raises(InfeasiblePlan) as exc:
            get_framework("torchtitan").check(MOE, TRAINING, plan.replace(tp=1, dp=16, sequence_parallel=False,
                                                                          micro_batch_size=1, num_microbatches=4))
        assert exc.value.reason == f"framework_{name}"


def test_plan_file_and_megatron_export():
    plan = PLAN.replace(recompute_modules=("layernorm", "moe"), moe_capacity_factor=1.0)
    assert ParallelPlan.from_dict(plan.to_dict()) == plan
    assert "recompute_modules" not in PLAN.to_dict() and "moe_capacity_factor" not in PLAN.to_dict()
    with pytest.raises(SchemaError, match=r"recompute_modules\[0\].*must be one of"):
        ParallelPlan.from_dict({**plan.to_dict(), "recompute_modules": ["attention"]})
    text = export_plan(PlanDocument(model=MOE, training=TRAINING, cluster=CLUSTER, parallel=plan,
                                    framework="megatron-core"), "megatron").text
    assert "--recompute-granularity selective" in text and "--recompute-modules layernorm moe" in text
    assert "--moe-expert-capacity-factor 1.0" in text
    plain = export_plan(PlanDocument(model=MOE, training=TRAINING, cluster=CLUSTER, parallel=PLAN,
                                     framework="megatron-core"), "megatron").text
    assert "--recompute-modules" not in plain and "--moe-expert-capacity-factor" not in plain


def test_published_zoo_rows_read_their_recompute_modules():
    runs = {r.id: r for r in load_published_runs()}
    assert runs["MOEZOO-q3235b-01"].plan.recompute_modules == ("layernorm", "moe_act")
    assert runs["MOEZOO-q3235b-17"].plan.recompute_modules == ("layernorm", "moe")
    assert runs["MOEZOO-q3235b-03"].plan.recompute_modules == ()     # full recompute


def test_padded_expert_gemm_pays_the_imbalance_without_ep():
    # KempnerForge pads every expert to the busiest one's tokens (moe.py grouped_expert_forward): at ep 1
    # the rank runs experts x max rows = 1.25 x the routed tokens; an unpadded grouped GEMM runs them once.
    assert expert_load_imbalance(0.0, 1) == 1.0
    assert expert_load_imbalance(0.0, 1, padded=True) == 1.25
    run = {r.id: r for r in load_published_runs()}["KEMPNERMOE-packed-01"]
    assert run.framework_facts().moe_padded_expert_gemm
    est = Estimator(run.model, run.training, run.cluster, run.profile(), framework=run.framework_facts(),
                    allow_tp_across_nodes=True)
    unpadded = Estimator(run.model, run.training, run.cluster, run.profile(),
                         framework=run.framework_facts().with_overrides(moe_padded_expert_gemm=False),
                         allow_tp_across_nodes=True)
    lt, lt0 = est.stage_costs(run.plan).layer, unpadded.stage_costs(run.plan).layer
    from cost_model.layer_time import EXPERT_GEMMS, gemms_time_s
    from cost_model.flops import layer_gemms
    from cost_model.grouped_gemm import kernel_for
    # Its experts run torch._grouped_mm (Framework.moe_grouped_gemm): priced as that kernel on the H200.
    assert run.framework_facts().moe_grouped_gemm and kernel_for(est.tables, "bf16") is not None
    expert_fwd_s = gemms_time_s(est.tables, [g for g in layer_gemms(run.model, 4 * 4096, 1, 1, True, 1)
                                              if g.name in EXPERT_GEMMS], est.rates, kernel_for(est.tables, "bf16"))[0]
    assert lt.gemm_fwd_s - lt0.gemm_fwd_s == pytest.approx(0.25 * expert_fwd_s, rel=1e-9)


def test_estimate_flags(tmp_path, capsys):
    import json
    from autoplan.cli.main import main

    pins = ["estimate", "--model", "mixtral-8x7b", "--gpus", "64", "--tp", "1", "--pp", "4", "--ep", "8",
            "--zero", "1", "--framework", "megatron-core"]
    out = tmp_path / "plan.json"
    assert main(pins + ["--recompute", "selective", "--recompute-modules", "layernorm", "moe",
                        "--moe-capacity-factor", "1.1", "-o", str(out)]) == 0
    parallel = json.loads(out.read_text())["parallel"]
    assert parallel["recompute_modules"] == ["layernorm", "moe"] and parallel["moe_capacity_factor"] == 1.1
    assert "recompute=selective(layernorm moe) capacity=1.1" in capsys.readouterr().out
    assert main(pins + ["--recompute", "none", "--recompute-modules", "moe"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--recompute-modules needs --recompute selective" in err[0]
