"""Weight-based maps between heads and through the vocabulary, as in "A Mathematical Framework".

Composition scores (the Framework's definition, TransformerLens's ``all_composition_scores``)
---------------------------------------------------------------------------------------
For a head A of layer l_A writing W_OV^A = W_V^A W_O^A [d d] and a head B of a later
layer l_B > l_A reading it::

    score(A → B) = ‖W_OV^A · M_B‖_F / (‖W_OV^A‖_F ‖M_B‖_F)

with M_B = W_Q^B W_K^Bᵀ (Q-composition: A's output feeds B's query), W_K^B W_Q^Bᵀ
(K-composition: A's output feeds B's key) or W_V^B W_O^B (V-composition). Pairs with
l_B ≤ l_A score 0 (as TransformerLens masks them). Every matrix is a product of two
rank-e factors (e = d_head), so no d × d circuit is formed: for a factor F [d e],
‖F X‖_F = ‖R_F X‖_F with R_F [e e] the triangular factor of F = Q R (Q orthonormal
columns), and likewise on the right. Hence, e.g. for K-composition,
‖W_V^A W_O^A W_K^B W_Q^Bᵀ‖_F = ‖R_V^A (W_O^A W_K^B) R_Q^Bᵀ‖_F — an e × e matrix per
pair, W_O^A W_K^B [e e] costing e²·d. Or, with fewer multiply-adds where d < 2e² (GPT-2: d 768,
e 64), the squared numerator is the inner product ⟨G_A, H_B⟩ of two symmetric d × d Grams
(W_OV^Aᵀ W_OV^A and M_B M_Bᵀ), d²/2 a pair after the Grams' d²·e/2 a head
(:func:`composition_scores`, :func:`composition_path`). All in float64. The weights are read as given:
``model.weights()`` (the default processing, equal to TransformerLens's) gives
TransformerLens's figures.

The Framework's copying score
-----------------------------
Σλ/Σ|λ| over the eigenvalues of the full OV circuit W_E W_V W_O W_U [vocab vocab] (raw
— processed, not effective — token embeddings, every token of the vocabulary). Its
nonzero eigenvalues are those of the e × e matrix W_O (W_U W_E) W_V (AB and BA share
their nonzero eigenvalues, A = W_E W_V, B = W_O W_U); W_U W_E [d d] is formed once per
model, summed over vocabulary chunks, in float64 (:func:`vocab_gram`).
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import torch
from jaxtyping import Float

from .._html_repr import HtmlRepr, render_text
from .._threads import one_thread, split_heads
from ..lowrank import column_factor, small_matrices, stacked_columns
from ..core.weights import Weights, written_W_O

Tensor = torch.Tensor
MODES = ("Q", "K", "V")
EDGES = 10          #: strongest edges listed per mode
CHUNK = 8192        #: vocabulary rows per chunk of W_U W_E


def _r(F: Float[Tensor, "... d e"]) -> Float[Tensor, "... e e"]:
    """R with FᵀF = RᵀR (QR of F, float64): ‖F X‖_F = ‖R X‖_F for any X."""
    return column_factor(F)


class HeadWeights(NamedTuple):
    """A layer's head weights in float64 on the CPU: W_Q, W_K, W_V [h d e], W_O [h e d] as the residual
    stream gets it (:func:`headscope.core.weights.written_W_O`), b_Q, b_K [h e]."""

    W_Q: Tensor
    W_K: Tensor
    W_V: Tensor
    W_O: Tensor
    b_Q: Tensor
    b_K: Tensor


def head_weights(weights: Weights, layer: int) -> HeadWeights:
    """Block `layer`'s :class:`HeadWeights`: each converted once for every reader of the layer (on one
    thread: memory-bound copies, :mod:`headscope._threads`; with the atlas's HeadColumns, 0.015 CPU s a
    GPT-2-XL layer against 0.077 on two busy cores)."""
    b = weights.blocks[layer]
    f64 = lambda t: t.to("cpu", torch.float64)  # noqa: E731
    with one_thread():
        return HeadWeights(f64(b.W_Q), f64(b.W_K), f64(b.W_V), f64(written_W_O(b, weights.cfg)), f64(b.b_Q),
                           f64(b.b_K))


def vocab_gram(weights: Weights, chunk: int = CHUNK) -> Float[Tensor, "d d"]:
    """W_U W_E [d_model d_model] in float64, summed over vocabulary chunks (no vocab-sized float64 copy).

    Each chunk's float64 copies go into two buffers kept for every chunk (a fresh one per chunk is a
    fresh mapping above malloc's mmap threshold, every page faulted in again), each a contiguous
    [d c] and [c d], as a fresh copy is."""
    d = weights.cfg.d_model
    G = torch.zeros(d, d, dtype=torch.float64)
    V = weights.cfg.vocab                                                                # tokens: no padding rows
    c = min(chunk, V)
    buf_U, buf_E = torch.empty(d * c, dtype=torch.float64), torch.empty(c * d, dtype=torch.float64)
    for i in range(0, V, chunk):
        w = min(i + chunk, V) - i
        U = buf_U[:d * w].view(d, w).copy_(weights.W_U[:, i:i + w])                     # [d w]
        E = buf_E[:w * d].view(w, d).copy_(weights.W_E[i:i + w])                        # [w d]
        G += U @ E
    return G


def framework_ov_eigenvalues(weights: Weights, layer: int, gram: Tensor | None = None, *,
                             block: HeadWeights | None = None) -> Tensor:
    """Eigenvalues [head e] (complex) of W_O[h] (W_U W_E) W_V[h]: the nonzero ones of W_E W_OV[h] W_U.
    ``block``: the layer's :func:`head_weights` when the caller holds them."""
    G = vocab_gram(weights) if gram is None else gram
    w = head_weights(weights, layer) if block is None else block
    GV = torch.einsum("cd,hde->hce", G, w.W_V)                                           # [h d e]
    with small_matrices():
        return torch.linalg.eigvals(w.W_O @ GV)                                          # [h e]


ROW_BLOCKS = 16     #: row blocks of the d × d Grams on the Gram path (its block triangle exceeds the triangle by ≤ 1/16)
MAX_BYTES = 1 << 31  #: memory the Gram path may hold (its factors and one row block of the writers' Grams)


def _block_rows(d: int) -> int:
    """Rows per row block of the d × d Grams: ⌈d / ROW_BLOCKS⌉."""
    return -(-d // ROW_BLOCKS)


def _block_entries(d: int) -> int:
    """Entries of the d × d block upper triangle the Gram path reads: Σ over row blocks [i0, i1) of
    (i1 − i0)·(d − i0) (the triangle d(d+1)/2 and the diagonal blocks' lower halves)."""
    B = _block_rows(d)
    return sum(min(B, d - i0) * (d - i0) for i0 in range(0, d, B))


def composition_costs(cfg) -> dict[str, float]:
    """Multiply-adds of each path of :func:`composition_scores` on a model of shape `cfg` (L layers,
    h heads, e = d_head, d = d_model; the L − 1 writer and L − 1 reader layers, the pairs
    P = 3 · L(L−1)/2 · h² of (writer, reader, mode)). Both form the factors: h·e²·d a writer head
    (R_V W_O) and 3·h·d·e² a reader head (its three modes), (L − 1)·4·h·d·e² in all; then

    - ``"cores"``: an e × e core per pair and mode, e²·d each: P · e² · d;
    - ``"gram"``: the row blocks of every writer's and reader mode's Gram ((L − 1)·4·h of them,
      e multiply-adds an entry) and one inner product of them per pair and mode, over the
      n = :func:`_block_entries` (≈ d²/2 · (1 + 1/ROW_BLOCKS)) entries each: (L − 1)·4·h·e·n + P·n.

    The small QR factors (O(d·e²) each, 4 a head) and the e × e norm products (2·L·h·e³) are not
    counted, nor the Gram path's cores under its noise floor (3·h·e²·d a writer head and reader layer;
    data-dependent: none on GPT-2 small's random checkpoint, 36 of the 1296 pairs on the planted one)."""
    L, H, e, d = cfg.n_layers, cfg.n_heads, cfg.d_head, cfg.d_model
    pairs = 3.0 * L * (L - 1) / 2 * H * H
    factors = 4.0 * max(L - 1, 0) * H * d * e * e
    n = _block_entries(d)
    return {"cores": factors + pairs * e * e * d, "gram": factors + 4.0 * max(L - 1, 0) * H * e * n + pairs * n}


def composition_bytes(cfg) -> dict[str, float]:
    """Float64 bytes each path holds at its peak, beyond the weights (the cores path also holds one
    product of at most `max_elements`, 2²⁷ bytes by default): ``"cores"`` the writers' left
    factors ((L − 1)·h·e·d); ``"gram"`` every writer's and reader mode's factor
    ((L − 1)·4·h·e·d), one row block of every writer's Gram ((L − 1)·h·B·d) and of one reader
    layer's three modes (3·h·B·d), B = :func:`_block_rows`."""
    L, H, e, d = cfg.n_layers, cfg.n_heads, cfg.d_head, cfg.d_model
    B, W = _block_rows(d), max(L - 1, 0) * H
    return {"cores": 8.0 * W * e * d, "gram": 8.0 * (4 * W * e * d + W * B * d + 3 * H * B * d)}


def composition_path(cfg, max_bytes: float = MAX_BYTES) -> str:
    """The path :func:`composition_scores` takes: ``"gram"`` where it has fewer multiply-adds
    (:func:`composition_costs`; with n ≈ d²/2, where d/(2e²) < 1/(1 + 8e/(3·L·h)): GPT-2 small
    0.09 < 0.46) and holds at most `max_bytes`
    (:func:`composition_bytes`), else ``"cores"`` (GPT-2 small and medium: gram; large and XL,
    whose Gram path would hold 2.4 and 5.4 GB: cores)."""
    cost = composition_costs(cfg)
    return "gram" if cost["gram"] < cost["cores"] and composition_bytes(cfg)["gram"] <= max_bytes else "cores"


def composition_cost(cfg) -> float:
    """Multiply-adds of :func:`composition_scores` on a model of shape `cfg`, on the path it takes
    (:func:`composition_path`, :func:`composition_costs`)."""
    return composition_costs(cfg)[composition_path(cfg)]


def _layer_factors(weights: Weights):
    """Per layer l, each block read once: (‖W_OV‖_F [h], ‖W_QK‖_F [h], the writer's left factor
    P = R_V W_O [h e d] (None at the last layer), the reader's right factors [3 h d e] of modes
    Q, K, V: W_Q R_Kᵀ, W_K R_Qᵀ, W_V R_Oᵀ (None at layer 0)), float64
    (:func:`composition_scores`)."""
    L = weights.cfg.n_layers
    T = lambda x: x.transpose(-1, -2)  # noqa: E731
    for l in range(L):
        W_Q, W_K, W_V, W_O = head_weights(weights, l)[:4]                                # [h d e] ×3, [h e d] written
        R = {"Q": _r(W_Q), "K": _r(W_K), "V": _r(W_V), "O": _r(W_O.transpose(-1, -2))}  # [h e e]
        n_ov = (R["V"] @ T(R["O"])).flatten(-2).norm(dim=-1)                              # [h] ‖W_V W_O‖_F
        n_qk = (R["Q"] @ T(R["K"])).flatten(-2).norm(dim=-1)                              # [h] ‖W_Q W_Kᵀ‖_F
        left = R["V"] @ W_O if l < L - 1 else None                                       # [h e d]
        right = torch.stack([W_Q @ T(R["K"]), W_K @ T(R["Q"]), W_V @ T(R["O"])]) if l else None  # [3 h d e]
        yield n_ov, n_qk, left, right
        del W_Q, W_K, W_V, W_O, R, left, right


def composition_scores(weights: Weights, max_elements: int = 1 << 24, path: str | None = None
                       ) -> dict[str, Float[Tensor, "L h L h"]]:
    """{mode: scores [layer_A head_A layer_B head_B]} for modes Q, K, V (module docstring); 0 where l_B ≤ l_A.

    With R_X the e × e factor of W_X (and R_O that of W_Oᵀ): the writer's left factor
    P_A = R_V^A W_O^A [e d]; the reader's right factor F_B = W_Q R_Kᵀ (Q), W_K R_Qᵀ (K) or
    W_V R_Oᵀ (V) [d e]; the numerator is ‖P_A F_B‖_F, and ‖P_A‖_F = ‖W_OV^A‖_F, ‖F_B‖_F = ‖M_B‖_F.
    Two exact ways to it (`path`; default :func:`composition_path`, the one with fewer
    multiply-adds within :data:`MAX_BYTES`):

    - ``"cores"``: every pair's e × e core P_A F_B (e²·d multiply-adds a pair and mode); all of
      them for a reader layer are one matrix product: the writers of the layers below, stacked
      ([writers·e d]), times the layer's three modes side by side ([d 3·heads·e]), chunked to at
      most `max_elements` entries (each entry the same dot product as with one product per mode).
    - ``"gram"``: ‖P_A F_B‖²_F = tr(F_Bᵀ P_Aᵀ P_A F_B) = ⟨G_A, H_B⟩_F with the symmetric d × d Grams
      G_A = P_Aᵀ P_A = W_OVᵀ W_OV and H_B = F_B F_Bᵀ = M_B M_Bᵀ, of the factors scaled to unit
      norm (P_A/‖P_A‖_F, F_B/‖F_B‖_F), so ⟨G_A, H_B⟩ is the squared score itself. Symmetry halves
      it: ⟨G, H⟩ = Σ_i G_ii H_ii + 2 Σ_{i<j} G_ij H_ij, read in row blocks [i0, i1) of
      :func:`_block_rows` rows, columns i0… (the diagonal block whole, the rest doubled — exactly).
      For each row block: every writer's Gram rows once, then per reader layer its three modes'
      rows and one product [writers_below, n] @ [n, 3·heads] (n entries; d²/2 per pair and mode
      instead of e²·d). Float64: each squared score is within about (d² + 2e)·ε of the exact one
      (γ_n ‖x‖‖y‖ for a dot product of n terms, here n ≤ d² over unit-norm Grams, ‖G‖_F ≤ 1, plus
      the Grams' own e-term entries), so a score s is exact to (d² + 2e)·ε/(2s²) relative (1.5e-15
      measured at GPT-2 small's widths) but only to ≈ d·√ε absolute near 0, where the cores path
      resolves ε. Hence pairs with s² ≤ τ² = 1.01·(d² + 2e)·ε (τ ≈ 1.2e-5 at d = 768; rounding can
      make s² of orthogonal heads negative: clamped to 0 first, never NaN) get their e × e core
      formed as on the cores path (:func:`_gram_scores`): every score keeps the cores' accuracy.
    """
    from ..core.applicability import weight_circuits
    weight_circuits(weights.cfg, "composition scores")             # OLMo 2 (QK-norm, no pre-norms): refused
    cfg = weights.cfg
    path = composition_path(cfg) if path is None else path
    if path not in ("cores", "gram"):
        raise ValueError(f"path must be 'cores' or 'gram', not {path!r}")
    L, H, e, d = cfg.n_layers, cfg.n_heads, cfg.d_head, cfg.d_model
    out = {m: torch.zeros(L, H, L, H, dtype=torch.float64) for m in MODES}
    # one pass over the layers, each block read once (a model that holds only some of its blocks
    # rebuilds none): the writers' left factors kept from below, in one buffer
    left = torch.empty(max(L - 1, 0) * H, e, d, dtype=torch.float64)                      # [(L−1)·h e d]
    if path == "gram":
        right = torch.empty(max(L - 1, 0), len(MODES) * H, d, e, dtype=torch.float64)     # [L−1 3·h d e]
        n_left = torch.zeros(max(L - 1, 0) * H, dtype=torch.float64)                        # [(L−1)·h]
        n_right = torch.zeros(max(L - 1, 0), len(MODES) * H, dtype=torch.float64)           # [L−1 3·h]
        for l, (n_ov, n_qk, P, F) in enumerate(_layer_factors(weights)):
            if P is not None:
                left[l * H:(l + 1) * H], n_left[l * H:(l + 1) * H] = P, n_ov
            if F is not None:
                right[l - 1], n_right[l - 1] = F.flatten(0, 1), torch.cat([n_qk, n_qk, n_ov])
        _gram_scores(left, n_left, right, n_right, out)
        return out
    he = H * e
    step = max(1, max_elements // (he * len(MODES) * he))                                # writer layers per product
    left = left.view(-1, d)                                                              # [(L−1)·h·e d]
    n_ovs: list[Tensor] = []                                                             # [h] per layer
    for lb, (n_ov, n_qk, P, F) in enumerate(_layer_factors(weights)):
        n_ovs.append(n_ov)
        if F is not None:
            norm_b = torch.stack([n_qk, n_qk, n_ov])                                     # [3 hB], modes Q K V
            Rb = F.permute(2, 0, 1, 3).reshape(d, len(MODES) * he)                        # [3 hB d e] → [d 3·hB·e]
            for la0 in range(0, lb, step):
                la1 = min(lb, la0 + step)
                n = la1 - la0
                s = _core_scores(left[la0 * he:la1 * he], Rb, torch.cat(n_ovs[la0:la1]), norm_b.flatten())
                s = s.view(n, H, len(MODES), H)                                          # [n·hA 3·hB] → [n hA 3 hB]
                for i, m in enumerate(MODES):
                    out[m][la0:la1, :, lb, :] = s[:, :, i]
                del s
            del Rb
        if P is not None:
            left[lb * he:(lb + 1) * he] = P.reshape(he, d)                               # [h e d] → [h·e d]
    return out


def _core_scores(rows: Float[Tensor, "n_e d"], Rb: Float[Tensor, "d R_e"], n_rows: Float[Tensor, "n"],
                 n_cols: Float[Tensor, "R"]) -> Float[Tensor, "n R"]:
    """The cores path's scores ‖P_A F_B‖_F / (‖P_A‖_F ‖F_B‖_F) of n writer heads against R reader
    modes: `rows` their left factors stacked [n·e d], `Rb` the right factors side by side [d R·e],
    `n_rows`, `n_cols` their norms; every e × e core in one product, 0 where a norm is 0."""
    n, R = n_rows.numel(), n_cols.numel()
    e = rows.shape[0] // n
    num = (rows @ Rb).square_().view(n, e, R, e).sum((1, 3)).sqrt_()                    # [n R] ‖core‖_F
    den = n_rows[:, None] * n_cols[None]                                                 # [n R]
    return torch.where(den > 0, num / torch.where(den > 0, den, 1.0), 0.0)


def _gram_scores(left: Float[Tensor, "W e d"], n_left: Float[Tensor, "W"], right: Float[Tensor, "Lm1 R d e"],
                 n_right: Float[Tensor, "Lm1 R"], out: dict) -> None:
    """The Gram path of :func:`composition_scores`: `left` the W = (L−1)·h writers' factors P_A and
    their norms, `right` the L − 1 reader layers' factors F_B (3·h each, modes Q, K, V) and theirs;
    writes √max(⟨G_A, H_B⟩, 0) of the unit-norm Grams into `out` — except below the noise floor
    score² ≤ τ² = 1.01·(d² + 2e)·ε (the docstring's bound: there the Gram value may be all
    rounding), where the writer's cores with the reader layer are formed as on the cores path, one
    row block [e 3·h·e] of its product (3·h·e²·d a writer head and reader layer; none on GPT-2
    small's random checkpoint, the exactly or nearly orthogonal planted pairs), so that no score
    loses more than its last digits."""
    W, e, d = left.shape
    Lm1, R = right.shape[0], right.shape[1]
    H = R // len(MODES)
    inv_l = torch.where(n_left > 0, 1 / n_left.square(), 0.0)                            # [W] 1/‖W_OV‖²
    inv_r = torch.where(n_right > 0, 1 / n_right.square(), 0.0)                          # [L−1 3·h] 1/‖M‖²
    sq = torch.zeros(Lm1, W, R, dtype=torch.float64)                   # [reader layer, writers, 3·h]
    B = _block_rows(d)
    # the row blocks' Grams in two buffers reused block after block (a fresh tensor of this size a
    # block costs its page faults: twice the CPU of the product, measured)
    G_buf = torch.empty(W * B * d, dtype=torch.float64)
    H_buf = torch.empty(R * B * d, dtype=torch.float64)
    for i0 in range(0, d, B):
        i1 = min(d, i0 + B)
        b, w = i1 - i0, d - i0
        # rows i0:i1 of 2·G_A/‖W_OV^A‖², columns i0: (the scale on the small left operand [W e b]), then
        # the diagonal block halved: G_ij and G_ji (i < j) both counted, each entry of the triangle once
        with one_thread():
            A = left[:, :, i0:i1].transpose(-1, -2) * (2 * inv_l)[:, None, None]         # [W b e]
        G = torch.bmm(A, left[:, :, i0:], out=G_buf[:W * b * w].view(W, b, w))           # [W b d−i0]
        # the rest on one thread: elementwise passes and thin products [lb·h b·w] @ [b·w 3·h] are
        # memory-bound (two threads spent 3× the CPU on 2 busy cores, measured)
        with one_thread():
            G[:, :, :b] *= 0.5
            G = G.view(W, b * w)                                                         # [W b·(d−i0)], unit norm
            for lb in range(1, Lm1 + 1):
                F = right[lb - 1]                                                        # [3·h d e]
                Fb = F[:, i0:i1] * inv_r[lb - 1, :, None, None]                          # [3·h b e], 1/‖M‖²
                Hs = torch.bmm(Fb, F[:, i0:].transpose(-1, -2), out=H_buf[:R * b * w].view(R, b, w))
                Hs = Hs.view(R, b * w)                                                   # [3·h b·(d−i0)]
                sq[lb - 1, :lb * H] += G[:lb * H] @ Hs.T                                 # [lb·h 3·h]
        del G
    with one_thread():
        _floor_cores(sq, left, n_left, right, n_right, out)


def _floor_cores(sq, left, n_left, right, n_right, out) -> None:
    """:func:`_gram_scores`' square roots, with the cores path's products under the noise floor."""
    W, e, d = left.shape
    Lm1, R = right.shape[0], right.shape[1]
    H = R // len(MODES)
    below = sq <= 1.01 * (d * d + 2 * e) * torch.finfo(torch.float64).eps               # [L−1 W 3·h]
    below &= torch.arange(W)[None, :, None] < H * torch.arange(1, Lm1 + 1)[:, None, None]   # writers below
    s = sq.clamp_(min=0).sqrt_()
    for lb1 in below.any(2).any(1).nonzero()[:, 0].tolist():                             # the cores path's
        Rb = right[lb1].transpose(0, 1).reshape(d, R * e)                                # [d 3·h·e], its layout
        for w in below[lb1].any(1).nonzero()[:, 0].tolist():                             # products, row by row
            r = below[lb1, w]
            s[lb1, w, r] = _core_scores(left[w], Rb, n_left[w:w + 1], n_right[lb1])[0, r]
    s = s.view(Lm1, Lm1, H, len(MODES), H)                                               # [lb−1 la hA 3 hB]
    for lb in range(1, Lm1 + 1):
        for i, m in enumerate(MODES):
            out[m][:lb, :, lb, :] = s[lb - 1, :lb, :, i]


@dataclasses.dataclass
class Edge:
    mode: str
    source: tuple[int, int]       # (layer, head) writing
    target: tuple[int, int]       # (layer, head) reading
    score: float

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclasses.dataclass
class Composition(HtmlRepr):
    """Q-, K-, V-composition scores of every pair of heads in different layers (module docstring)."""

    fingerprint: str
    processing: dict
    n_layers: int
    n_heads: int
    scores: dict[str, list]       # mode → [L][h][L][h]
    edges: dict[str, list[Edge]]  # mode → the strongest EDGES, descending
    baseline: float               # 1/√d_model: the score of two unrelated (random) heads
    incoming: dict[str, list] = dataclasses.field(default_factory=dict)  # mode → [L][h] max over writers
    outgoing: dict[str, list] = dataclasses.field(default_factory=dict)  # mode → [L][h] max over readers

    def score(self, mode: str, source: tuple[int, int], target: tuple[int, int]) -> float:
        return self.scores[mode][source[0]][source[1]][target[0]][target[1]]

    def to_dict(self) -> dict:
        return {"fingerprint": self.fingerprint, "processing": self.processing, "n_layers": self.n_layers,
                "n_heads": self.n_heads, "scores": self.scores, "baseline": self.baseline,
                "incoming": self.incoming, "outgoing": self.outgoing,
                "edges": {m: [e.to_dict() for e in v] for m, v in self.edges.items()}}

    def render(self) -> str:
        """The strongest edges of each mode as text (headscope.report.views.composition.text)."""
        return render_text(self)


def strongest_edges(scores: Tensor, mode: str, k: int = EDGES) -> list[Edge]:
    """The k largest scores of [L h L h] (ties by index), as edges."""
    L, H = scores.shape[0], scores.shape[1]
    flat = scores.flatten()
    k = min(k, int((flat > 0).sum()))
    order = torch.argsort(flat, descending=True, stable=True)[:k]
    out = []
    for i in order.tolist():
        la, ha, lb, hb = i // (H * L * H), (i // (L * H)) % H, (i // H) % L, i % H
        out.append(Edge(mode, (la, ha), (lb, hb), float(flat[i])))
    return out


@torch.no_grad()
def composition(model_or_weights, k: int = EDGES) -> Composition:
    """Composition scores of a model (under its bound processing) or of given weights, with the
    strongest edges."""
    if isinstance(model_or_weights, Weights):
        W, fp = model_or_weights, ""
    else:
        W, fp = model_or_weights.weights(), model_or_weights.fingerprint
    s = composition_scores(W)
    e, d = W.cfg.d_head, W.cfg.d_model
    return Composition(
        fingerprint=fp, processing=W.processing.to_dict(), n_layers=W.cfg.n_layers, n_heads=W.cfg.n_heads,
        scores={m: s[m].tolist() for m in MODES}, edges={m: strongest_edges(s[m], m, k) for m in MODES},
        incoming={m: s[m].amax(dim=(0, 1)).tolist() for m in MODES},   # [L h]: the reader's strongest writer
        outgoing={m: s[m].amax(dim=(2, 3)).tolist() for m in MODES},   # [L h]: the writer's strongest reader
        # unrelated heads (independent, isotropic factors): E‖AB‖²_F ≈ ‖A‖²_F ‖B‖²_F / d, so ≈ 1/√d
        baseline=float((1.0 / d) ** 0.5) if e else 0.0,
    )


# -- per head: singular directions of W_OV and W_QK read through the vocabulary ----------------


DIRECTIONS = 3      #: singular directions kept per circuit
DIRECTION_TOKENS = 5  #: tokens listed at each end of a direction


def _low_rank_svd(L: Float[Tensor, "h d e"], R: Float[Tensor, "h d e"], keep: int | None = None):
    """SVD of L Rᵀ [h d d] (rank ≤ e) from e × e cores: (U [h d k], σ [h e], V [h d k]) with
    L Rᵀ = U diag σ Vᵀ, the first k = `keep` (default all e) singular vectors formed.

    L = Q_L R_L (Householder), so U = Q_L U_c for the SVD U_c Σ V_cᵀ of R_L R_Rᵀ; Q_L is applied
    to U_c's first k columns from its reflectors (ormqr), never formed. Per head, small decompositions:
    the heads split over the caller's threads, one torch thread each (:func:`split_heads`, the same bits)."""
    e = L.shape[-1]
    k = e if keep is None else min(keep, e)

    def part(sl: slice):
        # column-major inputs (stacked_columns): geqrf's own copy of them is then a straight one
        (aL, tL), (aR, tR) = torch.geqrf(stacked_columns([L[sl]])), torch.geqrf(stacked_columns([R[sl]]))  # [h d e], [h e]
        # [h e e], column-major as torch.linalg.qr returns R (the same bits of R_L R_Rᵀ and its SVD)
        RL, RR = (a[..., :e, :].triu().mT.contiguous().mT for a in (aL, aR))
        Uc, sig, Vhc = torch.linalg.svd(RL @ RR.transpose(-1, -2))

        def lift(a, tau, c):                                                        # Q [d e] @ c [e k]
            return torch.ormqr(a, tau, torch.cat([c, c.new_zeros(*c.shape[:-2], a.shape[-2] - e, k)], -2))

        return lift(aL, tL, Uc[..., :k]), sig, lift(aR, tR, Vhc.transpose(-1, -2)[..., :k])
    return tuple(torch.cat(p) for p in zip(*split_heads(part, L.shape[0])))


def _direction_ends(T: Float[Tensor, "N d"], D: Float[Tensor, "m d"], n: int, exact, t_norm: float | None = None
                    ) -> tuple[Tensor, Tensor]:
    """The `n` highest and lowest tokens (positions [m n] each, ties by position) of each direction's
    scores T D[j], exactly as the stable sort of ``exact(j)`` (one matrix-vector product, [N]) lists them.

    The scores come from one product T Dᵀ; a float64 dot product of length d is within
    γ = 1.01 d ε ‖t‖ ‖D[j]‖ of the exact value in any summation order, so where every gap between
    the first n + 1 (last n + 1) sorted scores exceeds 2 max_t γ, both products sort them alike.
    The other directions (ties, or scores that are rounding noise: a direction that reads
    nothing) are recomputed with ``exact(j)``. ``t_norm``: max_t ‖t‖ when the caller holds it
    (:func:`_max_row_norm` of `T`).
    """
    N, d = T.shape
    approx = D @ T.T                                                                     # [m N]
    with small_matrices():                   # selections and norms over [m N]: a second thread only waits
        return _ends(T, D, approx, n, exact, t_norm)


def _ends(T: Tensor, D: Tensor, approx: Tensor, n: int, exact, t_norm: float | None) -> tuple[Tensor, Tensor]:
    """:func:`_direction_ends` from the scores `approx` = D Tᵀ [m N]."""
    N, d = T.shape
    k = min(n + 1, N)
    # the k highest (descending) and k lowest (ascending): where their gaps all exceed tol, no two
    # are tied, so these are the stable sort's first and last k, whatever order topk breaks ties in
    hi, lo = approx.topk(k, dim=-1), approx.topk(k, dim=-1, largest=False)               # [m k] each
    top, bottom = hi.indices[:, :n].clone(), lo.indices[:, :n].clone()
    t_norm = _max_row_norm(T) if t_norm is None else t_norm
    tol = 2 * 1.01 * d * torch.finfo(torch.float64).eps * D.norm(dim=1) * t_norm                     # [m]
    gaps_top, gaps_bottom = hi.values[:, :-1] - hi.values[:, 1:], lo.values[:, 1:] - lo.values[:, :-1]
    unsure = ((gaps_top <= tol[:, None]).any(1) | (gaps_bottom <= tol[:, None]).any(1)).nonzero()[:, 0]
    for j in unsure.tolist():
        o = torch.argsort(exact(j), descending=True, stable=True)
        top[j], bottom[j] = o[:n], o.flip(0)[:n]
    return top, bottom


def _max_row_norm(T: Float[Tensor, "N d"]) -> float:
    """max_t ‖T[t]‖ (the bound :func:`_direction_ends` scales its tolerance by)."""
    return float(T.norm(dim=1).max())


class DirectionVocab(NamedTuple):
    """The tokens :func:`head_directions` reads, in float64: E = W_E[ids] [N d], U = W_U[:, ids] [d N] and
    their largest row norms (:func:`_max_row_norm` of E and Uᵀ), formed once for every layer."""

    E: Tensor
    U: Tensor
    E_norm: float
    U_norm: float


def direction_vocab(E: Float[Tensor, "N d"], U: Float[Tensor, "d N"]) -> DirectionVocab:
    """:class:`DirectionVocab` of W_E[ids] and W_U[:, ids] (float64)."""
    return DirectionVocab(E, U, _max_row_norm(E), _max_row_norm(U.T))


def head_directions(weights: Weights, layer: int, ids: Tensor, tokens, k: int = DIRECTIONS,
                    n: int = DIRECTION_TOKENS, *, vocab: tuple[Tensor, Tensor] | DirectionVocab | None = None,
                    block: HeadWeights | None = None) -> list[dict]:
    """Per head of `layer`: the singular values of W_OV = W_V W_O and W_QK = W_Q W_Kᵀ and, for the
    top `k` singular triples (σ, u, v), the tokens of `ids` each side reads or writes.

    OV: W_OV = Σ σ_i u_i v_iᵀ: a token t whose embedding W_E[t] has a large u_i component
    (``reads``) makes the head write σ_i (W_E[t]·u_i) v_i, raising the logits of the tokens s
    with large W_U[:, s]·v_i (``writes``); the ``-`` lists are the other end (the sign pair
    (u, v) → (−u, −v) is the same direction). QK: W_QK = Σ σ_i u_i v_iᵀ: queries with large
    W_E[t]·u_i score keys with large W_E[s]·v_i highly. Tokens are the given ids' (e.g. the
    atlas's frequent tokens), read through the processed W_E and W_U. `tokens(ids)` gives
    their strings. Float64, from e × e cores (:func:`_low_rank_svd`). ``vocab``: W_E[ids] [N d] and
    W_U[:, ids] [d N] in float64, or their :func:`direction_vocab`, when the caller holds them (one
    copy for every layer); ``block``: the layer's :func:`head_weights`.
    """
    if vocab is None:
        vocab = (weights.W_E[ids].double(), weights.W_U[:, ids].double())                # [N d] [d N]
    E, Uu, E_norm, U_norm = vocab if isinstance(vocab, DirectionVocab) else direction_vocab(*vocab)
    w = head_weights(weights, layer) if block is None else block
    kk = min(k, weights.cfg.d_head)
    ov = _low_rank_svd(w.W_V, w.W_O.transpose(-1, -2), kk)
    qk = _low_rank_svd(w.W_Q, w.W_K, kk)
    ids = ids.tolist()

    # every direction's scores in one product per side (:func:`_direction_ends`: the lists of one
    # matrix-vector product per direction, which orders ties by its own rounding): [h kk n] each
    H = weights.cfg.n_heads
    sides = (ov[0], qk[0], qk[2])                                                         # [h d e] each
    D = torch.stack(sides)[..., :kk].transpose(-1, -2).reshape(3 * H * kk, -1)          # [3·h·kk d]
    top, bottom = _direction_ends(E, D, n, lambda j: E @ sides[j // (H * kk)][(j // kk) % H, :, j % kk], E_norm)
    reads, queries, keys = zip(top.view(3, H, kk, -1).tolist(), bottom.view(3, H, kk, -1).tolist())
    D = ov[2][..., :kk].transpose(-1, -2).reshape(H * kk, -1)                            # [h·kk d]
    top, bottom = _direction_ends(Uu.T, D, n, lambda j: ov[2][j // kk, :, j % kk] @ Uu, U_norm)
    writes = (top.view(H, kk, -1).tolist(), bottom.view(H, kk, -1).tolist())

    # the strings of every listed position, in one call, in order of first appearance
    lists = (reads, writes, queries, keys)
    seen = dict.fromkeys(p for side in lists for end in side for head in end for row in head for p in row)
    names = dict(zip(seen, tokens([ids[p] for p in seen])))                               # position → string

    def strs(pos: list[int]) -> list[str]:
        return [names[p] for p in pos]

    ov_sig, qk_sig = ov[1].tolist(), qk[1].tolist()                                      # [h e] each
    out = []
    for h in range(H):
        row = {"ov_singular_values": ov_sig[h], "qk_singular_values": qk_sig[h],
               "ov_directions": [], "qk_directions": []}
        for i in range(kk):
            row["ov_directions"].append({"sigma": ov_sig[h][i], "reads": strs(reads[0][h][i]),
                                         "writes": strs(writes[0][h][i]), "reads_neg": strs(reads[1][h][i]),
                                         "writes_neg": strs(writes[1][h][i])})
            row["qk_directions"].append({"sigma": qk_sig[h][i], "queries": strs(queries[0][h][i]),
                                         "keys": strs(keys[0][h][i]), "queries_neg": strs(queries[1][h][i]),
                                         "keys_neg": strs(keys[1][h][i])})
        out.append(row)
    return out
