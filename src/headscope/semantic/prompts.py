"""Category prompts (seed 002): the category word lists, their tokens and the seeded prompts that
the survey, one head's analysis, steering, the atlas and reproduce all read.

Category prompts are ``BOS w_1 … w_n`` with every w_i a single GPT-2 token with a
leading space drawn from a few categories (with replacement, so copies occur); each
position is labelled with its category's index (−1 at BOS). Categories that overlap in
meaning (days and months, colours and metals: " silver" is a colour too) are declared in
the categories file under ``"_related"`` (pairs of names); the prompts carry them as pairs
of labels (:attr:`CategoryPrompts.related`), which the survey's target mask allows
(:func:`headscope.semantic.survey.target_masks`).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import torch
from jaxtyping import Int

from .. import shipped
from .._errors import HeadscopeError, NotApplicable
from .._input import read_json_file
from ..core.model import Model
from ..core.tokenizer import unknown_id, word_ids

Tensor = torch.Tensor


# -- categories --------------------------------------------------------------------------


RELATED = "_related"   #: reserved key of a categories file: pairs of semantically overlapping categories


def _read_categories(path: str | Path | None) -> dict:
    if path is None:
        return shipped.categories()
    data = read_json_file(path, "categories file")
    if not isinstance(data, dict) or not all(
        isinstance(v, list) and all(isinstance(w, str) for w in v) for k, v in data.items() if k != RELATED
    ):
        raise HeadscopeError(f"categories file {path}: expected an object of name → list of words")
    return data


def load_categories(path: str | Path | None = None) -> dict[str, list[str]]:
    """Category word lists: ``{"colours": ["red", …], …}`` from a JSON file or the shipped one
    (without the reserved ``"_related"`` entry: see :func:`load_relations`)."""
    data = _read_categories(path)
    return {str(k): list(v) for k, v in data.items() if k != RELATED}


def _relations(data: dict, source) -> list[tuple[str, str]]:
    pairs = data.get(RELATED, [])
    names = {k for k in data if k != RELATED}
    ok = isinstance(pairs, list) and all(isinstance(p, list) and len(p) == 2 and all(isinstance(x, str) for x in p)
                                         for p in pairs)
    if not ok:
        raise HeadscopeError(f"categories file {source}: \"{RELATED}\" must be a list of [name, name] pairs, "
                             f"got {pairs!r}")
    bad = sorted({x for p in pairs for x in p} - names)
    if bad:
        raise HeadscopeError(f"categories file {source}: \"{RELATED}\" names unknown categories {bad}")
    return [(a, b) for a, b in pairs]


def load_relations(path: str | Path | dict | None = None) -> list[tuple[str, str]]:
    """The ``"_related"`` pairs of a categories file (or dict), [] when there are none."""
    data = path if isinstance(path, dict) else _read_categories(path)
    return _relations(data, "(given)" if isinstance(path, dict) else (path or "headscope:categories.json"))


def category_tokens(tokenizer, categories: dict[str, list[str]]) -> dict[str, list[int]]:
    """Token ids of the words that are single tokens after a space (:func:`~headscope.core.tokenizer.word_ids`).

    Words are given with or without their leading space. Other words are dropped;
    categories left with fewer than 2 words, or tokens in two categories, are refused.
    """
    out: dict[str, list[int]] = {}
    seen: dict[int, str] = {}
    unk = unknown_id(tokenizer)
    unknown: list[str] = []                      # words the tokenizer reads as its unknown token
    longer: list[tuple[str, int]] = []           # words of more than one token
    for name, words in categories.items():
        if name == RELATED:
            continue
        ids = []
        for w in words:
            enc = word_ids(tokenizer, w)
            if unk is not None and unk in enc:
                unknown.append(w.strip())
            elif len(enc) != 1:
                longer.append((w.strip(), len(enc)))
            elif enc[0] not in ids:
                if enc[0] in seen:
                    raise HeadscopeError(f"categories: token {w!r} is in both {seen[enc[0]]!r} and {name!r}")
                seen[enc[0]] = name
                ids.append(enc[0])
        if len(ids) >= 2:
            out[name] = ids
    if len(out) < 2:
        from .._errors import NotApplicable

        n_words = sum(len(v) for v in out.values())
        total = sum(len(w) for k, w in categories.items() if k != RELATED)
        why = []
        if unknown:
            why.append(f"{len(unknown)} not in the vocabulary (read as its unknown token "
                       f"{tokenizer.convert_ids_to_tokens(unk)!r}: {_some(unknown)})")
        if longer:
            why.append(f"{len(longer)} of more than one token ({_some([f'{w} → {k}' for w, k in longer])})")
        raise NotApplicable(f"categories: expected at least 2 categories with ≥ 2 words that are single tokens in "
                            f"this tokenizer's vocabulary ({len(tokenizer)} tokens), got {len(out)} ({n_words} "
                            f"single-token words of {total}" + (f"; {'; '.join(why)}" if why else "") + ")")
    return out


def _some(items: list[str], k: int = 3) -> str:
    """The first `k` of `items` quoted, '…' after them when there are more."""
    return ", ".join(repr(x) if "→" not in x else x for x in items[:k]) + (", …" if len(items) > k else "")


# -- prompts ----------------------------------------------------------------------


@dataclasses.dataclass
class CategoryPrompts:
    tokens: Int[Tensor, "batch pos"]      # BOS first
    labels: Int[Tensor, "batch pos"]      # category index, -1 at BOS
    names: list[str]
    related: list[tuple[int, int]] = dataclasses.field(default_factory=list)   # label pairs that overlap
    #: category → [words that are one token in this vocabulary (used), words given]
    counts: dict[str, list[int]] = dataclasses.field(default_factory=dict)


def make_prompts(cat_ids: dict[str, list[int]], bos: int, *, n_prompts: int = 64, length: int = 16,
                 cats_per_prompt: int = 5, seed: int = 0) -> CategoryPrompts:
    """Seeded category prompts: each draws `cats_per_prompt` categories, then words from them."""
    rng = np.random.default_rng(seed)
    names = list(cat_ids)
    k = min(cats_per_prompt, len(names))
    toks = np.empty((n_prompts, length + 1), dtype=np.int64)
    labs = np.full((n_prompts, length + 1), -1, dtype=np.int64)
    toks[:, 0] = bos
    for b in range(n_prompts):
        chosen = rng.choice(len(names), size=k, replace=False)
        for p in range(1, length + 1):
            c = int(chosen[rng.integers(k)])
            members = cat_ids[names[c]]
            toks[b, p] = members[rng.integers(len(members))]
            labs[b, p] = c
    return CategoryPrompts(torch.from_numpy(toks), torch.from_numpy(labs), names)


def prompts_for(model: Model, categories=None, *, n_prompts=64, length=16, seed=0, cats_per_prompt: int | None = 5):
    """(CategoryPrompts, {category: token ids}); ``categories``: a dict, a file, ``"seed"`` or None
    (shipped). ``cats_per_prompt=None``: every category in every prompt."""
    if categories == "seed":
        categories = shipped.seed_categories()
    data = categories if isinstance(categories, dict) else _read_categories(categories)
    cats = {k: v for k, v in data.items() if k != RELATED}
    rel_names = load_relations(data)
    ids = category_tokens(model.tokenizer, cats)
    if length + 1 > model.cfg.n_ctx:
        raise NotApplicable(f"prompt length {length} + BOS exceeds n_ctx {model.cfg.n_ctx}")
    k = len(ids) if cats_per_prompt is None else cats_per_prompt
    prompts = make_prompts(ids, model.bos_id, n_prompts=n_prompts, length=length, seed=seed, cats_per_prompt=k)
    index = {name: i for i, name in enumerate(prompts.names)}
    prompts.related = [(index[a], index[b]) for a, b in rel_names if a in index and b in index]
    prompts.counts = {name: [len(ids.get(name, [])), len(words)] for name, words in sorted(cats.items())}
    return prompts, ids
