"""The shipped notebooks execute top to bottom (so they never rot), on this interpreter's kernel."""
import json
import sys
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"
KERNEL = "autoplan-test-python"


@pytest.fixture(scope="module")
def kernel_name(tmp_path_factory):
    """A kernelspec that runs *this* interpreter (the venv's), whatever kernels the machine has."""
    spec_dir = tmp_path_factory.mktemp("jupyter") / "kernels" / KERNEL
    spec_dir.mkdir(parents=True)
    spec = {"argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
            "display_name": "autoplan test python", "language": "python"}
    (spec_dir / "kernel.json").write_text(json.dumps(spec))
    mp = pytest.MonkeyPatch()
    mp.setenv("JUPYTER_PATH", str(spec_dir.parent.parent))
    mp.setenv("MPLBACKEND", "Agg")
    yield KERNEL
    mp.undo()


@pytest.mark.slow
@pytest.mark.parametrize("name", ["predicted_vs_measured.ipynb", "plan_report.ipynb"])
def test_notebook_executes(name, kernel_name):
    notebook = nbformat.read(NOTEBOOKS / name, as_version=4)
    client = nbclient.NotebookClient(notebook, kernel_name=kernel_name, timeout=180,
                                     resources={"metadata": {"path": str(NOTEBOOKS)}})
    client.execute()
    errors = [o for c in notebook.cells if c.cell_type == "code" for o in c.get("outputs", [])
              if o.get("output_type") == "error"]
    assert errors == []
    images = [o for c in notebook.cells if c.cell_type == "code" for o in c.get("outputs", [])
              if "image/png" in o.get("data", {})]
    assert images, "the notebook shows no figure"
