"""The scan's running top / bottom k of every neuron's scores over the vocabulary, chunk by chunk.

:func:`headscope.layer0.neurons.scan_neurons` and :func:`~headscope.layer0.neurons.rank_neurons`
keep, for each neuron (a row of a chunk's transposed scores [s c]), its k largest and k
smallest scores with their token ids, ties by ascending id (a stable sort of the whole
column, bit for bit), without ever forming [d_vocab s] or sorting a whole chunk: a chunk's
candidates are found block by block (:data:`BLOCK` columns) against the running k-th.
"""

from __future__ import annotations

import torch

from .._threads import one_thread

Tensor = torch.Tensor


#: columns per block of :func:`_beyond`'s prefilter
BLOCK = 64


def _block_extremes(scoreT: Tensor, largest: bool) -> Tensor:
    """[s nb]: each row's max (``largest``, else min) over blocks of :data:`BLOCK` columns (the last
    one narrower when BLOCK does not divide c; NaN propagates)."""
    m, c = scoreT.shape
    cf = c - c % BLOCK
    red = (lambda x: x.amax(-1)) if largest else (lambda x: x.amin(-1))
    parts = [red(scoreT[:, :cf].view(m, cf // BLOCK, BLOCK))] if cf else []
    if cf < c:
        parts.append(red(scoreT[:, cf:])[:, None])                        # the last, narrower block
    return torch.cat(parts, dim=1) if len(parts) > 1 else parts[0]


def _beyond(scoreT: Tensor, kth: Tensor, largest: bool, strict: bool, blocks: Tensor | None = None
            ) -> tuple[Tensor, Tensor]:
    """(rows, columns) of the entries of ``scoreT`` [s c] beyond their row's ``kth`` [s 1] (above it
    if ``largest``, else below; ``strict`` or not; NaN always), row-major (ascending columns per row).

    Blocks of :data:`BLOCK` columns first (``blocks``: :func:`_block_extremes`, computed if not
    given): only the blocks whose max (min) passes are read again, as whole [nb BLOCK] rows, and
    a nonzero of their pass mask gives (block, offset) — no [s c] mask, no expanded indices."""
    m, c = scoreT.shape
    nf = c // BLOCK
    cf = nf * BLOCK
    if largest:
        passes = (lambda x, t: ~(x <= t)) if strict else (lambda x, t: ~(x < t))
    else:
        passes = (lambda x, t: ~(x >= t)) if strict else (lambda x, t: ~(x > t))
    if blocks is None:
        blocks = _block_extremes(scoreT, largest)
    rb, bb = passes(blocks, kth).nonzero(as_tuple=True)                   # passing blocks, row-major
    full = bb < nf
    tail = cf < c and not bool(full.all())
    rf, bf = (rb[full], bb[full]) if tail else (rb, bb)
    if cf == c and scoreT.is_contiguous():       # whole rows of the [s·nb BLOCK] view: index_select copies rows
        read = scoreT.view(m * nf, BLOCK).index_select(0, rf * nf + bf)              # [nb BLOCK]
    else:
        read = scoreT[:, :cf].view(m, nf, BLOCK)[rf, bf]                             # [nb BLOCK]
    j, o = passes(read, kth.view(-1).index_select(0, rf)[:, None]).nonzero(as_tuple=True)
    r, col = rf.index_select(0, j), bf.index_select(0, j) * BLOCK + o
    if not tail:
        return r, col
    rt = rb[~full]
    jt, ot = passes(scoreT[rt, cf:], kth[rt]).nonzero(as_tuple=True)      # the tail [nt c-cf]
    r, col = torch.cat([r, rt[jt]]), torch.cat([col, cf + ot])
    order = torch.argsort(r, stable=True)                                  # the tail after its row's blocks
    return r[order], col[order]


def _topk_step(best: list, scoreT: Tensor, s: int, k: int) -> None:
    """Merge one chunk's transposed scores [s c] (rows s.. of the vocabulary) into ``best``
    (``[top, bottom]``, each None or (values, ids) [s k'], k' = min(k, columns seen)): per side,
    every neuron's top (bottom) k of all the columns seen, sorted, ties by ascending id.

    Only candidates can enter: a score strictly beyond the running k-th (an equal one has a
    larger id than every kept one, so loses the tie), or, on the first chunk, at least as far
    as a bound on the chunk's own k-th value: the k-th largest of its :data:`BLOCK`-column
    blocks' maxima (k blocks each hold a score that large, so the k-th score is at least it;
    the chunk's own k-th where it has fewer than k blocks), from :meth:`torch.Tensor.topk`'s
    values (its tie order is unspecified, hence not used). Candidates are a superset of the k
    best; they are packed per neuron [s w] (in ascending id) behind the
    kept [s k'] and one stable sort of [s k'+w] merges them: no full top-k over any chunk. NaN is always a candidate and sorts first descending (so the top-1 turns NaN, as
    :meth:`~torch.Tensor.topk` would make it)."""
    with one_thread():   # exact operations (comparisons, gathers, sorts): the same result on any thread count
        for side, largest in ((0, True), (1, False)):
            _topk_side(best, side, largest, scoreT, s, k)


def _topk_side(best: list, side: int, largest: bool, scoreT: Tensor, s: int, k: int) -> None:
    """:func:`_topk_step` for one side (``best[side]``: top if ``largest``, else bottom)."""
    rows_n, c = scoreT.shape
    prev = best[side]
    width = 0 if prev is None else prev[0].shape[1]
    kk = min(k, width + c)
    if prev is None:                                                   # a bound on the chunk's k-th value
        blocks = _block_extremes(scoreT, largest)                      # [s nb]
        src = blocks if blocks.shape[1] >= k else scoreT
        kth = src.topk(min(k, src.shape[1]), dim=1, largest=largest, sorted=False).values
        kth = kth.amin(1, keepdim=True) if largest else kth.amax(1, keepdim=True)   # [s 1]
        r, col = _beyond(scoreT, kth, largest, strict=False, blocks=blocks)
    elif width < k:                                                    # too few kept: all columns
        r, col = torch.ones_like(scoreT, dtype=torch.bool).nonzero(as_tuple=True)
    else:                                                              # strictly beyond the k-th kept
        r, col = _beyond(scoreT, prev[0][:, -1:], largest, strict=True)
    cnt = torch.bincount(r, minlength=rows_n)                          # [s]
    w = int(cnt.max()) if len(r) else 0
    at = torch.arange(len(r)) - (cnt.cumsum(0) - cnt).index_select(0, r)   # place within its row
    flat = r * w + at                                                  # (row, place) in [s w], flattened
    V = torch.full((rows_n, w), float("-inf") if largest else float("inf"), dtype=scoreT.dtype)
    V.view(-1).index_copy_(0, flat, scoreT.reshape(-1).index_select(0, r * c + col))   # V[r, at] = scoreT[r, col]
    I = torch.zeros(rows_n, w, dtype=torch.long)
    I.view(-1).index_copy_(0, flat, col + s)                           # I[r, at] = col + s
    if prev is not None:                                               # kept first: smaller ids
        V, I = torch.cat([prev[0], V], dim=1), torch.cat([prev[1], I], dim=1)
    V, pick = V.sort(dim=1, descending=largest, stable=True)
    best[side] = (V[:, :kk].contiguous(), I.gather(1, pick[:, :kk]))


def _running_topk(Y: Tensor, Ms: Tensor, k: int, chunk: int) -> tuple[tuple[Tensor, Tensor], tuple[Tensor, Tensor]]:
    """((top values, ids), (bottom values, ids)), each [k s], of Y @ Ms over the vocabulary,
    chunk by chunk: [d_vocab s] is never formed.

    Each chunk's scores are copied transposed, so that each neuron's scores are contiguous (a
    top-k along a row is several times faster than down a column): :func:`_topk_step`."""
    s_ = Ms.shape[1]
    best: list[tuple[Tensor, Tensor] | None] = [None, None]
    for s in range(0, Y.shape[0], chunk):
        _topk_step(best, (Y[s:s + chunk] @ Ms).T.contiguous(), s, k)     # [s c]
    if best[0] is None:                                                   # no rows
        e = (torch.empty(0, s_, dtype=Y.dtype), torch.empty(0, s_, dtype=torch.long))
        return e, e
    (tv, ti), (bv, bi) = best
    return (tv.T.contiguous(), ti.T.contiguous()), (bv.T.contiguous(), bi.T.contiguous())
