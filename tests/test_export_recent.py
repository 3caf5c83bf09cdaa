"""The exporters carry the 2024-2025 architecture facts as framework settings, or list them as not
mapped: Megatron-LM flags parsed back from the command, torchtitan's TOML and notes, DeepSpeed's notes."""
import tomllib
from pathlib import Path

import pytest

from autoplan.exporters import export_plan
from autoplan.inputs.hf_config import load_hf_config
from autoplan.specs import ClusterSpec, InfeasiblePlan, ParallelPlan, PlanDocument, TrainingSpec
from tests.test_export import export_megatron_args

FIXTURES = Path(__file__).parent / "fixtures" / "hf_configs"


def _doc(name, num_gpus=64, global_batch=64, **parallel):
    model = load_hf_config(FIXTURES / f"{name}.json")
    plan = ParallelPlan(**parallel)
    return PlanDocument(model=model, training=TrainingSpec(global_batch_size=global_batch, seq_len=4096),
                        cluster=ClusterSpec(name="h100-80gb", num_gpus=num_gpus), parallel=plan)


# 8 micro-batches: torchtitan's 1F1B needs at least pp of them
DEEPSEEK = _doc("deepseek-v3", num_gpus=64, dp=8, pp=8, ep=8, zero_stage=1, micro_batch_size=1,
                num_microbatches=8)
GEMMA3 = _doc("gemma-3-27b", dp=32, tp=2, sequence_parallel=True, zero_stage=1, micro_batch_size=1,
              num_microbatches=2)
GPTJ = _doc("gpt-j-6b", dp=64, zero_stage=1, micro_batch_size=1, num_microbatches=1)
# ZeRO-1: the distributed optimizer with expert parallelism
QWEN3_MOE = _doc("qwen3-235b-a22b", dp=64, ep=64, zero_stage=1, micro_batch_size=1, num_microbatches=1)


def test_megatron_carries_mla_shared_experts_and_dense_layers():
    args = export_megatron_args(DEEPSEEK)
    assert args["--multi-latent-attention"] is True
    assert (args["--q-lora-rank"], args["--kv-lora-rank"], args["--qk-head-dim"], args["--qk-pos-emb-head-dim"],
            args["--v-head-dim"]) == ("1536", "512", "128", "64", "128")
    assert (args["--num-experts"], args["--moe-router-topk"], args["--moe-ffn-hidden-size"],
            args["--moe-shared-expert-intermediate-size"]) == ("256", "8", "2048", "2048")
    pattern = eval(args["--moe-layer-freq"])  # Megatron evaluates the string to a list the same way
    assert pattern == [0] * 3 + [1] * 58
    assert "--kv-channels" not in args
    assert not any("not expressible" in note for note in export_plan(DEEPSEEK, "megatron").notes)


def test_megatron_maps_qk_norm_and_head_dim_and_lists_what_does_not_map():
    args = export_megatron_args(GEMMA3)
    assert args["--qk-layernorm"] is True and args["--kv-channels"] == "128"
    note = next(n for n in export_plan(GEMMA3, "megatron").notes if "not expressible" in n)
    assert "sliding-window attention of 1024 tokens, every 6th layer global" in note
    assert "GeGLU" in note and "before and after" in note
    moe = export_megatron_args(QWEN3_MOE)
    assert moe["--moe-ffn-hidden-size"] == "1536" and "--moe-layer-freq" not in moe
    assert "--moe-shared-expert-intermediate-size" not in moe


def test_partial_rotary_and_parallel_block():
    args = export_megatron_args(GPTJ)
    assert float(args["--rotary-percent"]) == 0.25
    note = next(n for n in export_plan(GPTJ, "megatron").notes if "not expressible" in n)
    assert "in parallel on one shared norm" in note and "bias on the output layer" in note


def test_torchtitan_deepseek_flavor_and_deepspeed_notes():
    export = export_plan(DEEPSEEK, "torchtitan-0.2")
    toml = tomllib.loads(export.text)
    assert toml["model"] == {"name": "deepseek_v3", "flavor": "671B"}  # torchtitan ships DeepSeek-V3's shape
    assert toml["parallelism"]["expert_parallel_degree"] == 8
    flavor = next(n for n in export.notes if "deepseek_v3 model with" in n)
    for word in ("n_shared_experts=1", "n_dense_layers=3", "kv_lora_rank=512", "qk_rope_head_dim=64"):
        assert word in flavor
    gemma = export_plan(GEMMA3, "torchtitan-0.2").notes
    assert any("not expressible in torchtitan's llama3 model" in n and "q and k head" in n for n in gemma)
    with pytest.raises(InfeasiblePlan, match="framework deepspeed has no multi-head latent attention"):
        export_plan(DEEPSEEK, "deepspeed")
    ds = export_plan(GEMMA3, "deepspeed").notes
    assert any("not expressible in DeepSpeed" in n and "sliding-window attention" in n for n in ds)
