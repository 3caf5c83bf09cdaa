"""A framework is one file (issue 52): the registry in autoplan/specs/frameworks/__init__.py finds every
module of its package, and of the folders AUTOPLAN_FRAMEWORKS_PATH names, so a framework written in one
new file is listed, passes the contract tests that walk every framework and is planned for."""
from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

import autoplan.specs.frameworks as registry
from autoplan.specs import AutoplanError, Framework

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "autoplan" / "specs" / "frameworks"

ONE_FILE = '''"""tiny-fsdp: a data-parallel-only framework, written in one file for the registration test."""
from autoplan.specs.framework import Framework, fsdp2_states

LISTED_AT = 50
FRAMEWORKS = (Framework(
    name="tiny-fsdp", version="tiny-fsdp 1.0 (a test)",
    description="FSDP data parallelism only, flash attention",
    states=fsdp2_states("FSDP-sharded master"), zero_stages=(0, 3), hsdp_zero_stages=(3,),
    max_tp=1, max_pp=1, max_cp=1, max_vpp=1, sequence_parallel="never", mla=False, moe=False,
    sources={"max_tp": "the test's own: data parallelism only"}),)
'''

WALKING_TESTS = [
    # The contract tests that walk every registered framework (each parametrized or looping over them).
    "tests/test_frameworks.py::test_frameworks_command_lists_every_framework_and_one_with_sources",
    "tests/test_bounded_search.py::test_rules_that_reject_a_whole_group_hold_for_its_every_plan[tiny-fsdp]",
    "tests/test_attention_tables.py::test_every_framework_names_a_kernel_a_profile_can_hold",
    "tests/test_state_oracle.py::test_every_framework_is_walked_or_says_why",
]


def _module_frameworks(path: Path) -> list:
    """The names of the Framework(...) entries a module file writes, read from its text."""
    names = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call) and getattr(node.func, "id", "") in ("Framework", "replace"):
            names += [k.value.value for k in node.keywords if k.arg == "name" and isinstance(k.value, ast.Constant)]
    return names


def test_every_file_of_the_package_is_registered_with_every_entry_it_writes():
    files = sorted(p for p in PACKAGE.glob("*.py") if not p.name.startswith("_"))
    assert {f"autoplan.specs.frameworks.{p.stem}" for p in files} == set(registry.REGISTERED)
    for path in files:
        written = _module_frameworks(path)
        assert written and set(written) == set(registry.REGISTERED[f"autoplan.specs.frameworks.{path.stem}"]), path
    assert set(registry.FRAMEWORKS) == {n for names in registry.REGISTERED.values() for n in names}


def test_a_module_that_is_no_framework_module_is_one_line():
    stray = ModuleType("autoplan.specs.frameworks.stray")  # a module that forgot LISTED_AT
    stray.FRAMEWORKS = (Framework(name="stray", version="1", description="x"),)
    with pytest.raises(AutoplanError, match="framework module autoplan.specs.frameworks.stray must set"):
        registry.register(stray)
    assert "stray" not in registry.FRAMEWORKS


def test_a_name_registered_twice_is_refused():
    twice = ModuleType("autoplan.specs.frameworks.twice")
    twice.LISTED_AT, twice.FRAMEWORKS = 1, (registry.FRAMEWORKS["torchtitan"],)
    with pytest.raises(AutoplanError, match="names torchtitan, which another module registered"):
        registry.register(twice)
    assert list(registry.FRAMEWORKS).count("torchtitan") == 1


def _run(args: list, folder: Path, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    env = {**os.environ, registry.PATH_VARIABLE: str(folder), "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def one_file(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("frameworks")
    (folder / "tiny_fsdp.py").write_text(ONE_FILE, encoding="utf-8")
    return folder


def test_a_framework_in_one_new_file_is_listed_and_planned(one_file, tmp_path):
    listed = _run(["-m", "autoplan", "frameworks"], one_file)
    assert listed.returncode == 0, listed.stderr
    rows = [line.split()[0] for line in listed.stdout.splitlines()[1:] if line[:2] == "  " and line[2:3].strip()]
    assert rows[-1] == "tiny-fsdp" and len(rows) == len(registry.FRAMEWORKS) - len(registry.HISTORICAL_FRAMEWORKS) + 1
    plan = tmp_path / "plan.json"
    searched = _run(["-m", "autoplan", "search", "--model", "llama-2-7b", "--gpus", "16", "--framework",
                     "tiny-fsdp", "-o", str(plan)], one_file)
    assert searched.returncode == 0, searched.stderr
    doc = json.loads(plan.read_text())
    assert doc["framework"] == "tiny-fsdp"
    parallel = doc["parallel"]
    assert (parallel["tp"], parallel["pp"], parallel["cp"]) == (1, 1, 1) and parallel["zero_stage"] in (0, 3)


def test_a_framework_in_one_new_file_passes_the_tests_that_walk_every_framework(one_file):
    walked = _run(["-m", "pytest", "-q", "-p", "no:cacheprovider", *WALKING_TESTS], one_file)
    assert walked.returncode == 0, walked.stdout[-3000:]
    assert f"{len(WALKING_TESTS)} passed" in walked.stdout
