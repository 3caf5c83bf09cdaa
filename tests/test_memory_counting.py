"""The cost model's activation terms for framework `autoplan` against what the executor's model
really saves for backward.

On the CPU, under bf16 autocast (as the executor runs on a GPU), saved-tensor hooks record every
tensor autograd keeps during the forward of executor/model.py; each storage is counted once and
attributed to the module whose forward was running (embedding, each layer, head + loss). Weights,
their autocast casts and buffers (the RoPE table) are states, not activations, and are left out.
The cost model (cost_model/eager_activations.py) must agree within 3% per layer, per recompute
policy, and for the head/loss in one process, and to the byte on every rank of the multi-process
runs. When the executor changes what it saves, this test says where.
"""
from __future__ import annotations

import collections
import dataclasses

import pytest

torch = pytest.importorskip("torch")

from autoplan.specs import ModelSpec  # noqa: E402
from cost_model import eager_activations as eager  # noqa: E402
from tests.memory_counting_ranks import from_parameter  # noqa: E402


LLAMA_LIKE = ModelSpec(name="llama-like", num_layers=2, hidden_size=256, num_heads=8, num_kv_heads=2,
                       ffn_hidden_size=704, vocab_size=1000, mlp="swiglu", norm="rmsnorm", position="rope",
                       tied_embeddings=True, max_seq_len=512)
QWEN_LIKE = ModelSpec(name="qwen-like", num_layers=2, hidden_size=192, num_heads=6, num_kv_heads=6,
                      ffn_hidden_size=512, vocab_size=1500, mlp="swiglu", norm="rmsnorm", position="rope",
                      tied_embeddings=False, qkv_bias=True, max_seq_len=512)
GEGLU_LIKE = ModelSpec(name="geglu-like", num_layers=2, hidden_size=256, num_heads=8, num_kv_heads=4,
                       ffn_hidden_size=640, vocab_size=1200, mlp="geglu", norm="rmsnorm", position="rope",
                       tied_embeddings=True, max_seq_len=512)
GPT_LIKE = ModelSpec(name="gpt-like", num_layers=2, hidden_size=256, num_heads=8, num_kv_heads=8,
                     ffn_hidden_size=1024, vocab_size=1000, mlp="gelu", norm="layernorm", position="learned",
                     tied_embeddings=True, linear_bias=True, max_seq_len=512)


def saved_bytes(spec: ModelSpec, b: int, s: int, policy: str, kernels=None, bf16_weights: bool = False,
                autocast: bool = True) -> dict:
    """Bytes saved for backward per scope ("embedding", "layer0", ..., "head") in one forward + loss.
    `kernels` None: the executor before its speed-ups (K/V repeated, fp32 RoPE, whole fp32 logits).
    `bf16_weights`: the model's weights in bf16 and no autocast, as the forward sees FSDP2's
    mixed-precision copies; otherwise fp32 weights under bf16 autocast, or (`autocast` False) in fp32
    throughout, as the executor runs on a CPU."""
    import torch.nn.functional as F

    from executor.blocks import Kernels
    from executor.model import build_model
    from executor.torch_backend.parallelize import apply_recompute

    torch.manual_seed(0)
    old = kernels is None
    model = build_model(spec, "cpu", Kernels(native_gqa=False, rope_in_compute_dtype=False, loss_chunk_tokens=0)
                        if old else kernels)
    apply_recompute(model, policy, spec.num_layers)
    model.init_weights(0)
    if bf16_weights:
        model.to(torch.bfloat16)
    states = {t.untyped_storage().data_ptr() for t in (*model.buffers(), *model.parameters())}
    scope, seen, per_scope = ["embedding"], set(), collections.Counter()
    for key, layer in model.layers.items():
        layer.register_forward_pre_hook(lambda *_, key=key: scope.__setitem__(0, f"layer{key}"))
    model.norm.register_forward_pre_hook(lambda *_: scope.__setitem__(0, "head"))

    def pack(t):
        storage = t.untyped_storage()
        if storage.data_ptr() not in seen and storage.data_ptr() not in states and not from_parameter(t):
            seen.add(storage.data_ptr())
            per_scope[scope[0]] += storage.nbytes()
        return t

    tokens = torch.randint(0, spec.vocab_size, (b, s))
    labels = torch.randint(0, spec.vocab_size, (b, s))
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast and not bf16_weights), \
            torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        if old:
            logits = model(tokens)
            scope[0] = "head"
            F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten())
        else:
            model(tokens, labels=labels)
    return dict(per_scope)


def cpu_rms_norm_is_fused() -> bool:
    """Whether torch's RMSNorm on this CPU saves only its input and statistics (a fused kernel), or
    also its normalized output (the composite of torch 2.9)."""
    norm = torch.nn.RMSNorm(64)
    x = torch.randn(4, 64, requires_grad=True)
    sizes = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: sizes.append(t.numel()) or t, lambda t: t):
        norm(x * 1.0)
    return sizes.count(x.numel()) <= 1


def predicted(spec: ModelSpec, b: int, s: int, policy: str, recipe) -> dict:
    if policy == "full":
        layer = eager.full_layer_saved(spec, b, s, 1, False, recipe)
    elif policy == "selective":
        layer = eager.selective_layer_saved(spec, b, s, 1, False, recipe)
    else:
        layer = eager.layer_saved(spec, b, s, 1, False, recipe)
    return {"embedding": sum(eager.embedding_saved(spec, b, s).values()), "layer": sum(layer.values()),
            "head": sum(eager.head_saved(spec, b, s, 1, False, recipe).values())}


def _assert_counts_agree(spec, counted, want, what, rel=0.03):
    assert set(counted) == {"embedding", "head", *(f"layer{i}" for i in range(spec.num_layers))}
    for i in range(spec.num_layers):
        assert counted[f"layer{i}"] == pytest.approx(want["layer"], rel=rel), (what, i, counted, want)
    assert counted["head"] == pytest.approx(want["head"], rel=rel), (what, counted, want)
    assert counted["embedding"] == pytest.approx(want["embedding"], rel=rel), (what, counted, want)


# Multi-head latent attention (DeepSeek-V2's block, executor/blocks.py LatentAttention): q through a
# low-rank latent, K/V from one compressed latent plus a shared RoPE key, values narrower than q/k.
MLA_LIKE = ModelSpec(name="mla-like", num_layers=2, hidden_size=256, num_heads=8, num_kv_heads=8,
                     ffn_hidden_size=704, vocab_size=1000, mlp="swiglu", norm="rmsnorm", position="rope",
                     tied_embeddings=True, max_seq_len=512, head_dim=48, v_head_dim=32, q_lora_rank=96,
                     kv_lora_rank=64, qk_rope_head_dim=16)
# Without the query latent, and with values as wide as q/k (no padding: V is a view beside the key).
MLA_PLAIN_Q = dataclasses.replace(MLA_LIKE, name="mla-plain-q", q_lora_rank=0, v_head_dim=0)

SPECS = [LLAMA_LIKE, QWEN_LIKE, GEGLU_LIKE, GPT_LIKE, MLA_LIKE, MLA_PLAIN_Q]
POLICIES = ["none", "selective", "full"]


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.name)
@pytest.mark.parametrize("policy", POLICIES)
def test_cost_model_counts_what_the_old_executor_saves(spec, policy):
    """Recipe "eager-autocast" (framework autoplan-91ee867, the shipped H100 records)."""
    b, s = 2, 128
    recipe = eager.recipe_for("eager-autocast", spec, None, fused_norm=cpu_rms_norm_is_fused())
    _assert_counts_agree(spec, saved_bytes(spec, b, s, policy), predicted(spec, b, s, policy, recipe), policy)


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.name)
@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("bf16_weights", [True, False], ids=["fsdp-bf16-copies", "autocast"])
def test_cost_model_counts_what_the_executor_saves(spec, policy, bf16_weights):
    """Recipe "eager" (framework autoplan): today's executor with its default kernels, in both compute
    modes a plan can run in (one layer's K/V unrepeated, the chunked loss at tp = 1)."""
    from executor.blocks import Kernels
    from executor.loss import auto_chunk_tokens

    b, s = 2, 128
    kernels = Kernels(loss_chunk_tokens=auto_chunk_tokens(spec.vocab_size))
    recipe = eager.EagerRecipe(autocast=not bf16_weights, native_gqa=True, chunked_loss=True,
                               rope_table_casts=not bf16_weights and spec.position == "rope",
                               fused_norm=cpu_rms_norm_is_fused())
    counted = saved_bytes(spec, b, s, policy, kernels, bf16_weights)
    _assert_counts_agree(spec, counted, predicted(spec, b, s, policy, recipe), (policy, bf16_weights))


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.name)
@pytest.mark.parametrize("policy", POLICIES)
def test_cost_model_counts_what_the_executor_saves_on_a_cpu(spec, policy):
    """A plan predicted for a CPU profile: the executor runs fp32 there (no autocast, no mixed
    precision off CUDA), so every activation the bf16 recipes count at 2 B is 4 B."""
    from autoplan.specs import ParallelPlan
    from executor.blocks import Kernels
    from executor.loss import auto_chunk_tokens

    b, s = 2, 128
    kernels = Kernels(loss_chunk_tokens=auto_chunk_tokens(spec.vocab_size))
    recipe = eager.recipe_for("eager", spec, ParallelPlan(), fused_norm=cpu_rms_norm_is_fused(), on_cpu=True)
    assert not recipe.autocast and recipe.compute_bytes == 4
    counted = saved_bytes(spec, b, s, policy, kernels, autocast=False)
    _assert_counts_agree(spec, counted, predicted(spec, b, s, policy, recipe), (policy, "fp32"))


COMPUTE_MODES = {  # (MoE, dp, cp, zero) -> autocast over fp32 weights, from the rule's sentences (not its code)
    # dense: FSDP2 wraps at one replica (any ZeRO) and where ZeRO shards over several; DDP at ZeRO 0 does not
    (False, 1, 1, 0): False, (False, 1, 1, 3): False, (False, 2, 1, 0): True, (False, 2, 1, 1): False,
    (False, 2, 1, 3): False, (False, 1, 2, 0): True, (False, 1, 2, 2): False,
    # MoE: autocast at one replica and without ZeRO; bf16 copies only where ZeRO shards over replicas
    (True, 1, 1, 0): True, (True, 1, 1, 3): True, (True, 2, 1, 0): True, (True, 2, 1, 1): False,
    (True, 2, 1, 3): False, (True, 1, 2, 0): True, (True, 1, 2, 2): False,
}


def test_cost_model_knows_which_compute_mode_a_plan_runs_in():
    """The cost model prices the compute mode the executor runs (autoplan.specs.plan.compute_mode, read
    by both): FSDP2's bf16 weight copies or autocast over fp32 weights, per docs of the rule."""
    from autoplan.specs import ParallelPlan
    from autoplan.specs.plan import compute_mode

    moe = ModelSpec(name="moe-like", num_layers=2, hidden_size=256, num_heads=8, num_kv_heads=8,
                    ffn_hidden_size=512, vocab_size=1000, num_experts=4, num_experts_per_token=2)
    for (is_moe, dp, cp, zero), autocast in COMPUTE_MODES.items():
        spec, plan = (moe if is_moe else LLAMA_LIKE), ParallelPlan(dp=dp, cp=cp, zero_stage=zero)
        assert eager.autocast_for(spec, plan) == autocast, (spec.name, dp, cp, zero)
        assert compute_mode(plan, spec).fsdp == (zero > 0 and dp * cp > 1 or dp * cp == 1 and not is_moe)
    # without the bf16-params speed-up FSDP2 wraps only where ZeRO shards, and never hands bf16 copies
    assert compute_mode(ParallelPlan(), LLAMA_LIKE, bf16_params=False) == (False, False)


def test_recompute_policies_save_less_in_order():
    counted = {p: saved_bytes(LLAMA_LIKE, 1, 64, p)["layer0"] for p in ("none", "selective", "full")}
    assert counted["none"] > counted["selective"] > counted["full"] > 0


def test_speedups_save_less_than_the_old_executor():
    """Native GQA, the chunked loss and bf16 weight copies each leave fewer bytes saved."""
    from executor.blocks import Kernels
    from executor.loss import auto_chunk_tokens

    old = saved_bytes(LLAMA_LIKE, 2, 128, "none")
    new = saved_bytes(LLAMA_LIKE, 2, 128, "none", Kernels(loss_chunk_tokens=auto_chunk_tokens(1000)), True)
    assert new["layer0"] < old["layer0"] and new["head"] < old["head"] / 2


# -- per rank, in real multi-process gloo runs with TP, TP+SP and CP ------------------------------

RANK_B, RANK_S = 2, 128
# Framework autoplan runs tied embeddings at tp = 1 only (tied_embeddings_one_stage): the TP plans'
# models have their own head.
LLAMA_UNTIED = dataclasses.replace(LLAMA_LIKE, name="llama-untied", tied_embeddings=False)
GEGLU_UNTIED = dataclasses.replace(GEGLU_LIKE, name="geglu-untied", tied_embeddings=False)
MLA_UNTIED = dataclasses.replace(MLA_LIKE, name="mla-untied", tied_embeddings=False)
RANK_PLANS = {  # nproc -> [(model, plan)]; the compute mode follows from the plan (specs.plan.compute_mode)
    2: [(LLAMA_UNTIED, dict(tp=2)),                                      # FSDP2 bf16 copies
        (LLAMA_UNTIED, dict(tp=2, sequence_parallel=True)),
        (LLAMA_LIKE, dict(cp=2)),                                        # DDP: autocast
        (LLAMA_LIKE, dict(cp=2, zero_stage=3))],                         # FSDP2 bf16 copies
    # (GPT-like at tp 4 with SP is not one: the executor does not split learned positions over the
    # sequence, Framework.learned_positions_split_sequence, and every rank failed in the embedding.)
    4: [(LLAMA_UNTIED, dict(dp=2, tp=2)),                                # DDP: autocast
        (MLA_UNTIED, dict(dp=2, tp=2)),                                  # MLA: heads over tp, latents whole
        (MLA_UNTIED, dict(dp=2, tp=2, sequence_parallel=True, zero_stage=3)),
        (LLAMA_UNTIED, dict(dp=2, tp=2, sequence_parallel=True, zero_stage=3)),
        (GEGLU_UNTIED, dict(tp=4, sequence_parallel=True)),              # 8 heads, 4 KV heads
        (LLAMA_UNTIED, dict(tp=2, cp=2, sequence_parallel=True))],
}


def _rank_plan(model, parallel, policy):
    from autoplan.specs import ParallelPlan

    return ParallelPlan(**parallel, recompute=policy, recompute_num_layers=model.num_layers if policy == "full" else 0,
                        num_microbatches=1)


def test_rank_plans_are_ones_the_executor_runs():
    """Each counted plan passes framework `autoplan`'s rules (what executor/torch_backend/checks.py
    asks before a run), so the count measures plans the planner can hand out."""
    from autoplan.specs import TrainingSpec, get_framework

    for nproc, plans in RANK_PLANS.items():
        for model, parallel in plans:
            for policy in POLICIES:
                plan = _rank_plan(model, parallel, policy)
                assert plan.num_gpus == nproc, (model.name, parallel)
                get_framework("autoplan").check(model, TrainingSpec(RANK_B * plan.dp, RANK_S, "bf16"), plan)


def launch_counts(nproc: int, cases: list) -> list[list[dict]]:
    """Run tests/memory_counting_ranks.py on `nproc` local gloo processes (the local launcher's
    environment, executor/torch_backend/launch.py) over `cases`; per case, each rank's count."""
    import json
    import os
    import subprocess
    import sys
    import tempfile
    from pathlib import Path

    from executor import RunOptions
    from executor.torch_backend.launch import wait_for_ranks, worker_env, free_port, stop_processes

    root = Path(__file__).resolve().parent.parent
    with tempfile.TemporaryDirectory(prefix="autoplan-count-") as tmp:
        plans = Path(tmp) / "cases.json"
        plans.write_text(json.dumps([{"model": m.to_dict(), "plan": p.to_dict(), "policy": p.recompute,
                                      "b": RANK_B, "s": RANK_S} for m, p in cases]))
        port, procs = free_port(), []
        try:
            for rank in range(nproc):
                env = worker_env(rank, nproc, port, RunOptions())
                env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(root), env.get("PYTHONPATH")]))
                procs.append(subprocess.Popen([sys.executable, str(root / "tests" / "memory_counting_ranks.py"),
                                               tmp, str(plans)], env=env, cwd=root))
            codes = wait_for_ranks(procs)
        finally:
            stop_processes(procs)
        assert codes == [0] * nproc, codes
        per_rank = [json.loads((Path(tmp) / f"rank{r}.json").read_text()) for r in range(nproc)]
    return [[per_rank[r][i] for r in range(nproc)] for i in range(len(cases))]


def predicted_per_rank(spec, plan, policy, recipe) -> dict:
    """The recipe's per-rank sums as cost_model/stage_memory.py asks for them: s / cp tokens of the
    micro-batch, the plan's tp and sp."""
    b, s, tp, sp = RANK_B, RANK_S // plan.cp, plan.tp, plan.sequence_parallel
    layer = {"full": eager.full_layer_saved, "selective": eager.selective_layer_saved}.get(policy, eager.layer_saved)
    return {"embedding": sum(eager.embedding_saved(spec, b, s).values()),
            "layer": sum(layer(spec, b, s, tp, sp, recipe).values()),
            "head": sum(eager.head_saved(spec, b, s, tp, sp, recipe).values())}


RANK_CASES = [(nproc, m, p, policy) for nproc, plans in RANK_PLANS.items() for m, p in plans for policy in POLICIES]


def test_context_parallel_terms_by_hand():
    """Llama-like (h 256, 8 heads of 32, 2 KV heads), b 2, s 128 over cp 2: 64 local tokens per
    sequence. Without recompute, SDPA keeps the gathered K and V of all 2 x 128 tokens repeated to
    8 heads (2 B x 256 x 256 each) and the (64 x 128) causal mask in bf16; with the core
    checkpointed, only the local, unrepeated K and V (2 B x 128 x 64). At tp 2 the heads halve; the
    mask, broadcast over heads, does not. (These are the measured gaps of the multi-process count
    before the terms existed: 245760 bytes per layer at tp 1, 131072 at tp 2.)"""
    from autoplan.specs import ParallelPlan

    recipe = eager.recipe_for("eager", LLAMA_LIKE, ParallelPlan(cp=2))
    none = eager.layer_saved(LLAMA_LIKE, 2, 64, 1, False, recipe)
    assert (none["k"], none["v"], none["cp_mask"]) == (131072, 131072, 16384)
    plain = eager.layer_saved(LLAMA_LIKE, 2, 64, 1, False, dataclasses.replace(recipe, context_shards=1))
    assert sum(none.values()) - sum(plain.values()) == 245760
    tp2 = eager.layer_saved(LLAMA_UNTIED, 2, 64, 2, True, dataclasses.replace(recipe, vocab_shards=2))
    assert (tp2["k"], tp2["v"], tp2["cp_mask"]) == (65536, 65536, 16384)
    selective = eager.selective_layer_saved(LLAMA_LIKE, 2, 64, 1, False, recipe)
    assert (selective["k"], selective["v"]) == (16384, 16384) and "cp_mask" not in selective


def _case_id(case) -> str:
    nproc, model, parallel, policy = case
    return f"{nproc}proc-{model.name}-" + "-".join(f"{k}{v}" for k, v in parallel.items()) + f"-{policy}"


@pytest.fixture(scope="module")
def rank_counts():
    """One launch per process count, on first use."""
    counts = {}

    def get(case):
        if _case_id(case) not in counts:
            cases = [c for c in RANK_CASES if c[0] == case[0]]
            results = launch_counts(case[0], [(m, _rank_plan(m, p, policy)) for _, m, p, policy in cases])
            counts.update(zip(map(_case_id, cases), results))
        return counts[_case_id(case)]
    return get


@pytest.mark.slow
@pytest.mark.parametrize("case", RANK_CASES, ids=_case_id)
def test_cost_model_counts_what_each_rank_saves(case, rank_counts):
    """Recipe "eager" per rank under TP, TP+SP and CP, in 2- and 4-process gloo runs: every rank's
    saved bytes against eager_activations at the plan's tp, sp and s / cp, in the compute mode
    autoplan.specs.plan.compute_mode gives the plan."""
    nproc, model, parallel, policy = case
    plan = _rank_plan(model, parallel, policy)
    # the counting runs are eager (no torch.compile on a CPU)
    recipe = eager.recipe_for("eager", model, plan, fused_norm=cpu_rms_norm_is_fused(), compiled=False)
    want = predicted_per_rank(model, plan, policy, recipe)
    for rank, got in enumerate(rank_counts(case)):
        assert got["autocast"] == recipe.autocast, (rank, got)
        # Exact: a storage's bytes are an integer on any CPU, and every term is a whole tensor. (At
        # 3%, a q term left undivided by tp, 64 KiB of a 2.2 MB layer, went through.)
        _assert_counts_agree(model, got["counted"], want, (_case_id(case), f"rank {rank}"), rel=0)
