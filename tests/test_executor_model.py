"""The executor's model, data, schedule and record helpers (single process, CPU, fast)."""
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from autoplan.specs import AutoplanError, ModelSpec
from executor import RunOptions, get_backend
from executor.data import FileTokens, SyntheticTokens, batch, local_slice, open_tokens
from executor.model import build_model, check_buildable, count_params, model_notes
from executor.moe import MoEFeedForward
from autoplan.specs.flops import model_flops_per_token
from autoplan.specs.gpus import datasheet_peak_flops_per_s as peak_flops_per_s
from executor.schedule import lr_at

LLAMA = ModelSpec("tiny-llama", 2, 64, 4, 2, 128, 256, max_seq_len=64)
QWEN = ModelSpec("tiny-qwen", 2, 64, 4, 2, 128, 256, qkv_bias=True, max_seq_len=64)
GPT = ModelSpec("tiny-gpt", 2, 64, 4, 4, 256, 256, mlp="gelu", norm="layernorm", position="learned",
                tied_embeddings=True, linear_bias=True, max_seq_len=64)
BLOOM = ModelSpec("tiny-bloom", 2, 64, 4, 4, 256, 256, mlp="gelu", norm="layernorm", position="alibi",
                  linear_bias=True, max_seq_len=64)
MOE = ModelSpec("tiny-moe", 2, 32, 4, 2, 64, 256, num_experts=4, num_experts_per_token=2, max_seq_len=64)


def _materialized(spec, seed=0):
    model = build_model(spec)
    model.to_empty(device="cpu")
    model.init_weights(seed)
    return model


@pytest.mark.parametrize("spec", [LLAMA, QWEN, GPT, BLOOM, MOE], ids=lambda s: s.name)
def test_numel_equals_independent_count_and_forward_runs(spec):
    model = _materialized(spec)
    assert count_params(model) == spec.num_params
    tokens = torch.randint(0, spec.vocab_size, (2, 16))
    logits = model(tokens)
    assert logits.shape == (2, 16, spec.vocab_size) and logits.dtype == torch.float32
    # At init the prediction is close to uniform: loss on unrelated labels near ln(vocab).
    labels = torch.randint(0, spec.vocab_size, (2, 16))
    loss = F.cross_entropy(logits.flatten(0, 1), labels.flatten())
    assert abs(loss.item() - math.log(spec.vocab_size)) < 0.5


def test_real_size_on_meta_costs_nothing():
    llama70 = ModelSpec("llama-2-70b", 80, 8192, 64, 8, 28672, 32000)
    model = build_model(llama70)
    assert count_params(model) == llama70.num_params
    assert all(p.is_meta for p in model.parameters())


def test_init_depends_only_on_seed_and_name():
    a, b, c = _materialized(LLAMA, 1), _materialized(LLAMA, 1), _materialized(LLAMA, 2)
    sa, sb, sc = a.state_dict(), b.state_dict(), c.state_dict()
    assert all(torch.equal(sa[k], sb[k]) for k in sa)
    assert not torch.equal(sa["layers.0.attention.wq.weight"], sc["layers.0.attention.wq.weight"])
    # A pipeline stage holding only layer 1 gets the same layer-1 weights.
    stage = build_model(LLAMA)
    del stage.layers["0"]
    stage.tok_embeddings = None
    stage.to_empty(device="cpu")
    stage.init_weights(1)
    assert torch.equal(stage.state_dict()["layers.1.feed_forward.w2.weight"], sa["layers.1.feed_forward.w2.weight"])
    assert sa["layers.0.attention_norm.weight"].eq(1).all()


def test_causality_and_tied_embeddings():
    model = _materialized(GPT)
    assert model.output.weight is model.tok_embeddings.weight
    tokens = torch.randint(0, 256, (1, 12))
    changed = tokens.clone()
    changed[0, 8] = (changed[0, 8] + 1) % 256
    before, after = model(tokens), model(changed)
    assert torch.allclose(before[0, :8], after[0, :8], atol=1e-6)
    assert not torch.allclose(before[0, 8:], after[0, 8:], atol=1e-4)


def test_moe_only_where_the_backend_runs_it_and_alibi_noted():
    with pytest.raises(AutoplanError, match="mixture of experts.*--backend torch"):
        check_buildable(MOE)  # what the XLA backend asks
    check_buildable(MOE, moe=True)
    with pytest.raises(AutoplanError, match="SwiGLU MLPs without biases"):
        build_model(ModelSpec("gelu-moe", 2, 32, 4, 4, 64, 256, mlp="gelu", num_experts=4))
    assert "RoPE" in model_notes(BLOOM)[0] and not model_notes(LLAMA)


def test_moe_block_equals_a_loop_over_each_tokens_top_k_experts():
    torch.manual_seed(0)
    model = _materialized(MOE)
    block = model.layers["0"].feed_forward
    assert isinstance(block, MoEFeedForward)
    x = torch.randn(3, 5, MOE.hidden_size)
    ex = block.experts
    expected = torch.zeros_like(x)
    for b in range(3):
        for t in range(5):
            logits = x[b, t] @ block.router.weight.t()
            top = sorted(range(MOE.num_experts), key=lambda e: -logits[e].item())[:MOE.num_experts_per_token]
            gates = torch.exp(logits[top]) / torch.exp(logits[top]).sum()  # softmax over the top k
            for gate, e in zip(gates, top):
                hidden = F.silu(ex.w1[e] @ x[b, t]) * (ex.w3[e] @ x[b, t])
                expected[b, t] += gate * (ex.w2[e] @ hidden)
    assert torch.allclose(block(x), expected, atol=1e-6)
    # The tokens spread over several experts, so the sort-and-split path is exercised.
    _, chosen = block.router(x.reshape(-1, MOE.hidden_size)).topk(2, dim=-1)
    assert chosen.unique().numel() == MOE.num_experts


def test_expert_parallel_rank_keeps_its_slice_of_the_same_experts():
    from executor.torch_backend.expert_parallel import expert_major_order

    full = _materialized(MOE)
    part = build_model(MOE)
    part.layers["1"].feed_forward.experts.keep_experts(2, 2)  # ep rank 1 of 2
    part.to_empty(device="cpu")
    part.init_weights(0)
    for name in ("w1", "w2", "w3"):
        whole = getattr(full.layers["1"].feed_forward.experts, name)
        assert torch.equal(getattr(part.layers["1"].feed_forward.experts, name), whole[2:4])
    assert full.layers["1"].feed_forward.experts.w2.std() < full.layers["1"].feed_forward.experts.w1.std()
    # Rows from 2 source ranks x 2 local experts, regrouped expert-major: counts [[1, 2], [3, 0]]
    # lay out rows 0 | 1 2 | 3 4 5 | - (source 0: e0, e1; source 1: e0, e1) -> e0: 0, 3 4 5; e1: 1 2.
    assert expert_major_order(torch.tensor([[1, 2], [3, 0]])).tolist() == [0, 3, 4, 5, 1, 2]


def test_data_is_a_function_of_seed_step_and_sequence(tmp_path):
    source = SyntheticTokens(seed=3, vocab_size=256)
    x, y = batch(source, step=5, first=0, count=4, seq_len=32)
    assert torch.equal(x[:, 1:], y[:, :-1])
    first, count = local_slice(4, dp=2, dp_rank=1)
    x_rank1, _ = batch(source, 5, first, count, 32)
    assert torch.equal(x_rank1, x[2:])
    assert not torch.equal(batch(source, 6, 0, 4, 32)[0], x)
    path = tmp_path / "tokens.bin"
    np.arange(500, dtype=np.uint32).tofile(path)
    tokens = open_tokens(str(path), "uint32", seed=0, vocab_size=1000)
    fx, fy = batch(tokens, 0, 0, 2, 16)
    assert torch.equal(fy - fx, torch.ones_like(fx))
    with pytest.raises(AutoplanError, match="does not exist"):
        FileTokens(str(tmp_path / "missing.bin"), "uint16", 0, 256)
    with pytest.raises(AutoplanError, match="outside the model's vocab_size"):
        batch(open_tokens(str(path), "uint32", 0, vocab_size=10), 0, 0, 1, 16)


def test_schedule_warms_up_then_decays_to_min_lr():
    lrs = [lr_at(s, 1.0, 0.1, warmup=4, total_steps=20) for s in range(20)]
    assert lrs[:4] == [0.25, 0.5, 0.75, 1.0]
    assert all(a >= b for a, b in zip(lrs[4:], lrs[5:]))
    assert lr_at(20, 1.0, 0.1, 4, 20) == pytest.approx(0.1)


def test_options_and_registry_reject_bad_input():
    with pytest.raises(AutoplanError, match="warmup-steps"):
        RunOptions(steps=2, warmup_steps=2)
    with pytest.raises(AutoplanError, match="checkpoint-dir"):
        RunOptions(resume=True)
    with pytest.raises(AutoplanError, match="saves nothing without --checkpoint-every"):
        RunOptions(checkpoint_dir="ckpt")
    with pytest.raises(AutoplanError, match="--lr-warmup must not be negative"):
        RunOptions(warmup=-1)
    with pytest.raises(AutoplanError, match="unknown backend 'jax'"):
        get_backend("jax")


def test_flops_and_peaks():
    # PaLM appendix B: 6N + 12*L*H*Q*T per token.
    # The one convention (autoplan.specs.flops): 6 x the matmul parameters (not the embedding
    # lookup) + the attention matmuls (PaLM appendix B: 12*L*H*Q*T).
    embedding = LLAMA.vocab_size * LLAMA.hidden_size
    assert model_flops_per_token(LLAMA, 32) == 6 * (LLAMA.num_params - embedding) + 12 * 2 * 4 * 16 * 32
    assert peak_flops_per_s("NVIDIA H100 80GB HBM3", "bf16") == 989.5e12
    assert peak_flops_per_s("NVIDIA H100 PCIe", "bf16") == 756.5e12
    assert peak_flops_per_s("cpu", "fp32") == 0.0


def _loss_and_grads(model, tokens, labels):
    from executor.saved_bytes import saved_bytes

    params = dict(model.named_parameters())
    loss, saved = saved_bytes(lambda: model(tokens, labels=labels), list(params.values()))
    grads = torch.autograd.grad(loss, list(params.values()))
    return loss, dict(zip(params, grads)), saved


@pytest.mark.parametrize("spec", [LLAMA, GPT], ids=lambda s: s.name)
def test_speedups_compute_the_same_loss_and_grads_and_save_fewer_bytes(spec):
    """Each kernel choice gives the plain model's loss and gradients to fp32 rounding, and the
    bytes autograd saves for the backward (saved-tensor hooks) drop by exactly what it avoids:
    the fp32 log-softmax over the whole vocabulary (chunked loss), the repeated K/V heads (GQA)."""
    from executor.model import Kernels

    batch_size, seq_len = 2, 32
    tokens = torch.randint(0, spec.vocab_size, (batch_size, seq_len), generator=torch.Generator().manual_seed(0))
    labels = tokens.roll(-1, dims=1)
    plain = Kernels(native_gqa=False, rope_in_compute_dtype=False, loss_chunk_tokens=0)
    results = {}
    for name, kernels in {"plain": plain, "gqa": Kernels(native_gqa=True, rope_in_compute_dtype=False),
                          "rope": Kernels(native_gqa=False, rope_in_compute_dtype=True),
                          "chunked": Kernels(native_gqa=False, rope_in_compute_dtype=False, loss_chunk_tokens=7),
                          "all": Kernels(loss_chunk_tokens=5)}.items():
        model = build_model(spec, "cpu", kernels)
        model.init_weights(0)
        results[name] = _loss_and_grads(model, tokens, labels)
    loss, grads, saved = results["plain"]
    for name, (other_loss, other_grads, _) in results.items():
        assert torch.allclose(other_loss, loss, rtol=1e-6), name
        for key, grad in grads.items():
            assert torch.allclose(other_grads[key], grad, rtol=1e-4, atol=1e-7), (name, key)
    num_tokens = batch_size * seq_len
    logits_bytes, lse_bytes = num_tokens * spec.vocab_size * 4, num_tokens * 4
    assert saved - results["chunked"][2] >= logits_bytes - lse_bytes
    repeated_kv_bytes = 2 * batch_size * (spec.num_heads - spec.num_kv_heads) * seq_len * spec.head_dim * 4
    assert saved - results["gqa"][2] == repeated_kv_bytes * spec.num_layers  # 0 for GPT (no GQA)
    assert results["rope"][2] == saved  # fp32 run: the fp32 round trip is a no-op


def test_rope_in_bf16_stays_close_to_fp32_rope():
    from executor.blocks import apply_rope, rope_cache

    x = torch.randn(2, 64, 4, 16)
    cache = rope_cache(16, 64)
    exact = apply_rope(x, cache, in_compute_dtype=False)
    fast = apply_rope(x.bfloat16(), cache.bfloat16(), in_compute_dtype=True)
    assert fast.dtype == torch.bfloat16 and torch.allclose(fast.float(), exact, atol=0.05, rtol=0.02)
    # A rotation: the norm of each (i, i + d/2) pair is kept.
    assert torch.allclose(exact.norm(dim=-1), x.norm(dim=-1), rtol=1e-5)


def test_speedup_switches_and_the_allocator_setting():
    from executor.torch_backend.launch import allocator_env

    with pytest.raises(AutoplanError, match=r"unknown speed-up\(s\) \['flash'\]"):
        RunOptions(without=("flash",))
    options = RunOptions(device="cuda", without=["chunked-loss"])  # a JSON round trip gives a list
    assert options.without == ("chunked-loss",) and not options.uses("chunked-loss") and options.uses("native-gqa")
    assert options.compiles and not RunOptions().compiles and RunOptions(compile=True).compiles
    assert not RunOptions(device="cuda", compile=False).compiles
    assert allocator_env(options, {}) == {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}
    assert allocator_env(options, {"PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:512"}) == {}  # the user's wins
    assert allocator_env(options.replace(without=("expandable-segments",)), {}) == {}
    assert allocator_env(RunOptions(), {}) == {}  # CPU
