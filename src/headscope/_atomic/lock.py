"""The lock of an output directory: one writer per directory."""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import sys
import weakref
from pathlib import Path

from .._errors import HeadscopeError
from .files import _DIR_LOCK, _O_CLOEXEC, _O_NOFOLLOW, _O_NONBLOCK, fcntl, kind_of


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
