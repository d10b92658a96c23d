"""Attention patterns of whole layers on texts: mean patterns, per-head rates, offset profiles.

For head h of layer l and text s with pattern A_s[q, k] (softmax over k ≤ q, forward's
``hook_pattern``):

* mean pattern  Ā[q, k] = mean_s A_s[q, k] for q, k < P (P = min(max_positions, shortest
  text)); exact on the truncated texts, since A[q, ·] only depends on tokens 0..q;
* per-head rates, means over all queries q ≥ 1 of all texts: BOS = A[q, 0],
  self = A[q, q], previous = A[q, q−1], mean distance Σ_k (q − k) A[q, k],
  entropy −Σ_k A log A (nats);
* offset profile: A[q, q − d] against the offset d < D, mean and 10–90 % range over the
  queries q ≥ max(d, 1) that reach back that far; D = min(max_positions, longest text),
  so every offset shown is reached by at least one query (no undefined entries);
* the pattern of the first text, positions < max_positions.

Texts are ``[BOS] + tokens`` truncated to n_ctx; texts that are BOS alone have no query q ≥ 1
and the summary does not apply (:class:`~headscope.NotApplicable`) when every text is one.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Callable, Iterable, Sequence

import numpy as np
import torch

from .._errors import NotApplicable
from .._json import plain
from ..corpus import default_window
from ..core.forward import run_with_cache
from ..core.model import Model
from ..shipped import Text
from ..core.weights import Weights, same_block
from ..lowrank import small_matrices

Tensor = torch.Tensor
RATES = ("bos", "self", "prev", "distance", "entropy")


def lower_rows(m: Tensor) -> list[list[float]]:
    """Rows of the lower triangle of a square matrix (row q has q + 1 entries)."""
    return [row[: q + 1] for q, row in enumerate(m.tolist())]          # one conversion, then list slices


@torch.no_grad()
def head_pattern(weights: Weights, tokens: Tensor, layer: int, head: int) -> Tensor:
    """Attention pattern A[b, q, k] (float64) of head (layer, head) on token batches [b p]."""
    name = f"blocks.{layer}.attn.hook_pattern"
    return run_with_cache(weights, tokens, names=[name], stop_at_layer=layer + 1, batch_size=32)[name][:, head].double()


def _shares_prefix(a: Weights, b: Weights, layer: int) -> bool:
    """Whether `a` and `b` hold the very same embeddings and blocks 0..layer−1 (by identity)."""
    return (a.cfg == b.cfg and a.W_E is b.W_E and a.W_pos is b.W_pos
            and all(same_block(a.blocks, b.blocks, i) for i in range(layer)))


@torch.no_grad()
def head_patterns(weights: Sequence[Weights], tokens: Tensor, layer: int, head: int) -> list[Tensor]:
    """:func:`head_pattern` under each of several weights, e.g. a model and its steered copy
    (:func:`head_patterns_of_sets` of one token batch)."""
    return head_patterns_of_sets(weights, [tokens], layer, head)[0]


@torch.no_grad()
def head_patterns_of_sets(weights: Sequence[Weights], token_sets: Sequence[Tensor], layer: int, head: int
                          ) -> list[list[Tensor]]:
    """:func:`head_pattern` of each token batch [b p] under each of several weights: [set][weights].

    When the weights share the embeddings and blocks 0..layer−1 (the same tensors, as
    :func:`headscope.steering.steered_weights` leaves them), the residual stream entering
    block `layer` is computed once per set (the sets' passes walking the blocks together) and
    only block `layer`'s attention runs per weights — the very operations ``run_with_cache``
    performs, so the patterns are the same.
    """
    weights = list(weights)
    if len(weights) < 2 or not all(_shares_prefix(weights[0], w, layer) for w in weights[1:]):
        return [[head_pattern(w, tokens, layer, head) for w in weights] for tokens in token_sets]
    from ..core.forward import _attention, _Keeper, run_with_caches  # the forward's own attention block (one home)

    name = f"blocks.{layer}.attn.hook_pattern"
    resid = f"blocks.{layer - 1}.hook_resid_post"                                  # = block layer's resid_pre
    xs = ([c[resid] for c in run_with_caches(weights[0], token_sets, [resid], stop_at_layer=layer, batch_size=32)]
          if layer else [None] * len(token_sets))
    out = []
    for tokens, x in zip(token_sets, xs):
        per_weights = []
        for w in weights:
            parts = []
            for a in range(0, tokens.shape[0], 32):
                if layer:
                    xa = x[a:a + 32]
                else:                                                               # block 0 reads the embeddings
                    t = tokens[a:a + 32]
                    xa = w.W_E[t] + w.W_pos[:t.shape[1]] if w.W_pos is not None else w.W_E[t]  # rotary: no W_pos
                keeper = _Keeper([name], w.cfg.n_layers)
                _attention(w.blocks[layer], xa.to(w.device), layer, w, keeper)
                parts.append(keeper.cache[name][:, head].cpu())
            per_weights.append(torch.cat(parts).double())
        out.append(per_weights)
    return out


@dataclasses.dataclass
class HeadAttention:
    layer: int
    head: int
    bos: float
    self: float
    prev: float
    distance: float
    entropy: float
    mean_pattern: list[list[float]]          # lower triangle of Ā, rows q < P
    offset_profile: dict                     # {"mean", "p10", "p90"}: [D] each
    example_pattern: list[list[float]]       # lower triangle of A on the first text


@dataclasses.dataclass
class AttentionSummary:
    layers: list[int]
    n_heads: int
    positions: int           # P
    offsets: int             # D
    n_queries: int
    samples: list[str]
    example: dict            # {"sample": name, "tokens": str tokens of the example pattern}
    heads: list[HeadAttention]

    def to_dict(self) -> dict:
        return plain(self)   # asdict's values without its deep copy of every float


#: the offset profile's band: these quantiles over the queries of each (head, offset)
BAND = (0.1, 0.9)


def _offset_profiles(diags: list[list[list[Tensor]]]) -> tuple[list, list, list]:
    """(mean, p10, p90) [l·h][D] over the queries of each head and offset, from `diags[l][d]` (the
    texts' [h n_d] values A[q, q − d]).

    The quantiles are ``torch.quantile``'s (linear interpolation between the order statistics at
    ranks ⌊r⌋ and ⌈r⌉, r = β(n_d − 1)): the order statistics read from one sort of each offset's
    [l·h n_d] values (numpy's, several times faster than torch's sort or four ``kthvalue``
    selections here; an order statistic is a value, so the same bits), then the one ``lerp`` it applies."""
    D = len(diags[0])
    vals = [torch.cat([torch.cat(diags[i][d], dim=1) for i in range(len(diags))]) for d in range(D)]  # [l·h n_d]
    mean = torch.stack([v.mean(1) for v in vals], 1)                                  # [l·h D]
    ranks = [[(int(r), math.ceil(r), r - int(r)) for r in (beta * (v.shape[1] - 1) for v in vals)]  # torch.quantile's
             for beta in BAND]                                                                  # [β][D]
    lo = torch.empty(len(BAND), vals[0].shape[0], D, dtype=vals[0].dtype)            # [β l·h D]
    hi = torch.empty_like(lo)
    for d, v in enumerate(vals):
        ordered = np.sort(v.numpy(), axis=1)                                          # [l·h n_d]
        for b, rk in enumerate(ranks):
            below, above, _ = rk[d]
            lo[b, :, d] = torch.from_numpy(ordered[:, below])
            hi[b, :, d] = torch.from_numpy(ordered[:, above])
    weight = torch.tensor([[w for _, _, w in rk] for rk in ranks], dtype=lo.dtype)[:, None, :].expand_as(lo).contiguous()
    q = torch.lerp(lo, hi, weight)                                                    # [2 l·h D]
    p10, p90 = q.tolist()
    return mean.tolist(), p10, p90


@torch.no_grad()
@small_matrices()     # a few hundred tokens through two blocks and [h n n] statistics: one thread (see README)
def attention_summary(model: Model, texts: Sequence[Text], layers: Sequence[int], *, max_positions: int = 40,
                      progress: Callable[[list], Iterable] | None = None) -> AttentionSummary:
    """The module docstring's statistics for every head of `layers` (those the model has) on `texts`."""
    cfg = model.cfg
    asked, layers = list(layers), [l for l in layers if 0 <= l < cfg.n_layers]
    if not layers:
        raise NotApplicable(f"attention summary: the model has layers 0..{cfg.n_layers - 1}, none of {asked}")
    W = model.weights()
    # the first window of each text, at most 2048 tokens (corpus.default_window): a pattern is h × n² floats
    toks = [model.to_tokens(t.text)[: default_window(model)] for t in texts]
    P = min(max_positions, min(len(t) for t in toks))
    D = min(max_positions, max(len(t) for t in toks))                              # every offset d < D is reached
    if D < 2:
        raise NotApplicable("attention summary: every text is BOS alone (no query position q ≥ 1)")
    H_ = cfg.n_heads
    mean = torch.zeros(len(layers), H_, P, P, dtype=torch.float64)
    rate = {k: torch.zeros(len(layers), H_, dtype=torch.float64) for k in RATES}
    diags: list[list[list[Tensor]]] = [[[] for _ in range(D)] for _ in layers]   # [l][d] → [h n_d] per text
    n_q = 0
    example: dict[int, Tensor] = {}
    names = [f"blocks.{l}.attn.hook_pattern" for l in layers]
    for s, t in enumerate((progress or iter)(toks)):
        cache = run_with_cache(W, t[None], names, stop_at_layer=max(layers) + 1)
        n = len(t)
        q = torch.arange(n)
        dist = (q[:, None] - q[None, :]).clamp(min=0).double()                     # [q k]
        for i, l in enumerate(layers):
            A = cache[f"blocks.{l}.attn.hook_pattern"][0].double()                 # [h q k]
            mean[i] += A[:, :P, :P]
            rate["bos"][i] += A[:, 1:, 0].sum(-1)
            rate["self"][i] += A.diagonal(dim1=1, dim2=2)[:, 1:].sum(-1)
            rate["prev"][i] += A.diagonal(offset=-1, dim1=1, dim2=2).sum(-1)
            t = torch.mul(A, dist)                                                 # [h q k], reused below
            rate["distance"][i] += t.sum(-1)[:, 1:].sum(-1)
            t = torch.clamp_min(A, 1e-30, out=t).log_().mul_(A)                    # A log A, in place
            rate["entropy"][i] += -t.sum(-1)[:, 1:].sum(-1)
            for d in range(min(D, n)):                    # A[q, q − d] for the queries q ≥ max(d, 1)
                diags[i][d].append(A.diagonal(offset=-d, dim1=1, dim2=2)[:, 0 if d else 1:])   # [h n − d (− 1)]
            if s == 0:
                m = min(n, max_positions)
                example[l] = A[:, :m, :m]
        n_q += n - 1
    mean /= len(toks)
    o_mean, p10, p90 = _offset_profiles(diags)                                     # [l·h][D] each
    rates = {k: (rate[k] / n_q).tolist() for k in RATES}                           # [l][h]
    heads = []
    for i, l in enumerate(layers):
        for h in range(H_):
            j = i * H_ + h
            heads.append(HeadAttention(
                layer=l, head=h, **{k: rates[k][i][h] for k in RATES},
                mean_pattern=lower_rows(mean[i, h]),
                offset_profile={"mean": o_mean[j], "p10": p10[j], "p90": p90[j]},
                example_pattern=lower_rows(example[l][h])))
    m = min(len(toks[0]), max_positions)
    return AttentionSummary(layers=layers, n_heads=H_, positions=P, offsets=D, n_queries=n_q,
                            samples=[t.name for t in texts],
                            example={"sample": texts[0].name, "tokens": model.to_str_tokens(toks[0][:m].tolist())},
                            heads=heads)
