"""The output rule: where headscope writes and how. Written once; every writer uses it.

1. **Only new paths or headscope's own directories.** An output directory must be new,
   empty, or a directory headscope wrote earlier, recognised by its manifest
   (:data:`MANIFEST`, ``.headscope-manifest.json``) listing every file headscope wrote
   there — and, for a command, listing that command's own marker file (a report's
   ``.headscope-report``, a steered checkpoint's ``steering.json``, …). Files not in the
   manifest (a user's notes) are never replaced, moved or deleted; headscope refuses to
   write over one. Stale files are removed only if the manifest lists them.
2. **Single output files** (``--out calib.json``) are written to a new path, over an
   empty file, or over an earlier output of the same kind (the writer's `owned` test).
3. **Symbolic links** given as the output are followed (written through; the link stays);
   a dangling link is refused. Inside an output directory headscope never writes
   through, replaces or deletes a link.
4. **FIFOs, sockets and devices** are refused, never opened for writing or replaced.
5. **Nothing half-written; the output never goes missing.** A file is written under a
   temporary name beside its destination (``.NAME.headscope-tmp-XXXXXXXXXXXX``), then
   renamed over it. A directory output is staged in a hidden directory inside itself
   (``.headscope-staging-XXXXXXXXXXXX``); when every file is complete, a commit record
   is written and the files are renamed into place, so the old output stays whole until
   the new one is complete. The next write to the same place cleans up after a killed
   run: temporaries and uncommitted staging are removed, a commit that was under way is
   finished (rolled forward). A temporary still locked (``flock``) by a live process is
   left alone.

Test hook: ``HEADSCOPE_TEST_PAUSE=POINT[:DETAIL]`` makes the process sleep at that point
(``file``: a temporary is complete, before its rename, DETAIL the destination's name
relative to its output; ``commit``: after each file renamed in by a directory commit),
after writing the point to the file named by ``HEADSCOPE_TEST_PAUSE_FLAG``, so a test
can kill it at the worst moment.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import secrets
import shutil
import stat
import sys
import time
import weakref
from pathlib import Path
from typing import Callable, Iterable

from ._errors import HeadscopeError

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


# -- output directories ----------------------------------------------------------------------


def _outside_reason(rel) -> str | None:
    """Why `rel` is not a name inside an output directory (None if it is one).

    The containment rule: a name read from a manifest or a commit record is a relative,
    normalised POSIX path (no ``..``, ``.`` or empty part, no leading ``/``, no NUL), and
    not one of headscope's own bookkeeping names. Links among its parts are checked where
    the name is used: headscope never writes, renames or deletes through a link.
    """
    if not isinstance(rel, str):
        return "not a file name"
    if not rel or rel.startswith("/") or "\x00" in rel:
        return "not a relative path"
    parts = rel.split("/")
    if any(p in ("", ".", "..") for p in parts):
        return "not a normalised path inside the directory"
    if rel in (MANIFEST, _DIR_LOCK) or any(is_temporary_name(p) for p in parts):
        return "one of headscope's own bookkeeping files"
    return None


def _contained(directory: Path, names, source: str) -> list[str]:
    """`names` (read from `source` in `directory`), each checked by the containment rule; refused otherwise."""
    out = []
    for rel in names:
        why = _outside_reason(rel)
        if why is not None:
            raise HeadscopeError(f"{directory / source} lists {rel!r}, which is {why}: headscope only touches files "
                                 "inside its output directory and refuses this one (edited or not headscope's); "
                                 "remove that entry, or choose another output directory")
        out.append(rel)
    return out


def _read_manifest(directory: Path) -> set[str] | None:
    """The files listed in `directory`'s manifest, or None without a valid one.

    A manifest listing a name outside the directory (``../notes.txt``) is refused
    (:class:`HeadscopeError`), never used."""
    data = read_small_file(directory / MANIFEST)
    if data is None or (directory / MANIFEST).is_symlink():
        return None
    try:
        d = json.loads(data)
    except (ValueError, RecursionError):
        return None
    if not isinstance(d, dict) or d.get("format") != MANIFEST_FORMAT or not isinstance(d.get("files"), list):
        return None
    return set(_contained(directory, d["files"], MANIFEST))


def _write_manifest(directory: Path, files: Iterable[str]) -> None:
    text = json.dumps({"format": MANIFEST_FORMAT, "version": 1, "files": sorted(set(files))}, indent=1) + "\n"
    tmp, fd = _write_temp(directory, MANIFEST, text.encode("utf-8"))
    _replace(tmp, fd, directory / MANIFEST, MANIFEST)


def _safe_rel(rel: str) -> str:
    parts = rel.split("/")
    if rel.startswith("/") or any(p in ("", ".", "..") for p in parts) or rel == MANIFEST or any(
            is_temporary_name(p) for p in parts):
        raise ValueError(f"output file name {rel!r}: expected a relative path inside the output directory")
    return rel


def _check_dest(root: Path, rel: str, listed: set[str], shown: Path) -> None:
    """Refuse to write `rel` in `root` over anything headscope did not write there."""
    p = root
    for part in rel.split("/")[:-1]:
        p = p / part
        if p.is_symlink() or (p.exists() and not p.is_dir()):
            raise HeadscopeError(f"{shown / rel}: {shown / p.relative_to(root)} is "
                                 f"{'a symbolic link' if p.is_symlink() else 'not a directory'}; "
                                 "headscope does not write through it")
    dest = root / rel
    if dest.is_symlink():
        raise HeadscopeError(f"{shown / rel} is a symbolic link; headscope does not write through links "
                             "inside its output directories")
    if os.path.lexists(dest):
        mode = os.lstat(dest).st_mode
        if not stat.S_ISREG(mode):
            raise HeadscopeError(f"{shown / rel} is {kind_of(mode)}; headscope writes only regular files")
        if rel not in listed:
            raise HeadscopeError(f"{shown / rel} already exists and was not written by headscope; "
                                 "move it away or choose another output directory")


def _make_parents(root: Path, rel: str) -> None:
    p = root
    for part in rel.split("/")[:-1]:
        p = p / part
        with contextlib.suppress(FileExistsError):
            p.mkdir()
        if p.is_symlink() or not p.is_dir():
            raise HeadscopeError(f"{p} is not a directory; headscope does not write through it")


def _remove_listed(root: Path, rel: str) -> None:
    """Delete the regular file `rel` (listed in the manifest) and its emptied parent folders."""
    p = root
    for part in rel.split("/")[:-1]:
        p = p / part
        if p.is_symlink() or not p.is_dir():   # never through a link to somewhere else
            return
    p = root / rel
    if p.is_symlink() or not p.is_file():
        return
    p.unlink()
    parent = p.parent
    while parent != root:
        try:
            parent.rmdir()      # only if empty
        except OSError:
            break
        parent = parent.parent


def _read_record(root: Path, staging: Path) -> tuple[list[str], list[str]]:
    """The (files, stale) of a commit record, every name checked by the containment rule."""
    source = f"{staging.name}/{_COMMIT}"
    data = None if (staging / _COMMIT).is_symlink() else read_small_file(staging / _COMMIT)
    try:
        record = json.loads(data) if data is not None else None
    except (ValueError, RecursionError):
        record = None
    if not (isinstance(record, dict) and isinstance(record.get("files"), list)
            and isinstance(record.get("stale"), list)):
        raise HeadscopeError(f"{root / source} is not a headscope commit record (unreadable or edited); "
                             f"move {root / staging.name} away, then rerun")
    return _contained(root, record["files"], source), _contained(root, record["stale"], source)


def _roll_forward(root: Path, staging: Path) -> None:
    """Finish a commit whose record is written (idempotent: a rerun after a kill redoes it).

    Every name in the record stays inside `root` (refused otherwise, before anything is
    touched); a file is put in place only over nothing or a file the manifest lists, and
    a stale file is deleted only if the manifest lists it."""
    files, stale = _read_record(root, staging)
    listed = _read_manifest(root) or set()
    for rel in files:
        if os.path.lexists(staging / rel):
            _check_dest(root, rel, listed, root)
    stale = [rel for rel in stale if rel in listed]
    _write_manifest(root, listed | set(files))          # every file about to appear is listed first
    for rel in files:
        src = staging / rel
        if os.path.lexists(src):
            _make_parents(root, rel)
            os.replace(src, root / rel)
            pause_point("commit", rel)
    for rel in stale:
        _remove_listed(root, rel)
    _write_manifest(root, (listed - set(stale)) | set(files))
    shutil.rmtree(staging)


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


# -- the lock of an output directory ---------------------------------------------------------


class _DirLock:
    """An exclusive ``flock`` on ``DIR/.headscope-lock``, which holds the writer's pid and command.

    One per directory and process: every :class:`OutputDir` of this process on that
    directory shares it (a run writes its output in several steps), and it is released
    (the lock file removed, then closed) when the last of them closes or goes away. A
    killed writer's lock is released by the kernel; its file, left behind, is reused.
    """

    def __init__(self, fd: int, path: Path, ident: tuple[int, int]):
        self.fd, self.path, self.ident = fd, path, ident

    def release(self) -> None:
        if self.fd is None:
            return
        with contextlib.suppress(OSError):
            st = os.lstat(self.path)
            if (st.st_dev, st.st_ino) == self.ident:
                os.unlink(self.path)        # while still held: nobody can take a lock on a file that stays
        os.close(self.fd)
        self.fd = None

    def __del__(self):
        try:
            self.release()
        except Exception:       # at interpreter exit os may be gone; the kernel drops the lock anyway
            pass


_HELD: dict[tuple[int, int], "weakref.ref[_DirLock]"] = {}


def _lock_holder(fd: int) -> str:
    with contextlib.suppress(OSError):
        text = os.pread(fd, 4096, 0).decode("utf-8", "replace").strip()
        if text:
            return " ".join(text.split())
    return "a process that has not said who it is yet"


def _lock_dir(directory: Path, what: str) -> _DirLock:
    """Take the exclusive lock of the output directory `directory`; refused (one line) if another run holds it."""
    st = os.stat(directory)
    key = (st.st_dev, st.st_ino)
    held = _HELD.get(key)
    held = held() if held is not None else None
    if held is not None and held.fd is not None:
        return held
    path = directory / _DIR_LOCK
    for _ in range(50):
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | _O_NOFOLLOW | _O_NONBLOCK | _O_CLOEXEC, 0o644)
        except OSError as e:
            raise HeadscopeError(f"cannot lock {what} {directory}: {path}: {e.strerror}") from None
        fst = os.fstat(fd)
        if not stat.S_ISREG(fst.st_mode):
            os.close(fd)
            raise HeadscopeError(f"{path} is {kind_of(fst.st_mode)}; headscope's lock file must be a regular file")
        if fst.st_nlink != 1:               # a hard link: writing the holder would rewrite another file
            os.close(fd)
            raise HeadscopeError(f"{path} is a hard link ({fst.st_nlink} names for one file); headscope's lock "
                                 "file must be a file of its own: remove it (the other names keep the file)")
        if fcntl is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as e:
                if e.errno in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EINVAL):
                    pass                    # a file system without flock: write unlocked, as without fcntl
                elif e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    os.close(fd)
                    raise HeadscopeError(f"cannot lock {what} {directory}: {e.strerror}") from None
                else:
                    holder = _lock_holder(fd)
                    os.close(fd)
                    raise HeadscopeError(f"{what} {directory} is being written by another headscope run "
                                         f"({holder}); wait for it to finish, or choose another output "
                                         "directory") from None
        try:
            now = os.lstat(path)
        except OSError:
            now = None
        if now is None or (now.st_dev, now.st_ino) != (fst.st_dev, fst.st_ino):
            os.close(fd)                    # released and removed by its holder meanwhile: take the new one
            continue
        prog = os.path.basename(sys.argv[0] or "python")
        argv = " ".join(["headscope" if prog == "__main__.py" else prog, *sys.argv[1:]])[:1000]
        with contextlib.suppress(OSError):
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"pid {os.getpid()}: {argv}\n".encode("utf-8", "backslashreplace"), 0)
        lock = _DirLock(fd, path, (fst.st_dev, fst.st_ino))
        _HELD[key] = weakref.ref(lock)
        return lock
    raise HeadscopeError(f"cannot lock {what} {directory}: its lock file keeps changing")


def unfinished_commit(directory: str | os.PathLike) -> str | None:
    """The staging directory of a commit under way (or killed) in `directory`, or None.

    Between its commit record and its last rename, a directory holds a mix of the old
    and the new output; readers refuse it (:func:`refuse_unfinished`).
    """
    root = Path(directory)
    try:
        names = sorted(os.listdir(root))
    except OSError:
        return None
    for name in names:
        if _STAGING_RE.match(name) and os.path.lexists(root / name / _COMMIT):
            return name
    return None


def refuse_unfinished(directory: str | os.PathLike, what: str = "checkpoint directory") -> None:
    """Refuse (one line) to read `directory` while it holds a half-committed output."""
    name = unfinished_commit(directory)
    if name is None:
        return
    holder = ""
    data = read_small_file(Path(directory) / _DIR_LOCK, 4096)
    if data and data.strip():
        holder = f" (last writer: {' '.join(data.decode('utf-8', 'replace').split())})"
    raise HeadscopeError(f"{what} {directory} is half-committed: a headscope run is writing it or was killed while "
                         f"writing it ({name} holds the commit record){holder}; rerun the command that writes it "
                         "to finish the commit, then read it")


def recover(directory: str | os.PathLike) -> None:
    """Clean up after killed writers in `directory`: finish committed staging, remove the rest."""
    root = Path(directory)
    try:
        names = sorted(os.listdir(root))
    except OSError:
        return
    for name in names:
        staging = root / name
        if not _STAGING_RE.match(name) or staging.is_symlink() or not staging.is_dir():
            continue
        if not os.path.lexists(staging / _STAGING_LOCK):
            with contextlib.suppress(OSError):
                staging.rmdir()                              # killed before it held anything
            continue
        fd = _take_abandoned(staging / _STAGING_LOCK)
        if fd is None:
            continue                                         # a live writer's
        try:
            if (staging / _COMMIT).is_file():
                _roll_forward(root, staging)
            else:
                shutil.rmtree(staging)
        finally:
            os.close(fd)
    for dirpath, dirnames, _ in os.walk(root):
        dirnames[:] = [d for d in dirnames if not _STAGING_RE.match(d)]
        _remove_abandoned_temps(Path(dirpath))


class OutputDir:
    """An output directory under the output rule (module docstring).

    ``OutputDir(path, marker).check()`` refuses, without touching anything, a path that
    is not a directory or a directory headscope may not write (non-empty, without a
    manifest listing `marker`). :meth:`open` creates the directory if needed and
    cleans up after killed runs; then :meth:`write` puts files in place one by one (each
    atomically) and :meth:`remove_stale` deletes listed files this run did not write;
    or :meth:`staged` builds a complete output and commits it all together.
    """

    def __init__(self, path: str | os.PathLike, marker: str | None = None, what: str = "output directory"):
        self.path = Path(path)
        self.marker = marker
        self.what = what
        self.files: set[str] = set()
        self.created = False
        self._open = False
        self._lock: _DirLock | None = None

    def close(self) -> None:
        """Give up this directory (its lock is released when no other writer of this process holds it)."""
        self._lock = None
        self._open = False

    def __enter__(self) -> "OutputDir":
        return self.open() if not self._open else self

    def __exit__(self, *exc) -> None:
        self.close()

    def check(self) -> "OutputDir":
        p = self.path
        _follow(p, self.what)
        try:
            st = os.stat(p)
        except (FileNotFoundError, NotADirectoryError):   # created by open, or refused there with the reason
            return self
        except OSError as e:
            raise HeadscopeError(f"cannot use {self.what} {p}: {e.strerror}") from None
        if not stat.S_ISDIR(st.st_mode):
            kind = "" if stat.S_ISREG(st.st_mode) else f" ({kind_of(st.st_mode)})"
            raise HeadscopeError(f"output path {p} exists and is not a directory{kind}")
        try:
            entries = [n for n in os.listdir(p) if not is_temporary_name(n)]
        except OSError as e:
            raise HeadscopeError(f"cannot read {self.what} {p}: {e.strerror}") from None
        entries = [n for n in entries if n != _DIR_LOCK]
        if not entries:
            return self
        listed = _read_manifest(p)
        if listed is None or (self.marker is not None and self.marker not in listed):
            mark = f"{self.marker} listed in headscope's {MANIFEST}" if self.marker else f"headscope's {MANIFEST}"
            legacy = listed is None and self.marker is not None and (p / self.marker).is_file()
            hint = (" — it was written by a headscope older than its manifest, which cannot tell its files from "
                    "yours: remove it or choose an empty or new directory") if legacy else \
                "; choose an empty or new directory"
            raise HeadscopeError(f"{self.what} {p} already holds other files (no {mark}){hint}")
        return self

    def open(self) -> "OutputDir":
        """Check, create if missing, recover from killed runs, read the manifest."""
        self.check()
        if not os.path.lexists(self.path):
            ensure_writable_dir(self.path.parent if str(self.path.parent) else Path("."))
            try:
                self.path.mkdir()
                self.created = True
            except FileExistsError:
                self.check()
            except OSError as e:
                raise HeadscopeError(f"cannot create output directory {self.path}: {e.strerror}") from None
        ensure_writable_dir(self.path)
        self._lock = _lock_dir(self.path, self.what)
        recover(self.path)
        self.files = _read_manifest(self.path) or set()
        self._open = True
        return self

    def _require_open(self) -> None:
        if not self._open:
            self.open()

    def write(self, rel: str, data: bytes | str) -> Path:
        """Write the file `rel` (e.g. ``heads/L0H3.html``) in place, atomically; returns its path."""
        self._require_open()
        rel = _safe_rel(rel)
        _check_dest(self.path, rel, self.files, self.path)
        _make_parents(self.path, rel)
        if rel not in self.files:                     # listed before it appears
            self.files.add(rel)
            _write_manifest(self.path, self.files)
        dest = self.path / rel
        tmp, fd = _write_temp(dest.parent, dest.name, _as_bytes(data))
        _replace(tmp, fd, dest, rel)
        return dest

    def remove_stale(self, keep: Iterable[str]) -> list[str]:
        """Delete the files headscope wrote here earlier that are not in `keep`; returns them."""
        self._require_open()
        keep = set(keep)
        stale = sorted(self.files - keep)
        for rel in stale:
            _remove_listed(self.path, rel)
        if stale:
            self.files -= set(stale)
            _write_manifest(self.path, self.files)
        return stale

    @contextlib.contextmanager
    def staged(self):
        """Yield an empty staging directory; on success its files replace this output's (see the rule)."""
        self._require_open()
        staging = self.path / f".headscope-staging-{secrets.token_hex(6)}"
        staging.mkdir()
        lock = os.open(staging / _STAGING_LOCK, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _O_CLOEXEC, 0o600)
        try:
            _lock(lock)
            try:
                yield staging
                committed = self._commit_record(staging)
            except BaseException:                     # nothing of the new output is in place: drop it
                shutil.rmtree(staging, ignore_errors=True)
                if self.created:
                    if self._lock is not None:      # a directory this run created: no other writer shares it
                        self._lock.release()
                        self._lock = None
                    with contextlib.suppress(OSError):
                        self.path.rmdir()
                raise
            # the new output is complete; if this is interrupted, the next write finishes it
            _roll_forward(self.path, staging)
            self.files = committed
        finally:
            os.close(lock)

    def _commit_record(self, staging: Path) -> set[str]:
        """Check the staged files against this directory and write the commit record."""
        new = []
        for dirpath, dirnames, filenames in os.walk(staging):
            dirnames.sort()
            for name in sorted(filenames):
                rel = (Path(dirpath) / name).relative_to(staging).as_posix()
                if rel in (_STAGING_LOCK, _COMMIT):
                    continue
                if (Path(dirpath) / name).is_symlink() or not (Path(dirpath) / name).is_file():
                    raise ValueError(f"staged output {rel!r} is not a regular file")
                new.append(_safe_rel(rel))
        for rel in new:
            _check_dest(self.path, rel, self.files, self.path)
        mode = 0o666 & ~_umask()            # as if created by open(); some writers make 0600 files
        for rel in new:
            os.chmod(staging / rel, mode)
        record = {"files": new, "stale": sorted(self.files - set(new))}
        tmp, fd = _write_temp(staging, _COMMIT, json.dumps(record).encode("utf-8"))
        _replace(tmp, fd, staging / _COMMIT, _COMMIT)
        return set(new)


def refuse_foreign_dir(out: Path, marker: str | None = None) -> None:
    """Refuse (changing nothing) an output directory headscope may not write; see :class:`OutputDir`."""
    OutputDir(out, marker).check()


@contextlib.contextmanager
def atomic_directory(out: Path, *, marker: str | None = None, overwrite: bool = True):
    """Yield a staging directory; on success its files become `out`'s (the output rule).

    `out` must be new, empty, or an earlier headscope output (with `marker`, if given).
    Files of the earlier output that the new one does not contain are removed; other
    files in `out` are kept. On failure the staging vanishes and `out` is unchanged.
    """
    d = OutputDir(out, marker)
    if not overwrite and d.path.exists() and any(not is_temporary_name(n) for n in os.listdir(d.path)):
        raise HeadscopeError(f"{out} already exists")
    try:
        with d.open().staged() as staging:
            yield staging
    finally:
        d.close()
