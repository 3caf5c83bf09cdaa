"""benchmarks/kernel_rates.py: the script that measured cost_model/data/kernels still runs, and its
summary reads the shipped records (the figures cost_model/data/kernels/README.md quotes)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "kernel_rates.py"


def _run(*args):
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, cwd=ROOT, timeout=300)


def test_smoke_measures_every_family_and_writes_the_record(tmp_path):
    out = tmp_path / "k.json"
    done = _run("--smoke", "-o", str(out))
    assert done.returncode == 0, done.stderr
    record = json.loads(out.read_text())
    assert record["schema"] == "autoplan.kernel_rates/v1" and record["environment"]["torch"]
    kinds = {e["kind"] for e in record["entries"] if "flops_per_s" in e}
    assert kinds == {"gemm", "attention", "grouped", "attention-variant"}  # row-wise fp8 may be refused on a CPU
    assert all("flops_per_s" in e or e["error"] for e in record["entries"])


def test_without_a_gpu_it_refuses_in_one_line_unless_smoke(tmp_path):
    import torch

    if torch.cuda.is_available():
        return
    done = _run("-o", str(tmp_path / "k.json"))
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "--smoke" in done.stderr
    assert not (tmp_path / "k.json").exists()


def test_summary_reads_the_shipped_h100_record():
    done = _run("--summary", str(ROOT / "cost_model" / "data" / "kernels" / "kernel_rates-h100.json"))
    assert done.returncode == 0, done.stderr
    assert "NVIDIA H100 80GB HBM3" in done.stdout and "failed 0" in done.stdout
    assert "row-wise / tensor-wise: median 0.913" in done.stdout   # the README's figure
