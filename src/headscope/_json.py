"""Deterministic JSON: sorted keys, floats rounded to 7 significant digits, no NaN."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import torch

SIG_DIGITS = 7


def _clean(x):
    if isinstance(x, bool) or x is None or isinstance(x, str):
        return x
    if isinstance(x, (int, np.integer)):
        return int(x)
    if isinstance(x, (float, np.floating)):
        x = float(x)
        if not math.isfinite(x):
            return None
        return float(f"{x:.{SIG_DIGITS}g}")
    if isinstance(x, torch.Tensor):
        return _clean(x.detach().cpu().tolist())
    if isinstance(x, np.ndarray):
        return _clean(x.tolist())
    if isinstance(x, dict):
        return {str(k): _clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_clean(v) for v in x]
    if dataclasses.is_dataclass(x):
        return _clean(x.to_dict() if hasattr(x, "to_dict") else dataclasses.asdict(x))
    if hasattr(x, "to_dict"):
        return _clean(x.to_dict())
    raise TypeError(f"not JSON-serialisable: {type(x).__name__}")


def clean(obj):
    """The JSON-ready form of `obj` (what :func:`dumps` writes)."""
    return _clean(obj)


def dumps(obj) -> str:
    return json.dumps(_clean(obj), sort_keys=True, indent=2, ensure_ascii=False, allow_nan=False) + "\n"
