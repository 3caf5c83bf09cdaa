"""fp8 plans for framework `autoplan`: searched, estimated (their memory facts held to a saved-tensor
count), run with torchao's float8 training (emulated on the CPU) and recorded.

The runs need torchao, which the side venv of `make torchtitan-0.3` has (torch 2.13.0+cpu, the newest
CPU wheel of the registry, torchao 0.18.0); tests/fp8_check.py runs there in one subprocess (one
single-process and one two-process launch), which also holds the torch backend's parallel plans to
its single-process run on that torch. Without the venv those tests fail, or skip with
AUTOPLAN_EXPORT_TEST_OPTIONAL=1; the rest run here.
"""
from __future__ import annotations

import json
import math
import os
import tempfile
from pathlib import Path

import pytest

from autoplan.specs import (
    AutoplanError, ClusterSpec, InfeasiblePlan, ModelSpec, ParallelPlan, TrainingSpec, get_framework,
)
from cost_model import builtin_profile
from cost_model.estimator import Estimator
from tests.cli_run import run_cli
from tests.side_venv import run_side, side_python

FP8_LOSS_ULP = 2.0 ** -3
"""e4m3 keeps 3 mantissa bits: an operand rounds to within half of its ulp, 2^-4 relative, and one ulp
is 2^-3. The tolerance of an fp8 loss against the unquantized one: one e4m3 ulp of the largest change
one step of training makes to the reference loss, i.e. fp8 may perturb what the model computed by no
more than its own resolution of what the model learns per step. Measured (tests/fp8_check.py, 4 steps
of a 2-layer Llama at lr 1e-2, AMD EPYC): the reference loss moves by up to 0.162 per step, so the
tolerance is 0.0203; tensorwise deviates by at most 0.0088 (step 4), rowwise by 0.0056 (step 3): 2.3x
margin. A run whose fp8 linears do not learn, or whose scaling is lost (weights of std 0.02 flush
toward e4m3's subnormals), leaves it by far more."""
FP8_PARALLEL_RTOL = 1e-3
"""A parallel fp8 plan against the single-process fp8 run of the same recipe: the same casts, in
another summation order (tensorwise amax over a DTensor is the whole tensor's). Measured: 8e-6
relative on the losses and 3e-6 on the first gradient norm; an fp8 rounding that flips with the
summation order moves one element by 2^-3 of itself, far below 1e-3 on a mean over 256 tokens."""
MODEL = ModelSpec("tiny-llama", 2, 64, 4, 2, 128, 256, max_seq_len=64)
"""tests/fp8_check.py's model: every block linear runs in fp8 (14 of them)."""
MOE = ModelSpec("tiny-moe", 2, 64, 4, 2, 128, 256, num_experts=4, num_experts_per_token=2, max_seq_len=64)
"""tests/fp8_check.py's MoE model."""


@pytest.fixture(scope="module")
def fp8_check():
    if not side_python().exists():
        if os.environ.get("AUTOPLAN_EXPORT_TEST_OPTIONAL") == "1":
            pytest.skip("no torch side venv (make torchtitan-0.3) for the fp8 runs")
        pytest.fail(f"the fp8 runs need torchao: no side venv at {side_python()}; run `make torchtitan-0.3` "
                    "(make test does), or set AUTOPLAN_EXPORT_TEST_OPTIONAL=1")
    with tempfile.TemporaryDirectory() as tmp:
        return run_side("fp8_check.py", cwd=tmp, repo_on_path=True)


def _runs(check) -> dict:
    return {r["label"]: r for r in check["runs"]}


def test_fp8_losses_track_the_unquantized_ones(fp8_check):
    runs = _runs(fp8_check)
    assert all(r["status"] == "ok" for r in runs.values()), [(r["label"], r["error"]) for r in runs.values()]
    reference = runs["reference"]["losses"]
    per_step = max(abs(b - a) for a, b in zip(reference, reference[1:]))
    tolerance = FP8_LOSS_ULP * per_step
    for label in ("tensorwise", "rowwise", "fsdp-float8-all-gather", "tp-sp"):
        losses = runs[label]["losses"]
        deviation = max(abs(f - r) for f, r in zip(losses, reference))
        assert len(losses) == len(reference) and deviation <= tolerance, (label, deviation, tolerance)
        # fp8 really ran: the casts change the numbers (measured: 0.0088 tensorwise), by more than rounding
        assert deviation > 1e-4, (label, losses, reference)
    assert runs["tensorwise"]["losses"] != runs["rowwise"]["losses"]  # the recipe reached torchao


def test_parallel_fp8_plans_reproduce_the_single_process_fp8_run(fp8_check):
    runs = _runs(fp8_check)
    single = runs["tensorwise"]
    for label in ("fsdp-float8-all-gather", "tp-sp"):
        run = runs[label]
        assert all(math.isclose(a, b, rel_tol=FP8_PARALLEL_RTOL) for a, b in zip(run["losses"], single["losses"]))
        assert math.isclose(run["grad_norms"][0], single["grad_norms"][0], rel_tol=FP8_PARALLEL_RTOL), label


def test_torch_backend_parity_on_the_side_venvs_torch(fp8_check):
    """The torch backend on the newest CPU torch of the registry (the side venv's 2.13.0+cpu; the main
    venv's 2.9.0 runs tests/test_torch_backend.py): FSDP2 ZeRO-3, TP + SP and a MoE model's expert
    parallelism under ZeRO-1 reproduce the single-process losses and gradient norms with that file's
    tolerances."""
    from tests.test_torch_backend import LOSS_RTOL, close_enough, grad_norms_close

    runs = _runs(fp8_check)
    for label in ("fsdp-unquantized", "tp-sp-unquantized", "moe-ep-fsdp-unquantized"):
        # the MoE run: experts FSDP'd over a one-rank edp group (ep = dp = 2), whose gradients torch 2.13
        # divided twice (executor/torch_backend/expert_parallel.py: FSDP now only sums, divide_expert_grads divides)
        reference = runs["moe-reference" if label.startswith("moe") else "reference"]
        run = runs[label]
        assert run["status"] == "ok" and close_enough(run["losses"], reference["losses"], LOSS_RTOL), (label, run)
        assert grad_norms_close(run["grad_norms"], reference["grad_norms"]), (label, run["grad_norms"])


def test_fp8_runs_record_their_recipe_and_linears(fp8_check):
    runs = _runs(fp8_check)
    assert runs["reference"]["fp8"] is None and runs["fsdp-unquantized"]["fp8"] is None
    want = {"tensorwise": ("tensorwise", False), "rowwise": ("rowwise", False),  # rowwise: autoplan+fp8-rowwise
            "fsdp-float8-all-gather": ("tensorwise", True), "tp-sp": ("tensorwise", False)}
    for label, (recipe, all_gather) in want.items():
        assert runs[label]["fp8"] == {"recipe": recipe, "linears": 7 * MODEL.num_layers,
                                      "float8_all_gather": all_gather, "emulated": True}, label


def _weight_copies(dtype: str, framework: str = "autoplan", model: ModelSpec = MODEL) -> float:
    training = TrainingSpec(8, 32, dtype)
    est = Estimator(model, training, ClusterSpec("h100-80gb", 2), builtin_profile("h100-80gb"),
                    framework=get_framework(framework))
    return est.memory(ParallelPlan(dp=2, zero_stage=1, num_microbatches=4), "none", 0)["weight_copies"]


def test_fp8_weight_copies_are_the_counted_ones(fp8_check):
    """Per block, under FSDP2 with the float8 all-gather, autograd keeps the fp8 linears' gathered
    weights at 1 B per parameter and one fp32 scale each, the norms in bf16, and the same activations
    as the bf16 block; the cost model's weight copies of an fp8 ZeRO-1 plan (dp=2) shrink by the
    counted difference per layer."""
    bf16, fp8 = fp8_check["saved"]["bf16"], fp8_check["saved"]["fp8"]
    linears = fp8["fp8_linear_params"]
    assert linears == 2 * 64 * 64 + 2 * 64 * 32 + 3 * 64 * 128  # wq, wo; wk, wv (2 KV heads); w1, w2, w3
    assert fp8["activations"] == bf16["activations"]
    assert fp8["fp8_weights"] == 1 * linears + 4 * 7 and fp8["weights"] == bf16["weights"] - 2 * linears
    counted_saving = bf16["weights"] - fp8["weights"] - fp8["fp8_weights"]
    modelled_saving = (_weight_copies("bf16") - _weight_copies("fp8")) / MODEL.num_layers
    assert abs(modelled_saving - counted_saving) <= 1e-3 * counted_saving, (modelled_saving, counted_saving)


def test_fp8_moe_weight_copies_are_the_counted_ones(fp8_check):
    """A MoE block under FSDP2 with the float8 all-gather keeps its 4 attention linears' gathered
    weights in fp8 (1 B and one fp32 scale each) and its router and norms in bf16; the routed experts'
    copies are bf16 either way. The cost model's fp8 saving per layer is the attention linears' byte
    each, leaving out the router (fp8_linear_share) and the scales (4 B per linear, not modelled)."""
    bf16, fp8 = fp8_check["saved"]["moe_bf16"], fp8_check["saved"]["moe_fp8"]
    attention = 2 * 64 * 64 + 2 * 64 * 32  # wq, wo; wk, wv (2 KV heads)
    assert fp8["fp8_linear_params"] == attention and fp8["fp8_weights"] == attention + 4 * 4
    router_and_norms = 64 * MOE.num_experts + 2 * 64
    assert fp8["weights"] == 2 * router_and_norms and bf16["weights"] == 2 * (attention + router_and_norms)
    assert fp8["activations"] == bf16["activations"]
    counted_saving = bf16["weights"] - fp8["weights"] - fp8["fp8_weights"]
    modelled_saving = (_weight_copies("bf16", model=MOE) - _weight_copies("fp8", model=MOE)) / MOE.num_layers
    assert abs(modelled_saving - counted_saving) <= 4 * 4, (modelled_saving, counted_saving)


def test_rowwise_gathers_bf16_weights():
    assert _weight_copies("fp8", "autoplan+fp8-rowwise") == _weight_copies("bf16")
    assert get_framework("autoplan+fp8-rowwise").fp8_rowwise


def test_autoplan_searches_fp8_plans(capsys, tmp_path):
    out = tmp_path / "plan.json"
    code, _, err = run_cli(capsys, "search", "--model", "llama-3-8b", "--gpus", "8", "--gpu", "h100-80gb",
                                    "--dtype", "fp8", "-o", out)
    doc = json.loads(out.read_text())
    assert code == 0 and doc["framework"] == "autoplan" and doc["training"]["dtype"] == "fp8", err
    code, text, err = run_cli(capsys, "estimate", out)
    assert code in (0, 1) and "fp8" in text, err


def test_fp8_moe_trains_with_its_experts_in_bf16(fp8_check):
    """A MoE model's attention linears run in fp8 and its router and grouped experts in the compute
    dtype (Framework.fp8_expert_gemms False for `autoplan`): 8 fp8 linears over 2 layers, not 14. Its
    fp8 losses track its unquantized ones within one e4m3 ulp of a step's change (FP8_LOSS_ULP), and
    under ep 2 with FSDP2 ZeRO-3 and the float8 all-gather, and under tp 2 + SP, the parallel runs
    reproduce the single-process fp8 run as the dense plans do (FP8_PARALLEL_RTOL; measured 6e-6 and
    5e-5 on the losses). Before divide_expert_grads the ep run's experts learned from half their
    gradient on torch 2.13 and its losses parted by 5e-4."""
    runs = _runs(fp8_check)
    reference, single = runs["moe-reference"]["losses"], runs["moe-tensorwise"]
    tolerance = FP8_LOSS_ULP * max(abs(b - a) for a, b in zip(reference, reference[1:]))
    for label in ("moe-tensorwise", "moe-ep-fsdp", "moe-tp-sp"):
        run = runs[label]
        assert run["status"] == "ok", (label, run["error"])
        assert run["fp8"]["linears"] == 4 * MOE.num_layers, (label, run["fp8"])  # wq, wk, wv, wo per layer
        deviation = max(abs(f - r) for f, r in zip(run["losses"], reference))
        assert len(run["losses"]) == len(reference) and 1e-4 < deviation <= tolerance, (label, deviation, tolerance)
        assert all(math.isclose(a, b, rel_tol=FP8_PARALLEL_RTOL) for a, b in zip(run["losses"], single["losses"]))
        assert math.isclose(run["grad_norms"][0], single["grad_norms"][0], rel_tol=FP8_PARALLEL_RTOL), label
    assert runs["moe-ep-fsdp"]["fp8"]["float8_all_gather"]


def test_fp8_with_latent_attention_is_refused_with_its_rule():
    mla = get_framework("megatron-core")  # runs it; autoplan's executor would leave MLA's projections bf16
    model = ModelSpec("tiny-mla", 2, 64, 4, 4, 128, 256, num_experts=4, num_experts_per_token=2, max_seq_len=64,
                      q_lora_rank=32, kv_lora_rank=32, qk_rope_head_dim=16, head_dim=32)
    mla.check_problem(model, TrainingSpec(8, 32, "fp8"))
    with pytest.raises(InfeasiblePlan, match="without multi-head latent attention only"):
        get_framework("autoplan").check_problem(model, TrainingSpec(8, 32, "fp8"))
    get_framework("autoplan").check_problem(MOE, TrainingSpec(8, 32, "fp8"))  # MoE without MLA: planned


def test_bad_fp8_recipe_is_one_line():
    from executor import RunOptions

    with pytest.raises(AutoplanError, match="--fp8-recipe must be one of"):
        RunOptions(fp8_recipe="blockwise")


def _tiny_plan(capsys, tmp_path, dtype: str):
    out = tmp_path / f"{dtype}.json"
    code, _, err = run_cli(capsys, "search", "--model", "notebooks/data/tiny-96x4", "--gpus", "1", "--gpu",
                           "h100-80gb", "--global-batch", "4", "--seq-len", "64", "--dtype", dtype, "-o", out)
    assert code == 0, err
    return out


def test_fp8_run_refusals_are_one_line(capsys, tmp_path, monkeypatch):
    """Before any process starts: an fp8 plan where torchao does not import, --fp8-recipe on a bf16 plan."""
    import builtins
    import importlib.util

    monkeypatch.chdir(Path(__file__).resolve().parents[1])
    real_import = builtins.__import__

    def no_torchao(name, *args, **kwargs):
        if name.startswith("torchao"):
            raise ModuleNotFoundError("No module named 'torchao'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_torchao)
    assert importlib.util.find_spec("torch") is not None
    code, _, err = run_cli(capsys, "run", _tiny_plan(capsys, tmp_path, "fp8"), "--steps", "2", "-o", "")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "fp8 plans need torchao" in err, err
    code, _, err = run_cli(capsys, "run", _tiny_plan(capsys, tmp_path, "bf16"), "--fp8-recipe", "rowwise", "-o", "")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "--fp8-recipe rowwise is for fp8 plans" in err, err
