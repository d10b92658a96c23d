"""Write files and directories so that nothing is ever half-written."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from pathlib import Path

from ._errors import HeadscopeError


def atomic_write_text(path: Path, text: str) -> Path:
    """Write `text` to a temp file beside `path`, then rename it into place."""
    return atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_bytes(path: Path, data: bytes) -> Path:
    path = Path(path)
    if path.is_dir():
        raise HeadscopeError(f"output file {path}: expected a file path, got an existing directory")
    ensure_writable_dir(path.parent)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return path


def ensure_writable_dir(directory: Path) -> Path:
    directory = Path(directory)
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise HeadscopeError(f"cannot create output directory {directory}: {e.strerror}") from None
    if not directory.is_dir():
        raise HeadscopeError(f"output path {directory} exists and is not a directory")
    if not os.access(directory, os.W_OK | os.X_OK):
        raise HeadscopeError(f"output directory {directory} is not writable")
    return directory


@contextlib.contextmanager
def atomic_directory(out: Path, *, overwrite: bool = True):
    """Yield a temp directory; on success it replaces `out`, on failure it vanishes.

    `out` may exist only if it is empty or looks like a previous output of the same
    kind (`overwrite`); a non-empty directory of other files is refused by callers
    that care (see :func:`refuse_foreign_dir`).
    """
    out = Path(out)
    ensure_writable_dir(out.parent if str(out.parent) else Path("."))
    tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.", suffix=".tmp"))
    try:
        yield tmp
        os.chmod(tmp, 0o755)
        for f in tmp.rglob("*"):
            os.chmod(f, 0o755 if f.is_dir() else 0o644)
        if out.exists():
            if not overwrite:
                raise HeadscopeError(f"{out} already exists")
            old = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.", suffix=".old"))
            os.replace(out, old / "x")
            os.replace(tmp, out)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def refuse_foreign_dir(out: Path, marker: str) -> None:
    """Refuse to write into an existing non-empty directory lacking `marker`."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise HeadscopeError(f"output path {out} exists and is not a directory")
    if out.is_dir() and any(out.iterdir()) and not (out / marker).exists():
        raise HeadscopeError(
            f"output directory {out} already holds other files (no {marker}); choose an empty or new directory"
        )
