"""Every export of every plan in tests/export_plans.py, fed to the target framework's own code
(tests/framework_acceptance.py): accepted, or refused by autoplan with the framework's rule.

The frameworks come from the `export-test` extra (`make test` installs it); the real torchtitan 0.3.0
(target `torchtitan`) lives in a venv of its own on torch 2.13.0+cpu (`make torchtitan-0.3`, which
`make test` runs: ../side-venvs/tt03 beside the repository, or AUTOPLAN_TORCHTITAN_03_VENV), where
tests/torchtitan03_check.py runs in a subprocess: the venv's torchtitan 0.2.0 (target `torchtitan-0.2`)
and torch 2.9.0 never meet it. Where one cannot be installed the per-target tests skip, and
test_export_frameworks_are_installed fails loudly, naming what is missing (set
AUTOPLAN_EXPORT_TEST_OPTIONAL=1 to accept the gap knowingly).
"""
import functools
import importlib.util
import json
import os
from pathlib import Path

import pytest

from autoplan.exporters import export_plan
from autoplan.exporters.deepspeed import megatron_deepspeed_flags
from autoplan.exporters.torchtitan.v02 import flavor_module
from autoplan.specs import InfeasiblePlan, ModelSpec
from cost_model.memory import ops_saved_elems
from tests import framework_acceptance as fa
from tests.export_plans import PLANS
from tests.side_venv import TORCH_SIDE_VENV, run_side

PACKAGES = {"megatron": "megatron.core", "torchtitan": "torchtitan 0.3.0", "torchtitan-0.2": "torchtitan",
            "deepspeed": "deepspeed"}
TORCHTITAN_03 = TORCH_SIDE_VENV
"""The venv with the real torchtitan 0.3.0 on torch 2.13.0+cpu (Makefile target torchtitan-0.3)."""


def installed(module: str) -> bool:
    if module == "torchtitan 0.3.0":
        return (TORCHTITAN_03 / "bin" / "python").exists() and \
            any(TORCHTITAN_03.glob("lib/python*/site-packages/torchtitan-0.3.0.dist-info"))
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        return False


def test_export_frameworks_are_installed():
    missing = [f"{target} ({module})" for target, module in PACKAGES.items() if not installed(module)]
    if missing and os.environ.get("AUTOPLAN_EXPORT_TEST_OPTIONAL") != "1":
        pytest.fail(f"the export acceptance tests cannot run: {', '.join(missing)} not installed (torchtitan 0.3.0: "
                    f"a venv at {TORCHTITAN_03}); run `make test` (installs the export-test extra and, with "
                    f"`make torchtitan-0.3`, that venv: about 2 minutes, 2.5 GB), or set "
                    f"AUTOPLAN_EXPORT_TEST_OPTIONAL=1")


def verdict(doc, target: str, tmp_path) -> str:
    """"refused: <rule>" (autoplan would not export it), "" (the framework accepts it), or its complaint."""
    try:
        export = export_plan(doc, target)
    except InfeasiblePlan as exc:
        return f"refused: {exc}"
    par, n = doc.parallel, doc.cluster.num_gpus
    if target == "megatron":
        return fa.megatron_accepts(export.text, n)
    if target == "torchtitan-0.2":
        return fa.torchtitan_accepts(export.text, n, tmp_path, flavor_module(doc))
    with_mpu = fa.deepspeed_accepts(export.text, n, par.dp, par.tp, par.pp, with_mpu=True)
    if with_mpu:
        return with_mpu
    flags = fa.megatron_deepspeed_flags_accepted(" ".join(megatron_deepspeed_flags(doc)))
    if flags:
        return flags
    without = fa.deepspeed_accepts(export.text, n, par.dp, par.tp, par.pp, with_mpu=False)
    says_mpu = any(note.startswith("batch check:") and "mpu" in note for note in export.notes)
    if without and not says_mpu:
        return f"needs a Megatron-DeepSpeed mpu and the export does not say so ({without})"
    return ""


@pytest.mark.slow
@pytest.mark.parametrize("target", sorted(PACKAGES))
def test_every_export_is_accepted_by_the_framework(target, tmp_path):
    if not installed(PACKAGES[target]):
        pytest.skip(f"{PACKAGES[target]} is not installed (test_export_frameworks_are_installed says so loudly)")
    failures, refused = [], []
    results = torchtitan_03_verdicts() if target == "torchtitan" else {}
    for label, doc in PLANS.items():
        result = results[label] if results else verdict(doc, target, tmp_path)
        if result.startswith("refused: "):
            refused.append(label)
        elif result:
            failures.append(f"{label}: {result}")
    assert not failures, "\n".join(failures)
    assert len(refused) < len(PLANS) // 2, f"{target} refuses most plans: {refused}"


TORCHTITAN_03_CONTROLS = {
    # label: (plan the export comes from, text replaced, replacement, what torchtitan 0.3.0 says)
    "control: unknown attention backend": ("zero1 pp 1f1b partial recompute", 'attn_backend="flex"', 'attn_backend="flesh"',
                                           "Unknown backend: flesh"),
    "control: unknown field": ("zero1 pp 1f1b partial recompute", "FullAC.Config()", "FullAC.Config(layers=3)",
                               "unexpected keyword argument 'layers'"),
    "control: misspelt config attribute": ("zero1 tp+sp+pp+vpp", "config.model_spec = ", "config.modle_spec = ",
                                           "has no attribute 'modle_spec'"),
    # reaches fully_shard: the default spmd backend's plain local tensors, which torch 2.13.0's FSDP refuses
    "control: spmd_types backend": ("fsdp (zero3, selective)", "spmd_backend='partial_dtensor'",
                                    "spmd_backend='spmd_types'", "all parameters must be DTensors"),
    # issue 50: the recipe that constructs a Float8LinearConverter, called for a bf16 plan, on a machine without fp8
    "control: llama3_405b() recipe without an fp8 GPU": ("uneven 405b (first/last lighter)", "llama3_70b", "llama3_405b",
                                                         "float8 is only supported on NVIDIA SM89 or later"),
    "control: cuda graphs": ("zero1 pp 1f1b partial recompute", "disable_cuda_graphs=True",
                             "disable_cuda_graphs=False", "CUDA graphs"),
}
"""Wrong exports the check must catch, each with the words of torchtitan 0.3.0's own complaint."""


def run_torchtitan_03(exports: list) -> list:
    """torchtitan 0.3.0's verdict on each {"text", "num_gpus"}, in one subprocess with its venv's python
    (tests/torchtitan03_check.py)."""
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "exports.json"
        path.write_text(json.dumps(exports))
        return run_side("torchtitan03_check.py", str(path), cwd=tmp)


SAC_TRACE_SHAPE = (256, 8, 2, 768)
"""dim, heads, kv heads, FFN width of the one-block llama3 whose matmuls 0.3.0's SelectiveAC is traced on."""


@functools.cache
def torchtitan_03_run() -> tuple:
    """(plan label -> verdict of every `torchtitan` export, the SelectiveAC trace of SAC_TRACE_SHAPE),
    from one subprocess of torchtitan 0.3.0. A verdict is "refused: <rule>", torchtitan's own
    complaint, a model that is not the plan's (parameters within 0.5%, layers, fp8 only when planned,
    compile and async TP on exactly where the plan overlaps its TP communication), a parallelized model (on a fake
    process group of the plan's world) that is not split the plan's way, or "" (taken)."""
    verdicts, exports = {}, []
    for label, doc in PLANS.items():
        try:
            exports.append((label, {"text": export_plan(doc, "torchtitan").text, "num_gpus": doc.cluster.num_gpus,
                                    "fp8": doc.training.dtype == "fp8"}))  # the rest build without an fp8 GPU
        except InfeasiblePlan as exc:
            verdicts[label] = f"refused: {exc}"
    texts = dict(exports)
    for label, (plan, old, new, _) in TORCHTITAN_03_CONTROLS.items():
        assert old in texts[plan]["text"], f"{label}: {old!r} not in the export of {plan!r}"
        exports.append((label, {**texts[plan], "text": texts[plan]["text"].replace(old, new)}))
    *results, traced = run_torchtitan_03([item for _, item in exports] + [{"sac_trace": list(SAC_TRACE_SHAPE)}])
    for (label, _), got in zip(exports, results):
        if label in TORCHTITAN_03_CONTROLS:
            said = TORCHTITAN_03_CONTROLS[label][3]
            assert said in got["error"], f"{label}: torchtitan 0.3.0 should say {said!r}, got {got}"
            continue
        verdicts[label] = got["error"] or model_mismatch(PLANS[label], got)
    return verdicts, traced["sac_trace"]


def torchtitan_03_verdicts() -> dict:
    return torchtitan_03_run()[0]


@pytest.mark.slow
def test_torchtitan_selective_ac_keeps_what_the_memory_model_counts():
    """0.3.0's SelectiveAC, traced on a one-block llama3 (wqkv, wo, w1, w3, w2), keeps the 1st, 3rd and
    5th matmul outputs; with the block input and the attention output that is what the torchtitan
    entry's memory model counts per token (cost_model/memory.py ops_saved_elems)."""
    if not installed(PACKAGES["torchtitan"]):
        pytest.skip("torchtitan 0.3.0 is not installed (test_export_frameworks_are_installed says so loudly)")
    dim, heads, kv_heads, ffn = SAC_TRACE_SHAPE
    trace = torchtitan_03_run()[1]
    qkv = dim + 2 * dim // heads * kv_heads
    assert [width for width, _ in trace] == [qkv, dim, ffn, ffn, dim]
    kept = sum(width for width, saved in trace if saved)  # the outputs of wqkv, w1, w2: 384 + 768 + 256
    model = ModelSpec(name="sac-trace", num_layers=1, hidden_size=dim, num_heads=heads, num_kv_heads=kv_heads,
                      ffn_hidden_size=ffn, vocab_size=64)
    assert ops_saved_elems(model, tp=1, sequence_parallel=False) == dim + kept + dim == 1920


def tp_whole_params(doc) -> int:
    """Parameters of rank 0's layers that TP keeps whole (each rank holds them all, sharded by FSDP alone):
    the block's two norms, MLA's down-projections and their norms (the latents are not split over heads),
    a MoE layer's router. Rank 0 holds the stages 0, pp, 2pp, ... of the plan's split."""
    m, par = doc.model, doc.parallel
    mla = (m.hidden_size * (m.q_lora_rank + m.kv_lora_rank + m.qk_rope_head_dim) + m.q_lora_rank
           + m.kv_lora_rank) if m.is_mla else 0
    total, first = 0, 0
    for stage, count in enumerate(par.virtual_stage_num_layers(m.num_layers)):
        if stage % par.pp == 0:
            total += sum(2 * m.hidden_size + mla + (m.hidden_size * m.num_experts if m.is_moe_layer(layer) else 0)
                         for layer in range(first, first + count))
        first += count
    return total


def model_mismatch(doc, got: dict) -> str:
    """"" when the model torchtitan built is the plan's, else what differs."""
    model, wrong = doc.model, []
    if abs(got["params"] - model.num_params) > 0.005 * model.num_params:
        wrong.append(f"{got['params'] / 1e9:.2f}B parameters, the plan has {model.num_params / 1e9:.2f}B")
    if got["layers"] != model.num_layers:
        wrong.append(f"{got['layers']} layers, the plan has {model.num_layers}")
    if bool(got["float8_linears"]) != (doc.training.dtype == "fp8"):
        wrong.append(f"{got['float8_linears']} Float8Linear modules for dtype={doc.training.dtype}")
    planned = doc.parallel.tp_comm_overlap      # async TP, which runs only under compile
    if got["compile"] != planned or got["async_tp"] != planned:
        wrong.append(f"compile={got['compile']} async_tp={got['async_tp']}, planned with tp_comm_overlap={planned}")
    par = doc.parallel
    if got["model_parts"] != (par.vpp if par.pp > 1 else 1):
        wrong.append(f"rank 0 holds {got['model_parts']} model parts, the plan has vpp={par.vpp}")
    # Every weight is split over the planned ranks: FSDP over dp (ZeRO 0: replicated, unless the experts
    # borrow dp_shard), TP over tp, CP ranks join FSDP; routed experts over ep x (dp*cp*tp/ep), the same
    # product; with hybrid sharding FSDP over the shard group only (zero_shard, CP included). What stays
    # whole under TP is counted apart (tp_whole_params); FSDP pads rank 0's chunk: within 0.5%.
    shards = par.tp * (par.zero_shard_group if par.zero_stage > 0 else par.cp * (par.dp if par.ep > 1 else 1))
    local = got["part_params"] / shards + tp_whole_params(doc) * (par.tp - 1) / shards
    held, expected = got["part_params"] / max(got["local_params"], 1), got["part_params"] / local
    if abs(held - expected) > 0.005 * expected:
        wrong.append(f"rank 0 holds 1/{held:.2f} of its stage's {got['part_params']} parameters, the plan "
                     f"shards them 1/{expected:.2f} ({shards} ways, what TP keeps whole {par.tp} times)")
    return "; ".join(wrong)


def test_deepspeed_export_says_when_the_batch_check_needs_an_mpu():
    export = export_plan(PLANS["zero1 pp 1f1b partial recompute"], "deepspeed")
    assert any(note.startswith("batch check:") and "refuses" in note for note in export.notes), export.notes
    pure_dp = export_plan(PLANS["tied embeddings zero2"], "deepspeed")
    assert not any(note.startswith("batch check:") for note in pure_dp.notes)
    config = json.loads(export.text)
    assert config["train_batch_size"] == 256 and config["gradient_accumulation_steps"] == 64
