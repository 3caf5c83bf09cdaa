"""Plain-text layout shared by every report autoplan prints: aligned tables, wrapped prose, counts.

A leaf of every module that prints (rendering's render and cluster_render, planning's budget and tune,
the CLI's compare, memory and tune commands): it imports nothing of ours, so they all read it without
importing one another.
"""
from __future__ import annotations

import textwrap

WIDTH = 120
"""Columns the prose lines are wrapped to (tables keep their rows whole)."""


def text_table(headers: list, rows: list, align: str) -> list:
    """Left/right aligned columns ('l'/'r' per column), two spaces apart."""
    cells = [headers] + [[str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    out = []
    for row in cells:
        parts = [c.ljust(w) if a == "l" else c.rjust(w) for c, w, a in zip(row, widths, align)]
        out.append("  " + "  ".join(parts).rstrip())
    return out


def wrap_line(line: str, indent: int) -> list:
    """`line` wrapped to WIDTH columns, the lines after the first indented by `indent` spaces."""
    return textwrap.wrap(line, WIDTH, subsequent_indent=" " * indent, break_on_hyphens=False) or [line]


def human_count(n: float) -> str:
    """1.23B / 45.6M / 7.8K / 12: large counts in the unit that keeps them readable (base 10)."""
    for scale, suffix in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "K")):
        if n >= scale:
            return f"{n / scale:.{1 if n >= 10 * scale else 2}f}{suffix}"
    return f"{n:.0f}"
