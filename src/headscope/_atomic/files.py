"""Single output files and the pieces every writer shares: temporaries written then renamed,
the bookkeeping names, the test pause hook, and the small-file reader (see :mod:`headscope._atomic`)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import stat
import time
from pathlib import Path
from typing import Callable

from .._errors import HeadscopeError

try:  # POSIX advisory locks tell a live writer's temporaries from a killed one's
    import fcntl
except ImportError:  # pragma: no cover - not POSIX: every temporary counts as abandoned
    fcntl = None

#: The manifest of an output directory: the files headscope wrote there.
MANIFEST = ".headscope-manifest.json"
MANIFEST_FORMAT = "headscope-output"
_STAGING_LOCK = ".headscope-lock"
#: the lock of an output directory (inside it): held by the one run writing there
_DIR_LOCK = ".headscope-lock"
_COMMIT = ".headscope-commit.json"
_TMP_RE = re.compile(r"^\..*\.headscope-tmp-[0-9a-f]{12}$", re.DOTALL)
_STAGING_RE = re.compile(r"^\.headscope-staging-[0-9a-f]{12}$")
_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_O_NONBLOCK = getattr(os, "O_NONBLOCK", 0)


# -- small helpers ---------------------------------------------------------------------------


def kind_of(mode: int) -> str:
    """What a stat mode is, in words ("a FIFO", "a socket", …)."""
    for test, name in ((stat.S_ISREG, "a regular file"), (stat.S_ISDIR, "a directory"),
                       (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISLNK, "a symbolic link")):
        if test(mode):
            return name
    return "not a regular file"


def is_temporary_name(name: str) -> bool:
    """Whether `name` is one of headscope's temporary files or staging directories."""
    return bool(_TMP_RE.match(name) or _STAGING_RE.match(name))


def pause_point(point: str, detail: str = "") -> None:
    """Test hook (see the module docstring): sleep here if HEADSCOPE_TEST_PAUSE names this point."""
    spec = os.environ.get("HEADSCOPE_TEST_PAUSE")
    if not spec:
        return
    want, _, want_detail = spec.partition(":")
    if want != point or (want_detail and want_detail != detail):
        return
    flag = os.environ.get("HEADSCOPE_TEST_PAUSE_FLAG")
    if flag:
        with open(flag, "w", encoding="utf-8") as f:
            f.write(f"{point}:{detail}\n")
    time.sleep(float(os.environ.get("HEADSCOPE_TEST_PAUSE_SECONDS", "120")))


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _lock(fd: int) -> None:
    if fcntl is not None:
        fcntl.flock(fd, fcntl.LOCK_EX)


def _take_abandoned(path: Path) -> int | None:
    """An fd locking `path` if it is a regular file no live process holds, else None."""
    try:
        fd = os.open(path, os.O_RDONLY | _O_NONBLOCK | _O_NOFOLLOW | _O_CLOEXEC)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError
        if fcntl is not None:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return fd


def _write_temp(directory: Path, name: str, data: bytes) -> tuple[Path, int]:
    """A complete, locked temporary holding `data` in `directory`; returns (path, fd)."""
    tmp = directory / f".{name[:100]}.headscope-tmp-{secrets.token_hex(6)}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _O_CLOEXEC, 0o666)
    try:
        _lock(fd)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    except BaseException:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return tmp, fd


def _replace(tmp: Path, fd: int, dest: Path, pause_detail: str) -> None:
    """Rename the temporary over `dest` (atomic), then drop its lock."""
    try:
        pause_point("file", pause_detail)
        os.replace(tmp, dest)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    finally:
        os.close(fd)


def _as_bytes(data: bytes | str) -> bytes:
    return data.encode("utf-8") if isinstance(data, str) else bytes(data)


def _follow(path: Path, what: str) -> Path:
    """`path`, or the target of the symbolic link `path` (refused if dangling)."""
    if path.is_symlink():
        target = Path(os.path.realpath(path))
        if not target.exists():
            raise HeadscopeError(f"{what} {path} is a symbolic link to {target}, which does not exist; "
                                 "create the target or remove the link")
        return target
    return path


def ensure_writable_dir(directory: Path) -> Path:
    """`directory`, created if missing (with its parents); refused if not a writable directory."""
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


# -- single output files ---------------------------------------------------------------------


def check_output_file(path: str | os.PathLike, *, owned: Callable[[Path], bool] | None = None,
                      what: str = "output file") -> tuple[Path, os.stat_result | None]:
    """Refuse (changing nothing) a single output file headscope may not write; see :func:`write_file`.

    Returns the path to write (a link's target) and its stat (None if it does not exist yet).
    """
    path = Path(path)
    dest = _follow(path, what)
    try:
        st = os.stat(dest)
    except (FileNotFoundError, NotADirectoryError):   # created by write_file, or refused there with the reason
        return dest, None
    except OSError as e:
        raise HeadscopeError(f"cannot use {what} {path}: {e.strerror}") from None
    if stat.S_ISDIR(st.st_mode):
        raise HeadscopeError(f"{what} {path}: expected a file path, got an existing directory")
    if not stat.S_ISREG(st.st_mode):
        raise HeadscopeError(f"{what} {path} is {kind_of(st.st_mode)}; headscope writes only regular files")
    if st.st_size and not (owned is not None and owned(dest)):
        raise HeadscopeError(f"{what} {path} already exists and was not written by headscope; "
                             "choose a new path or remove it")
    return dest, st


def write_file(path: str | os.PathLike, data: bytes | str, *, owned: Callable[[Path], bool] | None = None,
               what: str = "output file") -> Path:
    """Write `data` to the single output file `path` under the output rule; returns `path`.

    An existing file is replaced only if it is empty or ``owned(file)`` says headscope
    wrote it (an earlier output of the same kind); a link is written through; a
    directory, FIFO, socket or device is refused. The write is a temporary plus a rename.
    """
    dest, st = check_output_file(path, owned=owned, what=what)
    parent = ensure_writable_dir(dest.parent)
    _remove_abandoned_temps(parent, only_for=dest.name)
    tmp, fd = _write_temp(parent, dest.name, _as_bytes(data))
    if st is not None:
        with contextlib.suppress(OSError):
            os.chmod(tmp, stat.S_IMODE(st.st_mode))
    _replace(tmp, fd, dest, dest.name)
    return Path(path)


def atomic_write_text(path: Path, text: str, *, owned: Callable[[Path], bool] | None = None) -> Path:
    """:func:`write_file` for text (UTF-8)."""
    return write_file(path, text, owned=owned)


def atomic_write_bytes(path: Path, data: bytes, *, owned: Callable[[Path], bool] | None = None) -> Path:
    """:func:`write_file` for bytes."""
    return write_file(path, data, owned=owned)


def read_small_file(path: Path, limit: int = 64 * 2**20) -> bytes | None:
    """The bytes of `path` if it is a regular file of at most `limit` bytes, else None (never blocks)."""
    try:
        fd = os.open(path, os.O_RDONLY | _O_NONBLOCK | _O_CLOEXEC)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > limit:
            return None
        chunks, n = [], 0
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
            n += len(chunk)
            if n > limit:
                return None
        return b"".join(chunks)
    except OSError:
        return None
    finally:
        os.close(fd)


def json_object_with(*keys: str, **values) -> Callable[[Path], bool]:
    """An `owned` test: the file is a JSON object with these keys (and these values)."""
    def owned(path: Path) -> bool:
        data = read_small_file(path)
        try:
            d = json.loads(data) if data is not None else None
        except (ValueError, RecursionError):
            return False
        return (isinstance(d, dict) and all(k in d for k in keys)
                and all(d.get(k) == v for k, v in values.items()))
    return owned


def starts_with(*prefixes: bytes) -> Callable[[Path], bool]:
    """An `owned` test: the file's first bytes contain every one of `prefixes`, the first at offset 0."""
    def owned(path: Path) -> bool:
        try:
            with open(path, "rb") as f:  # a regular file: checked by the caller
                head = f.read(4096)
        except OSError:
            return False
        return head.startswith(prefixes[0]) and all(p in head for p in prefixes[1:])
    return owned



def _remove_abandoned_temps(directory: Path, only_for: str | None = None) -> None:
    """Delete headscope's temporaries in `directory` (only those for `only_for`) that no live process holds."""
    try:
        names = os.listdir(directory)
    except OSError:
        return
    for name in names:
        if not _TMP_RE.match(name) or (only_for is not None
                                       and not name.startswith(f".{only_for[:100]}.headscope-tmp-")):
            continue
        fd = _take_abandoned(directory / name)
        if fd is not None:
            try:
                os.unlink(directory / name)
            except OSError:
                pass
            finally:
                os.close(fd)

