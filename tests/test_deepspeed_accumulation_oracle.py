"""DeepSpeed 0.19.8's own engine as the oracle for the step's gradient-accumulation bytes: what the
cost model charges per parameter and micro-batch (cost_model.step_time.grad_accumulation_bytes_per_param,
the `deepspeed` framework in bf16) against what the engine reads and writes on its gradient holders
for the config autoplan exports (tests/accumulation_oracle_deepspeed.py, one gloo CPU rank)."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from autoplan.specs import ParallelPlan
from autoplan.specs.framework_facts import StepWorkFacts
from cost_model import load_constants
from cost_model.step_time import grad_accumulation_bytes_per_param
from tests.test_state_oracle import installed

ROOT = Path(__file__).resolve().parents[1]
CASES = {"zero0": ParallelPlan(zero_stage=0), "zero1": ParallelPlan(zero_stage=1),
         "zero0 pipeline dp2": ParallelPlan(pp=2, zero_stage=0)}
"""Oracle case -> a plan the cost model prices on that path (the pipeline case runs the pipeline engine
over one stage: the path DeepSpeed takes for any PipelineModule, whatever pp is)."""


def _measured() -> dict:
    from executor.torch_backend.launch import free_port

    env = {**os.environ, "PYTHONPATH": str(ROOT), "DS_ACCELERATOR": "cpu", "RANK": "0", "WORLD_SIZE": "1",
           "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())}
    done = subprocess.run([sys.executable, str(ROOT / "tests" / "accumulation_oracle_deepspeed.py"), *CASES],
                          env=env, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_deepspeed_accumulation_bytes_are_what_its_engine_moves():
    if not installed("deepspeed"):
        pytest.skip("deepspeed is not installed (test_export_frameworks_are_installed says so loudly)")
    work = load_constants().framework("deepspeed").for_dtype("bf16").facts(StepWorkFacts)
    measured = _measured()
    # The exported bf16 paths: autograd's in-place add into param.grad (0 B the first micro-batch,
    # 6 B each later one) and, under the pipeline engine, BF16_Optimizer's bf16 accumulator (6 B, 14 B).
    assert measured["zero0 pipeline dp2"]["optimizer"] == "BF16_Optimizer"
    for case, plan in CASES.items():
        first, later = grad_accumulation_bytes_per_param(work, plan, "bf16")
        per_microbatch = measured[case]["bytes_per_param"]
        assert per_microbatch[0] == pytest.approx(first, abs=0.01), (case, per_microbatch)
        assert per_microbatch[1:] == pytest.approx([later] * (len(per_microbatch) - 1), abs=0.01), (case, per_microbatch)
