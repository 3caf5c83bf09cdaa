"""The fitted efficiency values of the frameworks, and the refits that score them out of sample.

Physics gives the shape of every term and the profile (built-in or measured) what the hardware
achieves; what neither can know is how close a training framework's kernels and overlap get to
the profile. Those are Framework fields (autoplan.specs.framework); for the frameworks behind the
published runs `benchmarks/fit_constants.py` fits them and writes `cost_model/data/constants.json`
with its provenance (date, rows, resulting error) and the leave-one-source-out refits. Missing file
or keys fall back to the frameworks' documented values.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from autoplan.specs import AutoplanError, Framework, get_framework
from autoplan.specs.frameworks import base_framework_name

CONSTANTS_PATH = Path(__file__).parent / "data" / "constants.json"


@dataclass(frozen=True)
class Constants:
    frameworks: dict = field(default_factory=dict)
    """Framework name -> fitted Framework field overrides (how close its kernels and overlap get to
    the profile). Nothing here is keyed to a GPU type: hardware facts live in the profile."""
    provenance: dict = field(default_factory=dict)
    held_out: dict = field(default_factory=dict)
    """"<split>:<group>" (e.g. "source:bigscience", "gpu_generation:ampere") -> {"frameworks": ...,
    "provenance": ...}: the constants refitted without that group's rows (benchmarks/fit_constants.py),
    for `autoplan validate`'s out-of-sample figures."""

    def framework(self, name: str | Framework, **overrides) -> Framework:
        """The named framework (autoplan.specs.frameworks; or that Framework, already looked up) with
        its fitted efficiency values and per-run overrides (e.g. torch.compile on) merged over its
        documented facts."""
        framework = name if isinstance(name, Framework) else get_framework(name)
        # Fitted values belong to the built-in framework, options or not ("megatron-core+flex-deepep").
        fitted = self.frameworks.get(base_framework_name(framework.name), {})
        return framework.with_overrides(**{**fitted, **overrides})

    def refit_without(self, key: str) -> "Constants":
        """The constants fitted without the group `key` ("<split>:<group>"; KeyError when the file
        has none for it)."""
        entry = self.held_out[key]
        return Constants(frameworks={k: dict(v) for k, v in entry["frameworks"].items()},
                         provenance=dict(entry.get("provenance", {})))

    def to_dict(self) -> dict:
        return {"frameworks": {k: dict(v) for k, v in self.frameworks.items()},
                "provenance": dict(self.provenance),
                "held_out": {k: {"frameworks": {f: dict(v) for f, v in e["frameworks"].items()},
                                 "provenance": dict(e.get("provenance", {}))} for k, e in self.held_out.items()}}

    @classmethod
    def from_dict(cls, data: dict) -> "Constants":
        return cls(frameworks={k: dict(v) for k, v in data.get("frameworks", {}).items()},
                   provenance=dict(data.get("provenance", {})),
                   held_out={k: dict(v) for k, v in data.get("held_out", {}).items()})


@lru_cache(maxsize=None)
def load_constants(path: str = str(CONSTANTS_PATH)) -> Constants:
    """The fitted constants (neutral defaults when the file is absent)."""
    p = Path(path)
    if not p.exists():
        return Constants()
    try:
        return Constants.from_dict(json.loads(p.read_text(encoding="utf-8")))
    except (ValueError, TypeError, AttributeError) as exc:
        raise AutoplanError(f"cost-model constants {p} are malformed ({exc}); rerun benchmarks/fit_constants.py") from None
