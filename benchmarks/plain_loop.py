"""The training loop a user writes by hand, the peer `autoplan run` is measured against: one model on
one device, gradient accumulation, AdamW, global-norm clipping, no sharding, no hooks, no runner.

Two models can sit in it, both built from the plan's config without downloading weights:
- "torch": the executor's own `executor.model.Transformer` (the same module `autoplan run` builds, with
  whole fp32 logits and `F.cross_entropy`, the loss a user writes), so the difference to `autoplan run`
  is the runner alone: FSDP2 hooks, the fused loss, the step's bookkeeping;
- "hf": Hugging Face transformers' `AutoModelForCausalLM.from_config` (`pip install -e .[peers]`), the
  model a user would take (SDPA attention).

The recipe is the executor's (executor/schedule.py): fp32 master weights, bf16 autocast on CUDA (fp32
on CPU), AdamW betas 0.9/0.95, weight decay 0.1, lr 3e-4, clipping at 1.0; compiled: `torch.compile`
of the whole model and, on CUDA, fused AdamW (the H100 peer of ../shared/data/h100_runs/plain_loop.py);
eager: for-each AdamW. Each step ends with a host read of the loss, as autoplan's loss all-reduce does.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from executor.schedule import ADAMW_BETAS, WEIGHT_DECAY

LR, GRAD_CLIP = 3e-4, 1.0
"""`autoplan run`'s defaults (executor/options.py RunOptions.lr, grad_clip)."""
MODELS = ("torch", "hf")


def transformers_missing() -> str:
    """Why the Hugging Face peer cannot run here ("" when it can)."""
    try:
        import transformers  # noqa: F401
    except ImportError:
        return "transformers is not installed (pip install -e .[peers]): the hf-* peers are skipped"
    return ""


def build_model(kind: str, doc, config_dir: str, device: torch.device):
    """(model in fp32 on `device`, tokens -> fp32 logits) of `kind` for the plan document `doc`."""
    if kind == "torch":
        from executor.blocks import Kernels
        from executor.model import build_model as build_transformer

        model = build_transformer(doc.model, kernels=Kernels(loss_chunk_tokens=0))
        model.to_empty(device=device)
        model.init_weights(0)
        return model, lambda m, tokens: m(tokens)
    if kind == "hf":
        import transformers

        torch.manual_seed(0)
        config = transformers.AutoConfig.from_pretrained(config_dir)
        with torch.device(device):
            model = transformers.AutoModelForCausalLM.from_config(config, attn_implementation="sdpa",
                                                                  dtype=torch.float32)
        return model, lambda m, tokens: m(input_ids=tokens).logits
    raise ValueError(f"unknown peer model {kind!r}; choose from {MODELS}")


class PlainLoop:
    """One model, one optimizer; `step(inputs, labels)` runs one optimizer step over the micro-batches."""

    def __init__(self, model, logits_fn, device: torch.device, compiled: bool, num_microbatches: int,
                 compile_backend: str = "inductor", grad_clip: float = GRAD_CLIP):
        self.model, self.device, self.num_microbatches = model.train(), device, num_microbatches
        self.grad_clip, self.grad_norms = grad_clip, []
        self.forward = torch.compile(model, backend=compile_backend) if compiled else model
        self.logits_fn = logits_fn
        impl = {"fused": True} if compiled and device.type == "cuda" else {"foreach": True}
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=LR, betas=ADAMW_BETAS, weight_decay=WEIGHT_DECAY,
                                           **impl)
        self.autocast = device.type == "cuda"

    def step(self, inputs: torch.Tensor, labels: torch.Tensor) -> float:
        self.optimizer.zero_grad(set_to_none=True)
        total = torch.zeros((), device=self.device)
        for x, y in zip(inputs.chunk(self.num_microbatches), labels.chunk(self.num_microbatches)):
            with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.autocast):
                logits = self.logits_fn(self.forward, x)
            loss = F.cross_entropy(logits.float().flatten(0, 1), y.flatten()) / self.num_microbatches
            loss.backward()
            total += loss.detach()
        norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.grad_clip or float("inf"))
        self.optimizer.step()
        self.grad_norms.append(norm.detach())
        return float(total)  # a host sync, as autoplan's loss all-reduce is

    def params(self) -> int:
        return sum(p.numel() for p in self.model.parameters())
