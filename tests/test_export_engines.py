"""Exports run by the frameworks' own engines, not only their config checks (issue 21, items 4 and 5).

- DeepSpeed: the JSON `autoplan export PLAN --to deepspeed` writes for ZeRO 0, 1, 2 and 3 (and
  fp16, fp32, activation checkpointing) goes to deepspeed.initialize on 2 real gloo processes with
  DeepSpeed's CPU accelerator (tests/deepspeed_engine_check.py), which takes one optimizer step.
- Megatron-Core 0.16.1: the model of `autoplan export PLAN --to megatron` for a tiny shape of each
  family the exporter handles, built as GPTModel on the CPU with the Transformer-Engine-free layer
  spec at tp = pp = 1 (tests/megatron_core_build.py, which says where megatron-core needs CUDA).
  Its parameter count equals the plan's model.num_params plus the rows Megatron pads the
  vocabulary with: exactly, not within a tolerance.

Each also feeds a planted fault (an export edited the wrong way) and asserts it is caught.
"""
import json
import math
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from autoplan.cli.main import main as autoplan_main
from autoplan.specs import ClusterSpec, ModelSpec, ParallelPlan, PlanDocument, TrainingSpec
from tests.test_export_acceptance import installed

ROOT = Path(__file__).resolve().parents[1]


def exported(doc: PlanDocument, target: str, tmp_path: Path) -> str:
    """What `autoplan export plan.json --to TARGET -o FILE` writes for this plan."""
    plan, out = tmp_path / f"{doc.plan_id}.plan.json", tmp_path / f"{doc.plan_id}.{target}"
    doc.save(plan)
    assert autoplan_main(["export", str(plan), "--to", target, "-o", str(out)]) == 0
    return out.read_text()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _child_env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", MASTER_ADDR="127.0.0.1", **extra)
    return env


# -- DeepSpeed ------------------------------------------------------------------------------------------
TINY = ModelSpec(name="tiny-llama", num_layers=2, hidden_size=64, num_heads=4, num_kv_heads=2,
                 ffn_hidden_size=176, vocab_size=1000, max_seq_len=256)
"""The plan's model; the engine trains tests/deepspeed_engine_check.py's TinyLM (DeepSpeed's JSON
names no model shape)."""


def _ds_plan(zero_stage: int, dtype: str = "bf16", recompute: str = "none") -> PlanDocument:
    return PlanDocument(model=TINY, training=TrainingSpec(global_batch_size=8, seq_len=128, dtype=dtype),
                        cluster=ClusterSpec(name="h100-80gb", num_gpus=2), framework="deepspeed",
                        parallel=ParallelPlan(dp=2, zero_stage=zero_stage, micro_batch_size=2, num_microbatches=2,
                                              recompute=recompute,
                                              recompute_num_layers=2 if recompute == "full" else 0))


DS_PLANS = {
    "zero0 bf16": _ds_plan(0),
    "zero1 bf16": _ds_plan(1),
    "zero2 bf16": _ds_plan(2),
    "zero3 bf16": _ds_plan(3),
    "zero1 fp16 (dynamic loss scale)": _ds_plan(1, dtype="fp16"),
    "zero0 fp32": _ds_plan(0, dtype="fp32"),
    "zero3 bf16 full recompute": _ds_plan(3, recompute="full"),
}
DS_CONTROL = ("control: train_batch_size off by 2", "zero2 bf16", "Check batch related parameters")
"""A planted fault (label, plan it edits, what DeepSpeed says): the batch no longer equals micro x
accumulation x data-parallel ranks."""


def run_deepspeed(configs: list, tmp_path: Path, world: int = 2) -> list:
    """Every rank's verdicts on [{"label", "config"}], from `world` gloo processes."""
    path = tmp_path / "ds_configs.json"
    path.write_text(json.dumps(configs))
    port = str(_free_port())
    procs = [subprocess.Popen([sys.executable, str(ROOT / "tests" / "deepspeed_engine_check.py"), str(path),
                               str(tmp_path / f"ds_rank{rank}.json")], cwd=tmp_path, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              env=_child_env(DS_ACCELERATOR="cpu", MASTER_PORT=port, RANK=str(rank),
                                             LOCAL_RANK=str(rank), WORLD_SIZE=str(world), LOCAL_SIZE=str(world)))
             for rank in range(world)]
    try:
        logs = [proc.communicate(timeout=300)[0] for proc in procs]
    except subprocess.TimeoutExpired:
        for proc in procs:
            proc.kill()
        logs = [proc.communicate()[0] for proc in procs]
        raise AssertionError("the DeepSpeed ranks did not finish in 300 s (one step of a tiny model takes "
                             "seconds); their output:\n" + "\n".join(f"rank {r}: {log[-2000:]}" for r, log in enumerate(logs)))
    for rank, proc in enumerate(procs):
        assert proc.returncode == 0, f"rank {rank} exited with {proc.returncode}:\n{logs[rank][-3000:]}"
    return [json.loads((tmp_path / f"ds_rank{rank}.json").read_text()) for rank in range(world)]


FP16_ON_CPU = "Type fp16 is not supported on your device"
"""DeepSpeed's refusal (engine.py _do_sanity_check, 0.19.8 line 2004) where the CPU accelerator's
is_fp16_supported is False: torch.ops.mkldnn._is_mkldnn_fp16_supported(), i.e. a CPU without
AVX512-FP16 or AMX-FP16 (this machine's)."""


@pytest.fixture(scope="module")
def deepspeed_verdicts(tmp_path_factory) -> dict:
    """Plan label -> each rank's verdict, from one 2-process run of every export and the control."""
    if not installed("deepspeed"):
        pytest.skip("deepspeed is not installed (test_export_frameworks_are_installed says so loudly)")
    tmp_path = tmp_path_factory.mktemp("deepspeed")
    configs = {label: json.loads(exported(doc, "deepspeed", tmp_path)) for label, doc in DS_PLANS.items()}
    label, plan, _ = DS_CONTROL
    control = {**configs[plan], "train_batch_size": configs[plan]["train_batch_size"] + 2}
    items = [{"label": k, "config": v} for k, v in configs.items()] + [{"label": label, "config": control}]
    ranks = run_deepspeed(items, tmp_path)
    return {item["label"]: [{v["label"]: v for v in verdicts}[item["label"]] for verdicts in ranks] for item in items}


@pytest.mark.slow
def test_deepspeed_engine_takes_one_step_with_every_exported_zero_stage(deepspeed_verdicts):
    label, _, said = DS_CONTROL
    for rank, got in enumerate(deepspeed_verdicts[label]):
        assert said in got["error"], f"rank {rank}: {label}: DeepSpeed should say {said!r}, got {got}"
    failures = [f"rank {rank}: {name}: {wrong}" for name, doc in DS_PLANS.items() if doc.training.dtype != "fp16"
                for rank, got in enumerate(deepspeed_verdicts[name]) if (wrong := engine_mismatch(doc, got))]
    assert not failures, "\n".join(failures)


@pytest.mark.slow
def test_deepspeed_engine_takes_the_fp16_export(deepspeed_verdicts):
    for name, doc in DS_PLANS.items():
        if doc.training.dtype != "fp16":
            continue
        errors = {got["error"] for got in deepspeed_verdicts[name]}
        if any(FP16_ON_CPU in error for error in errors):
            pytest.skip(f"SKIPPED LOUDLY: {name}: DeepSpeed's CPU accelerator refuses fp16 on this CPU, so the "
                        f"exported fp16 config is not run here: {errors.pop()}")
        wrong = [f"rank {rank}: {w}" for rank, got in enumerate(deepspeed_verdicts[name])
                 if (w := engine_mismatch(doc, got))]
        assert not wrong, f"{name}: " + "; ".join(wrong)


def engine_mismatch(doc: PlanDocument, got: dict) -> str:
    """"" when DeepSpeed's engine ran the plan's ZeRO stage, precision and batch for one finite step."""
    if got["error"]:
        return got["error"]
    par, dtype = doc.parallel, {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}[doc.training.dtype]
    wanted = {"stage": par.zero_stage, "dtype": dtype, "global_steps": 1,
              "train_batch_size": doc.training.global_batch_size,
              "gradient_accumulation_steps": par.num_microbatches}
    wrong = [f"{key} {got[key]}, the plan has {value}" for key, value in wanted.items() if got[key] != value]
    if not isinstance(got["loss"], float) or not math.isfinite(got["loss"]):
        wrong.append(f"loss {got['loss']}")
    return "; ".join(wrong)


# -- Megatron-Core --------------------------------------------------------------------------------------
def _tiny(name: str, **shape) -> ModelSpec:
    base = dict(num_layers=2, hidden_size=64, num_heads=4, num_kv_heads=4, ffn_hidden_size=176, vocab_size=1000,
                max_seq_len=256)
    return ModelSpec(name=name, **{**base, **shape})


MEGATRON_MODELS = {
    "gpt (gelu, layernorm, learned positions, tied, biases)": _tiny(
        "tiny-gpt", ffn_hidden_size=256, mlp="gelu", norm="layernorm", position="learned", tied_embeddings=True,
        linear_bias=True),
    "llama (swiglu, rmsnorm, rope, untied)": _tiny("tiny-llama"),
    "gqa + qkv bias (qwen2.5)": _tiny("tiny-qwen2", num_heads=8, num_kv_heads=2, qkv_bias=True),
    "per-head qk norm, head_dim != h/heads (qwen3)": _tiny("tiny-qwen3", num_kv_heads=2, head_dim=32, qk_norm="head"),
    "partial rotary, tied (phi-style)": _tiny("tiny-partial-rope", rotary_dim=8, tied_embeddings=True),
    "moe (mixtral)": _tiny("tiny-mixtral", num_kv_heads=2, num_experts=4, num_experts_per_token=2),
    "moe expert width + qk norm (qwen3-moe)": _tiny("tiny-qwen3-moe", num_kv_heads=2, head_dim=32, qk_norm="head",
                                                    num_experts=4, num_experts_per_token=2, moe_ffn_hidden_size=48),
    "mla + shared experts + dense first layer (deepseek-v3)": _tiny(
        "tiny-deepseek-v3", num_layers=3, head_dim=24, v_head_dim=16, num_experts=4, num_experts_per_token=2,
        moe_ffn_hidden_size=32, shared_expert_ffn_size=32, num_dense_layers=1, q_lora_rank=48, kv_lora_rank=32,
        qk_rope_head_dim=8),
}
MEGATRON_CONTROL = ("control: --ffn-hidden-size off by one", "llama (swiglu, rmsnorm, rope, untied)")
"""A planted fault (label, model whose export it edits): the exported MLP width plus one."""


def _megatron_plan(model: ModelSpec) -> PlanDocument:
    return PlanDocument(model=model, training=TrainingSpec(global_batch_size=8, seq_len=128, dtype="bf16"),
                        cluster=ClusterSpec(name="h100-80gb", num_gpus=1), framework="megatron-core",
                        parallel=ParallelPlan(dp=1, micro_batch_size=1, num_microbatches=8))


def run_megatron_core(texts: list, tmp_path: Path, release_dir: str = "") -> list:
    """tests/megatron_core_build.py's verdicts; `release_dir`: a folder holding another megatron-core
    release, put before the venv's on the path (tests/test_megatron_core_019.py)."""
    path = tmp_path / "megatron_exports.json"
    path.write_text(json.dumps(texts))
    env = _child_env(MASTER_PORT=str(_free_port()))
    if release_dir:
        env["PYTHONPATH"] = f"{release_dir}:{env['PYTHONPATH']}"
    done = subprocess.run([sys.executable, str(ROOT / "tests" / "megatron_core_build.py"), str(path)], cwd=tmp_path,
                          capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def megatron_mismatch(model: ModelSpec, got: dict) -> str:
    """"" when megatron-core built the plan's model: parameters equal to model.num_params plus the padded
    vocabulary rows (once when the head is tied to the embedding), layers, MoE layers."""
    if got["error"]:
        return got["error"]
    padding = (got["padded_vocab"] - model.vocab_size) * model.hidden_size * (1 if model.tied_embeddings else 2)
    wrong = []
    if got["params"] != model.num_params + padding:
        wrong.append(f"{got['params']} parameters, the plan has {model.num_params} + {padding} vocabulary padding "
                     f"(off by {got['params'] - model.num_params - padding})")
    if got["layers"] != model.num_layers:
        wrong.append(f"{got['layers']} layers, the plan has {model.num_layers}")
    if got["moe_layers"] != model.num_moe_layers:
        wrong.append(f"{got['moe_layers']} MoE layers, the plan has {model.num_moe_layers}")
    return "; ".join(wrong)


@pytest.mark.slow
def test_megatron_core_builds_the_exported_model_of_every_family(tmp_path):
    if not installed("megatron.core"):
        pytest.skip("megatron-core is not installed (test_export_frameworks_are_installed says so loudly)")
    texts = {label: exported(_megatron_plan(model), "megatron", tmp_path) for label, model in MEGATRON_MODELS.items()}
    label, plan = MEGATRON_CONTROL
    wrong_width = re.sub(r"--ffn-hidden-size (\d+)", lambda m: f"--ffn-hidden-size {int(m[1]) + 1}", texts[plan])
    assert wrong_width != texts[plan], f"{label}: no --ffn-hidden-size in the export of {plan!r}"
    verdicts = run_megatron_core(list(texts.values()) + [wrong_width], tmp_path)
    control = megatron_mismatch(MEGATRON_MODELS[plan], verdicts[-1])
    assert "off by" in control, f"{label}: the build should not match the plan, got {verdicts[-1]}"
    failures = [f"{name}: {wrong}" for name, got in zip(texts, verdicts)
                if (wrong := megatron_mismatch(MEGATRON_MODELS[name], got))]
    assert not failures, "\n".join(failures)
