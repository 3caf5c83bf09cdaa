"""Where autoplan writes: the one writer every command's output goes through.

What it guarantees, for every command (search, cluster, estimate, memory, export, calibrate, tune,
run, profile):
- `-` and `/dev/stdout` are standard output, never a file named "-" or a replaced device;
- a target that is a folder, a FIFO, a device (/dev/null included) or a socket is refused with one
  line: replacing it by rename would destroy the node as root and fail as anyone else;
- a symlink is written through: the file it points to is replaced, the link stays;
- an output that is one of the command's inputs (compared resolved, symlinks followed, and by inode)
  is refused before anything is read or run, so `calibrate runs.jsonl -o runs.jsonl` keeps the runs;
- a regular file is written to a temporary file beside it and renamed into place, so a failure or
  Ctrl-C leaves the previous file (or none), never half of one;
- an unwritable folder, a full disk or a read-only file system is one line, not a traceback.

A folder a command fills (`report -o DIR`) has the same refusals (check_output_folder) and is built
in a private folder on the same file system, then published all at once (publish_folder).

`check_output` is the up-front half: argparse runs it on every `-o` and the CLI runs it with the
command's inputs before the command starts, so `tune`, `run` and `profile` refuse a bad target before
minutes of training or measuring. Standard library only, like the rest of autoplan.specs.
"""
from __future__ import annotations

import os
import secrets
import shutil
import stat
import sys
import tempfile
from pathlib import Path

from autoplan.specs.errors import AutoplanError

STDOUT_NAMES = ("-", "/dev/stdout")
"""Output names that mean standard output (the shell's and Linux's spellings)."""


def is_stdout(path) -> bool:
    return str(path) in STDOUT_NAMES


def _quote(path) -> str:
    text = repr(str(path))
    return text if len(text) <= 120 else f"{text[:60]}...{text[-57:]}"


def node_kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def resolve_target(path, example: str = "out.json") -> Path:
    """The file a write to `path` lands in (symlinks followed), after refusing every target that is
    not a regular file in a writable folder (`example`: the file name a refusal suggests). Does not
    create anything."""
    text = str(path)
    if not text.strip():
        raise AutoplanError("the output path is empty; give a file name such as plan.json (or - for stdout)")
    if "\x00" in text:
        raise AutoplanError(f"the output path {_quote(text)} holds a NUL character; give a file name")
    if text.endswith(("/", "/.", "/..")) or text in (".", ".."):  # Path() drops the slash: a file "x" for "x/"
        raise AutoplanError(f"cannot write {_quote(text)}: it names a folder; give a file name such as "
                            f"{_quote(Path(text) / example)}")
    try:
        target = Path(text).expanduser().resolve()
    except (OSError, RuntimeError) as exc:  # a symlink loop
        raise AutoplanError(f"cannot write {_quote(text)}: {getattr(exc, 'strerror', None) or exc}") from None
    try:
        mode = os.stat(target).st_mode
    except (FileNotFoundError, NotADirectoryError):  # the folder check below names what is missing
        mode = None
    except OSError as exc:
        raise AutoplanError(f"cannot write {_quote(text)}: {exc.strerror or exc}") from None
    if mode is not None and stat.S_ISDIR(mode):
        raise AutoplanError(f"cannot write {_quote(text)}: it is a folder; give a file name inside it such as "
                            f"{_quote(Path(text) / example)}")
    if mode is not None and not stat.S_ISREG(mode):
        raise AutoplanError(f"cannot write {_quote(text)}: it is {node_kind(mode)}, and autoplan writes regular files "
                            f"only (give - for standard output)")
    folder = target.parent
    if not folder.is_dir():
        raise AutoplanError(f"cannot write {_quote(text)}: the folder {_quote(folder)} does not exist; create it first")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise AutoplanError(f"cannot write {_quote(text)}: the folder {_quote(folder)} is not writable")
    if mode is not None and not os.access(target, os.W_OK):
        raise AutoplanError(f"cannot write {_quote(text)}: the file is read-only")
    return target


def check_output(path, inputs=(), flag: str | None = None, example: str = "out.json") -> None:
    """Refuse, before any work, an output that cannot be written or that is one of `inputs` (the
    paths the command reads; those that do not exist are ignored). `flag` (e.g. "--records") starts
    the message where no parser has named the flag already."""
    if is_stdout(path):
        return
    try:
        target = resolve_target(path, example)
    except AutoplanError as exc:
        if flag is None:
            raise
        raise AutoplanError(f"{flag}: {exc}") from None
    for source in inputs:
        if source is None or is_stdout(source) or not str(source).strip() or "\x00" in str(source):
            continue
        if _same_file(target, source):
            raise AutoplanError(f"{flag or 'the output'} {_quote(path)} is also an input of this command "
                                f"({_quote(source)}); "
                                f"writing it would destroy what is read: give another output file")


def _resolved_input(source) -> Path:
    """An input's path with its links followed; a symlink loop (or an unreadable step on the way) as
    written: it cannot be the output, and its reader says what is wrong with it."""
    path = Path(str(source)).expanduser()
    try:
        return path.resolve()
    except (OSError, RuntimeError):
        return path.absolute()


def check_output_folder(path, inputs=(), flag: str | None = None) -> Path:
    """The folder a command fills (`report -o DIR`), resolved, after the same refusals as a file's:
    standard output, a FIFO, device, socket or regular file where the folder should be, a missing or
    unwritable parent, an existing folder that is not writable, and a folder that is one of `inputs`
    or holds one of them (a report replaces its files by name). Creates nothing."""
    text = str(path)
    head = f"{flag}: " if flag else ""
    if is_stdout(text):
        raise AutoplanError(f"{head}{text!r} is standard output, and a report is a folder of files; give a folder")
    if not text.strip() or "\x00" in text:
        raise AutoplanError(f"{head}the output folder {_quote(text)} is not a folder name; give one such as report/")
    try:
        target = Path(text).expanduser().resolve()
        mode = os.stat(target).st_mode if target.exists() else None
    except (OSError, RuntimeError) as exc:  # a symlink loop, a permission error on the way
        why = getattr(exc, "strerror", None) or exc
        raise AutoplanError(f"{head}cannot write into {_quote(text)}: {why}") from None
    for source in inputs:
        if source is None or is_stdout(source) or not str(source).strip() or "\x00" in str(source):
            continue
        other = _resolved_input(source)
        if other == target or _same_file(target, source) or target in other.parents:
            raise AutoplanError(f"{head}the output folder {_quote(text)} is also an input of this command, or holds "
                                f"one ({_quote(source)}); give another folder")
    if mode is not None and not stat.S_ISDIR(mode):
        kind = "a file" if stat.S_ISREG(mode) else node_kind(mode)
        raise AutoplanError(f"{head}cannot write into {_quote(text)}: it is {kind}, and a report is a folder; give a "
                            f"folder (new or existing)")
    if mode is not None and not os.access(target, os.W_OK | os.X_OK):
        raise AutoplanError(f"{head}cannot write into {_quote(text)}: the folder is not writable")
    if mode is None and not target.parent.is_dir():
        raise AutoplanError(f"{head}cannot write into {_quote(text)}: the folder {_quote(target.parent)} does not "
                            f"exist; create it first")
    if mode is None and not os.access(target.parent, os.W_OK | os.X_OK):
        raise AutoplanError(f"{head}cannot create {_quote(text)}: the folder {_quote(target.parent)} is not writable")
    return target


def staging_folder(target: Path) -> Path:
    """A new, private folder on the same file system as `target` (inside it when it exists, else beside
    it) to build its files in before publish_folder moves them into place."""
    where = target if target.is_dir() else target.parent
    try:
        return Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".tmp", dir=where))
    except OSError as exc:
        raise AutoplanError(f"cannot write into {_quote(target)}: {exc.strerror or exc}") from None


def publish_folder(staged: Path, target: Path, last: str | None = None) -> list[Path]:
    """Move the files built in `staged` into `target` all or none: a new folder is one rename; into an
    existing one each file replaces its namesake (`last`, e.g. index.html, at the end) and a failure
    puts back every file replaced so far. Other files in `target` stay. Returns the files written."""
    names = sorted((p.name for p in staged.iterdir()), key=lambda n: (n == last, n))
    umask = os.umask(0)
    os.umask(umask)
    for name in names:  # mkstemp and mkdtemp make 0600/0700; a report is meant to be shared
        os.chmod(staged / name, 0o666 & ~umask)
    if not target.exists():
        try:
            os.chmod(staged, 0o777 & ~umask)
            os.rename(staged, target)
        except OSError as exc:
            raise AutoplanError(f"cannot write into {_quote(target)}: {exc.strerror or exc}") from None
        return [target / name for name in names]
    for name in names:
        if (target / name).exists() and not (target / name).is_file():
            raise AutoplanError(f"cannot write {_quote(target / name)}: it is {node_kind(os.stat(target / name).st_mode)}; "
                                f"move it away or give another folder")
    saved = staging_folder(target)
    replaced, moved = [], []
    try:
        for name in names:
            if (target / name).exists():
                os.replace(target / name, saved / name)
                replaced.append(name)
            os.replace(staged / name, target / name)
            moved.append(name)
    except OSError as exc:
        for name in moved:
            os.unlink(target / name)
        for name in replaced:
            os.replace(saved / name, target / name)
        raise AutoplanError(f"cannot write into {_quote(target)}: {exc.strerror or exc}") from None
    finally:
        shutil.rmtree(saved, ignore_errors=True)
    return [target / name for name in names]


def _same_file(target: Path, source) -> bool:
    try:
        other = _resolved_input(source)
        return other == target or (target.exists() and other.exists() and os.path.samefile(target, other))
    except (OSError, RuntimeError, ValueError):
        return False


def write_output(path, text: str, inputs=(), flag: str | None = None) -> None:
    """Write `text` to `path` (to stdout for - and /dev/stdout), checked as check_output says."""
    check_output(path, inputs, flag)
    if is_stdout(path):
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    write_text_atomic(path, text)


def append_output(path, text: str, inputs=(), flag: str | None = None) -> None:
    """Append `text` (JSON lines of measurements) in a single write(), so that concurrent appenders
    never interleave lines; the same targets are refused as by write_output."""
    check_output(path, inputs, flag)
    if is_stdout(path):
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    try:
        _append_whole(resolve_target(path), text.encode("utf-8"))
    except OSError as exc:
        raise AutoplanError(f"cannot append to {_quote(path)}: {exc.strerror or exc}; nothing was appended") from None


def _append_whole(target: Path, data: bytes) -> None:
    """All or nothing: one write() at the end of the file (O_APPEND), and a short one (a full disk, a
    file-size limit) cut back off, so a JSONL file never keeps half a line; a file this call created
    and left empty is removed."""
    existed = target.exists()
    fd = os.open(target, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
    try:
        written = 0
        try:
            written = os.write(fd, data)
        finally:
            if written < len(data):  # short (or raised after part of it): remove our part, at the end
                os.ftruncate(fd, os.fstat(fd).st_size - written)
        if written < len(data):
            raise OSError(f"only {written} of {len(data)} bytes could be written (a full disk or a file-size "
                          f"limit)")
    finally:
        os.close(fd)
        if not existed and target.exists() and target.stat().st_size == 0:
            target.unlink()


def write_text_atomic(path: str | os.PathLike, text: str) -> None:
    """Write through a temporary file in the target's folder and rename it into place.

    A run killed mid-write leaves the previous file (or none), never a half-written one. Every
    writer ends here, so a device, FIFO or folder is refused even where no command checked first,
    and - is standard output here too.
    """
    if is_stdout(path):
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    target = resolve_target(path)
    # The temporary file's name is chosen before the file exists, and the `try` that removes it covers its
    # creation: a Ctrl-C or SIGTERM (a stopped profiling rank) landing anywhere, even as the creating call
    # returns, leaves no temporary file. (mkstemp names the file only once it has created it; a signal
    # pending when it ran could surface inside it, with no name yet to remove: a rank stopped by SIGTERM
    # left one, tests/test_profiler.py, under two test workers.)
    tmp = target.parent / f".{target.name}.{secrets.token_hex(6)}.tmp"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        # Created 0600, as mkstemp does; give the file the mode a plain open() would (0666 minus umask).
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, target)
    except BaseException as exc:
        if not isinstance(exc, FileExistsError):  # that name is another file's (48 random bits: never)
            try:
                os.unlink(tmp)
            except OSError:  # never created, or already renamed into place
                pass
        if isinstance(exc, OSError):  # a full disk, a read-only file system: one line
            raise AutoplanError(f"cannot write {_quote(path)}: {exc.strerror or exc}") from None
        raise
