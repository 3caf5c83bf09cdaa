"""Megatron-Core 0.19.2 takes the Megatron exports as 0.16.1 does (issue 50).

megatron-core 0.19.2 (the registry's newest) sits in a folder of its own (`make megatron-core-0.19`:
../side-venvs/mcore019 beside the repository, or AUTOPLAN_MCORE_019), put before the venv's 0.16.1 on
the path of a subprocess running tests/megatron_core_build.py. It declares Requires-Python >= 3.12 and
is installed with --ignore-requires-python --no-deps onto the venv's Python 3.11 and torch 2.9.0: the
modules these checks import (TransformerConfig, the GPT layer specs, GPTModel, parallel_state) import
and run there; a 3.12 venv would need a second torch (no 3.12 CPU wheel is in this machine's cache).

What changed between 0.16.1 and 0.19.2 for the flags the export writes (Megatron-LM arguments.py at
core_v0.16.1 and at branch core_r0.19.0, the 0.19 source the mirror holds): no flag was renamed or
removed; --tokenizer-type, --tokenizer-model, --vocab-size and --use-megatron-fsdp moved from literal
add_argument calls into dataclasses the argument factory generates them from (training/config/
training_config.py TokenizerConfig, common_config.py), with the same names; the validate_args rules the
export meets (FSDP: CUDA_DEVICE_MAX_CONNECTIONS > 1 and the fsdp_dtensor checkpoint format; virtual and
uneven stages; experts; one data source) are the same, moved (Megatron-FSDP's from lines 671-691 to
1100-1147, now also forcing the distributed optimizer and refusing optimizers other than sgd/adam, which
the export does not set) -- tests/framework_acceptance.py keeps 0.16.1's line numbers.
Checked here with 0.19.2's own code: every export of tests/export_plans.py through the flag names and
TransformerConfig (megatron_accepts), and every family of tests/test_export_fidelity.py built as
GPTModel and compared with its config field by field."""
import os
import tempfile
from pathlib import Path

import pytest

from autoplan.exporters import export_plan
from autoplan.specs import InfeasiblePlan
from tests.export_plans import PLANS
from tests.test_export_engines import run_megatron_core
from tests.test_export_fidelity import FAMILIES, export_of, megatron_mismatch

ROOT = Path(__file__).resolve().parents[1]
MCORE_019 = Path(os.environ.get("AUTOPLAN_MCORE_019", ROOT.parent / "side-venvs" / "mcore019"))
VERSION = "0.19.2"


@pytest.mark.slow
def test_megatron_core_019_accepts_and_builds_the_exports():
    if not any(MCORE_019.glob(f"megatron_core-{VERSION}.dist-info")):
        if os.environ.get("AUTOPLAN_EXPORT_TEST_OPTIONAL") == "1":
            pytest.skip(f"megatron-core {VERSION} is not installed at {MCORE_019}")
        pytest.fail(f"megatron-core {VERSION} is not installed at {MCORE_019}: run `make megatron-core-0.19` "
                    f"(about 10 s), or set AUTOPLAN_EXPORT_TEST_OPTIONAL=1")
    accepts = {}
    for label, doc in PLANS.items():
        try:
            accepts[label] = {"accepts": export_plan(doc, "megatron").text, "num_gpus": doc.cluster.num_gpus}
        except InfeasiblePlan:
            continue
    exports = {label: export_of(model, "megatron") for label, model in FAMILIES.items()}
    with tempfile.TemporaryDirectory() as tmp:
        verdicts = run_megatron_core(list(accepts.values()) + [e.text for e in exports.values()], Path(tmp),
                                     release_dir=str(MCORE_019))
    assert {v["version"] for v in verdicts} == {VERSION}, {v["version"] for v in verdicts}
    failures = [f"{label}: {v['error']}" for label, v in zip(accepts, verdicts) if v["error"]]
    run = {"exports": exports, "verdicts": dict(zip(exports, verdicts[len(accepts):]))}
    failures += [f"{label}: {wrong}" for label in exports if (wrong := megatron_mismatch(label, run))]
    assert not failures, "\n".join(failures)
