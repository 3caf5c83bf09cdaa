"""The backend registry: name -> module exposing `check(doc, options)` and `run(doc, options)`.

`check` raises AutoplanError naming the plan feature this backend cannot run and which backend can;
it starts nothing. `run` trains and returns a Measurement (status ok/oom/error). Modules are imported
only when asked for, so `autoplan run --backend torch` never imports torch_xla.
"""
from __future__ import annotations

import importlib
from types import ModuleType

from autoplan.specs import AutoplanError

BACKENDS = {
    "torch": "executor.torch_backend",
    "xla": "executor.xla_backend",
}


def get_backend(name: str) -> ModuleType:
    if name not in BACKENDS:
        raise AutoplanError(f"unknown backend {name!r}; choose one of {sorted(BACKENDS)}")
    try:
        module = importlib.import_module(BACKENDS[name])
    except ModuleNotFoundError as exc:
        raise AutoplanError(f"backend {name!r} cannot be loaded ({exc}); install autoplan[{name}]") from None
    for attr in ("check", "run"):
        if not callable(getattr(module, attr, None)):
            raise AutoplanError(f"backend {name!r} ({BACKENDS[name]}) has no {attr}() yet")
    return module
