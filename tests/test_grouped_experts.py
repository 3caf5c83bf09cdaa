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
def test_grouped_gemms_match_the_loop(counts, autocast):
    assert grouped_mm_runs(torch.zeros(1))   # this torch has the kernel on the CPU, or nothing is tested
    grouped, loop = _experts(True), _experts(False)
    x = torch.randn(sum(counts), 32)
    outs, grads = [], []
    for experts in (grouped, loop):
        xi = x.clone().requires_grad_()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            out = experts(xi, counts)
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
