"""Exporters: a plan file turned into the configuration of a training framework.

`export_plan(doc, "megatron" | "torchtitan" | "deepspeed")` returns an `Export`: the text to hand
to the framework and the notes on what of the plan does not map onto it. Every option name is the
framework's own (Megatron-LM `arguments.py`, torchtitan `JobConfig`, DeepSpeed's JSON config).
"""
from autoplan.exporters.common import Export, export_plan, target_framework, target_names, with_alternative

__all__ = ["Export", "export_plan", "target_framework", "target_names", "with_alternative"]
