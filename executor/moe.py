"""The mixture-of-experts feed-forward block of Mixtral (Jiang et al. 2024, arXiv 2401.04088,
section 2.1): a router and `num_experts` SwiGLU experts, each token sent to its top-k experts.

- Router: a linear layer h -> num_experts without bias (Mixtral's `gate`). Each token keeps the k
  largest logits and its weights are the softmax over those k only: softmax(TopK(x W_g)), the
  paper's equation. (Hugging Face's Mixtral takes the softmax over all experts, keeps the top k and
  renormalises them to sum to 1; that is the same number.) Softmax in fp32.
- Dropless: every token reaches all of its k experts, whatever the load; there is no capacity
  factor and no token is dropped, as in Mixtral (and MegaBlocks, Gale et al. 2022). An expert's
  work therefore varies from step to step.
- No load-balancing auxiliary loss: the training objective is the language-model loss alone.
- Experts are stacked parameters `experts.w1`, `experts.w3` [num_experts, ffn, h] (gate, up) and
  `experts.w2` [num_experts, h, ffn] (down), so an expert-parallel rank keeps a contiguous slice
  [first_expert, first_expert + num_local_experts) of the same tensors (`keep_experts`).
  Parameters: router h*E + E*3*h*ffn (+ the shared experts), which is `ModelSpec.moe_mlp_params()`.

Tokens are sorted by expert and all local experts run as one grouped GEMM per weight (w1, w3, w2:
torch._grouped_mm over the experts' row groups, as Megatron-Core's and torchtitan's grouped experts);
where that kernel does not run (CUDA before Hopper, or `--without grouped-experts`), a loop of
per-expert matmuls, torchtitan's fallback. An expert with no tokens is an empty group (or an empty
batch), so every parameter gets a gradient (zero) every step, which DDP requires.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from autoplan.specs import ModelSpec


def route(logits: torch.Tensor, num_experts_per_token: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(weights, expert ids), each (tokens, k): softmax over the k largest router logits."""
    top_logits, expert_ids = logits.topk(num_experts_per_token, dim=-1)
    return F.softmax(top_logits.float(), dim=-1), expert_ids


class GroupedExperts(nn.Module):
    """SwiGLU experts (w2(silu(w1 x) * w3 x), Shazeer 2020) as stacked weights; this module holds
    experts [first_expert, first_expert + num_local_experts) of the model's num_experts. `grouped`: one
    grouped GEMM per weight over every local expert (torch._grouped_mm) where it runs; False (`autoplan
    run --without grouped-experts`): a loop of per-expert matmuls."""

    def __init__(self, num_experts: int, hidden_size: int, ffn_hidden_size: int, grouped: bool = True):
        super().__init__()
        self.grouped = grouped
        self.num_experts = num_experts
        self.first_expert = 0
        self.w1 = nn.Parameter(torch.empty(num_experts, ffn_hidden_size, hidden_size))
        self.w3 = nn.Parameter(torch.empty(num_experts, ffn_hidden_size, hidden_size))
        self.w2 = nn.Parameter(torch.empty(num_experts, hidden_size, ffn_hidden_size))

    @property
    def num_local_experts(self) -> int:
        return self.w1.shape[0]

    def keep_experts(self, first: int, count: int) -> None:
        """Keep only experts [first, first + count) (before materialization: on meta this costs
        nothing). Their initial values stay those of the full model (`init_weights` draws the full
        stacked tensor and takes these rows)."""
        self.first_expert = first
        for name in ("w1", "w2", "w3"):
            old = getattr(self, name)
            setattr(self, name, nn.Parameter(torch.empty((count, *old.shape[1:]), device=old.device,
                                                         dtype=old.dtype)))

    def local_rows(self, full: torch.Tensor) -> torch.Tensor:
        """This module's experts out of a full [num_experts, ...] tensor."""
        return full[self.first_expert:self.first_expert + self.num_local_experts]

    def forward(self, x: torch.Tensor, counts: list[int] | torch.Tensor) -> torch.Tensor:
        """x: tokens sorted by local expert, counts[e] of them for local expert e (a list, or a tensor on
        x's device: the grouped GEMMs take their offsets there, the host never reads the counts)."""
        w1, w3, w2 = (local_shard(w) for w in (self.w1, self.w3, self.w2))   # this tp rank's shards, if split
        if self.grouped and grouped_mm_runs(x):
            return self._grouped_forward(x, counts, w1, w3, w2)
        if isinstance(counts, torch.Tensor):
            counts = counts.tolist()  # the loop splits on the host: it waits for the device here
        outputs = []
        for e, x_e in enumerate(torch.split(x, counts)):
            hidden = F.silu(x_e @ w1[e].t()) * (x_e @ w3[e].t())
            outputs.append(hidden @ w2[e].t())
        return torch.cat(outputs)

    def _grouped_forward(self, x: torch.Tensor, counts, w1, w3, w2) -> torch.Tensor:
        """The same experts as three grouped GEMMs: group e is rows offs[e-1]:offs[e] of x times expert
        e's weight (Megatron-Core's TEGroupedMLP and torchtitan's GroupedExperts do the same; an expert
        without tokens is an empty group whose weight gradient is zero). Under autocast the operands are
        cast as a matmul's would be (the grouped GEMM is not on autocast's list)."""
        dtype = torch.get_autocast_dtype(x.device.type) if torch.is_autocast_enabled(x.device.type) else x.dtype
        x = x.to(dtype)
        w1, w3, w2 = (w.to(dtype).transpose(1, 2) for w in (w1, w3, w2))
        offs = torch.as_tensor(counts, device=x.device).cumsum(0).to(torch.int32)
        hidden = F.silu(torch._grouped_mm(x, w1, offs=offs)) * torch._grouped_mm(x, w3, offs=offs)
        return torch._grouped_mm(hidden, w2, offs=offs)


def local_shard(weight: torch.Tensor) -> torch.Tensor:
    """A weight split over tensor-parallel ranks (a DTensor) as this rank's shard; a plain one as is."""
    from torch.distributed.tensor import DTensor

    return weight.to_local() if isinstance(weight, DTensor) else weight


def grouped_mm_runs(x: torch.Tensor) -> bool:
    """torch._grouped_mm's kernels: on the CPU (torch 2.9's fallback, fp32 and bf16), and on CUDA in bf16
    on Hopper and later (its cuBLAS/CUTLASS grouped GEMM); elsewhere the per-expert loop."""
    if not hasattr(torch, "_grouped_mm"):
        return False
    if x.device.type == "cpu":
        return True
    return x.device.type == "cuda" and torch.cuda.get_device_capability(x.device) >= (9, 0) and (
        x.dtype == torch.bfloat16 or torch.get_autocast_dtype("cuda") == torch.bfloat16)


class MoEFeedForward(nn.Module):
    """Router + experts. `dispatcher` is None (every expert here) or, under expert parallelism, an
    object that sends the routed tokens to the ranks holding their experts and brings the outputs
    back (`executor.torch_backend.expert_parallel`)."""

    def __init__(self, spec: ModelSpec, grouped_experts: bool = True):
        super().__init__()
        self.num_experts_per_token = spec.num_experts_per_token
        self.router = nn.Linear(spec.hidden_size, spec.num_experts, bias=False)
        self.experts = GroupedExperts(spec.num_experts, spec.hidden_size, spec.expert_ffn_size, grouped_experts)
        self.dispatcher = None
        self.tensor_parallel = None
        """Under tensor parallelism: the forward that splits the experts over tp
        (executor.torch_backend.moe_tensor_parallel)."""
        self.shared_mlp = None
        """Shared experts (DeepSeekMoE, arXiv 2401.06066 sec. 3.2): one MLP of the shared width every
        token passes, added to the routed output; `executor.blocks.TransformerBlock` sets it."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.tensor_parallel is not None:
            return self.tensor_parallel.forward(self, x)
        tokens = x.reshape(-1, x.shape[-1])
        combined = self.routed(tokens, self.router(tokens)).view(x.shape)
        return combined if self.shared_mlp is None else combined + self.shared_mlp(x)

    def routed(self, tokens: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
        """(tokens, h): each token's top-k experts' outputs, weighted by its routing weights and summed."""
        weights, expert_ids = route(logits, self.num_experts_per_token)
        flat_ids = expert_ids.flatten()
        # Stable sort: within an expert, tokens keep their order (deterministic sums).
        order = torch.argsort(flat_ids, stable=True)
        token_ids = order // self.num_experts_per_token
        counts = torch.bincount(flat_ids, minlength=self.experts.num_experts)
        routed = tokens[token_ids]
        if self.dispatcher is None:  # the counts stay on the device (no wait for it, grouped GEMMs)
            out = self.experts(routed, counts)
        else:
            out = self.dispatcher(routed, counts, self.experts)
        out = out * weights.flatten()[order].unsqueeze(-1).to(out.dtype)
        return torch.zeros(tokens.shape, dtype=out.dtype, device=out.device).index_add_(0, token_ids, out)
