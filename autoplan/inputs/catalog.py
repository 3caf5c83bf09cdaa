"""The model catalog: named architectures (facts from the project's shared models.md table, shipped as
`catalog.json` next to this module), and `resolve_model`, which turns a `--model` argument (a
catalog name, a Hugging Face config.json, or a folder holding one) into a ModelSpec.
"""
from __future__ import annotations

import difflib
import json
from functools import lru_cache
from pathlib import Path

from autoplan.specs import AutoplanError, ModelSpec
from autoplan.specs.validation import show

CATALOG_PATH = Path(__file__).with_name("catalog.json")

# Keys of a catalog entry that are about the entry, not ModelSpec fields.
_META_KEYS = ("source",)


@lru_cache(maxsize=1)
def _catalog() -> dict:
    with CATALOG_PATH.open(encoding="utf-8") as f:
        return json.load(f)["models"]


def model_names() -> list[str]:
    """Catalog names in the catalog's order (grouped by family, smaller first)."""
    return list(_catalog())


def model_source(name: str) -> str:
    """Where the architecture of a catalog model comes from."""
    return _catalog()[_canonical(name)]["source"]


def _canonical(name: str) -> str:
    """Catalog key for `name`, forgiving case and '_' vs '-' ("Qwen_72B" -> "qwen-72b")."""
    key = name.strip().lower().replace("_", "-")
    if key in _catalog():
        return key
    suggestions = difflib.get_close_matches(key, model_names(), n=3, cutoff=0.5)
    hint = f"did you mean {', '.join(suggestions)}?" if suggestions else "run `autoplan models` to list them"
    raise AutoplanError(
        f"unknown model {show(name)}: not in the catalog and not a config.json path; {hint} "
        f"(or pass a Hugging Face config.json or a folder holding one)")


def catalog_model(name: str) -> ModelSpec:
    """The catalog's ModelSpec for `name`; unknown names raise AutoplanError with close names."""
    key = _canonical(name)
    entry = {k: v for k, v in _catalog()[key].items() if k not in _META_KEYS}
    spec = ModelSpec(name=key, **entry)
    spec.check()
    return spec


def resolve_model(arg: str) -> ModelSpec:
    """`--model`: a catalog name, a config.json path, or a folder holding config.json."""
    from autoplan.inputs.hf_config import load_hf_config

    if not isinstance(arg, str) or not arg.strip():
        raise AutoplanError("--model is empty; give a catalog name (see `autoplan models`) or a config.json path")
    if "\x00" in arg:
        raise AutoplanError("--model holds a NUL character; give a catalog name or a config.json path")
    path = Path(arg).expanduser()
    try:
        exists = path.exists()
    except OSError:  # e.g. a name longer than the file system allows: not a file we can read
        exists = False
    looks_like_path = exists or arg.endswith(".json") or "/" in arg or arg.startswith(".")
    if looks_like_path:
        return load_hf_config(path)
    return catalog_model(arg)
