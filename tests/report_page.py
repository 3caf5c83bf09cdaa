"""The report page read back as a reader sees it: each table's cells by the title above it."""
from html.parser import HTMLParser
from pathlib import Path

TITLE = "Measured vs predicted, per run"


class Tables(HTMLParser):
    """Each table's rows of cell texts, by the h2 title above it."""

    def __init__(self):
        super().__init__()
        self.tables, self.title, self.cell, self.tag = {}, "", None, None

    def handle_starttag(self, tag, attrs):
        self.tag = tag
        if tag == "table":
            self.tables[self.title] = []
        elif tag == "tr":
            self.tables[self.title].append([])
        elif tag in ("td", "th"):
            self.cell = ""

    def handle_endtag(self, tag):
        if tag in ("td", "th"):
            self.tables[self.title][-1].append(self.cell)
            self.cell = None
        self.tag = None

    def handle_data(self, data):
        if self.tag == "h2":
            self.title = data
        elif self.cell is not None:
            self.cell += data


def column_names(header: list) -> list:
    """'measured' and 'error' repeat under each quantity: name them by the column before."""
    names, quantity = [], ""
    for h in header:
        if h.endswith("predicted"):
            quantity = h.rsplit(" ", 1)[0]
        names.append(f"{quantity} {h}" if h in ("measured", "error", "measured (median)") else h)
    return names


def per_run_rows(page: Path) -> list:
    """The per-run table of a report's index.html: one dict per run, keyed by `column_names`."""
    parser = Tables()
    parser.feed(page.read_text())
    header, *rows = parser.tables[TITLE]
    return [dict(zip(column_names(header), row)) for row in rows]
