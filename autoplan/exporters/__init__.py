"""Exporters: a plan file turned into the configuration of a training framework.

`export_plan(doc, "megatron" | "torchtitan" | "torchtitan-0.2" | "deepspeed")` returns an `Export`: the text to hand
to the framework and the notes on what of the plan does not map onto it. Every option name is the
framework's own (Megatron-LM `arguments.py`, torchtitan 0.3.0's config dataclasses and 0.2.0's `JobConfig`, DeepSpeed's JSON config).
"""
from autoplan.exporters.common import Export, target_framework, target_names, with_alternative
from autoplan.exporters.dispatch import export_launch, export_plan

__all__ = ["Export", "export_launch", "export_plan", "target_framework", "target_names", "with_alternative"]
