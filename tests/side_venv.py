"""The side venv with the newest torch the registry has as a CPU wheel (`make torchtitan-0.3`: torch
2.13.0+cpu, torchao 0.18.0, the real torchtitan 0.3.0), default ../side-venvs/tt03 beside the
repository or AUTOPLAN_TORCHTITAN_03_VENV. Checks that need it (tests/torchtitan03_check.py,
tests/fp8_check.py) run in a subprocess with its python, so it never meets the main venv's torch 2.9.0.
"""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TORCH_SIDE_VENV = Path(os.environ.get("AUTOPLAN_TORCHTITAN_03_VENV", ROOT.parent / "side-venvs" / "tt03"))


def side_python() -> Path:
    return TORCH_SIDE_VENV / "bin" / "python"


def run_side(script: str, *args: str, cwd: str, repo_on_path: bool = False, timeout_s: int = 600):
    """Run tests/<script> with the side venv's python; the JSON of its last stdout line. With
    `repo_on_path` the repository's packages (autoplan, executor) import from this checkout."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    if repo_on_path:
        env["PYTHONPATH"] = str(ROOT)
    done = subprocess.run([str(side_python()), str(ROOT / "tests" / script), *args], cwd=cwd,
                          capture_output=True, text=True, timeout=timeout_s, env=env)
    assert done.returncode == 0, (done.stdout[-3000:], done.stderr[-3000:])
    return json.loads(done.stdout.strip().splitlines()[-1])
