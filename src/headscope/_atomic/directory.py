"""Output directories (:class:`OutputDir`): checked, locked, recovered, then written file by
file or staged and committed together."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import secrets
import shutil
import stat
from pathlib import Path
from typing import Iterable

from .._errors import HeadscopeError
from .commit import _roll_forward, recover
from .files import (_COMMIT, _DIR_LOCK, _O_CLOEXEC, _STAGING_LOCK, MANIFEST, _as_bytes, _follow, _lock, _replace,
                    _umask, _write_temp, ensure_writable_dir, is_temporary_name, kind_of, read_small_file)
from .lock import _DirLock, _lock_dir
from .manifest import (_check_dest, _make_parents, _read_hashes, _read_manifest, _remove_listed, _safe_rel,
                       _write_manifest, manifest_problem)


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
        self.hashes: dict[str, str] = {}              # rel → sha256 of the files written with record_hash
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
            problem = manifest_problem(p) if listed is None else None
            legacy = problem is None and listed is None and self.marker is not None and (p / self.marker).is_file()
            if problem is not None:
                raise HeadscopeError(f"{self.what} {p}: its {MANIFEST} {problem}, so headscope cannot tell its "
                                     "files from yours; remove that file, or choose an empty or new directory")
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
        self.hashes = _read_hashes(self.path)
        self._open = True
        return self

    def _require_open(self) -> None:
        if not self._open:
            self.open()

    def write(self, rel: str, data: bytes | str, *, record_hash: bool = False) -> Path:
        """Write the file `rel` (e.g. ``heads/L0H3.html``) in place, atomically; returns its path.

        With `record_hash`, the manifest records the file's sha256, so that a later run can
        reuse it only as written (:meth:`verified`); a file written without it loses its hash.
        """
        self._require_open()
        rel = _safe_rel(rel)
        _check_dest(self.path, rel, self.files, self.path)
        _make_parents(self.path, rel)
        data = _as_bytes(data)
        digest = hashlib.sha256(data).hexdigest() if record_hash else None
        if rel not in self.files or self.hashes.get(rel) != digest:   # listed (and hashed) before it appears
            self.files.add(rel)
            if digest is None:
                self.hashes.pop(rel, None)
            else:
                self.hashes[rel] = digest
            _write_manifest(self.path, self.files, self.hashes)
        dest = self.path / rel
        tmp, fd = _write_temp(dest.parent, dest.name, data)
        _replace(tmp, fd, dest, rel)
        return dest

    def announce(self, rels: Iterable[str]) -> None:
        """List the files `rels` in the manifest at once, before any of them is written: one
        manifest write for many files instead of one each (:meth:`write` writes it only when
        the file is not yet listed as it will be). Each is checked as :meth:`write` checks it,
        so nothing is listed if one of them may not be written; listed files that do not exist
        yet are what a killed run leaves anyway (:meth:`remove_stale` skips them)."""
        self._require_open()
        new = []
        for rel in rels:
            rel = _safe_rel(rel)
            _check_dest(self.path, rel, self.files, self.path)
            if rel not in self.files or rel in self.hashes:
                new.append(rel)
        if new:
            self.files.update(new)
            for rel in new:
                self.hashes.pop(rel, None)      # as write without record_hash leaves it
            _write_manifest(self.path, self.files, self.hashes)

    def verified(self, rel: str, limit: int) -> bytes | None:
        """The bytes of the file `rel` if they are exactly what headscope wrote there (the sha256 the
        manifest recorded with ``write(record_hash=True)``), else None: missing, edited by hand, not a
        regular file, a link, or over `limit` bytes (never read whole then)."""
        self._require_open()
        want = self.hashes.get(rel)
        if want is None:
            return None
        path = self.path
        for part in _safe_rel(rel).split("/"):          # never read through a link inside the directory
            path = path / part
            if path.is_symlink():
                return None
        data = read_small_file(path, limit)
        if data is None or hashlib.sha256(data).hexdigest() != want:
            return None
        return data

    def remove_stale(self, keep: Iterable[str]) -> list[str]:
        """Delete the files headscope wrote here earlier that are not in `keep`; returns them."""
        self._require_open()
        keep = set(keep)
        stale = sorted(self.files - keep)
        for rel in stale:
            _remove_listed(self.path, rel)
        if stale:
            self.files -= set(stale)
            _write_manifest(self.path, self.files, self.hashes)
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
            self.hashes = _read_hashes(self.path)
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
