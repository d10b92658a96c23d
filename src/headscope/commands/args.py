"""Arguments shared by subcommands: loading a model from flags, parsing numbers and heads, printing results."""

from __future__ import annotations

import argparse

import math
import os
import sys

import torch

from .._errors import HeadscopeError
from .._json import dumps
from ..core.loading import check_dtype, load_checkpoint
from ..core.model import Model

DTYPES = {"float32": torch.float32, "float64": torch.float64, "bfloat16": torch.bfloat16, "float16": torch.float16}


def int_at_least(low: int, what: str = "an integer"):
    """An argparse type: an integer ≥ `low`, so a bad value is refused before the model loads."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what} ≥ {low}, got {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"expected {what} ≥ {low}, got {value}")
        return value
    parse.__name__ = "integer"
    return parse


def load_model(args, check=None) -> Model:
    """Load ``args.model`` with ``--device``, ``--dtype`` and ``--revision``.

    `check(cfg)` checks the command's index arguments (layers, heads, neurons, positions) against
    config.json's sizes before any weight is read: a bad index is refused in a moment, not after
    the weights' load and finiteness check. The weight files' hash, which every command's output
    names, starts in the background at once (:meth:`Checkpoint.prefetch_fingerprint`)."""
    check_dtype(DTYPES[args.dtype])
    return load_checkpoint(args.model, device=args.device, dtype=DTYPES[args.dtype],
                           revision=getattr(args, "revision", None), check_config=check, prefetch_fingerprint=True)


def emit(args, result, text: str | None = None) -> None:
    """Print ``result.to_dict()`` as JSON with ``--json``, else the human text."""
    if args.json:
        write_stdout(dumps(result.to_dict() if hasattr(result, "to_dict") else result))
    else:
        write_stdout((text if text is not None else str(result)).rstrip("\n") + "\n")


def write_stdout(text: str) -> None:
    """Write and flush `text` on standard output; a closed, broken or full stdout is one line (exit 2).

    Text that is not UTF-8 (a file name with undecodable bytes, held as surrogate escapes)
    is written with those escapes spelled out (``\\udcff``), so the output is valid UTF-8.
    """
    if sys.stdout is None:
        raise HeadscopeError("standard output is closed, so the result cannot be printed; "
                             "redirect it (> FILE, or > /dev/null)")
    try:
        try:
            sys.stdout.write(text)
        except UnicodeEncodeError:
            sys.stdout.write(text.encode("utf-8", "backslashreplace").decode("utf-8"))
        sys.stdout.flush()
    except BrokenPipeError:
        _drop_stdout()
        raise HeadscopeError("standard output was closed by its reader (broken pipe) "
                             "before the result was written") from None
    except OSError as e:
        _drop_stdout()
        raise HeadscopeError(f"cannot write to standard output: {e.strerror}") from None


def _drop_stdout() -> None:
    """Point stdout at /dev/null, so the unwritten rest is not retried (with a traceback) at exit."""
    try:
        fd = os.open(os.devnull, os.O_WRONLY)
        os.dup2(fd, sys.stdout.fileno())
        os.close(fd)
    except (OSError, ValueError, AttributeError):   # not a real file (captured in tests)
        pass


def parse_float(value: str, what: str) -> float:
    try:
        x = float(value)
    except ValueError:
        raise HeadscopeError(f"{what} must be a number, got {value!r}") from None
    if not math.isfinite(x):
        raise HeadscopeError(f"{what} must be finite, got {value!r}")
    return x


def parse_head(spec: str, cfg) -> tuple[int, int]:
    """Parse ``L.H`` (e.g. ``1.5``) and check it exists in the model."""
    parts = str(spec).split(".")
    if len(parts) != 2 or not all(p.isascii() and p.isdigit() and len(p) <= 9 for p in parts):  # "1.²" is not
        raise HeadscopeError(f"head must be written LAYER.HEAD (e.g. 1.5), got {spec!r}")
    return cfg.check_head(int(parts[0]), int(parts[1]))
