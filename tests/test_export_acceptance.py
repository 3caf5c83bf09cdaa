"""Every export of every plan in tests/export_plans.py, fed to the target framework's own code
(tests/framework_acceptance.py): accepted, or refused by autoplan with the framework's rule.

The frameworks come from the `export-test` extra (`make test` installs it); torchtitan 0.3.0 (target
`torchtitan`) lives in a side directory (.venv/torchtitan-0.3, `make test` installs it with --no-deps),
checked in a subprocess by tests/torchtitan03_check.py so that it never meets the venv's 0.2.0 (target
`torchtitan-0.2`). Where one cannot be installed the per-target tests skip, and
test_export_frameworks_are_installed fails loudly, naming what is missing (set
AUTOPLAN_EXPORT_TEST_OPTIONAL=1 to accept the gap knowingly).
"""
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from autoplan.exporters import export_plan
from autoplan.exporters.deepspeed import megatron_deepspeed_flags
from autoplan.exporters.torchtitan_02 import flavor_module
from autoplan.specs import InfeasiblePlan
from tests import framework_acceptance as fa
from tests.export_plans import PLANS

PACKAGES = {"megatron": "megatron.core", "torchtitan": "torchtitan 0.3.0", "torchtitan-0.2": "torchtitan",
            "deepspeed": "deepspeed"}
ROOT = Path(__file__).resolve().parents[1]
TORCHTITAN_03 = Path(os.environ.get("AUTOPLAN_TORCHTITAN_03", ROOT / ".venv" / "torchtitan-0.3"))
"""Side directory with torchtitan 0.3.0 and its config dependencies (Makefile, .venv/.export-test)."""


def _installed(module: str) -> bool:
    if module == "torchtitan 0.3.0":
        return (TORCHTITAN_03 / "torchtitan-0.3.0.dist-info").is_dir()
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        return False


def test_export_frameworks_are_installed():
    missing = [f"{target} ({module})" for target, module in PACKAGES.items() if not _installed(module)]
    if missing and os.environ.get("AUTOPLAN_EXPORT_TEST_OPTIONAL") != "1":
        pytest.fail(f"the export acceptance tests cannot run: {', '.join(missing)} not installed (torchtitan 0.3.0: "
                    f"in {TORCHTITAN_03}); run `make test` (installs the export-test extra and the torchtitan 0.3.0 "
                    f"side directory), or set AUTOPLAN_EXPORT_TEST_OPTIONAL=1")


def verdict(doc, target: str, tmp_path) -> str:
    """"refused: <rule>" (autoplan would not export it), "" (the framework accepts it), or its complaint."""
    try:
        export = export_plan(doc, target)
    except InfeasiblePlan as exc:
        return f"refused: {exc}"
    par, n = doc.parallel, doc.cluster.num_gpus
    if target == "megatron":
        return fa.megatron_accepts(export.text, n)
    if target == "torchtitan-0.2":
        return fa.torchtitan_accepts(export.text, n, tmp_path, flavor_module(doc))
    with_mpu = fa.deepspeed_accepts(export.text, n, par.dp, par.tp, par.pp, with_mpu=True)
    if with_mpu:
        return with_mpu
    flags = fa.megatron_deepspeed_flags_accepted(" ".join(megatron_deepspeed_flags(doc)))
    if flags:
        return flags
    without = fa.deepspeed_accepts(export.text, n, par.dp, par.tp, par.pp, with_mpu=False)
    says_mpu = any(note.startswith("batch check:") and "mpu" in note for note in export.notes)
    if without and not says_mpu:
        return f"needs a Megatron-DeepSpeed mpu and the export does not say so ({without})"
    return ""


@pytest.mark.slow
@pytest.mark.parametrize("target", sorted(PACKAGES))
def test_every_export_is_accepted_by_the_framework(target, tmp_path):
    if not _installed(PACKAGES[target]):
        pytest.skip(f"{PACKAGES[target]} is not installed (test_export_frameworks_are_installed says so loudly)")
    failures, refused = [], []
    results = torchtitan_03_verdicts(tmp_path) if target == "torchtitan" else {}
    for label, doc in PLANS.items():
        result = results[label] if results else verdict(doc, target, tmp_path)
        if result.startswith("refused: "):
            refused.append(label)
        elif result:
            failures.append(f"{label}: {result}")
    assert not failures, "\n".join(failures)
    assert len(refused) < len(PLANS) // 2, f"{target} refuses most plans: {refused}"


def torchtitan_03_verdicts(tmp_path) -> dict:
    """Plan label -> verdict of every `torchtitan` export, through torchtitan 0.3.0's config code in one
    subprocess (tests/torchtitan03_check.py, with the side directory first on its path)."""
    verdicts, exports = {}, []
    for label, doc in PLANS.items():
        try:
            exports.append((label, {"text": export_plan(doc, "torchtitan").text, "num_gpus": doc.cluster.num_gpus}))
        except InfeasiblePlan as exc:
            verdicts[label] = f"refused: {exc}"
    # Controls: the checker must refuse what 0.3.0 refuses (a field FullAC.Config lacks; CUDA graphs with pp)
    good = dict(exports)["zero1 pp 1f1b partial recompute"]
    for label, old, new in (("control: unknown field", "FullAC.Config()", "FullAC.Config(layers=3)"),
                            ("control: cuda graphs", "disable_cuda_graphs=True", "disable_cuda_graphs=False")):
        exports.append((label, {**good, "text": good["text"].replace(old, new)}))
    path = tmp_path / "exports.json"
    path.write_text(json.dumps([item for _, item in exports]))
    env = {**os.environ, "PYTHONPATH": str(TORCHTITAN_03)}
    done = subprocess.run([sys.executable, str(ROOT / "tests" / "torchtitan03_check.py"), str(path)], env=env,
                          cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    verdicts.update(zip([label for label, _ in exports], json.loads(done.stdout.strip().splitlines()[-1])))
    assert "FullAC.Config has no field ['layers']" in verdicts.pop("control: unknown field")
    assert "CUDA graphs do not support pipeline parallelism" in verdicts.pop("control: cuda graphs")
    return verdicts


def test_deepspeed_export_says_when_the_batch_check_needs_an_mpu():
    export = export_plan(PLANS["zero1 pp 1f1b partial recompute"], "deepspeed")
    assert any(note.startswith("batch check:") and "refuses" in note for note in export.notes), export.notes
    pure_dp = export_plan(PLANS["tied embeddings zero2"], "deepspeed")
    assert not any(note.startswith("batch check:") for note in pure_dp.notes)
    config = json.loads(export.text)
    assert config["train_batch_size"] == 256 and config["gradient_accumulation_steps"] == 64
