"""The direction of imports (DESIGN.md, "Packages and the direction of imports"), over the whole
transitive import graph read by tests/import_graph.py, and what planning loads at run time.

The checker is shown to fail: each violation planted in a small source tree below must be reported.
"""
from __future__ import annotations

import ast
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.import_graph import STDLIB, Graph

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("autoplan", "cost_model", "executor", "profiler", "benchmarks")

# package -> the other packages of ours its modules may load, directly or through anything they load.
# A package always may load its own modules; a module belongs to the longest package name it starts with.
ALLOWED = {
    "autoplan.specs": (),
    "cost_model": ("autoplan.specs",),
    "executor": ("autoplan.specs",),
    "profiler": ("autoplan.specs",),
    # Inside autoplan, by what each part does: what a plan is made for, the text it prints and the
    # exports sit on the vocabulary and the cost model; the search reads them; reports and the CLI
    # sit on top (and only the CLI launches the executor and the profiler).
    "autoplan.inputs": ("autoplan.specs", "cost_model"),
    "autoplan.rendering": ("autoplan.specs", "cost_model"),
    "autoplan.exporters": ("autoplan.specs",),
    "autoplan.planning": ("autoplan.specs", "cost_model", "autoplan.inputs", "autoplan.rendering",
                          "autoplan.exporters"),
    "autoplan.report": ("autoplan.specs", "cost_model", "autoplan.inputs", "autoplan.rendering",
                        "autoplan.exporters", "autoplan.planning"),
    "autoplan": ("autoplan.specs", "cost_model", "executor", "profiler", "autoplan.inputs", "autoplan.rendering",
                 "autoplan.exporters", "autoplan.planning", "autoplan.report"),
    "benchmarks": ("autoplan", "autoplan.specs", "autoplan.inputs", "autoplan.rendering", "autoplan.exporters",
                   "autoplan.planning", "autoplan.report", "cost_model", "executor", "profiler"),
}
# package -> outside modules it must never load (STDLIB_ONLY: anything outside the standard library).
STDLIB_ONLY = "anything outside the standard library"
FORBIDDEN_OUTSIDE = {
    "autoplan.specs": STDLIB_ONLY,
    "cost_model": ("torch", "torch_xla"),    # planning runs on a laptop
}


def package_of(module: str) -> str | None:
    matches = [name for name in ALLOWED if module == name or module.startswith(name + ".")]
    return max(matches, key=len) if matches else None


def violations(graph: Graph) -> list:
    """One line per module that loads what its package may not, with the chain of imports."""
    out = []
    for name in sorted(graph.modules):
        package = package_of(name)
        if package is None:
            continue
        module = graph.modules[name]
        out += [f"{name}: dynamic import the checker cannot read (line {line}): {text}"
                for line, text in module.unresolved]
        allowed = {package, *ALLOWED[package]}
        for target, chain in sorted(graph.reach(name).items()):
            if package_of(target) not in allowed:
                out.append(f"{name} ({package}) loads {target} ({package_of(target)}): {' -> '.join(chain)}")
        forbidden = FORBIDDEN_OUTSIDE.get(package, ())
        for outside, chain in sorted(graph.externals(name).items()):
            if outside not in STDLIB if forbidden == STDLIB_ONLY else outside in forbidden:
                out.append(f"{name} ({package}) loads {outside}: {' -> '.join(chain)}")
    return out


def test_the_tree_keeps_the_table():
    graph = Graph(ROOT, PACKAGES)
    assert set(map(package_of, graph.modules)) == set(ALLOWED), "a package the table does not name"
    found = violations(graph)
    # Every module above the one that breaks the table is listed too: the shortest lines name it.
    assert not found, f"{len(found)} violations, the shortest:\n" + "\n".join(sorted(found, key=len)[:12])


# -- planted violations: the checker must report each ------------------------------------------

CLEAN = {
    "autoplan/__init__.py": '"""lazy names, as the real package"""\n'
                            "from importlib import import_module\n\n"
                            "def __getattr__(name):\n    return getattr(import_module('autoplan.planner'), name)\n",
    "autoplan/specs/__init__.py": "from autoplan.specs.model import ModelSpec\n",
    "autoplan/specs/model.py": "import json\n\nclass ModelSpec:\n    pass\n",
    "autoplan/planner.py": "from autoplan.search import search\n",
    "autoplan/search.py": "from cost_model.estimator import Estimator\n\ndef search():\n    return Estimator\n",
    "autoplan/catalog.py": "from autoplan.specs import ModelSpec\n",
    "autoplan/calibration.py": "from cost_model.estimator import Estimator\n",
    "autoplan/cli/__init__.py": "",
    "autoplan/cli/main.py": "import importlib\n\ndef main(name):\n"
                            "    return importlib.import_module(f'autoplan.cli.{name}_cmd')\n",
    "autoplan/cli/search_cmd.py": "from autoplan.planner import search\n",
    "cost_model/__init__.py": "from cost_model.estimator import Estimator\n",
    "cost_model/estimator.py": "from autoplan.specs import ModelSpec\n\nclass Estimator:\n    pass\n",
    "executor/__init__.py": "",
    "executor/train.py": "import torch\n\nfrom autoplan.specs import ModelSpec\n",
    "executor/record.py": "from executor.train import torch\n",
    "profiler/__init__.py": "",
    "profiler/timing.py": "import time\n\nimport torch\n\nfrom autoplan.specs.model import ModelSpec\n",
    "benchmarks/speed.py": "from autoplan.planner import search\nfrom executor.train import torch\n",
}

PLANTED = {
    "executor imports the planner": (
        "executor/train.py", "from autoplan.planner import search\n",
        "executor.train (executor) loads autoplan.planner (autoplan)"),
    "executor reaches cost_model through autoplan.calibration": (
        "executor/record.py", "def corrected():\n    from autoplan import calibration\n",
        "executor.record (executor) loads cost_model.estimator (cost_model): "
        "executor.record -> autoplan.calibration -> cost_model.estimator"),
    "importlib.import_module with a string": (
        "executor/record.py", "import importlib\n\ndef load():\n    return importlib.import_module('autoplan.search')\n",
        "executor.record (executor) loads autoplan.search (autoplan)"),
    "__import__ with a string": (
        "profiler/timing.py", "def load():\n    return __import__('cost_model.estimator')\n",
        "profiler.timing (profiler) loads cost_model.estimator (cost_model)"),
    "an import_module the checker cannot read": (
        "executor/record.py", "import importlib\n\ndef load(name):\n    return importlib.import_module(name)\n",
        "executor.record: dynamic import the checker cannot read"),
    "profiler imports the executor": (
        "profiler/timing.py", "from executor.train import ModelSpec\n",
        "profiler.timing (profiler) loads executor.train (executor)"),
    "numpy in autoplan/specs": (
        "autoplan/specs/model.py", "def as_array(values):\n    import numpy\n    return numpy.asarray(values)\n",
        "autoplan.specs.model (autoplan.specs) loads numpy: autoplan.specs.model -> numpy (line"),
    "the cost model imports the catalog": (
        "cost_model/estimator.py", "def named(name):\n    from autoplan.catalog import resolve_model\n",
        "cost_model.estimator (cost_model) loads autoplan.catalog (autoplan)"),
    "the cost model imports torch": (
        "cost_model/estimator.py", "import torch\n", "cost_model.estimator (cost_model) loads torch"),
    "the specs package runs the planner when imported": (
        "autoplan/__init__.py", "from autoplan.planner import search\n",
        "autoplan.specs (autoplan.specs) loads autoplan.planner (autoplan): autoplan.specs -> autoplan -> "
        "autoplan.planner"),
}


def plant(base: Path, files: dict) -> Graph:
    for relative, text in files.items():
        path = base / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return Graph(base, PACKAGES)


def test_the_clean_fixture_tree_passes(tmp_path):
    assert violations(plant(tmp_path, CLEAN)) == []


@pytest.mark.parametrize("fault", list(PLANTED))
def test_a_planted_violation_is_reported(tmp_path, fault):
    path, text, expected = PLANTED[fault]
    files = dict(CLEAN)
    files[path] = files[path] + "\n" + text
    found = violations(plant(tmp_path, files))
    assert any(line.startswith(expected) for line in found), found


# -- what planning loads at run time -----------------------------------------------------------

HEAVY = ("torch", "torch_xla")


def loaded(statements: str) -> list:
    """The heavy modules in sys.modules after running `statements` in a fresh interpreter."""
    code = textwrap.dedent(statements) + f"\nimport json, sys\nprint(json.dumps(sorted(set({HEAVY!r}) & set(sys.modules))))\n"
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


def test_planning_the_cost_model_and_the_cli_load_no_torch():
    assert loaded("""
        import autoplan.planning.planner, autoplan.planning.search, autoplan.specs, cost_model, cost_model.learned
        import autoplan.cli.main
        autoplan.cli.main.build_parser()      # every subcommand registered, as `autoplan --help` does
    """) == []


def test_running_a_command_imports_no_other_command():
    """`autoplan search` builds its own parser only (autoplan/cli/main.py): the other commands' modules,
    and what they import (the cluster search, the exporters, the executor's options), stay out of its
    start-up, a share of every quick command's time (benchmarks/search_speed.py)."""
    code = textwrap.dedent("""
        import json, sys
        from autoplan.cli.main import main
        try:
            main(["search", "--help"])
        except SystemExit:  # --help exits once printed
            pass
        print(json.dumps(sorted(m for m in sys.modules if m.startswith("autoplan.cli.") and m.endswith("_cmd"))))
    """)
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1]) == ["autoplan.cli.search_cmd"]


def test_the_torch_probe_sees_torch_when_it_is_loaded():
    pytest.importorskip("torch")
    assert loaded("import executor.model; executor.model.Transformer") == ["torch"]


# -- no import circle, no private name across modules ------------------------------------------

def circles(graph: Graph) -> list:
    return [" <-> ".join(group) for group in graph.cycles()]


def private_imports(graph: Graph) -> list:
    return [f"{module.name} (line {line}) uses {name} of {owner}"
            for module in graph.modules.values() for line, owner, name in module.private_uses]


def test_no_import_circle_and_no_private_name_imported_across_modules():
    graph = Graph(ROOT, PACKAGES)
    assert circles(graph) == []
    assert private_imports(graph) == []


PLANTED_SHAPES = {
    "a circle through a lazy import": (
        {"autoplan/render.py": "from autoplan.budget import describe\n",
         "autoplan/budget.py": "def describe():\n    from autoplan.render import human_count\n"},
        circles, "autoplan.budget <-> autoplan.render"),
    "a circle through a string import": (
        {"autoplan/specs/schemas.py": "import importlib\n\ndef kinds():\n"
                                      "    return importlib.import_module('autoplan.specs.model').KINDS\n",
         "autoplan/specs/model.py": "from autoplan.specs.schemas import kinds\n"},
        circles, "autoplan.specs.model <-> autoplan.specs.schemas"),
    "a private name imported": (
        {"autoplan/tune.py": "from autoplan.render import _table\n"},
        private_imports, "autoplan.tune (line 1) uses _table of autoplan.render"),
    "a private name read off a module": (
        {"autoplan/cli/tune_cmd.py": "def warn():\n    from autoplan import render\n    return render._wrap('x', 2)\n"},
        private_imports, "autoplan.cli.tune_cmd (line 3) uses _wrap of autoplan.render"),
}


@pytest.mark.parametrize("fault", list(PLANTED_SHAPES))
def test_a_planted_circle_or_private_import_is_reported(tmp_path, fault):
    files, find, expected = PLANTED_SHAPES[fault]
    clean = dict(CLEAN, **{"autoplan/render.py": "def human_count():\n    pass\n", "autoplan/tune.py": "",
                           "autoplan/budget.py": "", "autoplan/specs/schemas.py": "", "autoplan/cli/tune_cmd.py": ""})
    assert circles(plant(tmp_path / "clean", clean)) == [] and private_imports(plant(tmp_path / "clean", clean)) == []
    assert expected in find(plant(tmp_path / "planted", {**clean, **files}))


def test_the_tests_read_no_private_name_of_the_code_or_of_each_other():
    # A test that imports a private helper pins an implementation detail; what a test needs is public.
    graph = Graph(ROOT, PACKAGES + ("tests",))
    assert [use for use in private_imports(graph) if use.startswith("tests.")] == []


# -- no private attribute of an object read outside the module that defines it ----------------

NAMEDTUPLE_API = {"_replace", "_asdict", "_fields", "_make"}
"""collections.namedtuple's public methods, underscored so they never clash with a field."""
THIRD_PARTY_PRIVATE = {
    "_flatten": "torch DeviceMesh._flatten: the dp_shard x cp mesh FSDP2 shards over (torchtitan does the same)",
    "_set_params_and_buffers_to_ignore_for_model": "torch DDP: the experts' parameters kept out of its all-reduce",
    "_get_xla_sharding_spec": "torch_xla._XLAC: how a tensor is sharded, no public accessor",
}
"""Private attributes of torch's own objects the executor reads, each for want of a public API."""


def private_attribute_reads(path: Path) -> list:
    """`obj._name` in `path` where obj is not self/cls or an imported module and no code of `path`
    defines `_name`: a module reaching into another's object (est._layer_cache read by the
    stage-memory module was one), which ties it to that module's insides."""
    tree = ast.parse(path.read_text(), str(path))
    defined, modules = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            defined.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            defined.add(node.attr)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            defined.add(node.id)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            defined.add(node.target.id)
        elif isinstance(node, ast.Import):
            modules.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
    reads = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute) or not node.attr.startswith("_") or node.attr.startswith("__"):
            continue
        owner = node.value
        if isinstance(owner, ast.Name) and (owner.id in ("self", "cls") or owner.id in modules):
            continue
        if node.attr not in defined and node.attr not in NAMEDTUPLE_API and node.attr not in THIRD_PARTY_PRIVATE:
            reads.append(f"{path.name}:{node.lineno} reads {ast.unparse(node)}")
    return reads


def test_no_private_attribute_read_across_modules():
    found = [read for package in ("autoplan", "cost_model", "executor", "profiler")
             for path in sorted((ROOT / package).rglob("*.py")) for read in private_attribute_reads(path)]
    assert found == []


def test_a_planted_private_attribute_read_is_reported(tmp_path):
    module = tmp_path / "stage_memory.py"
    module.write_text("import os\n\n\nclass Held:\n    def __init__(self):\n        self._total = 0\n\n\n"
                      "def peak(est, held):\n    os._exit if False else None\n    return held._total + est._layer_cache\n")
    assert private_attribute_reads(module) == ["stage_memory.py:11 reads est._layer_cache"]
