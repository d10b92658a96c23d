"""Text corpora for analyses that need real text: reading files, windowing to n_ctx.

A corpus is a list of ``(name, text)`` pairs read from files or directories (every
regular, non-hidden file below a directory, in sorted order). Files must be UTF-8
text: a NUL byte means binary and is refused, as is invalid UTF-8, with the file and
byte offset named. Whitespace-only files are skipped; a corpus with no text at all is
an error.

The input rule (every file a user names is read by :func:`read_input_bytes`): only
regular files are read (a link to one is fine); a FIFO, socket or device is refused
without being opened for a blocking read, so ``/dev/zero`` or a FIFO without a writer
cannot hang headscope. A file, and a whole corpus, may hold at most
:func:`max_input_bytes` (64 MiB unless raised with ``--max-input-mb`` or
:func:`input_limit`). A directory is walked for regular files; links to directories
are not followed, hidden files are skipped, and anything else is refused.

Windows: each text is tokenised on its own (no BOS inside texts), cut into chunks of
``n_ctx − 1`` tokens, and every chunk becomes one window ``[BOS] + chunk`` of at most
``n_ctx`` tokens, so position 0 of every window is BOS, as in the seed.
"""

from __future__ import annotations

import contextlib
import contextvars
import math
import os
import stat
from pathlib import Path
from typing import Callable, Iterable, Iterator, Sequence

import torch

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


def _amount(n: int) -> str:
    return f"{n / 2**20:.1f} MiB" if n >= 2**20 else f"{n} bytes"


def _too_large(what: str, path, size: int | None, limit: int, fixed: bool = False) -> HeadscopeError:
    got = _amount(size) if size is not None else "more than that"
    hint = "a fixed limit" if fixed else "raise the limit with --max-input-mb"
    return HeadscopeError(f"{what} {path} is over the input size limit: expected at most "
                          f"{_amount(limit)}, got {got} ({hint})")


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


def _files(path: Path) -> list[Path]:
    """The corpus files under `path`: itself if not a directory, else its non-hidden files, sorted."""
    if not os.path.lexists(path):
        raise HeadscopeError(f"corpus path not found: {path}")
    if not path.is_dir():
        return [path]                        # read_input_bytes refuses anything but a regular file
    out = []
    for dirpath, dirnames, filenames in os.walk(path):   # links to directories are not followed
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for name in sorted(filenames):
            if name.startswith("."):
                continue
            f = Path(dirpath) / name
            if f.is_dir():                   # a link to a directory
                continue
            out.append(f)
    return sorted(out)


def read_corpus(paths: str | os.PathLike | Sequence[str | os.PathLike], *,
                limit: int | None = None) -> list[tuple[str, str]]:
    """``[(name, text)]`` for every file under `paths` (files or directories).

    Raises HeadscopeError for a missing path, a file that is not a regular file, a
    binary or non-UTF-8 file, a file or a whole corpus over the size limit (`limit`
    bytes, default :func:`max_input_bytes`), or a corpus without any non-whitespace text.
    """
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    limit = max_input_bytes() if limit is None else limit
    out, total = [], 0
    for p in paths:
        for f in _files(Path(p)):
            data = read_input_bytes(f, "corpus file", limit=limit)
            total += len(data)
            if total > limit:
                shown = ", ".join(str(p) for p in paths)
                raise HeadscopeError(f"corpus {shown} is over the input size limit: expected at most "
                                     f"{_amount(limit)} in all (raise the limit with --max-input-mb)")
            text = decode_text(data, f, "corpus file")
            if text.strip():
                out.append((str(f), text))
    if not out:
        shown = ", ".join(str(p) for p in paths) or "(no paths)"
        raise HeadscopeError(f"empty corpus: no text found in {shown}")
    return out


def check_window(model, n_ctx: int) -> int:
    """`n_ctx`, a window length in 2..the model's n_ctx; refused otherwise."""
    if not 2 <= n_ctx <= model.cfg.n_ctx:
        raise HeadscopeError(f"window length: expected 2..{model.cfg.n_ctx}, got {n_ctx}")
    return n_ctx


def windows(
    model,
    texts: Iterable[tuple[str, str] | str],
    n_ctx: int | None = None,
    max_windows: int | None = None,
    stride: int | None = None,
) -> list[torch.Tensor]:
    """Token windows ``[BOS] + tokens`` (1-D int64 tensors of length ≤ n_ctx).

    `texts` holds strings or ``(name, text)`` pairs (as :func:`read_corpus` returns);
    `n_ctx` defaults to the model's; `max_windows` keeps the first windows only;
    `stride` (default n_ctx − 1: disjoint windows) is the step between window starts,
    smaller for overlapping windows.
    """
    n_ctx = check_window(model, model.cfg.n_ctx if n_ctx is None else n_ctx)
    if max_windows is not None and max_windows < 1:
        raise HeadscopeError(f"max_windows: expected ≥ 1, got {max_windows}")
    stride = n_ctx - 1 if stride is None else int(stride)
    if stride < 1:
        raise HeadscopeError(f"window stride: expected ≥ 1, got {stride}")
    out: list[torch.Tensor] = []
    for item in texts:
        text = item[1] if isinstance(item, tuple) else item
        for win in iter_windows(model, text, n_ctx, stride=stride):
            out.append(win)
            if max_windows is not None and len(out) >= max_windows:
                return out
    if not out:
        raise HeadscopeError("empty corpus: the texts contain no tokens")
    return out


#: texts are tokenised in pieces of about this many characters (memory independent of the text's length)
PIECE_CHARS = 1 << 18


def text_pieces(text: str, size: int | None = None) -> Iterator[str]:
    """`text` in consecutive pieces of at most about `size` characters (default :data:`PIECE_CHARS`).

    Each cut is just before a space that follows a non-space character, where GPT-2's
    pre-tokenizer always splits (no pre-token spans it), so the pieces encoded one by one
    give exactly the ids of the whole text. A stretch of `size` characters without such a
    space is extended to the next one: a piece is never longer than `size` plus the
    longest run of text without a word boundary.
    """
    size = PIECE_CHARS if size is None else size

    def safe(i: int) -> bool:
        return text[i] == " " and not text[i - 1].isspace()

    start, n = 0, len(text)
    while n - start > size:
        cut = text.rfind(" ", start + 1, start + size)
        while cut > start and not safe(cut):
            cut = text.rfind(" ", start + 1, cut)
        if cut <= start:                            # no boundary within `size`: the next one after it
            cut = text.find(" ", start + size)
            while cut != -1 and not safe(cut):
                cut = text.find(" ", cut + 1)
            if cut == -1:
                break
        yield text[start:cut]
        start = cut
    yield text[start:]


def iter_windows(model, text: str, n_ctx: int, progress: Callable[[int, int], None] | None = None,
                 stride: int | None = None) -> Iterator[torch.Tensor]:
    """The windows ``[BOS] + chunk`` of one text, as :func:`windows` cuts them, streamed: the text is
    tokenised piece by piece (:func:`text_pieces`), so memory does not grow with its length.
    A window starts every `stride` tokens (default n_ctx − 1: disjoint windows); the last
    windows, shorter than n_ctx, start every `stride` tokens too.
    `progress(done, total)` is called with characters tokenised so far after each piece."""
    step = n_ctx - 1 if stride is None else int(stride)
    if step < 1:
        raise HeadscopeError(f"window stride: expected ≥ 1, got {step}")
    ids: list[int] = []
    done = 0
    for piece in text_pieces(text):
        ids += model.tokenizer.encode(piece)
        done += len(piece)
        while len(ids) >= n_ctx - 1:
            yield torch.tensor([model.bos_id] + ids[:n_ctx - 1], dtype=torch.long)      # [n_ctx]
            del ids[:step]
        if progress is not None:
            progress(done, len(text))
    while ids:
        yield torch.tensor([model.bos_id] + ids[:n_ctx - 1], dtype=torch.long)          # [≤ n_ctx]
        del ids[:step]
