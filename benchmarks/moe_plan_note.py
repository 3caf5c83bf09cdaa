"""The plan autoplan picks next to a published or recipe plan, for two MoE models on 256 H100s.

    PYTHONPATH=. .venv/bin/python benchmarks/moe_plan_note.py

For Qwen3-235B-A22B the published plan is the Megatron MoE model zoo's H100 run (TP2 PP8 EP32 with
parallel folding, GBS 2048 x 4096: cost_model/data/published_runs.csv MOEZOO-q3235b-01, measured
with forced balanced routing); for DeepSeek-V3 the recipe is Megatron-LM's Megatron-FSDP example
(docs/discussions/megatron-fsdp-user-guide/example-scripts/sbatch_mfsdp_deepseek_v3.sh at
core_v0.16.1: TP1 EP8 ETP1, ZeRO-3 (Megatron-FSDP), micro-batch 4, GBS 2048 x 4096, selective
recompute of the modules mlp moe mla_up_proj layernorm). Both are estimated with Megatron-Core's facts and the default dropless routing, next to
the best plan of a seeded search (200 TPE trials + polish) over the same problem, with the terms
that differ most, under Megatron-Core's alltoall dispatcher and under its flex dispatcher on DeepEP
(--framework megatron-core+flex-deepep). Everything printed is predicted, nothing measured; the one measured figure is the
published row's tokens/s/GPU.
"""
from __future__ import annotations

from pathlib import Path

from autoplan.inputs.hf_config import load_hf_config
from autoplan.planning.planner import PlanRequest, make_estimator, plan_search
from autoplan.specs import ClusterSpec, ParallelPlan, TrainingSpec
from cost_model import builtin_profile
from cost_model.published import load_published_runs

FIXTURES = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "hf_configs"
GPUS, GBS, SEQ = 256, 2048, 4096


def _recipe_plans() -> dict:
    zoo = next(r for r in load_published_runs() if r.id == "MOEZOO-q3235b-01")
    deepseek = ParallelPlan(dp=256, tp=1, pp=1, cp=1, sequence_parallel=False, zero_stage=3, micro_batch_size=4,
                            num_microbatches=GBS // (256 * 4), recompute="selective", ep=8, etp=1,
                            recompute_modules=("mlp", "moe", "mla_up_proj", "layernorm"))
    return {"qwen3-235b-a22b": (zoo.plan, f"published MOEZOO-q3235b-01, measured "
                                          f"{zoo.measured_tokens_per_s_per_gpu:,.0f} tok/s/GPU (forced balance)"),
            "deepseek-v3": (deepseek, "recipe: Megatron-LM Megatron-FSDP DeepSeek-V3 example")}


def _describe(plan: ParallelPlan) -> str:
    return (f"dp{plan.dp} tp{plan.tp} pp{plan.pp} vpp{plan.vpp} cp{plan.cp} ep{plan.ep} etp{plan.expert_tp} "
            f"zero{plan.zero_stage} mb{plan.micro_batch_size} recompute={plan.recompute}"
            + (f" ({' '.join(plan.recompute_modules)})" if plan.recompute_modules else ""))


def compare(name: str, recipe: ParallelPlan, label: str, framework: str = "megatron-core", trials: int = 200) -> None:
    config = FIXTURES / f"{name}.json"
    model = load_hf_config(config)
    training = TrainingSpec(global_batch_size=GBS, seq_len=SEQ)
    cluster = ClusterSpec(name="h100-80gb", num_gpus=GPUS)
    est = make_estimator(model, training, cluster, builtin_profile("h100-80gb"), framework=framework)
    outcome = plan_search(PlanRequest(model=str(config), num_gpus=GPUS, global_batch_size=GBS, seq_len=SEQ,
                                      framework=framework, num_trials=trials, seed=0))
    picked = outcome.best.estimate
    ref = est.estimate(recipe)
    print(f"== {name} on {GPUS} x H100, GBS {GBS} x {SEQ}, {framework}, dropless routing (predicted)")
    for who, plan, e in (("autoplan", outcome.best.plan, picked), (label, recipe, ref)):
        print(f"  {who}\n    {_describe(plan)}: {e.step_time_s:.2f} s/step, {e.tokens_per_s_per_gpu:,.0f} tok/s/GPU, "
              f"{e.peak_memory_bytes / 2 ** 30:.1f} GiB{'' if e.fits else ' (does not fit)'}")
    diff = {k: ref.time_breakdown_s[k] - picked.time_breakdown_s[k] for k in picked.time_breakdown_s}
    print(f"  predicted difference: recipe {ref.step_time_s - picked.step_time_s:+.2f} s/step "
          f"({ref.step_time_s / picked.step_time_s - 1:+.1%}); deciding terms (recipe - autoplan):")
    for k, v in sorted(diff.items(), key=lambda kv: -abs(kv[1]))[:4]:
        print(f"    {k:13s} {v:+.2f} s")


if __name__ == "__main__":
    # Megatron-Core's alltoall dispatcher (the default export), then its flex dispatcher on DeepEP, which
    # the model zoo's Qwen3 run used (a token crosses the network once per node: cost_model/moe_time.py).
    for framework in ("megatron-core", "megatron-core+flex-deepep"):
        for name, (plan, label) in _recipe_plans().items():
            compare(name, plan, label, framework)
