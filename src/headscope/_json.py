"""Deterministic JSON: sorted keys, floats rounded to 7 significant digits, never NaN or inf.

Policy for numbers that are not numbers
---------------------------------------
Every number headscope writes is finite. A NaN or ±inf reaching :func:`dumps` (or
:func:`clean`) is a bug in the analysis that produced it, not something to paper over:
it raises :class:`NonFiniteError`, naming where in the object it sits
(``heads[3].tv_median``). Nothing is written silently as ``null``.

When a quantity is undefined on its input, the analysis says so explicitly:

- a scalar or list entry that is undefined (the correlation of a constant vector, the
  attention a query pays to BOS at BOS itself) is ``None`` → ``null``, and only in
  fields documented as nullable (``float | None``); each report stage lists those
  fields in ``Stage.nullable``;
- a whole analysis that does not apply to a model (no contextual heads, a vocabulary
  without two categories of single-token words) raises
  :class:`headscope.NotApplicable`; a report stage then saves
  :func:`not_applicable` ``{"not_applicable": "<reason>"}`` as its data and renders
  the reason.

:func:`assert_finite_json` is the check the tests use: the object serialises with
``allow_nan=False`` and every ``null`` sits at a path the caller declared nullable.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import re
from typing import Iterable

import numpy as np
import torch

SIG_DIGITS = 7
NOT_APPLICABLE = "not_applicable"


class NonFiniteError(ValueError):
    """A NaN or ±inf where headscope promises a number (a bug in the analysis that made it)."""


def _where(path) -> str:
    """The path :func:`_clean` reports (``heads[3].tv_median``), from its lazy form: a str (the root),
    or (parent, key) for a dict's value and (parent, [index]) for a list's item, nested."""
    steps = []
    while type(path) is tuple:
        path, step = path
        steps.append(step)
    for step in reversed(steps):
        path = f"{path}[{step[0]}]" if type(step) is list else f"{path}.{step}" if path else str(step)
    return path


def _text(x: str) -> str:
    """A string as JSON holds it: a lone surrogate (an undecodable file name) spelled out, so that the
    JSON stays UTF-8."""
    return x if x.isascii() else x.encode("utf-8", "backslashreplace").decode("utf-8")


def _clean(x, path):
    """`x` JSON-ready; `path` says where it sits (see :func:`_where`; spelled out only in an error)."""
    if isinstance(x, str):
        return _text(x)
    if isinstance(x, bool) or x is None:
        return x
    if isinstance(x, (int, np.integer)):
        return int(x)
    if isinstance(x, (float, np.floating)):
        x = float(x)
        if not math.isfinite(x):
            raise NonFiniteError(f"{x} at {_where(path) or 'the top level'}: every number written must be finite "
                                 "(an undefined quantity is None in a nullable field, see headscope._json)")
        return float(f"{x:.{SIG_DIGITS}g}")
    if isinstance(x, torch.Tensor):
        return _clean(x.detach().cpu().tolist(), path)
    if isinstance(x, np.ndarray):
        return _clean(x.tolist(), path)
    if isinstance(x, dict):
        return {str(k): _text(v) if type(v) is str else _clean(v, (path, k)) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        kinds = set(map(type, x))
        if kinds == {float} and all(map(math.isfinite, x)):     # fast paths: flat lists of numbers
            return [float(f"{v:.{SIG_DIGITS}g}") for v in x]
        if kinds == {int}:
            return list(x)
        if kinds == {str}:
            return list(map(_text, x))
        return [_clean(v, (path, [i])) for i, v in enumerate(x)]
    if dataclasses.is_dataclass(x):
        return _clean(x.to_dict() if hasattr(x, "to_dict") else dataclasses.asdict(x), path)
    if hasattr(x, "to_dict"):
        return _clean(x.to_dict(), path)
    raise TypeError(f"not JSON-serialisable: {type(x).__name__} at {_where(path) or 'the top level'}")


def clean(obj):
    """The JSON-ready form of `obj` (what :func:`dumps` writes); NaN/inf raise :class:`NonFiniteError`."""
    return _clean(obj, "")


def dumps(obj) -> str:
    """``json.dumps(clean(obj), sort_keys=True, indent=2, ensure_ascii=False, allow_nan=False)`` and a newline."""
    return encode(obj) + "\n"


class Encoded:
    """JSON text already written by :func:`encode` (at the level where it is placed), inserted
    as it is: a stage's data is encoded once, parsed back for the later stages, and put in its
    document without a second encoding."""

    __slots__ = ("text",)

    def __init__(self, text: str):
        self.text = text


class _Slow(Exception):
    """The fast encoder met something only the slow path handles (or reports) exactly."""


_INDENT = "  "
_str = json.encoder.encode_basestring      # json.dumps's own string encoder under ensure_ascii=False
_float = float.__repr__                    # json.dumps writes a finite float as float.__repr__
_int = int.__repr__
_round = f"%.{SIG_DIGITS}g".__mod__        # f"{x:.{SIG_DIGITS}g}" of a float, without building the spec


_WHOLE = re.compile(r"^-?[0-9]+$", re.MULTILINE).search     # a line without "." or "e": an integral figure


def _reprs(rounded: list[str]) -> list[str]:
    """``[repr(float(s)) for s in rounded]`` where ``rounded[i] = "%.7g" % x``: how json.dumps writes the
    rounded floats.

    A decimal of at most 15 significant digits is the only one of at most 15 digits that reads as its
    double (a normal double holds 15.95 digits), so repr (the shortest string that reads back) has
    the digits "%.7g" wrote. The two spell them alike where both are positional — |v| in
    [1e-4, 1e7), where "%.7g" drops the ".0" of a whole number — and where both use a negative
    exponent (e-05 and below). A list with an exponent from e+07 up (positional in repr until 1e16) or
    of the form e-3… (which takes in e-300 and below, where subnormals hold fewer digits) is repr'd."""
    text = "\n".join(rounded)
    if "e+" in text or "e-3" in text:
        return list(map(_float, map(float, rounded)))
    if _WHOLE(text) is None:
        return rounded
    return [s if "." in s or "e" in s else s + ".0" for s in rounded]


def _fast(x, ind: str) -> str:
    """`x` as :func:`dumps` writes it (without the final newline) where it starts a line after `ind`."""
    t = type(x)
    if t is str:
        return _str(_text(x))
    if t is float:
        if not math.isfinite(x):
            raise _Slow
        s = _round(x)
        return (s if "." in s else s + ".0") if "e" not in s else _float(float(s))   # repr: see _reprs
    if t is int:
        return _int(x)
    if x is None:
        return "null"
    if x is True:
        return "true"
    if x is False:
        return "false"
    if t is list or t is tuple:
        if not x:
            return "[]"
        inner = ind + _INDENT
        kinds = set(map(type, x))
        if kinds == {float}:
            if not all(map(math.isfinite, x)):
                raise _Slow
            parts = _reprs(list(map(_round, x)))
        elif kinds == {int}:
            parts = map(_int, x)
        else:
            parts = [_fast(v, inner) for v in x]
        return "[" + inner + ("," + inner).join(parts) + ind + "]"
    if t is dict and all(type(k) is str for k in x):
        if not x:
            return "{}"
        inner = ind + _INDENT
        return "{" + inner + ("," + inner).join(
            [_str(k) + ": " + _fast(v, inner) for k, v in sorted(x.items(), key=_first)]) + ind + "}"
    if t is Encoded:
        return x.text
    if isinstance(x, str):  # a subclass: json writes it as a string (clean keeps it as it is)
        return _fast(str.__str__(x), ind)
    try:
        x = _clean(x, "")   # numpy and torch numbers and arrays, dataclasses, dicts with other keys
    except (NonFiniteError, TypeError):
        raise _Slow from None
    return _fast(x, ind)


def _first(item):
    return item[0]


def encode(obj, level: int = 0) -> str:
    """`obj` as :func:`dumps` writes it without the final newline, indented to start at nesting
    `level` (its lines after the first are indented one level more than `level` levels).

    Byte for byte ``json.dumps(clean(obj), sort_keys=True, indent=2, ensure_ascii=False,
    allow_nan=False)`` (re-indented), in one pass and without json's per-item generators;
    anything it does not handle exactly (a NaN, an unknown type) goes through that slow path,
    which raises the documented error."""
    try:
        return _fast(obj, "\n" + _INDENT * level)
    except _Slow:
        text = json.dumps(clean(obj), sort_keys=True, indent=2, ensure_ascii=False, allow_nan=False)
        return text.replace("\n", "\n" + _INDENT * level) if level else text


_LEAVES = (float, int, str, bool, type(None))


def plain(obj):
    """``dataclasses.asdict(obj)`` without its deep copy of every number: dataclasses become dicts
    (fields in order, nested ones too), lists, tuples and dicts are rebuilt (nothing aliased),
    numbers, strings and None are kept as they are (immutable), anything else deep-copied as
    asdict does. A result of thousands of floats converts in a fraction of asdict's time."""
    t = type(obj)
    if t in _LEAVES:
        return obj
    if t is list or t is tuple:
        items = [v if type(v) in _LEAVES else plain(v) for v in obj]
        return items if t is list else tuple(items)
    if t is dict:
        return {k: v if type(v) in _LEAVES else plain(v) for k, v in obj.items()}
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: plain(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    return copy.deepcopy(obj)


# -- "not applicable" ---------------------------------------------------------------------


def not_applicable(reason: str) -> dict:
    """The data of an analysis that does not apply: ``{"not_applicable": reason}``."""
    return {NOT_APPLICABLE: str(reason)}


def is_not_applicable(data) -> bool:
    return isinstance(data, dict) and isinstance(data.get(NOT_APPLICABLE), str)


def finite_or_none(x) -> float | None:
    """float(x) if it is a finite number, else None (for fields documented as nullable)."""
    if x is None:
        return None
    x = float(x)
    return x if math.isfinite(x) else None


# -- the check the tests use ------------------------------------------------------------------


def _walk(x, path: str, nulls: list[str], bad: list[str]) -> None:
    if x is None:
        nulls.append(path)
    elif isinstance(x, bool) or isinstance(x, str):
        return
    elif isinstance(x, (int, float)):
        if not math.isfinite(x):
            bad.append(f"{path} = {x}")
    elif isinstance(x, dict):
        for k, v in x.items():
            _walk(v, f"{path}.{k}" if path else str(k), nulls, bad)
    elif isinstance(x, (list, tuple)):
        for i, v in enumerate(x):
            _walk(v, f"{path}[{i}]", nulls, bad)
    else:
        bad.append(f"{path}: not JSON ({type(x).__name__})")


def generic_path(path: str) -> str:
    """``heads[3].kernel[0]`` → ``heads[].kernel[]`` (the form :func:`assert_finite_json` matches)."""
    return re.sub(r"\[\d+\]", "[]", path)


def _pattern(p: str) -> re.Pattern:
    """A nullable-path pattern: literal except ``*``, which matches within one key."""
    return re.compile("[^.]*".join(re.escape(part) for part in p.split("*")))


def assert_finite_json(obj, nullable: Iterable[str] = (), what: str = "JSON") -> None:
    """Raise AssertionError unless `obj` (parsed JSON) holds only finite numbers and every
    ``null`` sits at a declared nullable path.

    `nullable` holds patterns over generic paths (list indices as ``[]``; ``*`` matches
    within one key): ``"neurons[].correlation"``, ``"neurons[].true[][]"``, ``"median_*"``. Data of an
    analysis that did not apply (:func:`not_applicable`) is accepted as it is.
    """
    if is_not_applicable(obj):
        return
    nulls: list[str] = []
    bad: list[str] = []
    _walk(obj, "", nulls, bad)
    pats = [_pattern(p) for p in nullable]
    stray = [p for p in nulls if not any(pat.fullmatch(generic_path(p)) for pat in pats)]
    msgs = []
    if bad:
        msgs.append(f"non-finite numbers: {', '.join(bad[:8])}{' …' if len(bad) > 8 else ''}")
    if stray:
        msgs.append(f"null where a number is promised: {', '.join(stray[:8])}{' …' if len(stray) > 8 else ''}")
    if msgs:
        raise AssertionError(f"{what}: " + "; ".join(msgs))
    json.dumps(obj, allow_nan=False)
