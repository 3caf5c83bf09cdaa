"""JSON reading and writing shared by every spec: schema checks, field checks; writes go through
autoplan.specs.output (atomic, stdout for -, devices and inputs refused)."""
from __future__ import annotations

import json
import math
import os
import stat
from pathlib import Path
from typing import Any

from autoplan.specs.errors import AutoplanError, SchemaError
from autoplan.specs.output import node_kind, write_text_atomic
from autoplan.specs.validation import MAX_JSON_BYTES, parse_json_text, show


# The files autoplan writes, by schema: what each is and which command writes it, so that a file
# handed to the wrong command is named for what it is instead of being called outdated.
_FILE_KINDS = {
    "autoplan.plan/v1": "a plan file (written by `autoplan search -o`)",
    "autoplan.plan/v2": "a plan file (written by `autoplan search -o`)",
    "autoplan.profile/v1": "a hardware profile (written by `autoplan profile --out`)",
    "autoplan.measurement/v1": "a measurement (a line of the JSONL `autoplan run` appends to)",
    "autoplan.calibration/v1": "a calibration file (written by `autoplan calibrate -o`)",
}


def check_schema(data: Any, expected: str, what: str) -> dict:
    """Return `data` if it is a dict whose "schema" is `expected`, else raise SchemaError."""
    if not isinstance(data, dict):
        raise SchemaError(f"{what} must be a JSON object, got {type(data).__name__}")
    found = data.get("schema")
    if not isinstance(found, str):
        raise SchemaError(f"{what} has no schema string (got {show(found)}), expected {expected!r}; "
                          f"regenerate it with this version of autoplan")
    if found != expected and found in _FILE_KINDS and expected in _FILE_KINDS:
        raise SchemaError(f"{what} has schema {found!r}: it is {_FILE_KINDS[found]}, not "
                          f"{_FILE_KINDS[expected]}; pass the right file (expected {expected!r})")
    if found != expected:
        raise SchemaError(
            f"{what} has schema {found!r}, expected {expected!r}; "
            f"regenerate it with this version of autoplan"
        )
    return data


def require(data: dict, key: str, kind: type | tuple, what: str) -> Any:
    """Fetch `data[key]` and check its type; bools are not accepted where numbers are asked."""
    if key not in data:
        raise SchemaError(f"{what} is missing the field {key!r}")
    value = data[key]
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if isinstance(value, bool) and bool not in kinds:
        raise SchemaError(f"{what} field {key!r} must be {_names(kinds)}, got {value!r}")
    if float in kinds and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if not isinstance(value, kinds):
        raise SchemaError(f"{what} field {key!r} must be {_names(kinds)}, got {value!r}")
    if isinstance(value, float) and not math.isfinite(value):
        raise SchemaError(f"{what} field {key!r} must be finite, got {value!r}")
    return value


def _names(kinds: tuple) -> str:
    return " or ".join(k.__name__ for k in kinds)


def check_input_file(path: str | os.PathLike, what: str) -> None:
    """Refuse an input that is not a regular file: a FIFO nobody writes (or a terminal) would block
    the read forever, and a device such as /dev/zero never ends. A missing one and a folder are
    said by the reader (each names what it expected)."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return
    if not stat.S_ISREG(mode) and not stat.S_ISDIR(mode):
        raise AutoplanError(f"{what} {_short(path)} is {node_kind(mode)}, not a regular file: autoplan reads files "
                            f"only (save it to a file first)")


def check_exists(p: Path, what: str) -> None:
    """AutoplanError when there is no file at `p`, saying whether a symbolic link points nowhere;
    any other failure to find it (a symlink loop, a name too long) is the OSError it is, for the
    caller to say with its reason (not as "does not exist")."""
    try:
        p.stat()
    except FileNotFoundError:
        if p.is_symlink():
            raise AutoplanError(f"{what} {_short(p)} is a symbolic link to {os.readlink(p)!r}, which does not "
                                f"exist") from None
        raise AutoplanError(f"{what} {_short(p)} does not exist") from None


def read_input_text(path: str | os.PathLike, what: str, expected: str = "a JSON file",
                    max_bytes: int = MAX_JSON_BYTES, too_big: str = "") -> str:
    """The one read of an input file autoplan parses: it exists, is a regular file (not a folder, FIFO
    or device), holds at most `max_bytes` (autoplan.specs.validation) and is UTF-8; every failure is
    one AutoplanError naming `what` file and what was `expected`. `too_big`: what to do with a larger
    one (default: it is not a `what` file)."""
    p = Path(path)
    try:
        check_exists(p, f"{what} file")
        if p.is_dir():
            raise AutoplanError(f"{what} path {_short(p)} is a folder, expected {expected}")
        check_input_file(p, f"{what} file")
        size = p.stat().st_size
        if size > max_bytes:
            raise AutoplanError(f"{what} file {_short(p)} is {size / 2**20:.0f} MiB, above the {max_bytes // 2**20} "
                                f"MiB autoplan reads; {too_big or f'it is not a {what} file'}")
        return p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        raise AutoplanError(f"cannot read {what} file {_short(p)}: {reason}; expected {expected}") from None


def read_json(path: str | os.PathLike, what: str) -> Any:
    """Load a JSON file, turning every I/O or parse failure into one clear AutoplanError.

    The file's size and nesting are bounded (autoplan.specs.validation) before and while parsing.
    """
    p = Path(path)
    text = read_input_text(p, what)
    try:
        return parse_json_text(text, f"{what} file {_short(p)}")
    except json.JSONDecodeError as exc:
        if exc.msg == "Extra data" and exc.lineno > 1:
            raise AutoplanError(f"{what} file {_short(p)} holds one JSON value per line (JSON Lines, like the "
                                f"runs.jsonl of `autoplan run`), not a single {what} JSON object") from None
        raise AutoplanError(
            f"{what} file {_short(p)} is not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})"
        ) from None


def _short(path) -> str:
    """A path as messages quote it: repr, cut in the middle past 120 characters (one line stays short)."""
    text = repr(str(path))
    return text if len(text) <= 120 else f"{text[:60]}...{text[-57:]}"


def dumps(data: Any) -> str:
    return json.dumps(data, indent=2, sort_keys=False) + "\n"


def write_json_atomic(path: str | os.PathLike, data: Any) -> None:
    write_text_atomic(path, dumps(data))
