"""Commit records: a staged directory output put in place all together, finished (rolled
forward) by the next writer after a kill; readers refuse a half-committed directory."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import stat
from pathlib import Path

from .._errors import HeadscopeError
from .files import (_COMMIT, _DIR_LOCK, _STAGING_LOCK, _STAGING_RE, _remove_abandoned_temps, _take_abandoned,
                    pause_point, read_small_file)
from .manifest import (_check_dest, _contained, _make_parents, _read_hashes, _read_manifest, _remove_listed,
                       _write_manifest)


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
    hashes = {k: v for k, v in _read_hashes(root).items() if k not in set(files)}   # replaced: no longer proven
    _write_manifest(root, listed | set(files), hashes)          # every file about to appear is listed first
    for rel in files:
        src = staging / rel
        if os.path.lexists(src):
            _make_parents(root, rel)
            os.replace(src, root / rel)
            pause_point("commit", rel)
    for rel in stale:
        _remove_listed(root, rel)
    _write_manifest(root, (listed - set(stale)) | set(files), hashes)
    shutil.rmtree(staging)


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
        try:
            lock_mode = os.lstat(staging / _STAGING_LOCK).st_mode
        except OSError:
            lock_mode = None
        if lock_mode is None and not os.path.lexists(staging / _COMMIT):
            with contextlib.suppress(OSError):
                staging.rmdir()                              # killed before it held anything
                continue
        fd = None
        if lock_mode is not None and stat.S_ISREG(lock_mode):
            fd = _take_abandoned(staging / _STAGING_LOCK)
            if fd is None:
                continue                                     # a live writer's
        # else: its lock is missing, or replaced by a directory, link, FIFO…: a live writer's lock is
        # the regular file it created and holds from start to end, so this staging is abandoned
        # (and the caller holds the directory's lock: no other run writes here now)
        try:
            if (staging / _COMMIT).is_file():
                _roll_forward(root, staging)
            else:
                shutil.rmtree(staging)
        finally:
            if fd is not None:
                os.close(fd)
    for dirpath, dirnames, _ in os.walk(root):
        dirnames[:] = [d for d in dirnames if not _STAGING_RE.match(d)]
        _remove_abandoned_temps(Path(dirpath))
