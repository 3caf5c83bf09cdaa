"""The executor's experts as one grouped GEMM per weight (torch._grouped_mm over every local expert's
row group) compute what the per-expert loop computes, forward and backward, empty experts included."""
import pytest

torch = pytest.importorskip("torch")

from executor.moe import GroupedExperts, grouped_mm_runs  # noqa: E402


def _experts(grouped: bool) -> GroupedExperts:
    torch.manual_seed(0)
    experts = GroupedExperts(4, 32, 48, grouped=grouped)
    for w in (experts.w1, experts.w2, experts.w3):
        torch.nn.init.normal_(w, std=0.1)
    return experts


@pytest.mark.parametrize("counts", [[5, 0, 9, 2], [0, 0, 16, 0], [4, 4, 4, 4]])
@pytest.mark.parametrize("autocast", [False, True])
@pytest.mark.parametrize("as_tensor", [False, True], ids=["host-counts", "device-counts"])
def test_grouped_gemms_match_the_loop(counts, autocast, as_tensor):
    assert grouped_mm_runs(torch.zeros(1))   # this torch has the kernel on the CPU, or nothing is tested
    grouped, loop = _experts(True), _experts(False)
    x = torch.randn(sum(counts), 32)
    outs, grads = [], []
    for experts in (grouped, loop):
        xi = x.clone().requires_grad_()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            out = experts(xi, torch.tensor(counts) if as_tensor else counts)
        (out.float() * torch.linspace(-1, 1, out.numel()).view_as(out)).sum().backward()
        outs.append(out.float())
        grads.append([xi.grad, experts.w1.grad, experts.w2.grad, experts.w3.grad])
    tol = 2e-2 if autocast else 1e-5
    assert torch.allclose(outs[0], outs[1], atol=tol, rtol=tol)
    for g, l in zip(*grads):
        assert torch.allclose(g.float(), l.float(), atol=tol, rtol=tol)
    for e, n in enumerate(counts):   # an expert without tokens gets a zero gradient, not none
        if n == 0:
            assert grads[0][1][e].abs().max() == 0


def test_a_layer_without_expert_parallelism_keeps_its_counts_on_the_device():
    """The routed layer hands the experts its token counts as a tensor: the grouped GEMMs take their
    offsets from it on the device, so a GPU step does not wait for the host to read them per layer."""
    from autoplan.specs import ModelSpec
    from executor.moe import MoEFeedForward

    spec = ModelSpec("tiny-moe", 1, 32, 4, 2, 48, 64, num_experts=4, num_experts_per_token=2, max_seq_len=16)
    layer = MoEFeedForward(spec)
    for w in (layer.router.weight, layer.experts.w1, layer.experts.w2, layer.experts.w3):
        torch.nn.init.normal_(w, std=0.1)
    seen = []
    forward = layer.experts.forward
    layer.experts.forward = lambda x, counts: seen.append(counts) or forward(x, counts)
    layer(torch.randn(2, 8, 32))
    assert len(seen) == 1 and isinstance(seen[0], torch.Tensor) and int(seen[0].sum()) == 2 * 8 * 2
