"""Issue 53: standard output closed (`>&-`) or full (`> /dev/full`), and a locale whose encoding lacks
a name's characters, are handled once at the command line's edge (autoplan/cli/streams.py): one line
and exit 2, or the name escaped; never a traceback. Real processes, as a shell starts them."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def shell(command: str, cwd: Path, **env) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", command], cwd=cwd, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT), **env})


@pytest.mark.parametrize("redirect", ["> /dev/full", ">&-"])
def test_an_unwritable_stdout_is_one_line(tmp_path, redirect):
    if redirect == "> /dev/full" and not Path("/dev/full").exists():
        pytest.skip("no /dev/full here")
    done = shell(f"'{sys.executable}' -m autoplan models {redirect}", tmp_path)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert lines[0].startswith("autoplan models: error: cannot write the output"), lines


def test_a_name_the_locale_cannot_encode_is_escaped(tmp_path):
    """Under an ASCII locale with Python's UTF-8 coercion off, a plan's non-ASCII model name printed
    (before: UnicodeEncodeError)."""
    plan = tmp_path / "plan.json"
    made = shell(f"'{sys.executable}' -m autoplan estimate --model llama-2-7b --gpus 8 --tp 2 -o plan.json", tmp_path)
    assert made.returncode in (0, 1), made.stderr  # 1: answered, does not fit (the file is written)
    doc = json.loads(plan.read_text())
    doc["model"]["name"] = "modèle中"
    plan.write_text(json.dumps(doc, ensure_ascii=False), encoding="utf-8")
    done = shell(f"'{sys.executable}' -m autoplan estimate plan.json", tmp_path, LC_ALL="C", LANG="C",
                 PYTHONUTF8="0", PYTHONCOERCECLOCALE="0", PYTHONIOENCODING="")
    assert done.returncode in (0, 1) and "Traceback" not in done.stderr, done.stderr
    assert "mod\\xe8le\\u4e2d" in done.stdout
