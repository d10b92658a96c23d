"""Arguments shared by subcommands: loading a model from flags, parsing numbers and heads, printing results."""

from __future__ import annotations

import math
import sys

import torch

from .._errors import HeadscopeError
from .._json import dumps
from ..core.entry import load
from ..core.loading import Model

DTYPES = {"float32": torch.float32, "float64": torch.float64, "bfloat16": torch.bfloat16, "float16": torch.float16}


def load_model(args) -> Model:
    """Load ``args.model`` with ``--device``, ``--dtype`` and ``--revision``."""
    return load(args.model, device=args.device, dtype=DTYPES[args.dtype], revision=getattr(args, "revision", None))


def emit(args, result, text: str | None = None) -> None:
    """Print ``result.to_dict()`` as JSON with ``--json``, else the human text."""
    if args.json:
        sys.stdout.write(dumps(result.to_dict() if hasattr(result, "to_dict") else result))
    else:
        sys.stdout.write((text if text is not None else str(result)).rstrip("\n") + "\n")


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
    if len(parts) != 2 or not all(p.isdigit() for p in parts):
        raise HeadscopeError(f"head must be written LAYER.HEAD (e.g. 1.5), got {spec!r}")
    return cfg.check_head(int(parts[0]), int(parts[1]))
