"""Options of the seed-002 analyses as frozen values: one head's clustering
(:class:`ClusterOptions`), its whole analysis (:class:`HeadOptions`) and steering
(:class:`SteerOptions`).

A preset names a recipe (``headscope``, the default, or ``seed``, the L1H5 authors'); the
fields left ``None`` take the preset's value when the options are resolved
(:meth:`ClusterOptions.resolved`), and a field given explicitly wins. The CLI flags of
``headscope head`` and ``headscope steer`` build these values one to one.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from .._errors import HeadscopeError
from .bilinear import ATTN_MEANS

#: clustering presets (:mod:`headscope.semantic.head`'s docstring); explicit options override them
PRESETS = {
    "headscope": {"n_tokens": 5000, "k": 10, "frequency": "bpe", "graph": "headscope", "attn_mean": "prompts"},
    "seed": {"n_tokens": 3000, "k": 4, "frequency": "wordfreq", "graph": "authors", "attn_mean": "authors"},
}
FREQUENCIES = ("bpe", "wordfreq")
KEYS = ("vocab", "nodes", "auto")


@dataclasses.dataclass(frozen=True)
class ClusterOptions:
    """How a head's token graph is built and clustered (:func:`headscope.semantic.head.head_clusters`).

    ``n_tokens``, ``k``, ``frequency`` and ``attn_mean`` default (None) to the preset's values.
    ``keys``: neighbours ranked over the whole vocabulary (``"vocab"``), the graph's nodes
    (``"nodes"``) or chosen by cost (``"auto"``). ``categories``: a categories file or
    mapping (default: the shipped lists); ``corpus``: a text file for token frequencies
    (default: ``frequency``).
    """

    preset: str = "headscope"
    variant: str = "full"                      # effective embeddings: "full" or "mlp"
    n_tokens: int | None = None
    k: int | None = None
    frequency: str | None = None               # FREQUENCIES
    attn_mean: str | None = None               # bilinear.ATTN_MEANS
    keys: str = "vocab"                        # KEYS
    categories: str | Path | dict | None = None
    corpus: str | Path | None = None
    resolution: float = 1.0                    # Leiden resolution (headscope's graph)
    seed: int = 0                              # prompts and clustering
    with_spectral: bool = True

    @property
    def authors(self) -> bool:
        """Whether the preset's graph is the authors' (key → top-k queries, directed)."""
        return PRESETS[self.preset]["graph"] == "authors"

    def resolved(self):
        """These options with the preset's values in place of None, checked (HeadscopeError)."""
        if self.preset not in PRESETS:
            raise HeadscopeError(f"preset: expected one of {', '.join(PRESETS)}, got {self.preset!r}")
        pre = PRESETS[self.preset]
        out = dataclasses.replace(self, **{f: pre[f] for f in ("n_tokens", "k", "frequency", "attn_mean")
                                           if getattr(self, f) is None})
        if out.frequency not in FREQUENCIES:
            raise HeadscopeError(f"frequency: expected one of {', '.join(FREQUENCIES)}, got {out.frequency!r}")
        if out.attn_mean not in ATTN_MEANS:
            raise HeadscopeError(f"attention means: expected one of {', '.join(ATTN_MEANS)}, got {out.attn_mean!r}")
        if out.keys not in KEYS:
            raise HeadscopeError(f"keys: expected 'vocab', 'nodes' or 'auto', got {out.keys!r}")
        if out.k < 1:
            raise HeadscopeError(f"k: expected ≥ 1, got {out.k}")
        return out


@dataclasses.dataclass(frozen=True)
class HeadOptions(ClusterOptions):
    """:class:`ClusterOptions` plus what the whole analysis of a head adds
    (:func:`headscope.semantic.head.analyse_head`): ``n_examples`` example tokens (the first
    word of each category) whose neighbours and self scores are explained."""

    n_examples: int = 10


#: steering presets: the eigenvalues each one scales (``headscope steer --preset``)
STEER_PRESETS = {"headscope": {"select": "negative"}, "seed": {"select": "negative-top64"}}


@dataclasses.dataclass(frozen=True)
class SteerOptions:
    """How a head is steered (:func:`headscope.semantic.steering.steer`).

    ``select``: ``"negative"`` (every negative eigenvalue), ``"negative-top64"`` (the negative
    ones among the top 64 by |λ|, the authors'), ``"positive"``, or a tuple of eigenvalue
    indices; None takes the preset's. ``keep_skew``: keep the skew-symmetric part.
    ``categories`` and ``seed``: the measurement prompts.
    """

    preset: str = "headscope"
    select: str | tuple[int, ...] | None = None
    keep_skew: bool = True
    categories: str | Path | dict | None = None
    seed: int = 0

    def resolved(self):
        """These options with the preset's selection in place of None, checked (HeadscopeError)."""
        if self.preset not in STEER_PRESETS:
            raise HeadscopeError(f"steer preset: expected one of {', '.join(STEER_PRESETS)}, got {self.preset!r}")
        if self.select is None:
            return dataclasses.replace(self, select=STEER_PRESETS[self.preset]["select"])
        return self
