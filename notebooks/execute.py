"""Execute the shipped notebooks top to bottom on this interpreter and save them with their outputs,
so a reader on the web sees the figures and tables (issue 53). `make test` does it (tests/
test_notebooks.py); by hand:

    PYTHONPATH=. python notebooks/execute.py [NAME.ipynb ...]

Cell timings are not recorded, so a notebook whose results did not change is rewritten unchanged.
"""
from __future__ import annotations

import json
import os
import re
import sys
import tempfile
from pathlib import Path

NOTEBOOKS = Path(__file__).resolve().parent
NAMES = ("predicted_vs_measured.ipynb", "plan_report.ipynb")
KERNEL = "autoplan-notebook-python"


def kernel_spec(folder: Path) -> str:
    """A kernelspec under `folder` that runs *this* interpreter (the venv's), whatever kernels the
    machine has; JUPYTER_PATH must name `folder` while it is used."""
    spec_dir = folder / "kernels" / KERNEL
    spec_dir.mkdir(parents=True, exist_ok=True)
    spec = {"argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
            "display_name": "autoplan notebook python", "language": "python"}
    (spec_dir / "kernel.json").write_text(json.dumps(spec))
    return KERNEL


def execute(name: str, kernel_name: str, timeout_s: int = 300):
    """The notebook `name` executed (its outputs filled in), not yet saved."""
    import nbclient
    import nbformat

    notebook = nbformat.read(NOTEBOOKS / name, as_version=4)
    client = nbclient.NotebookClient(notebook, kernel_name=kernel_name, timeout=timeout_s, record_timing=False,
                                     resources={"metadata": {"path": str(NOTEBOOKS)}})
    client.execute()
    return notebook


def _stable_outputs(notebook) -> None:
    """What changes from run to run without the results changing, made stable so that a notebook
    whose results did not change is saved unchanged: pandas' Styler names each HTML table with a
    random id (`T_d787f`, numbered in order instead), and an object's plain-text stand-in holds its
    memory address (`<...Styler at 0x7f88...>`, dropped)."""
    found: dict = {}
    for cell in notebook.cells:
        for output in cell.get("outputs", []):
            data = output.get("data", {})
            if isinstance(data.get("text/html"), str):
                data["text/html"] = re.sub(r"\bT_[0-9a-f]{5}(?![0-9a-f])",
                                           lambda m: found.setdefault(m.group(0), f"T_table{len(found)}"),
                                           data["text/html"])
            if isinstance(data.get("text/plain"), str):
                data["text/plain"] = re.sub(r" at 0x[0-9a-f]+>", ">", data["text/plain"])


def save(notebook, name: str) -> None:
    """Written through a temporary file and a rename: an interrupted save leaves the old notebook."""
    import nbformat

    _stable_outputs(notebook)
    path = NOTEBOOKS / name
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        nbformat.write(notebook, tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def main(argv=None) -> int:
    names = (argv if argv is not None else sys.argv[1:]) or list(NAMES)
    os.environ.setdefault("MPLBACKEND", "Agg")
    with tempfile.TemporaryDirectory(prefix="autoplan-jupyter-") as folder:
        os.environ["JUPYTER_PATH"] = folder
        kernel = kernel_spec(Path(folder))
        for name in names:
            save(execute(name, kernel), name)
            print(f"executed and saved notebooks/{name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
