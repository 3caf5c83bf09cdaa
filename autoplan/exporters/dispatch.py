"""Exporting a plan: check it against the target framework's rules, then import the target's exporter
by name (autoplan.exporters.common's table) and run it. The exporters import common, never this module.
"""
from __future__ import annotations

import importlib

from autoplan.exporters.common import (
    Export, check_names, header_lines, target_framework, target_module, target_names, target_suffix,
)
from autoplan.specs import AutoplanError, PlanDocument, get_framework


def export_plan(doc: PlanDocument, target: str) -> Export:
    """Translate a checked plan into `target`'s configuration, with the notes on what does not map."""
    if target not in target_names():
        raise AutoplanError(
            f"unknown export target {target!r}; choose one of {', '.join(target_names())}")
    # A hand-edited plan file may break the rules; the frameworks would fail later and less clearly.
    # TP across nodes is the user's choice (search has a flag for it), so it is not refused here.
    doc.parallel.check(doc.model, doc.training, doc.cluster, allow_tp_across_nodes=True)
    check_names(doc)
    # What the target cannot run is refused with its rule, never written out to fail on the cluster.
    get_framework(target_framework(target)).check(doc.model, doc.training, doc.parallel)
    module = importlib.import_module(f"autoplan.exporters.{target_module(target)}")
    text, notes = module.export(doc)
    return Export(target=target, text=text, notes=notes, suffix=target_suffix(target))


def export_launch(doc: PlanDocument, target: str, launcher: str) -> Export:
    """`target`'s export wrapped in a bash script that starts it with torchrun on every node or
    under Slurm (autoplan.exporters.launch); the same checks and notes as export_plan."""
    export = export_plan(doc, target)
    module = importlib.import_module(f"autoplan.exporters.{target_module(target)}")
    header = header_lines(doc, target) + [f"note: {note}" for note in export.notes]
    return Export(target=target, text=module.launch(doc, launcher, header, export.text), notes=export.notes,
                  suffix=".sh")
