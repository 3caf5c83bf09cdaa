"""Measurement: one record of what a run measured, appended as a JSON line (schema v1).

Written by the executor, read by calibration and reports. An OOM or an error is a record too
(`status` "oom" / "error"): data, not a crash.
"""
from __future__ import annotations

import json
import statistics
from dataclasses import asdict, dataclass, field
from pathlib import Path

from autoplan.specs.choices import STATUSES
from autoplan.specs.errors import SchemaError
from autoplan.specs.jsonio import check_schema, read_input_text
from autoplan.specs.output import append_output
from autoplan.specs.schemas import validate_measurement
from autoplan.specs.validation import MAX_JSONL_BYTES, Issues, parse_json_text

MEASUREMENT_SCHEMA = "autoplan.measurement/v1"


@dataclass
class Measurement:
    plan_id: str
    plan: dict
    """The whole plan document (schema autoplan.plan/v1) the run executed."""
    prediction: dict
    """The prediction the plan carried when it was run (may be empty)."""
    backend: str
    """"torch" or "xla"."""
    status: str
    step_times_s: list = field(default_factory=list)
    """Wall time of each measured step, warm-up steps excluded."""
    losses: list = field(default_factory=list)
    """Loss of every step, warm-up included."""
    peak_memory_bytes: int = 0
    environment: dict = field(default_factory=dict)
    num_warmup_steps: int = 0
    tokens_per_step: int = 0
    num_gpus: int = 0
    peak_flops_per_s: float = 0.0
    error: str = ""
    extra: dict = field(default_factory=dict)
    schema: str = MEASUREMENT_SCHEMA

    @property
    def median_step_time_s(self) -> float:
        return statistics.median(self.step_times_s) if self.step_times_s else float("nan")

    @property
    def tokens_per_s(self) -> float:
        t = self.median_step_time_s
        return self.tokens_per_step / t if self.step_times_s and t > 0 else float("nan")

    def to_dict(self) -> dict:
        d = asdict(self)
        extra = d.pop("extra")
        return {"schema": d.pop("schema"), **d, **extra}

    def to_json_line(self) -> str:
        return json.dumps(self.to_dict(), separators=(",", ":")) + "\n"

    @classmethod
    def from_dict(cls, data: dict, what: str = "measurement") -> "Measurement":
        check_schema(data, MEASUREMENT_SCHEMA, what)
        issues = Issues(what)
        validate_measurement(data, issues)
        issues.raise_if_any()
        known = {f for f in cls.__dataclass_fields__ if f != "extra"}
        kwargs = {k: data[k] for k in known if k in data}
        kwargs["extra"] = {k: v for k, v in data.items() if k not in known}
        return cls(**kwargs)


def append_measurement(path, record: Measurement) -> None:
    """Append one JSON line through the one writer (a single write(): concurrent appenders never
    interleave lines; - is stdout; a device, FIFO or folder is refused)."""
    append_output(path, record.to_json_line())


def read_measurements(path) -> tuple[list[Measurement], list[str]]:
    """Read a JSONL file; returns (records, problems) where each malformed line is one problem."""
    p = Path(path)
    text = read_input_text(p, "measurements", "a JSONL file written by `autoplan run`", MAX_JSONL_BYTES,
                           "split it into several files")
    records, problems = [], []
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            records.append(Measurement.from_dict(parse_json_text(line, "the record"), "measurement record"))
        except (json.JSONDecodeError, SchemaError) as exc:
            problems.append(f"{p.name}:{lineno}: {exc}")
    return records, problems
