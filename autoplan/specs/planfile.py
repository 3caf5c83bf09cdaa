"""PlanDocument: the plan file, schema `autoplan.plan/v2` (see DESIGN.md).

What `search --json` prints and `-o` writes, and what `run`, `estimate` and the exporters read.
Extra keys may be added; the documented ones are never renamed.

v2 adds `framework`: the name of the framework the plan was made for (autoplan.specs.frameworks).
A plan `autoplan tune` chose by running candidates carries the optional `tuning` block
(schemas.validate_tuning): `chosen_by: "measurement"`, the run settings and each candidate's
predicted and measured step time and peak memory.

A prediction is the plan's only while it belongs to it: `prediction_for` (written beside it, and in
each alternative that carries one) is prediction_hash() of the sections it was computed from (model,
training, cluster, parallel, framework). A reader compares it with the hash of what the file says now;
a hand edit of any of those sections, or a file written before the hash existed, leaves the stored
prediction not current (`prediction_current` False), and `autoplan.planning.planfiles.load_plan`
re-scores it with a note, as it scores a plan without one.

v1 files still read: they name no framework, so they are read as made for "autoplan" (the executor
that runs plan files) and `assumed` says so; their prediction was made with Megatron-Core's facts,
which `autoplan estimate` re-scores. v2 files made for a former framework option that is now a plan
knob (megatron-core+tp-comm-overlap) read as the framework with the knob on, and `assumed` says so.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field

from autoplan.specs.errors import SchemaError
from autoplan.specs.frameworks import DEFAULT_FRAMEWORK, get_framework, without_plan_knob_options
from autoplan.specs.jsonio import check_schema, read_json, require, write_json_atomic
from autoplan.specs.model import ModelSpec
from autoplan.specs.plan import ParallelPlan
from autoplan.specs.schemas import validate_plan
from autoplan.specs.training import ClusterSpec, TrainingSpec
from autoplan.specs.validation import Issues

PLAN_SCHEMA = "autoplan.plan/v2"
PLAN_SCHEMA_V1 = "autoplan.plan/v1"
AUTOPLAN_VERSION = "0.1.0"


@dataclass
class PlanDocument:
    model: ModelSpec
    training: TrainingSpec
    cluster: ClusterSpec
    parallel: ParallelPlan
    prediction: dict = field(default_factory=dict)
    """CostEstimate.to_prediction() of the chosen plan."""
    alternatives: list = field(default_factory=list)
    """[{"parallel": {...}, "prediction": {...}, "why_not": "..."}] ranked best first."""
    search: dict = field(default_factory=dict)
    provenance: dict = field(default_factory=lambda: {"autoplan_version": AUTOPLAN_VERSION,
                                                       "cost_model": "analytical/1"})
    extra: dict = field(default_factory=dict)
    """Keys of the JSON this version does not know; written back unchanged."""
    framework: str = DEFAULT_FRAMEWORK
    """The framework the plan was made for (its rules and facts were applied)."""
    assumed: list = field(default_factory=list)
    """What reading an older file assumed (one line each), for the CLI to say; not written."""
    prediction_for: str | None = None
    """prediction_hash() of the plan the prediction was made for, as the file stored it ("" when it
    stored none); None for a prediction made in this process, which belongs to the plan it holds."""

    @property
    def prediction_current(self) -> bool:
        """Whether `prediction` was made for this plan (an empty one is trivially current)."""
        if not self.prediction or self.prediction_for is None:
            return True
        return self.prediction_for == prediction_hash(self.model.to_dict(), self.training.to_dict(),
                                                      self.cluster.to_dict(), self.parallel.to_dict(), self.framework)

    def alternative_current(self, alternative: dict) -> bool:
        """Whether an alternative's stored prediction was made for it (and this file's other sections)."""
        stored = alternative.get("prediction_for")
        if not alternative.get("prediction") or stored is None:
            return True
        return stored == prediction_hash(self.model.to_dict(), self.training.to_dict(), self.cluster.to_dict(),
                                         alternative.get("parallel"), self.framework)

    @property
    def plan_id(self) -> str:
        return plan_id(self.model, self.training, self.cluster, self.parallel)

    def to_dict(self) -> dict:
        return {
            "schema": PLAN_SCHEMA,
            "plan_id": self.plan_id,
            "framework": self.framework,
            "model": self.model.to_dict(),
            "training": self.training.to_dict(),
            "cluster": self.cluster.to_dict(),
            "parallel": self.parallel.to_dict(),
            "prediction": self.prediction,
            **({"prediction_for": self._prediction_for()} if self.prediction else {}),
            "alternatives": [self._stamped(alternative) for alternative in self.alternatives],
            "search": self.search,
            "provenance": self.provenance,
            **self.extra,
        }

    def _prediction_for(self) -> str:
        """The hash written beside the prediction: the file's own when it was read from one (a stale
        prediction stays detectably stale when the document is written back), else this plan's."""
        if self.prediction_for is not None:
            return self.prediction_for
        return prediction_hash(self.model.to_dict(), self.training.to_dict(), self.cluster.to_dict(),
                               self.parallel.to_dict(), self.framework)

    def _stamped(self, alternative):
        """An alternative made in this process, with the hash of the plan its prediction was made for."""
        if not isinstance(alternative, dict) or not alternative.get("prediction") or "prediction_for" in alternative:
            return alternative
        return {**alternative, "prediction_for": prediction_hash(
            self.model.to_dict(), self.training.to_dict(), self.cluster.to_dict(), alternative.get("parallel"),
            self.framework)}

    @classmethod
    def from_dict(cls, data: dict, what: str = "plan file") -> "PlanDocument":
        assumed = []
        if isinstance(data, dict) and data.get("schema") == PLAN_SCHEMA_V1:
            check_schema(data, PLAN_SCHEMA_V1, what)
            framework = DEFAULT_FRAMEWORK
            assumed.append(f"{what} is {PLAN_SCHEMA_V1} and names no framework: read as made for "
                           f"{DEFAULT_FRAMEWORK!r} (its prediction assumed megatron-core; re-score it with "
                           f"`autoplan estimate`)")
        else:
            check_schema(data, PLAN_SCHEMA, what)
            data = _read_plan_knob_options(data, what, assumed)  # "megatron-core+tp-comm-overlap": the knob
            framework = get_framework(require(data, "framework", str, what)).name
        issues = Issues(what)
        validate_plan(data, issues, get_framework(framework))  # every field and cross-section rule, at once
        issues.raise_if_any()
        known = {"schema", "plan_id", "framework", "model", "training", "cluster", "parallel", "prediction",
                 "prediction_for", "alternatives", "search", "provenance"}
        stored_for = data.get("prediction_for")
        doc = cls(
            model=ModelSpec.from_dict(require(data, "model", dict, what), f"{what} model"),
            training=TrainingSpec.from_dict(require(data, "training", dict, what), f"{what} training"),
            cluster=ClusterSpec.from_dict(require(data, "cluster", dict, what), f"{what} cluster"),
            parallel=ParallelPlan.from_dict(require(data, "parallel", dict, what), f"{what} parallel"),
            prediction=data.get("prediction") or {},
            alternatives=[_read_alternative(a) for a in data.get("alternatives") or []],
            search=dict(data.get("search") or {}),
            provenance=dict(data.get("provenance") or {}),
            extra={k: v for k, v in data.items() if k not in known},
            framework=framework, assumed=assumed,
            prediction_for=stored_for if isinstance(stored_for, str) else "",  # none stored: not known to belong
        )
        if not isinstance(doc.prediction, dict):
            raise SchemaError(f"{what} field 'prediction' must be a JSON object")
        return doc

    @classmethod
    def load(cls, path) -> "PlanDocument":
        return cls.from_dict(read_json(path, "plan"), f"plan file {str(path)!r}")

    def save(self, path) -> None:
        write_json_atomic(path, self.to_dict())


def _read_plan_knob_options(data: dict, what: str, assumed: list) -> dict:
    """A file made for a former framework option that is now a plan knob (frameworks.PLAN_KNOB_OPTIONS:
    "megatron-core+tp-comm-overlap"), as made for the framework with the knob on in its plan and in each
    alternative where the option acted: tp > 1 with sequence parallelism, the only plans it priced
    (cost_model/step_time.py tp_exposed_s) and that take the knob (framework_rules.check_plan). A stored
    prediction made for the file as it is written stays current (both spellings price the same); one made
    for another plan stays stale. `assumed` gets a line saying so; other files come back as they are."""
    name = data.get("framework")
    framework, knobs = without_plan_knob_options(name) if isinstance(name, str) else (name, ())
    if not knobs:
        return data
    sections = [data.get(key) for key in ("model", "training", "cluster")]

    def read(part: dict) -> dict:
        """`part` (the file, or one alternative) with the knob on where the option acted, re-stamped."""
        old = part.get("parallel")
        tp = old.get("tp") if isinstance(old, dict) else None
        if not (isinstance(tp, int) and tp > 1 and old.get("sequence_parallel") is True):
            new = old
        else:
            new = {**old, **{knob: True for knob in knobs}}
        stored = part.get("prediction_for")
        if "prediction_for" in part and stored == prediction_hash(*sections, old, name):
            part = {**part, "prediction_for": prediction_hash(*sections, new, framework)}
        return {**part, "parallel": new} if "parallel" in part else part

    read_data = {**read(data), "framework": framework}
    if isinstance(data.get("alternatives"), list):
        read_data["alternatives"] = [read(a) if isinstance(a, dict) else a for a in data["alternatives"]]
    assumed.append(f"{what} names framework {name!r}, whose option is now the plan knob {', '.join(knobs)}: "
                   f"read as {framework!r} with it on in each plan with tp > 1 and sequence parallelism")
    return read_data


def _read_alternative(alternative):
    """An alternative as read: one with a prediction but no hash (a file written before it existed)
    gets "" so that writing it back does not stamp it as current."""
    if isinstance(alternative, dict) and alternative.get("prediction") and "prediction_for" not in alternative:
        return {**alternative, "prediction_for": ""}
    return alternative


def _digest(parts: list) -> str:
    key = json.dumps(parts, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(key.encode()).hexdigest()


def plan_id(model: ModelSpec, training: TrainingSpec, cluster: ClusterSpec, parallel: ParallelPlan) -> str:
    """A stable 12-hex-digit id of (model, training, cluster, parallel): same plan, same id."""
    return _digest([model.to_dict(), training.to_dict(), cluster.to_dict(), parallel.to_dict()])[:12]


def prediction_hash(model: dict, training: dict, cluster: dict, parallel, framework: str) -> str:
    """A 16-hex-digit hash of every section a prediction is computed from (the sections as their
    to_dict() writes them, and the framework's name): equal hashes, same inputs to the cost model."""
    return _digest([model, training, cluster, parallel, framework])[:16]
