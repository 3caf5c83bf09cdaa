"""The search for a plan: the knobs and their rules (`space`), the search over them (`search`: exact
branch and bound in `bounded`, Optuna TPE otherwise), the request a search answers (`planner`: model,
cluster and pins in, a plan document out), the nearest plan to a pinned one (`nearest`), the memory of
every ZeRO/recompute choice of one layout (`memory_table`), the GPU type and count for a goal
(`cluster_search`), the days and cost of a run (`budget`), and which of a plan file's plans to run
and how they rank once measured (`tune`). The cost model scores; this package chooses.

The package is named planning, not search or planner, so that it does not clash with the modules of
those names inside it. Empty on purpose: importing the planner must not load what a command does not use.
"""
