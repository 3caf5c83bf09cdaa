"""Reports: predicted vs measured, plan breakdowns, Pareto front and scaling, as PNGs + index.html."""
from autoplan.report.build import accuracy_sections, build_report, plan_sections, search_plans
from autoplan.report.html import Section, render, write_index

__all__ = ["Section", "accuracy_sections", "build_report", "plan_sections", "render", "search_plans", "write_index"]
