"""The manifest of an output directory (the files headscope wrote there) and the containment
rule every name read back from it, or from a commit record, must pass."""

from __future__ import annotations

import contextlib
import json
import os
import stat
from pathlib import Path
from typing import Iterable

from .._errors import HeadscopeError
from .files import (_DIR_LOCK, MANIFEST, MANIFEST_FORMAT, _replace, _write_temp, is_temporary_name, kind_of,
                    read_small_file)


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


#: the largest manifest headscope reads (one name per file written: far above any real output)
MANIFEST_LIMIT = 64 * 2**20


def _manifest_doc(directory: Path) -> tuple[dict | None, str | None]:
    """(the manifest's JSON object, None), or (None, why it is not a usable manifest; None if there is none)."""
    path = directory / MANIFEST
    if not os.path.lexists(path):
        return None, None
    if path.is_symlink():
        return None, "is a symbolic link"
    try:
        st = os.stat(path)
    except OSError as e:
        return None, f"cannot be read ({e.strerror})"
    if not stat.S_ISREG(st.st_mode):
        return None, f"is {kind_of(st.st_mode)}"
    if st.st_size > MANIFEST_LIMIT:
        return None, f"is over headscope's size limit for a manifest ({st.st_size} bytes, at most {MANIFEST_LIMIT})"
    data = read_small_file(path, MANIFEST_LIMIT)
    if data is None:
        return None, "cannot be read"
    try:
        d = json.loads(data)
    except (ValueError, RecursionError):
        return None, "is not valid JSON"
    if not isinstance(d, dict) or d.get("format") != MANIFEST_FORMAT or not isinstance(d.get("files"), list):
        return None, "is not a headscope manifest"
    return d, None


def manifest_problem(directory: Path) -> str | None:
    """Why `directory`'s manifest, which exists, cannot be used (None if it is usable or absent)."""
    return _manifest_doc(directory)[1]


def _read_manifest(directory: Path) -> set[str] | None:
    """The files listed in `directory`'s manifest, or None without a valid one.

    A manifest listing a name outside the directory (``../notes.txt``) is refused
    (:class:`HeadscopeError`), never used."""
    d, _ = _manifest_doc(directory)
    return None if d is None else set(_contained(directory, d["files"], MANIFEST))


def _read_hashes(directory: Path) -> dict[str, str]:
    """The content hashes (sha256 hex) the manifest records, by file: for the files headscope reuses."""
    d, _ = _manifest_doc(directory)
    h = d.get("sha256") if d is not None else None
    if not isinstance(h, dict):
        return {}
    return {k: v for k, v in h.items() if isinstance(k, str) and isinstance(v, str) and k in d["files"]}


def _write_manifest(directory: Path, files: Iterable[str], hashes: dict[str, str] | None = None) -> None:
    """Write the manifest listing `files`, with the content hashes of those of them in `hashes`."""
    files = sorted(set(files))
    doc = {"format": MANIFEST_FORMAT, "version": 1, "files": files}
    kept = {k: hashes[k] for k in sorted(hashes or ()) if k in set(files)}
    if kept:
        doc["sha256"] = kept
    text = json.dumps(doc, indent=1) + "\n"
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
