"""The executor's global-norm clip (executor/torch_backend/train.py PlanRunner._clip_grad_norm) against
torch.nn.utils.clip_grad_norm_ on the same gradients: the same norm and the same clipped gradients, with
plain parameters and with FSDP2's DTensor ones (one rank). The loss cannot hold this: AdamW's first
updates hardly depend on the gradients' scale."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = r'''
import os, socket, sys
with socket.socket() as s:
    s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK="0", WORLD_SIZE="1", LOCAL_RANK="0")
import torch
from torch.distributed.tensor import DTensor
from autoplan.specs import ClusterSpec, ModelSpec, ParallelPlan, PlanDocument, TrainingSpec
from executor.data import batch, open_tokens
from executor.options import RunOptions
from executor.torch_backend.train import PlanRunner
from executor.torch_backend.worker import init_distributed

torch.set_num_threads(1)
spec = ModelSpec("tiny", 2, 32, 4, 2, 64, 128, max_seq_len=32)
doc = PlanDocument(model=spec, training=TrainingSpec(4, 16, "bf16"), cluster=ClusterSpec("cpu", 1, gpus_per_node=1),
                   parallel=ParallelPlan(micro_batch_size=2, num_microbatches=2))
device = init_distributed("cpu")
inputs, labels = batch(open_tokens("", "uint16", 0, spec.vocab_size), 0, 0, 4, 16)
for fsdp in (False, True):
    runner = PlanRunner(doc, RunOptions(out="", fsdp_one_replica_on_cpu=fsdp), device)
    assert runner.fsdp == fsdp
    runner._local_step(inputs, labels)
    full = lambda g: g.full_tensor() if isinstance(g, DTensor) else g
    grads = [full(p.grad).detach().clone() for p in runner.models[0].parameters()]
    assert any(isinstance(p.grad, DTensor) for p in runner.models[0].parameters()) == fsdp
    ref = [torch.nn.Parameter(torch.zeros_like(g)) for g in grads]
    for r, g in zip(ref, grads):
        r.grad = g.clone()
    expected = torch.nn.utils.clip_grad_norm_(ref, 0.05)
    norm = runner._clip_grad_norm(0.05)
    assert float(expected) > 0.05 * 4, float(expected)  # the clip scales by less than 1/4
    torch.testing.assert_close(norm, expected, rtol=1e-6, atol=0)
    for p, r in zip(runner.models[0].parameters(), ref):
        torch.testing.assert_close(full(p.grad), r.grad, rtol=1e-6, atol=1e-9)
print("clip ok")
'''


def test_clip_matches_torch_clip_grad_norm():
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0 and "clip ok" in done.stdout, done.stdout[-2000:] + done.stderr[-3000:]
