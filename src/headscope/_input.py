"""The input rule: how headscope reads every file a user names (the output rule is :mod:`._atomic`).

Every file is read by :func:`read_input_bytes`: only regular files are read (a link to one is
fine); a FIFO, socket or device is refused without being opened for a blocking read, so
``/dev/zero`` or a FIFO without a writer cannot hang headscope. A file, and a whole corpus,
may hold at most :func:`max_input_bytes` (64 MiB unless raised with ``--max-input-mb`` or
:func:`input_limit`). Text must be UTF-8 (:func:`decode_text`); JSON is read by
:func:`read_json_file`, checkpoint files up to :data:`CHECKPOINT_FILE_LIMIT`.
"""

from __future__ import annotations

import contextlib
import contextvars
import math
import os
import stat

from ._atomic import kind_of
from ._errors import HeadscopeError

#: the default size limit of one input file (and of one corpus), in MiB
DEFAULT_MAX_INPUT_MB = 64
_max_input = contextvars.ContextVar("headscope_max_input_bytes", default=DEFAULT_MAX_INPUT_MB * 2**20)


def max_input_bytes() -> int:
    """The size limit of one input file (and of one corpus) now in force, in bytes."""
    return _max_input.get()


@contextlib.contextmanager
def input_limit(mb: float):
    """Raise (or lower) the input size limit to `mb` MiB inside the ``with`` block."""
    if isinstance(mb, bool) or not isinstance(mb, (int, float)) or not math.isfinite(mb) or mb <= 0:
        raise HeadscopeError(f"--max-input-mb: expected a positive number of MiB, got {mb!r}")
    token = _max_input.set(max(1, int(mb * 2**20)))
    try:
        yield
    finally:
        _max_input.reset(token)


def amount(n: int) -> str:
    return f"{n / 2**20:.1f} MiB" if n >= 2**20 else f"{n} bytes"


def _too_large(what: str, path, size: int | None, limit: int, fixed: bool = False) -> HeadscopeError:
    got = amount(size) if size is not None else "more than that"
    hint = "a fixed limit" if fixed else "raise the limit with --max-input-mb"
    return HeadscopeError(f"{what} {path} is over the input size limit: expected at most "
                          f"{amount(limit)}, got {got} ({hint})")


def read_input_bytes(path: str | os.PathLike, what: str = "input file", *, limit: int | None = None) -> bytes:
    """The bytes of the regular file `path` that the user named as `what` (the input rule).

    Refused with a one-line :class:`HeadscopeError`: a missing path, a directory, a FIFO,
    socket or device (checked with stat before opening, and again on the opened file,
    which is opened non-blocking so a FIFO swapped in cannot hang), and a file larger
    than `limit` bytes (default :func:`max_input_bytes`).
    """
    fixed = limit is not None and limit == CHECKPOINT_FILE_LIMIT
    limit = max_input_bytes() if limit is None else limit
    try:
        st = os.stat(path)
    except FileNotFoundError:
        if os.path.islink(path):
            raise HeadscopeError(f"{what} {path} is a symbolic link to a missing file") from None
        raise HeadscopeError(f"{what} not found: {path}") from None
    except OSError as e:
        raise HeadscopeError(f"cannot read {what} {path}: {e.strerror}") from None
    if stat.S_ISDIR(st.st_mode):
        raise HeadscopeError(f"{what} {path}: expected a file, got a directory")
    if not stat.S_ISREG(st.st_mode):
        raise HeadscopeError(f"{what} {path} is {kind_of(st.st_mode)}, not a regular file; "
                             "headscope reads only regular files")
    if st.st_size > limit:
        raise _too_large(what, path, st.st_size, limit, fixed)
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)
                     | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        raise HeadscopeError(f"cannot read {what} {path}: {e.strerror}") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise HeadscopeError(f"{what} {path} is {kind_of(mode)}, not a regular file; "
                                 "headscope reads only regular files")
        chunks, n = [], 0
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
            n += len(chunk)
            if n > limit:               # it grew while being read
                raise _too_large(what, path, None, limit, fixed)
    except OSError as e:
        raise HeadscopeError(f"cannot read {what} {path}: {e.strerror}") from None
    finally:
        os.close(fd)
    return b"".join(chunks)


def decode_text(data: bytes, path, what: str, *, allow_empty: bool = True) -> str:
    """`data` as UTF-8 text; NUL bytes (binary), invalid UTF-8 and, unless `allow_empty`, no text are refused."""
    if b"\x00" in data:
        raise HeadscopeError(f"{what} {path} is binary (contains NUL bytes), expected UTF-8 text")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise HeadscopeError(
            f"{what} {path} is not UTF-8: invalid byte 0x{data[e.start]:02x} at offset {e.start}"
        ) from None
    if not allow_empty and not text.strip():
        raise HeadscopeError(f"{what} {path}: expected some text, got an empty file")
    return text


def read_text_file(path: str | os.PathLike, what: str = "corpus file", *, allow_empty: bool = True,
                   limit: int | None = None) -> str:
    """The UTF-8 text of one file the user named, as `what` (e.g. "calibration text").

    Every user-given text is read here, under the input rule (:func:`read_input_bytes`):
    a missing file, a directory, FIFO, socket or device, a file over the size limit, a
    binary file (NUL bytes), invalid UTF-8 (byte and offset named) and, unless
    `allow_empty`, a whitespace-only file are a :class:`HeadscopeError`.
    """
    return decode_text(read_input_bytes(path, what, limit=limit), path, what, allow_empty=allow_empty)


def read_capped(path: str | os.PathLike, what: str = "input file", limit: int | None = None) -> bytes:
    """The one capped reader: every file headscope reads itself goes through here.

    The cap is `limit` bytes, by default :func:`max_input_bytes` (64 MiB, ``--max-input-mb``):
    a larger file (a 4 GiB sparse ``index.json`` included) is refused from its size
    before a byte is read, so memory never grows past the cap. Also the rest of the
    input rule (:func:`read_input_bytes`): regular files only, never a blocking open.
    """
    return read_input_bytes(path, what, limit=limit)


#: the size limit of a checkpoint's own small files (config.json, the shard index, tokenizer files), which
#: --max-input-mb (for the user's texts) does not change: GPT-2's largest, tokenizer.json, is 1.4 MB
CHECKPOINT_FILE_LIMIT = 64 * 2**20


def read_json_file(path: str | os.PathLike, what: str, *, hint: str = "", object_pairs_hook=None,
                   limit: int | None = None):
    """The JSON value in the file `path` (`what`, e.g. "calibration file"), read by :func:`read_capped`.

    One-line errors: not UTF-8, not JSON (`hint` appended), nesting deeper than Python's
    recursion limit, an integer longer than Python converts (``sys.get_int_max_str_digits``).
    """
    import json
    import sys

    text = decode_text(read_capped(path, what, limit), path, what)
    try:
        return json.loads(text, object_pairs_hook=object_pairs_hook)
    except json.JSONDecodeError as e:
        raise HeadscopeError(f"{what} {path} is not valid JSON ({e.msg}, line {e.lineno}){hint}") from None
    except RecursionError:
        raise HeadscopeError(f"{what} {path}: JSON nested too deeply (more than "
                             f"{sys.getrecursionlimit()} levels){hint}") from None
    except ValueError as e:           # an integer of thousands of digits
        raise HeadscopeError(f"{what} {path} holds a number headscope does not read "
                             f"({str(e).splitlines()[0]}){hint}") from None
