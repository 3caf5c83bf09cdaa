"""The built-in frameworks: one module each in this package, every fact with its source.

A new framework is one file here. Its module sets
- `FRAMEWORKS`: its Framework entries (its facts, the rules they switch on, their sources);
- `LISTED_AT`: its place in `autoplan frameworks` and in the error lines that name the known ones;
- optionally `HISTORICAL` (name -> what it is: entries kept to re-score old records, listed after the
  others and only with --all), `STANDS_IN_FOR` (the software names of published runs whose facts it
  predicts) and `AS_RAN` (published source -> the facts of this framework as that source ran it, which
  cost_model/published_rows.py applies to the source's rows), and `PLAN_KNOB_OPTIONS` (its former
  options that are now ParallelPlan knobs -> the plan field each turns on).
Discovery imports every module of this package whose name does not start with "_", and of the folders
named by the environment variable AUTOPLAN_FRAMEWORKS_PATH (a framework of your own outside the
installed package), and hands each to `register`, the one public call: a module that does not say what
a framework module says is one line naming it, never a framework silently left out.

The efficiency values fitted on published runs are not written here: benchmarks/fit_constants.py
fits them and writes them, with their provenance and the held-out refits, to
cost_model/data/constants.json, and cost_model.constants merges them over these documented values.
`get_framework(name)` is the one lookup; unknown names are one line that lists the known ones.
"""
from __future__ import annotations

import importlib
import os
import pkgutil
from types import ModuleType

from autoplan.specs.errors import AutoplanError
from autoplan.specs.framework import Framework

DEFAULT_FRAMEWORK = "autoplan"
PATH_VARIABLE = "AUTOPLAN_FRAMEWORKS_PATH"

FRAMEWORKS: dict = {}
"""name -> Framework, in listing order (the current ones by LISTED_AT, then the historical ones)."""
FRAMEWORK_NAMES = FRAMEWORKS.keys()
"""The known names, in listing order (a live view of FRAMEWORKS)."""
HISTORICAL_FRAMEWORKS: dict = {}
"""Frameworks kept to read and re-score old records, not to plan new runs, with what each is; the
`autoplan frameworks` list leaves them out unless asked (--all)."""
STANDS_IN_FOR: dict = {}
"""The software a published row names (its `framework` column) -> the built-in framework whose facts
predict it (names not here predict themselves)."""
AS_RAN: dict = {}
"""Published source (cost_model/source_facts.py SOURCES "source") -> {Framework field: value}: its
framework as that source ran it."""
PLAN_KNOB_OPTIONS: dict = {}
"""(framework, former option) -> the ParallelPlan field that now turns it on: ("megatron-core",
"tp-comm-overlap") -> "tp_comm_overlap". A plan file that names the option reads as the framework with the
knob on (autoplan.specs.planfile); get_framework refuses the name with the flag to use."""
REGISTERED: dict = {}
"""Module name -> the names of the frameworks it registered."""
_ORDER: list = []


def register(module: ModuleType) -> None:
    """Add one framework module's entries: what discovery does with each module it finds."""
    where = module.__name__
    frameworks = getattr(module, "FRAMEWORKS", None)
    if not isinstance(getattr(module, "LISTED_AT", None), int) or not isinstance(frameworks, tuple) or \
            not frameworks or not all(isinstance(f, Framework) for f in frameworks):
        raise AutoplanError(f"framework module {where} must set FRAMEWORKS (a tuple of Framework) and "
                            f"LISTED_AT (an int); it is not registered, fix or remove it")
    historical = dict(getattr(module, "HISTORICAL", {}))
    names = [f.name for f in frameworks]
    claimed = [n for n in names if n in FRAMEWORKS] + [n for n in historical if n not in names]
    claimed += [s for s in getattr(module, "AS_RAN", {}) if s in AS_RAN]
    claimed += [s for s in getattr(module, "STANDS_IN_FOR", ()) if s in STANDS_IN_FOR]
    if claimed:
        raise AutoplanError(f"framework module {where} names {', '.join(claimed)}, which another module "
                            f"registered already or it does not define; each name belongs to one module")
    HISTORICAL_FRAMEWORKS.update(historical)
    AS_RAN.update(getattr(module, "AS_RAN", {}))
    STANDS_IN_FOR.update({software: names[0] for software in getattr(module, "STANDS_IN_FOR", ())})
    PLAN_KNOB_OPTIONS.update({(names[0], o): knob for o, knob in getattr(module, "PLAN_KNOB_OPTIONS", {}).items()})
    REGISTERED[where] = tuple(names)
    _ORDER.append((module.LISTED_AT, frameworks))
    listed = [f for _, fws in sorted(_ORDER, key=lambda entry: entry[0]) for f in fws]
    FRAMEWORKS.clear()
    FRAMEWORKS.update({f.name: f for f in listed if f.name not in HISTORICAL_FRAMEWORKS})
    FRAMEWORKS.update({f.name: f for f in listed if f.name in HISTORICAL_FRAMEWORKS})


def discover() -> None:
    """Register every framework module of this package and of AUTOPLAN_FRAMEWORKS_PATH's folders."""
    extra = [p for p in os.environ.get(PATH_VARIABLE, "").split(os.pathsep) if p]
    __path__.extend(p for p in extra if p not in __path__)
    for found in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if not found.name.startswith("_") and f"autoplan.specs.frameworks.{found.name}" not in REGISTERED:
            register(importlib.import_module(f"autoplan.specs.frameworks.{found.name}"))


def get_framework(name: str) -> Framework:
    """The built-in framework of this name, with any of its options appended ("megatron-core+flex-
    deepep": the switches a run turns on, Framework.options); one line listing the known ones
    otherwise, or, for a former option that is now a plan knob (PLAN_KNOB_OPTIONS), the flag to use."""
    base, *options = (name.strip().lower() if isinstance(name, str) else str(name)).split("+")
    framework = FRAMEWORKS.get(base)
    if framework is None:
        raise AutoplanError(f"unknown framework {name!r}; known: {', '.join(FRAMEWORK_NAMES)}")
    if not options:
        return framework
    unknown = [o for o in options if o not in framework.options]
    if unknown:
        kept, knobs = without_plan_knob_options(name)
        if knobs:
            flags = " ".join(f"--{knob.replace('_', '-')}" for knob in knobs)
            raise AutoplanError(f"framework {name!r} is now framework {kept!r} with the plan's {', '.join(knobs)}: "
                                f"use --framework {kept} {flags} (plan files that name it still read)")
        known = ", ".join(f"{base}+{o}" for o in framework.options) or "none"
        raise AutoplanError(f"framework {base} has no option {unknown[0]!r}; its options: {known}")
    overrides = {}
    for option in sorted(set(options)):
        overrides.update(framework.options[option])
    return framework.with_overrides(name="+".join([base, *sorted(set(options))]), **overrides)


def base_framework_name(name: str) -> str:
    """The built-in framework a name with options ("megatron-core+flex-deepep") builds on."""
    return name.split("+")[0]


def without_plan_knob_options(name: str) -> tuple:
    """A framework name (an old plan file's) without its former options that are now plan knobs, and the
    ParallelPlan fields they turn on: "megatron-core+tp-comm-overlap" -> ("megatron-core", ("tp_comm_overlap",));
    a name without one comes back as it is, with ()."""
    base, *options = name.strip().lower().split("+")
    knobs = tuple(PLAN_KNOB_OPTIONS[(base, o)] for o in options if (base, o) in PLAN_KNOB_OPTIONS)
    if not knobs:
        return name, ()
    return "+".join([base, *(o for o in options if (base, o) not in PLAN_KNOB_OPTIONS)]), knobs


discover()
