"""The shipped notebooks execute top to bottom (so they never rot), on this interpreter's kernel, and
are saved with their outputs (notebooks/execute.py), so a reader on the web sees what they show."""
import json
import sys
from pathlib import Path

import pytest

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"
sys.path.insert(0, str(NOTEBOOKS))
import execute  # noqa: E402  notebooks/execute.py: the one way they are run and saved


def _images(notebook: dict) -> list:
    return [o for c in notebook["cells"] if c["cell_type"] == "code" for o in c.get("outputs", [])
            if "image/png" in o.get("data", {})]


@pytest.mark.parametrize("name", execute.NAMES)
def test_the_committed_notebook_carries_its_outputs(name):
    """Issue 53: committed without outputs, a notebook shows a reader on the web nothing."""
    notebook = json.loads((NOTEBOOKS / name).read_text())
    code = [c for c in notebook["cells"] if c["cell_type"] == "code"]
    assert code and all(c.get("execution_count") for c in code), "run `python notebooks/execute.py`"
    assert _images(notebook), "the saved notebook shows no figure"


@pytest.fixture(scope="module")
def kernel_name(tmp_path_factory):
    pytest.importorskip("nbformat"), pytest.importorskip("nbclient"), pytest.importorskip("ipykernel")
    folder = tmp_path_factory.mktemp("jupyter")
    mp = pytest.MonkeyPatch()
    mp.setenv("JUPYTER_PATH", str(folder))
    mp.setenv("MPLBACKEND", "Agg")
    yield execute.kernel_spec(folder)
    mp.undo()


@pytest.mark.slow
@pytest.mark.parametrize("name", execute.NAMES)
def test_notebook_executes_and_is_saved_with_its_outputs(name, kernel_name):
    notebook = execute.execute(name, kernel_name, timeout_s=180)
    errors = [o for c in notebook.cells if c.cell_type == "code" for o in c.get("outputs", [])
              if o.get("output_type") == "error"]
    assert errors == []
    assert _images(notebook), "the notebook shows no figure"
    execute.save(notebook, name)  # what `make test` ran is what the repository shows
