"""Feed `autoplan export --to torchtitan` modules to torchtitan 0.3.0's own config code; run as
`PYTHONPATH=<side dir with torchtitan 0.3.0> python tests/torchtitan03_check.py EXPORTS.json`, it prints
one JSON verdict per export ("" = accepted, else the complaint). tests/test_export_acceptance.py runs it
in a subprocess, so torchtitan 0.3.0 never meets the venv's 0.2.0 in one interpreter.

torchtitan 0.3.0's config package (torchtitan.config: ConfigManager, ParallelismConfig, TrainingConfig)
imports on torch 2.9.0; its trainer, models and distributed code need torch.distributed._local_tensor
(a newer torch). So, per export:
- ConfigManager._load_config (config/manager.py line 47) imports the module by name and calls the
  `--config` function, for real. The modules that do not import on torch 2.9 are stood in for by
  recorders built from their 0.3.0 source (ast): a name the real file does not define is an
  ImportError, a keyword the real function or `Config` dataclass (with its bases) lacks a TypeError.
- ParallelismConfig/TrainingConfig are the real classes (their __post_init__ runs), then parsed back by
  tyro with ConfigManager's registry and the launch script's overrides (`--training.steps`).
- 0.3.0's own ParallelDims._validate (distributed/parallel_dims.py line 170), _get_pipeline_metadata
  (distributed/pipeline_parallel.py line 194) and _generate_llm_fqn_per_model_part (line 366) are
  executed from their source; Trainer.Config.__post_init__ (trainer.py lines 118-211), the batch rule
  (trainer.py lines 415-433) and the expert mesh (parallel_dims.py lines 279, 401) are re-stated below.
"""
from __future__ import annotations

import ast
import dataclasses
import importlib
import json
import math
import sys
import tempfile
import types
from pathlib import Path

import torchtitan

ROOT = Path(torchtitan.__file__).parent


def _tree(module: str) -> ast.Module:
    path = ROOT.parent / (module.replace(".", "/") + ".py")
    if not path.exists():
        path = ROOT.parent / module.replace(".", "/") / "__init__.py"
    return ast.parse(path.read_text())


def _top_level(tree: ast.Module) -> dict:
    names = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names[node.name] = node
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update({(a.asname or a.name).split(".")[0]: node for a in node.names})
        elif isinstance(node, ast.Assign):
            names.update({t.id: node for t in node.targets if isinstance(t, ast.Name)})
    return names


_CLASSES: dict = {}


def _class_index() -> dict:
    """Every class defined in torchtitan 0.3.0, by name (for the bases of a `Config`)."""
    if not _CLASSES:
        for path in ROOT.rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.ClassDef):
                    _CLASSES.setdefault(node.name, []).append(node)
    return _CLASSES


def _fields(cls: ast.ClassDef, seen=()) -> set:
    """Annotated fields of a dataclass node and of its bases (`Base` or `Base.Config`)."""
    out = {n.target.id for n in cls.body if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)}
    for base in cls.bases:
        parts = ast.unparse(base).split(".")
        for outer in _class_index().get(parts[-2] if len(parts) > 1 else parts[-1], []):
            node = next((n for n in outer.body if isinstance(n, ast.ClassDef) and n.name == "Config"), None) \
                if len(parts) > 1 else outer
            if node is not None and id(node) not in seen:
                out |= _fields(node, seen + (id(node),))
    return out


class Recorded(types.SimpleNamespace):
    """What a stood-in call returned: attributes set by the module stay; others read as stand-ins."""

    def __getattr__(self, name):
        return Recorder(f"{self.__dict__.get('_origin', '?')}().{name}", None)

    def __contains__(self, item):
        return False


class Recorder:
    """A name of a torchtitan module that does not import on torch 2.9, checked against its source."""

    def __init__(self, origin: str, node):
        self.origin, self.node = origin, node

    def __getattr__(self, name):
        inner = None
        if isinstance(self.node, ast.ClassDef):
            inner = next((n for n in self.node.body if isinstance(n, ast.ClassDef) and n.name == name), None)
            if inner is None and name != "Config":
                raise AttributeError(f"torchtitan 0.3.0: {self.origin} has no {name}")
        return Recorder(f"{self.origin}.{name}", inner)

    def __bool__(self):
        return True

    def __contains__(self, item):
        return False

    def __call__(self, *args, **kwargs):
        node = self.node
        if isinstance(node, ast.FunctionDef):
            params = [a.arg for a in node.args.args + node.args.kwonlyargs]
            bad = [k for k in kwargs if k not in params and node.args.kwarg is None]
            if bad or (len(args) > len(node.args.args) and node.args.vararg is None):
                raise TypeError(f"torchtitan 0.3.0: {self.origin}() takes {params}, got {list(kwargs) or args}")
        elif isinstance(node, ast.ClassDef):
            bad = sorted(set(kwargs) - _fields(node))
            if bad or args:
                raise TypeError(f"torchtitan 0.3.0: {self.origin} has no field {bad or args}")
        return Recorded(_origin=self.origin, _args=args, **kwargs)


def _stand_in(module: str) -> types.ModuleType:
    stand_in = types.ModuleType(module)
    names = _top_level(_tree(module))
    for name, node in names.items():
        setattr(stand_in, name, Recorder(f"{module}.{name}", node))
    return stand_in  # a name the 0.3.0 file lacks: `from ... import` raises ImportError


def _install_stand_ins(text: str) -> None:
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.ImportFrom) and node.module.startswith("torchtitan"):
            try:
                importlib.import_module(node.module)
            except ImportError as exc:
                if "torch" not in str(exc):
                    raise
                sys.modules[node.module] = _stand_in(node.module)


def _source_function(module: str, name: str, cls: str | None = None, scope: dict | None = None):
    """0.3.0's own function, compiled from its source (its module does not import here)."""
    tree = _tree(module)
    body = tree.body if cls is None else next(n for n in tree.body if isinstance(n, ast.ClassDef)
                                              and n.name == cls).body
    node = next(n for n in body if isinstance(n, ast.FunctionDef) and n.name == name)
    node.returns, node.decorator_list = None, []
    for arg in node.args.args + node.args.kwonlyargs:
        arg.annotation = None
    namespace = dict(scope or {})
    exec(compile(ast.Module(body=[node], type_ignores=[]), f"torchtitan 0.3.0 {module}.{name}", "exec"), namespace)
    return namespace[name]


def _num_layers(config) -> int:
    """Transformer layers of the exported model: the module's own, or the shipped flavor's (`n_layers =`
    in torchtitan/models/<model>/__init__.py's flavor function; the recipe's `model_registry(flavor)`)."""
    spec = config.__dict__.get("model_spec")
    if spec is not None and spec._origin.endswith("ModelSpec"):
        return spec.model.layers.n_layers
    if spec is not None:
        name, flavor = spec._origin.split(".")[2], spec._args[0]
    else:  # the recipe's own model
        module, recipe = config._origin.rsplit(".", 1)
        fn = next(n for n in _tree(module).body if isinstance(n, ast.FunctionDef) and n.name == recipe)
        call = next(n for n in ast.walk(fn) if isinstance(n, ast.Call) and ast.unparse(n.func) == "model_registry")
        name, flavor = module.split(".")[2], call.args[0].value
    fn = next(n for n in _tree(f"torchtitan.models.{name}").body
              if isinstance(n, ast.FunctionDef) and n.name == "_" + flavor.lower().replace("-", "_").replace(".", "_"))
    return next(n.value.value for n in ast.walk(fn) if isinstance(n, ast.Assign)
                and ast.unparse(n.targets[0]) == "n_layers")


def check(text: str, num_gpus: int, workdir: Path, index: int) -> str:
    import tyro
    from torch.distributed.pipelining.schedules import PipelineScheduleSingle, get_schedule_class
    from torchtitan.config import ConfigManager, ParallelismConfig, TrainingConfig
    from torchtitan.config.manager import custom_registry

    module = f"autoplan_job_{index}"
    (workdir / f"{module}.py").write_text(text)
    try:
        _install_stand_ins(text)
        config, rest = ConfigManager()._load_config(["--module", module, "--config", "autoplan_job",
                                                     "--training.steps", "7"])
    except Exception as exc:  # whatever the module raises is the verdict
        return f"ConfigManager: {type(exc).__name__}: {exc}"
    p, t = config.parallelism, config.training
    if not isinstance(p, ParallelismConfig) or not isinstance(t, TrainingConfig):
        return "the module does not set torchtitan's ParallelismConfig and TrainingConfig"
    job = dataclasses.make_dataclass("Job", [("training", TrainingConfig), ("parallelism", ParallelismConfig)])
    try:  # the values and the launch script's override through tyro, as ConfigManager.parse_args does
        parsed = tyro.cli(job, args=rest, default=job(training=t, parallelism=p), registry=custom_registry)
    except SystemExit as exc:
        return f"tyro: exit {exc.code}"
    p, t = parsed.parallelism, parsed.training
    if t.steps != 7:
        return "--training.steps did not reach TrainingConfig"
    # Trainer.Config.__post_init__ / _validate_cuda_graphs (trainer.py lines 124-139, 179-211)
    if p.pipeline_parallel_degree > 1 and t.local_batch_size % p.pipeline_parallel_microbatch_size:
        return "training.local_batch_size must be evenly divisible by pipeline_parallel_microbatch_size"
    if not t.disable_cuda_graphs and (p.pipeline_parallel_degree > 1 or p.expert_parallel_degree > 1):
        return "CUDA graphs do not support pipeline parallelism (or EP with the default dispatcher)"
    dims = types.SimpleNamespace(dp_replicate=p.data_parallel_replicate_degree, dp_shard=p.data_parallel_shard_degree,
                                 cp=p.context_parallel_degree, tp=p.tensor_parallel_degree,
                                 pp=p.pipeline_parallel_degree, ep=p.expert_parallel_degree, world_size=num_gpus)
    try:
        _source_function("torchtitan.distributed.parallel_dims", "_validate", "ParallelDims")(dims)
    except AssertionError as exc:
        return f"ParallelDims: {exc}"
    if (dims.dp_shard * dims.cp * dims.tp) % dims.ep:  # efsdp = fsdp * tp // ep (parallel_dims.py line 279)
        return f"efsdp: dp_shard*cp*tp={dims.dp_shard * dims.cp * dims.tp} not divisible by ep={dims.ep}"
    batch = dims.dp_replicate * dims.dp_shard  # trainer.py lines 415-427
    if t.global_batch_size % (t.local_batch_size * batch):
        return f"global batch {t.global_batch_size} not a multiple of local {t.local_batch_size} x dp {batch}"
    if dims.pp > 1:
        n_layers = _num_layers(config)
        scope = {"math": math, "get_schedule_class": get_schedule_class,
                 "PipelineScheduleSingle": PipelineScheduleSingle}
        try:
            stages, _, first, last = _source_function("torchtitan.distributed.pipeline_parallel",
                                                      "_get_pipeline_metadata", scope=scope)(
                dims, p, types.SimpleNamespace(layers=[None] * n_layers))
            parts = p.module_fqns_per_model_part or _source_function(
                "torchtitan.distributed.pipeline_parallel", "_generate_llm_fqn_per_model_part")(
                stages, n_layers, first, last)
        except ValueError as exc:
            return f"pipeline_parallel: {exc}"
        layers = [m for part in parts for m in part if m.startswith("layers.")]
        if layers != [f"layers.{i}" for i in range(n_layers)] or len(parts) % dims.pp:
            return f"{len(parts)} model parts do not hold the {n_layers} layers in order over pp={dims.pp}"
        single = issubclass(get_schedule_class(p.pipeline_parallel_schedule), PipelineScheduleSingle)
        if (len(parts) // dims.pp == 1) != single:
            return f"{p.pipeline_parallel_schedule} cannot run {len(parts) // dims.pp} stages per rank"
    return ""


def main() -> None:
    exports = json.loads(Path(sys.argv[1]).read_text())
    with tempfile.TemporaryDirectory() as tmp:
        sys.path.insert(0, tmp)
        verdicts = [check(item["text"], item["num_gpus"], Path(tmp), index) for index, item in enumerate(exports)]
    print(json.dumps(verdicts))


if __name__ == "__main__":
    main()
