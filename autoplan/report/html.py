"""The report's one HTML page: sections of prose, tables and the PNGs beside it (no scripts, no
external assets, so it opens from a folder or an artifact store as it is)."""
from __future__ import annotations

import html
from dataclasses import dataclass, field
from pathlib import Path

from autoplan.specs import write_text_atomic

_STYLE = """
body { font-family: system-ui, sans-serif; max-width: 1400px; margin: 2em auto; color: #222; }
h1 { font-size: 1.6em; } h2 { font-size: 1.25em; margin-top: 2em; border-bottom: 1px solid #ccc; }
table { border-collapse: collapse; font-size: 0.8em; margin: 0.8em 0; }
th, td { border: 1px solid #ccc; padding: 3px 8px; text-align: right; }
th:first-child, td:first-child { text-align: left; }
img { max-width: 100%; border: 1px solid #eee; margin: 0.5em 0; display: block; }
td { white-space: nowrap; } td:last-child { white-space: normal; } .wide { overflow-x: auto; }
.note { color: #555; font-size: 0.9em; }
"""


@dataclass
class Section:
    title: str
    paragraphs: list = field(default_factory=list)
    images: list = field(default_factory=list)
    """PNG file names relative to the report folder."""
    table: list = field(default_factory=list)
    """Rows of cells; the first row is the header."""


def _cell(value) -> str:
    """Numbers for people: yes/no, thousands separators, no exponents (builders format units)."""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"
    if isinstance(value, int):
        return f"{value:,}"
    return html.escape(str(value))


def render(title: str, sections: list[Section], footer: str = "") -> str:
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>",
             f"<style>{_STYLE}</style></head><body><h1>{html.escape(title)}</h1>"]
    for s in sections:
        parts.append(f"<h2>{html.escape(s.title)}</h2>")
        parts += [f"<p>{html.escape(p)}</p>" for p in s.paragraphs]
        if s.table:
            header, *rows = s.table
            parts.append("<div class='wide'><table><tr>" + "".join(f"<th>{_cell(h)}</th>" for h in header) + "</tr>")
            parts += ["<tr>" + "".join(f"<td>{_cell(c)}</td>" for c in row) + "</tr>" for row in rows]
            parts.append("</table></div>")
        parts += [f"<img src='{html.escape(img)}' alt='{html.escape(s.title)}'>" for img in s.images]
    if footer:
        parts.append(f"<p class='note'>{html.escape(footer)}</p>")
    parts.append("</body></html>\n")
    return "\n".join(parts)


def write_index(out_dir, title: str, sections: list[Section], footer: str = "") -> str:
    path = Path(out_dir) / "index.html"
    write_text_atomic(path, render(title, sections, footer))
    return str(path)
