"""Text corpora for analyses that need real text: reading files, windowing to n_ctx.

A corpus is a list of ``(name, text)`` pairs read from files or directories (every
regular, non-hidden file below a directory, in sorted order). Files must be UTF-8
text: a NUL byte means binary and is refused, as is invalid UTF-8, with the file and
byte offset named. Whitespace-only files are skipped; a corpus with no text at all is
an error.

Every file is read under the input rule (:mod:`headscope._input`). A directory is walked for
regular files; links to directories are not followed, hidden files are skipped, and anything
else is refused.

Windows: each text is tokenised on its own (no BOS inside texts), cut into chunks of
``n_ctx − 1`` tokens, and every chunk becomes one window ``[BOS] + chunk`` of at most
``n_ctx`` tokens, so position 0 of every window is BOS, as in the seed.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable, Iterable, Iterator, Sequence

import torch

from ._errors import HeadscopeError
from ._input import amount, decode_text, max_input_bytes, read_input_bytes

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
                                     f"{amount(limit)} in all (raise the limit with --max-input-mb)")
            text = decode_text(data, f, "corpus file")
            if text.strip():
                out.append((str(f), text))
    if not out:
        shown = ", ".join(str(p) for p in paths) or "(no paths)"
        raise HeadscopeError(f"empty corpus: no text found in {shown}")
    return out


#: the default window length for a model of long context: one window's attention patterns take
#: h × n² floats (n_ctx 131072: 64 GB per head-layer batch); GPT-2 (1024) and its peers are below it
DEFAULT_WINDOW = 2048


def default_window(model) -> int:
    """The window length :func:`windows` cuts texts into by default: n_ctx, at most :data:`DEFAULT_WINDOW`."""
    return min(model.cfg.n_ctx, DEFAULT_WINDOW)


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
    `n_ctx` defaults to the model's, at most :data:`DEFAULT_WINDOW`; `max_windows` keeps the first windows only;
    `stride` (default n_ctx − 1: disjoint windows) is the step between window starts,
    smaller for overlapping windows.
    """
    n_ctx = check_window(model, default_window(model) if n_ctx is None else n_ctx)
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


def token_array(model, text: str, progress: Callable[[int, int], None] | None = None) -> torch.Tensor:
    """The ids of `text` (no BOS), tokenised piece by piece (:func:`text_pieces`: the same ids as the whole
    text), as one int32 tensor: 4 bytes a token, about one byte a character of English text, never a
    Python list of the whole text. `progress(done, total)` is called with characters tokenised so far."""
    import array

    ids = array.array("i")
    done = 0
    for piece in text_pieces(text):
        ids.extend(model.tokenizer.encode(piece))
        done += len(piece)
        if progress is not None:
            progress(done, len(text))
    return torch.frombuffer(ids, dtype=torch.int32).clone() if len(ids) else torch.zeros(0, dtype=torch.int32)


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
