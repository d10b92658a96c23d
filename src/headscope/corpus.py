"""Text corpora for analyses that need real text: reading files, windowing to n_ctx.

A corpus is a list of ``(name, text)`` pairs read from files or directories (every
regular, non-hidden file below a directory, in sorted order). Files must be UTF-8
text: a NUL byte means binary and is refused, as is invalid UTF-8, with the file and
byte offset named. Whitespace-only files are skipped; a corpus with no text at all is
an error.

Windows: each text is tokenised on its own (no BOS inside texts), cut into chunks of
``n_ctx − 1`` tokens, and every chunk becomes one window ``[BOS] + chunk`` of at most
``n_ctx`` tokens, so position 0 of every window is BOS, as in the seed.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterable, Sequence

import torch

from ._errors import HeadscopeError

def read_text_file(path: str | os.PathLike, what: str = "corpus file", *, allow_empty: bool = True) -> str:
    """The UTF-8 text of one file the user named, as `what` (e.g. "calibration text").

    Every user-given text is read here: a missing file, a binary file (NUL bytes),
    invalid UTF-8 (byte and offset named) and, unless `allow_empty`, a whitespace-only
    file are a :class:`HeadscopeError`.
    """
    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise HeadscopeError(f"{what} not found: {path}") from None
    except OSError as e:
        raise HeadscopeError(f"cannot read {what} {path}: {e.strerror}") from None
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


def _files(path: Path) -> list[Path]:
    if path.is_dir():
        return sorted(p for p in path.rglob("*")
                      if p.is_file() and not any(part.startswith(".") for part in p.relative_to(path).parts))
    if path.exists():
        return [path]
    raise HeadscopeError(f"corpus path not found: {path}")


def read_corpus(paths: str | os.PathLike | Sequence[str | os.PathLike]) -> list[tuple[str, str]]:
    """``[(name, text)]`` for every file under `paths` (files or directories).

    Raises HeadscopeError for a missing path, a binary or non-UTF-8 file, or a corpus
    without any non-whitespace text.
    """
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    out = []
    for p in paths:
        for f in _files(Path(p)):
            text = read_text_file(f)
            if text.strip():
                out.append((str(f), text))
    if not out:
        shown = ", ".join(str(p) for p in paths) or "(no paths)"
        raise HeadscopeError(f"empty corpus: no text found in {shown}")
    return out


def windows(
    model,
    texts: Iterable[tuple[str, str] | str],
    n_ctx: int | None = None,
    max_windows: int | None = None,
) -> list[torch.Tensor]:
    """Token windows ``[BOS] + tokens`` (1-D int64 tensors of length ≤ n_ctx).

    `texts` holds strings or ``(name, text)`` pairs (as :func:`read_corpus` returns);
    `n_ctx` defaults to the model's; `max_windows` keeps the first windows only.
    """
    n_ctx = model.cfg.n_ctx if n_ctx is None else n_ctx
    if not 2 <= n_ctx <= model.cfg.n_ctx:
        raise HeadscopeError(f"window length: expected 2..{model.cfg.n_ctx}, got {n_ctx}")
    if max_windows is not None and max_windows < 1:
        raise HeadscopeError(f"max_windows: expected ≥ 1, got {max_windows}")
    out: list[torch.Tensor] = []
    for item in texts:
        text = item[1] if isinstance(item, tuple) else item
        ids = model.tokenizer.encode(text)
        for start in range(0, len(ids), n_ctx - 1):
            chunk = ids[start:start + n_ctx - 1]
            out.append(torch.tensor([model.bos_id] + chunk, dtype=torch.long))    # [≤ n_ctx]
            if max_windows is not None and len(out) >= max_windows:
                return out
    if not out:
        raise HeadscopeError("empty corpus: the texts contain no tokens")
    return out
