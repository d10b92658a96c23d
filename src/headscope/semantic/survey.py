"""Behaviour of semantic heads (seed 002): metrics, survey, position independence, on category
prompts (:mod:`.prompts`: ``BOS w_1 … w_n``, every w_i a single-token word of a category).

For a query q (q ≥ 1) the target mask is::

    M[q, k] = 1  if k < q, cat(k) = cat(q) and tok(k) ≠ tok(q)    (earlier partner)
    M[q, 0] = 1  if q has no earlier partner                        (BOS fallback)

and the seed's loss is ``L = mean_q −log Σ_k (M ⊙ A)[q, k]`` for the head's pattern A
(a query's term is capped at −log 1e-30 ≈ 69 nats where its target mass underflows).
On a layer with a local attention window (GPT-Neo's local layers, Mistral, Qwen2, Phi-3 and
Gemma 2 windows) "earlier" means earlier *and visible* — the layer's own mask,
:meth:`Config.hidden_keys`: a partner outside the window is no partner, and BOS outside it no
fallback; a query that sees neither has no target and is left out of the loss's mean.

Categories that overlap in meaning (days and months, colours and metals: " silver" is
a colour too) are declared in the categories file under ``"_related"`` (pairs of names);
attention from a query to an earlier token of a *related* category is then allowed
(added to M), not counted as wrong. The BOS query (q = 0) is left out of every mean by
default; the authors' loss includes it (row 0 targets BOS, A[0, 0] = 1, adding
−log 1 = 0 to the mean: ``include_bos_query=True``).

Presets (:data:`PRESETS`): ``headscope`` — 64 seeded prompts of 16 words, each drawing
5 of the shipped categories (``data/categories.json``), BOS query excluded; ``seed`` —
as the L1H5 authors (Mamiglia et al., ``src/prompt.py`` and ``src/constants.py`` at
6c45e47, ``characterize_head.py:41``): one prompt of 255 words, each word a category
drawn uniformly from their 8 categories and then a word drawn uniformly from it (with
replacement), BOS query included (``data/categories_seed.json``).
Further rates (means over the queries they apply to):

- ``self_attention``  A[q, q]
- ``copy_attention``  Σ A[q, k] over earlier copies (tok(k) = tok(q), k < q), queries with copies
- ``same_category``   Σ A[q, k] over earlier partners, queries with a partner
- ``bos_fallback``    A[q, 0], queries without a partner

A rate whose set of queries is empty (no query has an earlier copy, say) is undefined
and reported as None, not as 0.

Position independence: the same tokens are shown in shuffled orders; the score of
every (query token, key token) pair is grouped over the orders, and the fraction of
score variance explained by token identity is ``1 − E[within-pair variance] / Var``.
Both variances are taken about their means (two passes, float64), so scores with a
large common offset do not cancel catastrophically; when every score is the same
(e.g. W_Q or W_K zero) the fraction is 0/0 and reported as None.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import torch
from jaxtyping import Float

from .._errors import HeadscopeError
from .._html_repr import HtmlRepr, render_text
from .._json import finite_or_none, plain
from ..lowrank import small_matrices
from ..core.forward import ForwardPass, advance_together, run_with_cache
from ..core.model import Model
from . import bilinear
from .prompts import prompts_for

Tensor = torch.Tensor


# -- masks ----------------------------------------------------------------------------------


#: survey presets (module docstring): categories (None: shipped), prompts, words, categories per prompt, BOS query
PRESETS = {
    "headscope": {"categories": None, "n_prompts": 64, "length": 16, "cats_per_prompt": 5, "bos_query": False},
    "seed": {"categories": "seed", "n_prompts": 1, "length": 255, "cats_per_prompt": None, "bos_query": True},
}


def target_masks(tokens: Tensor, labels: Tensor, related: list[tuple[int, int]] | None = None,
                 hidden: Tensor | None = None) -> dict[str, Tensor]:
    """Boolean masks [b q k]: partner, copy (earlier copies), related (earlier tokens of an
    overlapping category), target (partner, related, or BOS when there is no partner).

    `hidden` [q k]: the keys the layer's queries cannot see (``cfg.hidden_keys(l, pos[:, None],
    pos[None, :])``; default: none but the later ones) — a key it hides is nobody's partner, copy or
    fallback. ``has_partner`` and ``sees_bos`` [b q] say which queries have a visible partner and a
    visible BOS."""
    b, p = tokens.shape
    earlier = torch.ones(p, p, dtype=torch.bool).tril(-1)                                  # k < q
    if hidden is not None:
        earlier &= ~hidden.to(torch.bool)                                                  # … and visible
    same_cat = (labels[:, :, None] == labels[:, None, :]) & (labels[:, :, None] >= 0)      # [b q k]
    same_tok = tokens[:, :, None] == tokens[:, None, :]
    partner = same_cat & ~same_tok & earlier
    copy = same_tok & earlier
    rel = torch.zeros_like(partner)
    for a, c in related or []:
        for x, y in ((a, c), (c, a)):
            rel |= (labels[:, :, None] == x) & (labels[:, None, :] == y)
    rel &= earlier
    has_partner = partner.any(-1)                                                          # [b q]
    sees_bos = (torch.ones(p, dtype=torch.bool) if hidden is None else ~hidden[:, 0].to(torch.bool))
    sees_bos = sees_bos[None, :].expand(b, p)
    target = partner | rel
    target[:, :, 0] |= ~has_partner & sees_bos
    return {"partner": partner, "copy": copy, "related": rel, "target": target, "has_partner": has_partner,
            "sees_bos": sees_bos}


def pattern_metrics(pattern: Float[Tensor, "batch head q k"], masks: dict[str, Tensor],
                    include_bos_query: bool = False) -> dict[str, Tensor]:
    """The metrics of the module docstring for every head at once ([head] tensors).

    ``include_bos_query`` adds the BOS row (q = 0, target BOS) to the loss's mean, as the
    authors' loss does; the rates always use queries q ≥ 1.
    """
    A = pattern.double()
    q = slice(1, None)                                                                     # queries q ≥ 1
    def m(x):
        return x[:, None, q].double()                                                       # [b 1 q (k)]
    lq = slice(0, None) if include_bos_query else q
    tmask = masks["target"][:, None, lq]
    target = (A[:, :, lq] * tmask.double()).sum(-1)                                        # [b h q]
    diag = torch.diagonal(A, dim1=-2, dim2=-1)[:, :, q]                                    # [b h q]
    has_copy = masks["copy"].any(-1)[:, None, q].double()
    has_partner = masks["has_partner"][:, None, q].double()
    sees_bos = masks.get("sees_bos", torch.ones_like(masks["has_partner"]))[:, None, q].double()

    def masked_mean(x, w):                                     # NaN where no query applies (→ None)
        n = w.sum(dim=(0, 2))
        return torch.where(n > 0, (x * w).sum(dim=(0, 2)) / n.clamp_min(1), torch.full_like(n, math.nan))
    # queries with a target they can see (every query but under a local window that hides BOS and partners)
    scored = tmask.any(-1).double().expand_as(target)
    loss = masked_mean(-target.clamp_min(1e-30).log(), scored)
    loss = torch.nan_to_num(loss, nan=-math.log(1e-30))         # no query sees a target (window 1): the cap
    return {
        "semantic_loss": loss,
        "self_attention": diag.mean(dim=(0, 2)),
        "copy_attention": masked_mean((A[:, :, q] * m(masks["copy"])).sum(-1), has_copy),
        "same_category": masked_mean((A[:, :, q] * m(masks["partner"])).sum(-1), has_partner),
        "bos_fallback": masked_mean(A[:, :, q, 0], (1 - has_partner) * sees_bos),
    }


# -- survey ------------------------------------------------------------------------------------

#: rates over a subset of the queries, undefined (None) when that subset is empty
OPTIONAL_RATES = ("copy_attention", "same_category", "bos_fallback")


@dataclasses.dataclass
class HeadScore:
    layer: int
    head: int
    semantic_loss: float
    self_attention: float
    copy_attention: float | None      # None: no query of the prompts has an earlier copy
    same_category: float | None       # None: no query has an earlier partner
    bos_fallback: float | None        # None: every query has a partner
    rank: int = 0

    def to_dict(self) -> dict:
        return plain(self)


@dataclasses.dataclass
class SurveyResult(HtmlRepr):
    rows: list[HeadScore]                 # ranked by semantic_loss, best first
    fingerprint: str
    processing: dict
    prompts: dict                         # how the prompts were made
    categories: dict[str, list[str]]

    def to_dict(self) -> dict:
        return {"rows": [r.to_dict() for r in self.rows], "fingerprint": self.fingerprint,
                "processing": self.processing, "prompts": self.prompts, "categories": self.categories}

    def render(self, top: int | None = None) -> str:
        """The ranking as text, the best `top` heads (headscope.report.views.survey.text)."""
        return render_text(self, top)


def survey(model: Model, layers: list[int] | None = None, *, categories=None, n_prompts: int | None = None,
           length: int | None = None, seed: int = 0,
           preset: str = "headscope", include_bos_query: bool | None = None) -> SurveyResult:
    """Score every head of `layers` (default: all) on category prompts, ranked by semantic loss.

    ``preset`` (:data:`PRESETS`) sets the categories, the number and length of prompts,
    the categories per prompt and whether the BOS query counts; explicit arguments
    override it. The seed preset's 255 words are capped at n_ctx − 1.
    """
    if preset not in PRESETS:
        raise HeadscopeError(f"survey preset: expected one of {', '.join(PRESETS)}, got {preset!r}")
    pre = PRESETS[preset]
    cfg = model.cfg
    layers = list(range(cfg.n_layers)) if layers is None else [cfg.check_layer(l) for l in layers]
    categories = pre["categories"] if categories is None else categories
    n_prompts = pre["n_prompts"] if n_prompts is None else n_prompts
    length = (min(pre["length"], cfg.n_ctx - 1) if preset == "seed" else pre["length"]) if length is None else length
    bos_query = pre["bos_query"] if include_bos_query is None else include_bos_query
    prompts, ids = prompts_for(model, categories, n_prompts=n_prompts, length=length, seed=seed,
                               cats_per_prompt=pre["cats_per_prompt"])
    W = model.weights()
    # the first batch is the prompts of the atlas's, the semantic and steering stages' attention means
    # (the same seed: the first 32 of these prompts): their blocks' mean attention outputs are kept
    # for them (bilinear.share_prompt_attn_means), so that forward pass is not run again
    top = max(layers)
    attn_out = [f"blocks.{l}.hook_attn_out" for l in range(top)]
    # the forward on the caller's threads: idle, GPT-2 small's 64 prompts take 1.25–1.56 s wall on two
    # threads against 2.35 s on one, for about the same CPU and the same bits (two threads lose only on
    # cores busy with other work); the masks and metrics of small [b h q k] tensors on one thread
    cache = run_with_cache(W, prompts.tokens, names=[f"blocks.{l}.attn.hook_pattern" for l in layers] + attn_out,
                           stop_at_layer=top + 1, batch_size=bilinear.PROMPT_BATCH)
    first = prompts.tokens[:bilinear.PROMPT_BATCH]
    bilinear.share_prompt_attn_means(W, first, [cache.pop(n)[:len(first)] for n in attn_out])
    with small_matrices():
        pos = torch.arange(prompts.tokens.shape[1])
        masks = {}                                                 # by local window: the layer's own mask
        mets = {}
        for l in layers:
            if cfg.window(l) not in masks:
                masks[cfg.window(l)] = target_masks(prompts.tokens, prompts.labels, prompts.related,
                                                    hidden=cfg.hidden_keys(l, pos[:, None], pos[None, :]))
            mets[l] = pattern_metrics(cache[f"blocks.{l}.attn.hook_pattern"], masks[cfg.window(l)],
                                      include_bos_query=bos_query)
    rows = []
    for l in layers:
        met = mets[l]
        for h in range(cfg.n_heads):
            rows.append(HeadScore(l, h, **{k: finite_or_none(v[h]) if k in OPTIONAL_RATES else float(v[h])
                                           for k, v in met.items()}))
    rows.sort(key=lambda r: (r.semantic_loss, r.layer, r.head))
    for i, r in enumerate(rows):
        r.rank = i + 1
    return SurveyResult(
        rows=rows, fingerprint=model.fingerprint, processing=W.processing.to_dict(),
        prompts={"n_prompts": n_prompts, "length": length, "seed": seed, "preset": preset,
                 "cats_per_prompt": pre["cats_per_prompt"], "bos_query_in_loss": bos_query,
                 "related": [[prompts.names[a], prompts.names[b]] for a, b in prompts.related],
                 "category_words": prompts.counts, "bos": model.bos},
        categories={k: model.to_str_tokens(v) for k, v in ids.items()},
    )


# -- position independence --------------------------------------------------------------------


@dataclasses.dataclass
class PositionIndependence:
    layer: int
    head: int
    identity_fraction: float | None   # share of score variance explained by (query token, key token);
    position_fraction: float | None   # 1 − identity_fraction; both None when the scores are constant
    within_pair_std: float        # mean std of a pair's score across orders
    n_pairs: int

    def to_dict(self) -> dict:
        return plain(self)


def position_independence(model: Model, layer: int, head: int, *, categories=None, n_prompts: int = 16,
                          length: int = 16, n_shuffles: int = 4, seed: int = 0) -> PositionIndependence:
    """How much of head (layer, head)'s score is token identity rather than position."""
    return position_independence_heads(model, [(layer, head)], categories=categories, n_prompts=n_prompts,
                                       length=length, n_shuffles=n_shuffles, seed=seed)[0]


def position_independence_heads(model: Model, heads: list[tuple[int, int]], *, categories=None, n_prompts: int = 16,
                                length: int = 16, n_shuffles: int = 4, seed: int = 0) -> list[PositionIndependence]:
    """:func:`position_independence` of several heads (in the order given) from one forward pass per
    order of the prompts, up to the deepest head's layer (a head's scores do not depend on later blocks)."""
    steps, finish = position_independence_steps(model, heads, categories=categories, n_prompts=n_prompts,
                                                 length=length, n_shuffles=n_shuffles, seed=seed)
    advance_together(steps)
    return finish()


def position_independence_steps(model: Model, heads: list[tuple[int, int]], *, categories=None, n_prompts: int = 16,
                                length: int = 16, n_shuffles: int = 4, seed: int = 0):
    """(steps, finish): :func:`position_independence_heads` as the steps of its forward passes, one
    per order of the prompts (step k runs block k of each; :func:`advance_together` walks them, with
    other work if any), and ``finish()``, which returns the results once every step is done."""
    heads = [(int(l), int(h)) for l, h in heads]
    for layer, head in heads:
        model.cfg.check_head(layer, head)
    if not heads:
        return [], lambda: []
    prompts, _ = prompts_for(model, categories, n_prompts=n_prompts, length=length, seed=seed)
    rng = np.random.default_rng([seed, 1])
    W = model.weights()
    b, p = prompts.tokens.shape
    perms = [np.arange(p)] + [np.concatenate([[0], 1 + rng.permutation(p - 1)]) for _ in range(n_shuffles)]
    names = {l: f"blocks.{l}.attn.hook_attn_scores" for l in sorted({l for l, _ in heads})}
    perms_t = [torch.from_numpy(perm) for perm in perms]
    # new position n holds original token perm[n]
    passes = [ForwardPass(W, prompts.tokens[:, perm_t], list(names.values()), stop_at_layer=max(names) + 1)
              for perm_t in perms_t]

    def finish() -> list[PositionIndependence]:
        with small_matrices():               # [b p p] gathers and sums: a second thread only synchronises
            return _finish()

    def _finish() -> list[PositionIndependence]:
        scores = {hd: torch.empty(len(perms), b, p, p, dtype=torch.float64) for hd in heads}  # by original positions
        for r, (perm_t, fp) in enumerate(zip(perms_t, passes)):
            cache = fp.cache()
            inv = torch.empty_like(perm_t)
            inv[perm_t] = torch.arange(p)
            for (layer, head), s in scores.items():
                S = cache[names[layer]][:, head].double()         # [b q k]
                s[r] = S[:, inv][:, :, inv]                       # back to original indices [b i j]
            del cache
        return [_position_result(layer, head, scores[(layer, head)]) for layer, head in heads]

    # short prompts: one thread (as the survey)
    return [_one_thread(s) for fp in passes for s in fp.steps], finish


def _one_thread(step):
    """The generator `step`, each of its steps run with one torch thread (:func:`small_matrices`)."""
    done = object()
    while True:
        with small_matrices():
            if next(step, done) is done:
                return
        yield


def _position_result(layer: int, head: int, scores: Tensor) -> PositionIndependence:
    """Two-pass variances of scores [orders b i j] (a pair is seen in the orders that keep i ≥ j)."""
    ok = torch.isfinite(scores)
    cnt = ok.sum(0).double()                                  # [b i j]
    keep = cnt >= 2
    S0 = torch.where(ok, scores, torch.zeros_like(scores))
    mean = S0.sum(0) / cnt.clamp_min(1)                       # per pair [b i j]
    within = (torch.where(ok, scores - mean, torch.zeros_like(scores)).pow(2).sum(0) / cnt.clamp_min(1))[keep]
    n = cnt[keep]
    total_mean = (mean[keep] * n).sum() / n.sum()
    total_var = (torch.where(ok, scores - total_mean, torch.zeros_like(scores)).pow(2).sum(0)[keep]).sum() / n.sum()
    within_var = (within * n).sum() / n.sum()
    frac = float(1 - within_var / total_var) if total_var > 0 else None
    return PositionIndependence(layer, head, frac, None if frac is None else 1 - frac, float(within.sqrt().mean()),
                                int(keep.sum()))
