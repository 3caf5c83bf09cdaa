"""The calibration file (schema autoplan.calibration/v1): JSON only, never pickle.

It holds what `autoplan calibrate` learned: the plan-level correction as plain arrays (see
correction.py), the learned HardwareProfile's tables, the op regressors' cross-validated errors, how
the correction was trained and evaluated, and the library versions and feature schema it was written
with. Loading refuses another calibration schema, feature schema, or scikit-learn/numpy major.minor
version with one line that says what to do, because a correction is only meaningful against the
features and numerics it was fitted with.
"""
from __future__ import annotations

import platform
from dataclasses import dataclass, field

import numpy as np
import sklearn

from autoplan.specs import AUTOPLAN_VERSION, AutoplanError, HardwareProfile, read_json, write_json_atomic
from autoplan.specs.jsonio import check_schema
from autoplan.specs.schemas import validate_calibration
from autoplan.specs.validation import Issues
from cost_model.learned.correction import correction_from_json, correction_to_json
from cost_model.learned.features import FEATURE_NAMES, FEATURE_SCHEMA
from cost_model.learned.memory_correction import MemoryCorrection

CALIBRATION_SCHEMA = "autoplan.calibration/v1"
LEARNED_COST_MODEL = "learned/1"


def library_versions() -> dict:
    return {"autoplan": AUTOPLAN_VERSION, "scikit-learn": sklearn.__version__, "numpy": np.__version__,
            "python": platform.python_version()}


def _major_minor(version: str) -> str:
    return ".".join(version.split(".")[:2])


@dataclass
class CalibrationFile:
    correction: object = None
    """A fitted correction Pipeline (records -> log ratio), or None: factor 1.0 everywhere."""
    profile: HardwareProfile | None = None
    """The learned profile (op regressors' predictions), or None when no measured profile was given."""
    op_models: list = field(default_factory=list)
    training: dict = field(default_factory=dict)
    """num_rows, sources, skipped lines, and the grouped-CV evaluation of the correction."""
    memory_correction: object = None
    """A fitted MemoryCorrection (factor on the allocated peak), or None: analytical memory."""
    versions: dict = field(default_factory=library_versions)

    def to_dict(self) -> dict:
        return {
            "schema": CALIBRATION_SCHEMA,
            "cost_model": LEARNED_COST_MODEL,
            "versions": self.versions,
            "feature_schema": {"name": FEATURE_SCHEMA, "features": list(FEATURE_NAMES)},
            "correction": correction_to_json(self.correction) if self.correction is not None else None,
            "memory_correction": self.memory_correction.to_json() if self.memory_correction is not None else None,
            "profile": self.profile.to_dict() if self.profile is not None else None,
            "op_models": self.op_models,
            "training": self.training,
        }

    def save(self, path) -> None:
        write_json_atomic(path, self.to_dict())

    @classmethod
    def from_dict(cls, data: dict, what: str = "calibration file") -> "CalibrationFile":
        if not isinstance(data, dict) or data.get("schema") != CALIBRATION_SCHEMA:
            if isinstance(data, dict) and str(data.get("schema")).startswith("autoplan."):
                check_schema(data, CALIBRATION_SCHEMA, what)  # another autoplan file: says which kind
            found = data.get("schema") if isinstance(data, dict) else type(data).__name__
            raise AutoplanError(f"{what} has schema {found!r}, expected {CALIBRATION_SCHEMA!r}; "
                                f"regenerate it with `autoplan calibrate`")
        issues = Issues(what)
        validate_calibration(data, issues)  # the sections' types, before any is read
        issues.raise_if_any()
        _check_versions(data.get("versions") or {}, what)
        features = data.get("feature_schema") or {}
        if features.get("name") != FEATURE_SCHEMA or list(features.get("features", [])) != list(FEATURE_NAMES):
            raise AutoplanError(f"{what} uses plan features {features.get('name')!r}, this autoplan uses "
                                f"{FEATURE_SCHEMA!r}; regenerate it with `autoplan calibrate`")
        try:
            correction = correction_from_json(data["correction"]) if data.get("correction") else None
            memory = MemoryCorrection.from_json(data["memory_correction"]) if data.get("memory_correction") else None
        except (KeyError, TypeError, ValueError) as exc:
            raise AutoplanError(f"{what} has a malformed correction ({exc}); regenerate it with "
                                f"`autoplan calibrate`") from None
        profile = (HardwareProfile.from_dict(data["profile"], f"{what} profile")
                   if data.get("profile") else None)
        return cls(correction=correction, memory_correction=memory, profile=profile, op_models=list(data.get("op_models") or []),
                   training=dict(data.get("training") or {}), versions=dict(data["versions"]))

    @classmethod
    def load(cls, path) -> "CalibrationFile":
        return cls.from_dict(read_json(path, "calibration"), f"calibration file {str(path)!r}")


def _check_versions(written: dict, what: str) -> None:
    here = library_versions()
    for lib in ("scikit-learn", "numpy"):
        if lib not in written:
            raise AutoplanError(f"{what} does not record its {lib} version; regenerate it with "
                                f"`autoplan calibrate`")
        if _major_minor(str(written[lib])) != _major_minor(here[lib]):
            raise AutoplanError(f"{what} was written with {lib} {written[lib]}, this environment has "
                                f"{here[lib]}; regenerate it with `autoplan calibrate` here")
