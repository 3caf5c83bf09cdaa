"""The text autoplan prints: a plan document with its breakdowns, runners-up and Pareto front, the
frameworks and models lists (`render`), `autoplan cluster`'s answer (`cluster_render`), and the plain
aligned tables, wrapped prose and counts every report shares (`text`, a leaf that imports nothing of
ours). Rendering reads plans and estimates; it decides nothing about them.

Empty on purpose: a command imports the one module it prints with.
"""
