"""The claims table's process memo: a :class:`~headscope.claims.work.Work` measurement computed
once per process for the same model and the same parts of the reference (:func:`shared`), so a
table against another reference (a tampered or absent manifest, ``--heads``, ``--find``'s search
and then its table) reuses every measurement that does not depend on what changed."""

from __future__ import annotations

import collections
import functools
import hashlib
import json
from pathlib import Path

from .._errors import HeadscopeError
from ..core.model import Model

#: the models whose measurements the process keeps (most recent last): model key → {key: value}
_MEMO: collections.OrderedDict = collections.OrderedDict()
MEMO_MODELS = 2
#: files beside the weights that a measurement reads (config and tokenizer); the fingerprint covers the weights
_INPUT_FILES = ("config.json", "tokenizer.json", "vocab.json", "merges.txt")
_NO_MEMO = object()
_INPUTS = ("model", "ref", "head", "heads_spec", "variant")     #: what a Work is made of (Work.__init__)


def clear_memo() -> None:
    """Forget every measurement kept by :func:`shared`."""
    _MEMO.clear()


def _model_key(model: Model):
    """What every measurement of `model` reads: the weight files' fingerprint, the config and
    tokenizer files, the processing, dtype and device. None (nothing is kept) for a model whose
    weights are not its files' (Model.with_weights: a null draw, an edit) or held in memory."""
    if model.edited or model.directory is None:
        return None
    try:
        fingerprint = model.fingerprint
    except HeadscopeError:
        return None
    h = hashlib.sha256()
    for name in _INPUT_FILES:
        f = Path(model.directory) / name
        h.update(name.encode() + (f.read_bytes() if f.is_file() else b"\0absent"))
    return fingerprint, h.hexdigest(), model.resolved_processing(), str(model.dtype), str(model.device)


#: what a measurement may depend on besides the model: a hashable value of the Work each
_DEPS = {
    "head": lambda w: tuple(w.head),
    "heads": lambda w: None if w.heads is None else tuple(w.heads),
    "variant": lambda w: w.variant if w.variant.glitch in ("keep", "exclude") else _NO_MEMO,   # a file: not kept
    "categories": lambda w: json.dumps(w.ref.survey_categories, sort_keys=True),
    "threshold": lambda w: getattr(w.ref.found, "neuron_threshold", None),
    "published": lambda w: tuple(w.ref.contextual_heads),
}


def _memo(w, name, deps: tuple[str, ...], compute):
    """``compute()``, kept for the process under (model key, `name`, the values of `deps`)."""
    mkey = None if w.__dict__.get("_memo_off") else w._memo_model
    dep = tuple(_DEPS[d](w) for d in deps)
    if mkey is None or _NO_MEMO in dep:
        return compute()
    store = _MEMO.get(mkey)
    if store is None:
        store = _MEMO[mkey] = {}
        while len(_MEMO) > MEMO_MODELS:
            _MEMO.popitem(last=False)
    _MEMO.move_to_end(mkey)
    key = (name, dep)
    if key not in store:
        store[key] = compute()
    return store[key]


def shared(*deps: str):
    """A :class:`Work` measurement computed once per process for the same model (:func:`_model_key`)
    and the same `deps` (names of :data:`_DEPS`: the parts of the reference or options it reads);
    a property cached on the Work as ``functools.cached_property``. Callers must not modify it."""
    def wrap(fn):
        @functools.wraps(fn)
        def get(self):
            return _memo(self, fn.__name__, deps, lambda: fn(self))
        return functools.cached_property(get)
    return wrap


def shared_method(*deps: str):
    """:func:`shared` for a method of hashable arguments (kept per arguments, on the Work as well)."""
    def wrap(fn):
        @functools.wraps(fn)
        def get(self, *args):
            calls = self.__dict__.setdefault("_calls", {})
            key = (fn.__name__, args)
            if key not in calls:
                calls[key] = _memo(self, key, deps, lambda: fn(self, *args))
            return calls[key]
        return get
    return wrap
