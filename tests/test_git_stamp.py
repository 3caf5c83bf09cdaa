"""The git stamp on every measurement reads the checkout without writing to it: `git status` refreshes
and rewrites .git/index under .git/index.lock when it can, and a status killed at the stamp's timeout (or
with the run it stamps, or two stamps at once under `make test`'s two workers) would leave that lock
behind and block the user's next commit."""
from __future__ import annotations

import os
import subprocess
import time

from executor.record import git_revision


def _git(repo, *args):
    subprocess.run(["git", "-c", "user.email=t@t", "-c", "user.name=t", *args], cwd=repo, check=True,
                   capture_output=True)


def test_the_stamp_never_rewrites_the_index(tmp_path):
    _git(tmp_path, "init", "-q")
    (tmp_path / "f.txt").write_text("a\n")
    _git(tmp_path, "add", "f.txt")
    _git(tmp_path, "commit", "-qm", "one")
    index = tmp_path / ".git" / "index"
    # A tracked file whose stat data no longer matches the index: a plain `git status` refreshes the
    # index and writes it back (the worked case: mtime moved, content the same).
    later = time.time() + 5
    os.utime(tmp_path / "f.txt", (later, later))
    before = index.stat().st_mtime_ns, index.read_bytes()
    rev = git_revision(tmp_path)
    assert rev and not rev.endswith("+dirty"), rev
    assert (index.stat().st_mtime_ns, index.read_bytes()) == before
    assert not (tmp_path / ".git" / "index.lock").exists()
    (tmp_path / "f.txt").write_text("b\n")
    assert git_revision(tmp_path).endswith("+dirty")
