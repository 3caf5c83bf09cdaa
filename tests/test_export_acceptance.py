"""Every export of every plan in tests/export_plans.py, fed to the target framework's own code
(tests/framework_acceptance.py): accepted, or refused by autoplan with the framework's rule.

The frameworks come from the `export-test` extra (`make test` installs it). Where one cannot be
installed the per-target tests skip, and test_export_frameworks_are_installed fails loudly, naming
what is missing (set AUTOPLAN_EXPORT_TEST_OPTIONAL=1 to accept the gap knowingly).
"""
import importlib.util
import json
import os

import pytest

from autoplan.exporters import export_plan
from autoplan.exporters.deepspeed import megatron_deepspeed_flags
from autoplan.exporters.torchtitan import flavor_module
from autoplan.specs import InfeasiblePlan
from tests import framework_acceptance as fa
from tests.export_plans import PLANS

PACKAGES = {"megatron": "megatron.core", "torchtitan": "torchtitan", "deepspeed": "deepspeed"}


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        return False


def test_export_frameworks_are_installed():
    missing = [f"{target} ({module})" for target, module in PACKAGES.items() if not _installed(module)]
    if missing and os.environ.get("AUTOPLAN_EXPORT_TEST_OPTIONAL") != "1":
        pytest.fail(f"the export acceptance tests cannot run: {', '.join(missing)} not installed; "
                    f"run `make test` (installs the export-test extra: DS_BUILD_OPS=0 pip install "
                    f"--no-build-isolation -e '.[export-test]'), or set AUTOPLAN_EXPORT_TEST_OPTIONAL=1")


def verdict(doc, target: str, tmp_path) -> str:
    """"refused: <rule>" (autoplan would not export it), "" (the framework accepts it), or its complaint."""
    try:
        export = export_plan(doc, target)
    except InfeasiblePlan as exc:
        return f"refused: {exc}"
    par, n = doc.parallel, doc.cluster.num_gpus
    if target == "megatron":
        return fa.megatron_accepts(export.text, n)
    if target == "torchtitan":
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
    for label, doc in PLANS.items():
        result = verdict(doc, target, tmp_path)
        if result.startswith("refused: "):
            refused.append(label)
        elif result:
            failures.append(f"{label}: {result}")
    assert not failures, "\n".join(failures)
    assert len(refused) < len(PLANS) // 2, f"{target} refuses most plans: {refused}"


def test_deepspeed_export_says_when_the_batch_check_needs_an_mpu():
    export = export_plan(PLANS["zero1 pp 1f1b partial recompute"], "deepspeed")
    assert any(note.startswith("batch check:") and "refuses" in note for note in export.notes), export.notes
    pure_dp = export_plan(PLANS["tied embeddings zero2"], "deepspeed")
    assert not any(note.startswith("batch check:") for note in pure_dp.notes)
    config = json.loads(export.text)
    assert config["train_batch_size"] == 256 and config["gradient_accumulation_steps"] == 64
