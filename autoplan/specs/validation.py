"""The checks every file autoplan reads goes through before anything else touches its data.

Standard library only, like the rest of `autoplan.specs` (see docs/bad_input.md for why not
pydantic or jsonschema). Three layers:

- `parse_json_text`: size and nesting limits around `json.loads`, so a 100,000-deep `[[[[` is one
  line instead of a RecursionError, and a JSON file can not make a reader allocate without bound;
- `Issues` with the typed field readers (`take_int`, `take_float`, ...): every problem of a
  document is collected and reported at once, each as `<field path>: <rule>, got <value>`;
- the bounds below: counts a real model, cluster or run could have, far above any published one,
  so that an extra zero or a pasted token count is refused with its rule instead of running for
  hours (a 10^30-layer model made `search` enumerate forever).

The per-format rules (which fields, which cross-field rules) are in `autoplan.specs.schemas`.
"""
from __future__ import annotations

import json
import math
import unicodedata
from dataclasses import fields
from typing import Any

from autoplan.specs.errors import SchemaError

# -- limits on files ------------------------------------------------------------------------------
MAX_JSON_BYTES = 64 * 2**20
"""A JSON file (plan, profile, calibration, config.json). The largest autoplan writes is a measured
profile with its sample tables, well under 1 MiB; a calibration file of boosted trees a few MiB."""
MAX_JSONL_BYTES = 512 * 2**20
"""A measurements file (runs.jsonl): ~10 KB per run, so ~50,000 runs."""
MAX_DEPTH = 64
"""Nesting of any JSON document; autoplan's own files nest 5 deep, HF config.json files about 4."""

# -- bounds on sizes (inclusive upper bounds; every count is also >= 1 unless said otherwise) ------
# The largest published dense models have ~126 layers, hidden 16-25K, vocab ~256K, MoE up to a
# few hundred experts; contexts reach ~10M tokens (Llama 4 Scout). The bounds leave ~8x headroom.
MAX_LAYERS = 1000
MAX_HIDDEN = 2**17
MAX_HEADS = 2**14
MAX_HEAD_DIM = 2**13
MAX_FFN = 2**20
MAX_VOCAB = 2**22
MAX_EXPERTS = 2**16
MAX_SEQ_LEN = 2**24
# Clusters and runs: the largest published runs use ~16K-100K GPUs and ~16M tokens per step.
MAX_NUM_GPUS = 2**20
MAX_GPUS_PER_NODE = 2**10
MAX_GLOBAL_BATCH = 2**24
# A MoE run's busiest expert-parallel rank over the mean: a rank holds at most every routed token,
# ep times the mean (cost_model/moe_time.py bounds it per plan); 1024 ranks leave headroom.
MAX_MOE_LOAD_IMBALANCE = 1024.0
# A device: ~10 PFLOP/s, ~10 TB/s and ~300 GB per GPU today (B200-class); profiles of a whole
# host (CPU) stay far below these too.
MAX_FLOPS_PER_S = 1e18
MAX_BYTES_PER_S = 1e15
MAX_MEMORY_BYTES = 2**50
MAX_LATENCY_S = 10.0
MAX_VALUE_CHARS = 60
"""A value quoted in a message is cut to this many characters, so the message stays one line."""


def show(value: Any) -> str:
    """A value as a message quotes it: repr, one line, at most MAX_VALUE_CHARS characters."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**15:
        text = f"{value:.3g}" if abs(value) < 10**300 else f"an integer of {len(str(abs(value)))} digits"
    else:
        text = repr(value)
    text = text.replace("\n", " ")
    return text if len(text) <= MAX_VALUE_CHARS else text[:MAX_VALUE_CHARS - 3] + "..."


def parse_json_text(text: str, what: str) -> Any:
    """json.loads with a nesting limit; a too-deep document is one SchemaError, never RecursionError."""
    try:
        data = json.loads(text)
    except RecursionError:
        raise SchemaError(f"{what} is nested deeper than {MAX_DEPTH} levels (autoplan's files nest about 5); "
                          f"it is not a file autoplan or Hugging Face wrote") from None
    except json.JSONDecodeError:
        raise  # the caller names the line and column
    except ValueError as exc:  # e.g. an integer literal of more than 4,300 digits
        raise SchemaError(f"{what} holds a value JSON parsing refuses ({exc})") from None
    check_depth(data, what)
    return data


def check_depth(data: Any, what: str) -> None:
    """Refuse documents nested deeper than MAX_DEPTH (an iterative walk: no recursion to exhaust)."""
    stack = [(data, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict):
            children = node.values()
        elif isinstance(node, list):
            children = node
        else:
            continue
        if depth > MAX_DEPTH:
            raise SchemaError(f"{what} is nested deeper than {MAX_DEPTH} levels (autoplan's files nest about 5); "
                              f"it is not a file autoplan or Hugging Face wrote")
        stack.extend((child, depth + 1) for child in children)


def _ascii(convert):
    """`convert` (int or float) on ASCII text only, an argparse type: Python's int() and float() also
    read "1_0" and other scripts' digits ("١٦" is 16), which no documented form has."""
    def parse(text: str):
        if "_" in text or not text.isascii():
            raise ValueError(text)
        return convert(text)
    parse.__name__ = convert.__name__  # argparse says "invalid int value: '١٦'"
    return parse


ascii_int = _ascii(int)
ascii_float = _ascii(float)


def first_non_finite(data: Any, prefix: str) -> str | None:
    """The path of the first NaN or Infinity in `data` (an iterative walk), or None. Python's json reads
    and writes them, but they are not JSON: a file carrying one on is refused by jq and by browsers."""
    stack = [(data, prefix)]
    while stack:
        node, path = stack.pop()
        if isinstance(node, float) and not math.isfinite(node):
            return path
        if isinstance(node, dict):
            stack.extend((v, f"{path}.{k}") for k, v in node.items())
        elif isinstance(node, list):
            stack.extend((v, f"{path}[{i}]") for i, v in enumerate(node))
    return None


class Issues:
    """Every problem found in one document, raised together as one SchemaError line."""

    MAX_LISTED = 8

    def __init__(self, what: str):
        self.what = what
        self.missing: list[str] = []
        self.problems: list[str] = []

    def __bool__(self) -> bool:
        return bool(self.missing or self.problems)

    def add(self, path: str, rule: str, value: Any = None, show_value: bool = True) -> None:
        self.problems.append(f"{path} {rule}" + (f", got {show(value)}" if show_value else ""))

    def add_missing(self, path: str) -> None:
        self.missing.append(path)

    def message(self) -> str:
        parts = []
        if self.missing:
            parts.append(f"missing field{'s' if len(self.missing) > 1 else ''} {', '.join(self.missing)}")
        parts += self.problems
        extra = len(parts) - self.MAX_LISTED
        text = "; ".join(parts[:self.MAX_LISTED]) + (f"; and {extra} more" if extra > 0 else "")
        return f"{self.what}: {text}"

    def raise_if_any(self) -> None:
        if self:
            raise SchemaError(self.message())


def _path(prefix: str, key: str) -> str:
    return f"{prefix}.{key}" if prefix else key


def _present(data: dict, key: str, issues: Issues, path: str, required: bool) -> bool:
    if key in data:
        return True
    if required:
        issues.add_missing(path)
    return False


def take_int(data: dict, key: str, issues: Issues, prefix: str = "", low: int = 1, high: int | None = None,
             required: bool = True, default: int | None = None) -> int | None:
    """data[key] as an integer in [low, high]; records the problem and returns `default` otherwise."""
    path = _path(prefix, key)
    if not _present(data, key, issues, path, required):
        return default
    value = data[key]
    if isinstance(value, bool) or not isinstance(value, int):
        issues.add(path, "must be an integer", value)
        return default
    if value < low or (high is not None and value > high):
        bound = f"from {low:,} to {high:,}" if high is not None else f"at least {low:,}"
        issues.add(path, f"must be {bound}", value)
        return default
    return value


def take_float(data: dict, key: str, issues: Issues, prefix: str = "", low: float = 0.0, high: float | None = None,
               positive: bool = True, required: bool = True, default: float | None = None) -> float | None:
    """data[key] as a finite number, > low when `positive` else >= low, and <= high."""
    path = _path(prefix, key)
    if not _present(data, key, issues, path, required):
        return default
    value = data[key]
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        issues.add(path, "must be a number", value)
        return default
    value = float(value) if abs(value) < 1e308 else math.inf
    if not math.isfinite(value):
        issues.add(path, "must be a finite number", data[key])
        return default
    if (value <= low if positive else value < low) or (high is not None and value > high):
        rule = f"{'above' if positive else 'at least'} {low:g}" + (f" and at most {high:g}" if high is not None else "")
        issues.add(path, f"must be {rule}", value)
        return default
    return value


def _take(data: dict, key: str, issues: Issues, prefix: str, required: bool, kind: type, rule: str,
          absent=None, nullable: bool = False):
    """data[key] when it is a `kind`; else the problem is recorded and `absent` (or None) returned."""
    path = _path(prefix, key)
    if not _present(data, key, issues, path, required):
        return absent
    value = data[key]
    if value is None and nullable:
        return None
    if not isinstance(value, kind):
        issues.add(path, rule, value)
        return None if absent is None or required else absent
    return value


BIDI_CONTROLS = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
"""Unicode's bidirectional formatting characters (UAX #9, explicit formatting): inside a quoted name
they reorder how the rest of a generated script's line is displayed, so the code a reviewer reads is
not the code that runs ("Trojan Source", CVE-2021-42574)."""


def control_characters(text: str) -> str:
    """The characters of `text` that break a line or a generated file: C0/C1 controls (newline, tab,
    NUL, ESC, NEL, DEL), line and paragraph separators, lone surrogates and the bidirectional
    overrides (BIDI_CONTROLS). Spaces, quotes and non-ASCII letters are fine: every generator quotes
    them for its language."""
    return "".join(sorted({c for c in text if unicodedata.category(c) in ("Cc", "Zl", "Zp", "Cs")
                           or c in BIDI_CONTROLS}))


def refuse_unknown_fields(data: dict, known, what: str) -> None:
    """A section of a plan file holds only its own fields: a typo such as "tensor_parallel" or
    "num_layer" would otherwise be dropped silently, and the plan run or scored as if never edited."""
    unknown = sorted(set(data) - set(known))
    if unknown:
        raise SchemaError(f"{what} has unknown field(s) {', '.join(map(repr, unknown))}; "
                          f"the fields are {', '.join(known)}")


NAME_RULE = "must be one line without control characters (newline, tab, NUL, bidirectional overrides, ...)"
"""The rule of a name that reaches a message, a launch script, a Python module or a TOML file."""


def take_str(data: dict, key: str, issues: Issues, prefix: str = "", choices: tuple | None = None,
             required: bool = True, default: str | None = None, name: bool = False) -> str | None:
    """data[key] as a string (one of `choices` when given; one line without control characters when
    `name`: it is written into generated scripts and modules)."""
    value = _take(data, key, issues, prefix, required, str, "must be a string", default)
    if isinstance(value, str) and name and control_characters(value):
        issues.add(_path(prefix, key), NAME_RULE, value)
        return default
    if isinstance(value, str) and choices is not None and value not in choices:
        issues.add(_path(prefix, key), f"must be one of {', '.join(choices)}", value)
        return default
    return value if isinstance(value, str) else default


def take_bool(data: dict, key: str, issues: Issues, prefix: str = "", required: bool = True,
              default: bool | None = None) -> bool | None:
    value = _take(data, key, issues, prefix, required, bool, "must be true or false", default)
    return value if isinstance(value, bool) else default


def take_object(data: dict, key: str, issues: Issues, prefix: str = "", required: bool = True,
                nullable: bool = False) -> dict | None:
    """data[key] as a JSON object ({} when absent and not required; None when null is allowed)."""
    absent = None if required else {}
    value = _take(data, key, issues, prefix, required, dict, "must be a JSON object", absent, nullable)
    return value if isinstance(value, dict) or value is absent else None


def take_list(data: dict, key: str, issues: Issues, prefix: str = "", required: bool = True) -> list | None:
    absent = None if required else []
    # a tuple too: HardwareProfile.to_dict() keeps its tables as tuples until they are dumped
    value = _take(data, key, issues, prefix, required, (list, tuple), "must be a JSON list", absent)
    return value if isinstance(value, (list, tuple)) or value is absent else None


def require_object(data: Any, what: str) -> dict:
    if not isinstance(data, dict):
        raise SchemaError(f"{what} must be a JSON object, got {type(data).__name__} {show(data)}")
    return data


def bare_file_name(name: str) -> bool:
    """A file name with no folder part: not absolute, no / or \\, not . or .. (a file beside its JSON)."""
    return bool(name) and "/" not in name and "\\" not in name and name not in (".", "..") and "\x00" not in name


def check_spec_fields(spec, what: str, validate) -> None:
    """Every field of a built spec checked by its format's `validate` (autoplan.specs.schemas), the
    same rules its JSON passed: one SchemaError naming every problem."""
    issues = Issues(what)
    validate({f.name: getattr(spec, f.name) for f in fields(spec)}, issues, "")
    issues.raise_if_any()


def spec_from_dict(cls, data: Any, what: str, validate, derived: tuple = ()):
    """The one reader of a spec's JSON (ModelSpec, TrainingSpec, ClusterSpec): every field checked by
    `validate` with every problem told at once, no unknown field (a typo would be dropped silently;
    `derived` fields are written but not read back), then the spec built and its rules across fields
    checked (`cls.check`). A null field takes its default."""
    issues = Issues(what)
    validate(require_object(data, what), issues, prefix="")
    issues.raise_if_any()
    names = [f.name for f in fields(cls)]
    refuse_unknown_fields(data, names + list(derived), what)
    spec = cls(**{name: data[name] for name in names if data.get(name) is not None})
    spec.check()
    return spec
