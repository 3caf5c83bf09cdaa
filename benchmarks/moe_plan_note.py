"""The plan autoplan picks next to a published or recipe plan, for two MoE models on 256 and 1,024 H100s.

    PYTHONPATH=. .venv/bin/python benchmarks/moe_plan_note.py

Three problems, each with the plan that ran or that NVIDIA ships for it (configs only; no published
throughput of theirs is read or printed):
- Qwen3-235B-A22B on 256 H100, GBS 2048 x 4096: the Megatron MoE model zoo's measured run (TP2 PP8
  EP32 with parallel folding, DeepEP: cost_model/data/published_runs.csv MOEZOO-q3235b-01, forced
  balanced routing).
- Qwen3-235B-A22B on 256 H100, GBS 8192 x 4096: Megatron-Bridge's H100 recipe
  (src/megatron/bridge/perf_recipes/qwen/h100/qwen3_moe.py qwen3_235b_a22b_pretrain_256gpu_h100_bf16_config
  @067f987df: TP2 PP8 VP4 EP32, SP, micro-batch 1, no recompute, alltoall dispatcher with
  overlap_moe_expert_parallel_comm, forced balance).
- DeepSeek-V3 on 1,024 H100, GBS 16384 x 4096: Megatron-Bridge's H100 recipe
  (perf_recipes/deepseek/h100/deepseek_v3.py deepseek_v3_pretrain_1024gpu_h100_bf16_config @067f987df:
  TP2 PP8 VP4 EP64 ETP1, SP, micro-batch 1, recompute modules mla_up_proj mlp, flex dispatcher on
  HybridEP (recipes/deepseek/h100/deepseek_v3.py lines 158-160, 256), forced balance; its pipeline
  layout "Et|(tt|)*30mL" and its MTP layer are not in our plan vocabulary: priced with the even split).
Each is estimated with Megatron-Core's facts under the recipe's dispatcher and dropless routing, next to
the best plan of a seeded search (200 TPE trials + polish) over the same problem under each dispatcher
(--framework megatron-core, alltoall; megatron-core+flex-deepep), with the terms that differ most.
Everything printed is predicted; the one measured figure is the zoo row's tokens/s/GPU.
"""
from __future__ import annotations

from pathlib import Path

from autoplan.inputs.hf_config import load_hf_config
from autoplan.planning.planner import PlanRequest, make_estimator, plan_search
from autoplan.specs import ClusterSpec, ParallelPlan, TrainingSpec
from cost_model import builtin_profile
from cost_model.published_rows import load_published_runs

FIXTURES = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "hf_configs"
SEQ = 4096
BRIDGE = "Megatron-Bridge H100 recipe @067f987df"


def bridge_h100_recipes() -> dict:
    """Megatron-Bridge's H100 bf16 recipes for the two models, as plans: {name: (gpus, gbs, plan, framework)}."""
    qwen = ParallelPlan(dp=16, tp=2, pp=8, vpp=4, cp=1, sequence_parallel=True, zero_stage=1, micro_batch_size=1,
                        num_microbatches=8192 // 16, recompute="none", ep=32, etp=1)
    deepseek = ParallelPlan(dp=64, tp=2, pp=8, vpp=4, cp=1, sequence_parallel=True, zero_stage=1, micro_batch_size=1,
                            num_microbatches=16384 // 64, recompute="selective", ep=64, etp=1,
                            recompute_modules=("mla_up_proj", "mlp"))
    return {"qwen3-235b-a22b": (256, 8192, qwen, "megatron-core+overlap-moe-expert-parallel-comm"),
            "deepseek-v3": (1024, 16384, deepseek, "megatron-core+flex-deepep")}


def _problems() -> list:
    zoo = next(r for r in load_published_runs() if r.id == "MOEZOO-q3235b-01")
    rows = [("qwen3-235b-a22b", 256, 2048, zoo.plan, "megatron-core+flex-deepep",
             f"published MOEZOO-q3235b-01, measured {zoo.measured_tokens_per_s_per_gpu:,.0f} tok/s/GPU (forced balance)")]
    rows += [(name, gpus, gbs, plan, framework, BRIDGE) for name, (gpus, gbs, plan, framework) in bridge_h100_recipes().items()]
    return rows


def _describe(plan: ParallelPlan) -> str:
    return (f"dp{plan.dp} tp{plan.tp} pp{plan.pp} vpp{plan.vpp} cp{plan.cp} ep{plan.ep} etp{plan.expert_tp} "
            f"zero{plan.zero_stage} mb{plan.micro_batch_size} recompute={plan.recompute}"
            + (f" ({' '.join(plan.recompute_modules)})" if plan.recompute_modules else ""))


def compare(name: str, gpus: int, gbs: int, recipe: ParallelPlan, recipe_framework: str, label: str,
            framework: str, trials: int = 200) -> None:
    config = FIXTURES / f"{name}.json"
    model = load_hf_config(config)
    training = TrainingSpec(global_batch_size=gbs, seq_len=SEQ)
    cluster = ClusterSpec(name="h100-80gb", num_gpus=gpus)
    ref = make_estimator(model, training, cluster, builtin_profile("h100-80gb"), framework=recipe_framework).estimate(recipe)
    outcome = plan_search(PlanRequest(model=str(config), num_gpus=gpus, global_batch_size=gbs, seq_len=SEQ,
                                      framework=framework, num_trials=trials, seed=0))
    picked = outcome.best.estimate
    print(f"== {name} on {gpus} x H100, GBS {gbs} x {SEQ}, search under {framework}, dropless routing (predicted)")
    for who, plan, e in (("autoplan", outcome.best.plan, picked), (f"{label} [{recipe_framework}]", recipe, ref)):
        print(f"  {who}\n    {_describe(plan)}: {e.step_time_s:.2f} s/step, {e.tokens_per_s_per_gpu:,.0f} tok/s/GPU, "
              f"{e.peak_memory_bytes / 2 ** 30:.1f} GiB{'' if e.fits else ' (does not fit)'}")
    diff = {k: ref.time_breakdown_s.get(k, 0.0) - picked.time_breakdown_s.get(k, 0.0)
            for k in set(picked.time_breakdown_s) | set(ref.time_breakdown_s)}
    print(f"  predicted difference: recipe {ref.step_time_s - picked.step_time_s:+.2f} s/step "
          f"({ref.step_time_s / picked.step_time_s - 1:+.1%}); deciding terms (recipe - autoplan):")
    for k, v in sorted(diff.items(), key=lambda kv: -abs(kv[1]))[:4]:
        print(f"    {k:13s} {v:+.2f} s")


if __name__ == "__main__":
    # Megatron-Core's alltoall dispatcher (the default export), then its flex dispatcher on DeepEP
    # (a token crosses the network once per node: cost_model/moe_time.py).
    for name, gpus, gbs, plan, recipe_framework, label in _problems():
        for framework in ("megatron-core", "megatron-core+flex-deepep"):
            compare(name, gpus, gbs, plan, recipe_framework, label, framework)
