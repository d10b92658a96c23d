"""The QK circuit of one head as a bilinear form over effective token embeddings (seed 002).

Effective embeddings (what head (L, h) reads for a token t, context averaged out):

- ``full`` (variant a): x = W_E[t] + mean_p W_pos[p]; then for every block l < L:
  x += mean attn_l output (over a reference batch), x += MLP_l(x); finally
  x̂ = LN1_L(x).
- ``mlp`` (variant b): x̂ = LN1_L(MLP_0(W_E[t] + mean W_pos + mean attn_0)), the MLP0
  output alone (the post's "MLP0 as an extended embedding"). On planted checkpoints
  MLP0 does not carry the semantic block, so this variant shows nothing there.

Mean attention outputs (``attn_means``), two sources (:data:`ATTN_MEANS`):

- ``prompts`` (headscope's): the mean of ``hook_attn_out`` over positions ≥ 1 of the
  seeded category prompts (:func:`mean_attn_outputs`);
- ``authors`` (the L1H5 authors', ``src/ablation.py:26-66`` at 6c45e47): token ids
  0..P−1 (P = min(1024, n_ctx)) run as *one* sequence without BOS, every position given
  the mean position embedding mean_p W_pos[p], and ``hook_attn_out`` averaged over all
  P positions (b_O included) (:func:`authors_attn_means`). Their code stops at layer 1;
  for deeper heads the same sequence runs through the earlier blocks unchanged.

With processed weights (fold_ln) LN1 only centres and scales: x̂ lies in 1⊥. The head's
token-token score is ``score(t, s) = x̂_t W_QK x̂_sᵀ / √d_head`` with
``W_QK = P W_Q W_Kᵀ P`` (P the projector onto 1⊥, exact since x̂ ⊥ 1). Biases add a
key-only term ``x̂_s · (W_K b_Q)`` (kept apart: it is not token-token) and query-only
terms that softmax ignores.

Decomposition: ``W_QK = S + A``, ``S = (W + Wᵀ)/2``, ``A = (W − Wᵀ)/2``. For x = y the
score is ``x S xᵀ`` (``x A xᵀ = 0``), so self-attention is governed by S alone. S is
diagonalised in float64, ``S = Σ_i λ_i v_i v_iᵀ``, and a score splits into the
per-direction terms ``λ_i (x̂_t·v_i)(x̂_s·v_i)`` plus ``x̂_t A x̂_sᵀ``: negative λ_i with
large ``(x̂_t·v_i)²`` is why t avoids itself. Vocab × vocab top-k neighbours are
computed as ``(X W_Q)(X W_K)ᵀ`` in row chunks, never materialising d_vocab².
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Iterator

import torch
from jaxtyping import Float, Int

from .._errors import HeadscopeError
from .._memory import rows_that_fit
from ..core.forward import ForwardPass, mlp, normalize
from ..core.weights import Weights
from ..lowrank import small_matrices, span_basis

Tensor = torch.Tensor
VARIANTS = ("full", "mlp")
ATTN_MEANS = ("prompts", "authors")
AUTHORS_SEQUENCE = 1024     #: the authors' sequence: token ids 0..1023


# -- effective embeddings -------------------------------------------------------------------


def mean_attn_outputs(weights: Weights, tokens: Int[Tensor, "batch pos"], layers: int) -> list[Tensor]:
    """Mean attention output of blocks 0..layers-1 over positions ≥ 1 of `tokens`. [layers][d]"""
    return list(attn_means_as_needed(weights, layers, "prompts", tokens))


def authors_attn_means(weights: Weights, layers: int) -> list[Tensor]:
    """Mean attention output of blocks 0..layers-1, the authors' way (module docstring). [layers][d]"""
    return list(attn_means_as_needed(weights, layers, "authors"))


class AttnMeans(Sequence):
    """Mean attention outputs of blocks 0..layers−1 ([d] each), each computed when first read.

    Reading mean l runs the reference forward pass through block l (the blocks not run yet, every
    batch together), so a pass up the residual stream that reads mean l right after block l
    (:func:`effective_embeddings_by_layer`) finds that block still held: under a block budget
    the reference pass and the embeddings share one walk up the blocks. `reduce` maps the
    layer's ``hook_attn_out`` [b p d] (on the CPU) to its mean [d]."""

    def __init__(self, weights: Weights, forward: ForwardPass | None, layers: int, reduce):
        self._dtype, self._forward, self._n, self._reduce = weights.dtype, forward, layers, reduce
        self._means: list[Tensor] = []

    def __len__(self) -> int:
        return self._n

    @torch.no_grad()
    def __getitem__(self, l):
        if isinstance(l, slice):
            return [self[i] for i in range(*l.indices(self._n))]
        l = range(self._n)[l]
        while len(self._means) <= l:
            k = len(self._means)
            for step in self._forward.steps:          # block k of every batch (a batch done at k stops there)
                next(step, None)
            a = torch.cat([kp.cache[f"blocks.{k}.hook_attn_out"].cpu() for kp in self._forward.keepers])
            self._means.append(self._reduce(a).to(self._dtype))
        return self._means[l]


PROMPT_BATCH = 32           #: prompts per batch of the ``prompts`` source's forward pass


def prompt_mean(attn_out: Float[Tensor, "b p d"]) -> Float[Tensor, "d"]:
    """The ``prompts`` source's mean attention output: over every prompt and position ≥ 1 (not BOS)."""
    return attn_out[:, 1:].reshape(-1, attn_out.shape[-1]).mean(0)


def _tokens_key(tokens: Tensor) -> tuple:
    t = torch.as_tensor(tokens)
    return tuple(t.shape), str(t.dtype), t.cpu().contiguous().numpy().tobytes()


def share_prompt_attn_means(weights: Weights, tokens: Int[Tensor, "b p"], attn_outs: Sequence[Tensor]) -> None:
    """Remember the ``prompts`` source's means of `tokens` (at most :data:`PROMPT_BATCH` prompts: one
    batch) from their blocks' ``hook_attn_out`` [b p d] (blocks 0, 1, …) computed elsewhere — the
    same forward pass, one batch of the same prompts, so the same values: a later
    :func:`attn_means_as_needed` of these tokens on these weights reads them instead of running it
    again. Kept on the weights object (analyses never modify weights in place; an edited model has
    its own)."""
    if torch.as_tensor(tokens).shape[0] > PROMPT_BATCH:
        raise ValueError(f"share_prompt_attn_means: expected ≤ {PROMPT_BATCH} prompts (one batch), "
                         f"got {torch.as_tensor(tokens).shape[0]}")
    memo = weights.__dict__.setdefault("_prompt_attn_means", {})
    key = _tokens_key(tokens)
    if len(attn_outs) > len(memo.get(key, [])):
        memo[key] = [prompt_mean(a.cpu()).to(weights.dtype) for a in attn_outs]


def attn_means_as_needed(weights: Weights, layers: int, source: str, tokens: Tensor | None = None) -> AttnMeans:
    """:func:`attn_means_for` as an :class:`AttnMeans`: each mean computed when first read (or read
    from :func:`share_prompt_attn_means`'s memo, for the ``prompts`` source)."""
    if source not in ATTN_MEANS:
        raise HeadscopeError(f"attention means: expected one of {', '.join(ATTN_MEANS)}, got {source!r}")
    if layers == 0:
        return AttnMeans(weights, None, 0, None)
    names = [f"blocks.{l}.hook_attn_out" for l in range(layers)]
    if source == "prompts":
        known = weights.__dict__.get("_prompt_attn_means", {}).get(_tokens_key(tokens), [])
        if len(known) >= layers:                  # these prompts' forward ran already (the survey's first batch)
            means = AttnMeans(weights, None, layers, None)
            means._means = list(known[:layers])
            return means
        fp = ForwardPass(weights, tokens, names, batch_size=PROMPT_BATCH, stop_at_layer=layers)
        return AttnMeans(weights, fp, layers, prompt_mean)
    cfg = weights.cfg
    P = min(AUTHORS_SEQUENCE, cfg.n_ctx)
    w = weights                                  # rotary: positions act inside attention, nothing to average
    if weights.W_pos is not None:
        mean_pos = weights.W_pos.mean(0, keepdim=True).expand(cfg.n_ctx, cfg.d_model).contiguous()   # [n_ctx d]
        w = dataclasses.replace(weights, W_pos=mean_pos)
    fp = ForwardPass(w, torch.arange(P)[None], names, stop_at_layer=layers)                 # no BOS
    return AttnMeans(weights, fp, layers, lambda a: a[0].mean(0))                           # [1 P d] → [d]


def mean_position(weights: Weights) -> Tensor | float:
    """mean_p W_pos[p] [d], the position part of every effective embedding; 0 for a rotary model
    (its positions rotate queries and keys inside attention and add nothing to the residual)."""
    return weights.W_pos.mean(0) if weights.W_pos is not None else 0.0


def attn_means_for(weights: Weights, layers: int, source: str, tokens: Tensor | None = None) -> list[Tensor]:
    """Mean attention outputs of blocks 0..layers-1 from `source` (:data:`ATTN_MEANS`);
    ``prompts`` needs the category prompt `tokens`."""
    return list(attn_means_as_needed(weights, layers, source, tokens))


@torch.no_grad()
def effective_embeddings_by_layer(
    weights: Weights,
    token_ids: Int[Tensor, "n"] | None = None,
    *,
    attn_means: list[Tensor],
    upto: int | None = None,
    chunk: int = 4096,
    scales: bool = False,
) -> Iterator[tuple[int, Float[Tensor, "n d_model"]]]:
    """(l, x̂_t for the heads of layer l) for l = 0..upto (default: every layer), variant ``full``.

    One pass up the residual stream: x = W_E[t] + mean W_pos, then per block
    x += mean attn_l, x += MLP_l(x); each layer's x̂ = LN1_l(x) is yielded before that
    layer's block is added. Every block is read once, whatever the number of tokens;
    rows are processed `chunk` at a time. Needs ``attn_means`` for blocks 0..upto−1.
    With ``scales=True`` it yields (l, x̂, σ) with σ [n] LN1_l's scale of each residual.
    """
    from ..core.applicability import weight_circuits
    weight_circuits(weights.cfg, "the QK bilinear form of effective embeddings")
    cfg = weights.cfg
    upto = cfg.n_layers - 1 if upto is None else cfg.check_layer(upto)
    if len(attn_means) < upto:
        raise HeadscopeError(f"effective embeddings need mean attention outputs of {upto} blocks, got {len(attn_means)}")
    ids = torch.arange(cfg.vocab) if token_ids is None else torch.as_tensor(token_ids).long()
    if token_ids is None:                                  # the whole vocabulary: one pass, one [n d] buffer
        x = weights.W_E[:cfg.vocab] + mean_position(weights)                            # [n d] residual
    else:
        x = weights.W_E[ids]                                                            # [n d] residual (a copy)
        x += mean_position(weights)
    for l in range(upto + 1):
        block = weights.blocks[l]
        x_hat, sigma = normalize(x, block.ln1_w, block.ln1_b, cfg)
        yield (l, x_hat, sigma) if scales else (l, x_hat)
        if l == upto:
            return
        for a in range(0, len(ids), chunk):
            xa = x[a:a + chunk]                                                         # a view: updated in place
            xa += attn_means[l]
            xa += mlp(block, xa, cfg)[0]


@torch.no_grad()
def effective_embeddings(
    weights: Weights,
    layer: int,
    token_ids: Int[Tensor, "n"] | None = None,
    *,
    variant: str = "full",
    attn_means: list[Tensor] | None = None,
    chunk: int = 4096,
) -> Float[Tensor, "n d_model"]:
    """x̂_t for the heads of `layer` (see module docstring); all tokens by default."""
    from ..core.applicability import weight_circuits
    weight_circuits(weights.cfg, "the QK bilinear form of effective embeddings")
    cfg = weights.cfg
    if variant not in VARIANTS:
        raise HeadscopeError(f"embedding variant: expected one of {', '.join(VARIANTS)}, got {variant!r}")
    cfg.check_layer(layer)
    attn_means = attn_means or []
    if variant == "full":
        *_, (_, x_hat) = effective_embeddings_by_layer(weights, token_ids, attn_means=attn_means, upto=layer,
                                                       chunk=chunk)
        return x_hat
    if layer == 0:
        raise HeadscopeError("embedding variant 'mlp' needs a head in layer ≥ 1 (it reads MLP0's output)")
    if len(attn_means) < 1:
        raise HeadscopeError(f"effective embeddings need mean attention outputs of 1 blocks, got {len(attn_means)}")
    ids = torch.arange(cfg.vocab) if token_ids is None else torch.as_tensor(token_ids).long()
    ln1 = weights.blocks[layer]
    out = torch.empty(len(ids), cfg.d_model, dtype=weights.dtype)
    for a in range(0, len(ids), chunk):
        x = mlp(weights.blocks[0], weights.W_E[ids[a:a + chunk]] + mean_position(weights) + attn_means[0], cfg)[0]
        out[a:a + chunk] = normalize(x, ln1.ln1_w, ln1.ln1_b, cfg)[0]
    return out


# -- the bilinear form ------------------------------------------------------------------------


def qk_matrix(weights: Weights, layer: int, head: int, *, centred: bool | None = None
              ) -> Float[Tensor, "d_model d_model"]:
    """W_QK = P W_Q W_Kᵀ P in float64 (P = I − 11ᵀ/d projects onto 1⊥; off with centred=False;
    default: on when the readers see 1⊥, :attr:`Weights.reads_centred` — not under RMSNorm)."""
    from ..core.applicability import weight_circuits
    weight_circuits(weights.cfg, "the QK bilinear form of effective embeddings")
    centred = weights.reads_centred if centred is None else centred
    b = weights.blocks[layer]
    W = b.W_Q[head].double() @ b.W_K[head].double().T                                  # [d d]
    if centred:
        W = W - W.mean(0, keepdim=True)
        W = W - W.mean(1, keepdim=True)
    return W


def qk_factors(weights: Weights, layer: int, head: int, *, centred: bool | None = None
               ) -> tuple[Float[Tensor, "d_model d_head"], Float[Tensor, "d_model d_head"]]:
    """(U, V) in float64 with ``W_QK = U Vᵀ``: U = P W_Q[h], V = P W_K[h] (P as in :func:`qk_matrix`).

    W_QK has rank ≤ d_head, so its symmetric and skew parts live in span(U, V), of dimension
    ≤ 2·d_head: :func:`bilinear_form` decomposes them there (``factors=``) instead of in d_model².
    """
    centred = weights.reads_centred if centred is None else centred
    b = weights.blocks[layer]
    U, V = b.W_Q[head].double(), b.W_K[head].double()                                 # [d e] each
    if centred:
        U, V = U - U.mean(0, keepdim=True), V - V.mean(0, keepdim=True)
    return U, V


def key_bias_vector(weights: Weights, layer: int, head: int) -> Float[Tensor, "d_model"]:
    """v = P W_K b_Q: the key-only score term x̂_s · v (not part of the bilinear form; P = I under RMSNorm)."""
    b = weights.blocks[layer]
    v = b.W_K[head].double() @ b.b_Q[head].double()
    return v - v.mean() if weights.reads_centred else v


@dataclasses.dataclass
class BilinearForm:
    """Symmetric / skew split of W_QK and the eigen-decomposition of the symmetric part."""

    layer: int
    head: int
    eigenvalues: Float[Tensor, "r"]          # of S, sorted by |λ| descending (float64)
    eigenvectors: Float[Tensor, "d_model r"]
    skew: Float[Tensor, "d_model d_model"]   # A
    sigma_sym: Float[Tensor, "k"]            # top singular values of S (= sorted |λ|)
    sigma_skew: Float[Tensor, "k"]           # top singular values of A
    n_negative_top: int                      # negative eigenvalues among the top `top` by |λ|
    n_negative: int                          # all negative eigenvalues above the tolerance
    n_positive: int
    top: int
    tol: float
    basis: Tensor | None = dataclasses.field(default=None, repr=False)   # [d r] B when computed in span(U, V)

    @property
    def sym(self) -> Tensor:
        return (self.eigenvectors * self.eigenvalues) @ self.eigenvectors.T

    def to_dict(self, n: int | None = None) -> dict:
        n = self.top if n is None else n
        return {
            "layer": self.layer, "head": self.head,
            "eigenvalues": self.eigenvalues[:n].tolist(),
            f"n_negative_top{self.top}": self.n_negative_top,
            "n_negative": self.n_negative, "n_positive": self.n_positive,
            "sigma_sym": self.sigma_sym.tolist(), "sigma_skew": self.sigma_skew.tolist(),
            # None: S = 0 (σ_skew/0 is undefined, or infinite for a purely skew form)
            "skew_to_sym_ratio": float(self.sigma_skew[0] / self.sigma_sym[0]) if self.sigma_sym[0] > 0 else None,
            "tolerance": self.tol,
        }


def bilinear_form(W: Float[Tensor, "d d"], layer: int, head: int, *, top: int = 64, n_sigma: int = 8,
                  rel_tol: float = 1e-6, factors: tuple[Tensor, Tensor] | None = None) -> BilinearForm:
    """Decompose W_QK; eigenvalues with |λ| ≤ rel_tol·max|λ| count as zero.

    With ``factors=(U, V)`` (``W = U Vᵀ``, :func:`qk_factors`), S and A are decomposed in
    an orthonormal basis B of span(U, V) (:func:`headscope.lowrank.span_basis`, r ≤ 2·d_head columns):
    S = B (BᵀSB) Bᵀ and A = B (BᵀAB) Bᵀ exactly, so the non-zero eigenpairs of S are
    (λ, B y) for the eigenpairs (λ, y) of the r × r matrix BᵀSB, and the singular values of
    A those of BᵀAB (padded with the zeros outside span B). That costs O(d²·d_head)
    instead of the O(d³) of a d_model × d_model eigh and SVD (seconds at d_model 1600).
    """
    W = W.double()
    S = (W + W.T) / 2
    A = (W - W.T) / 2
    B = None if factors is None else span_basis(factors[0].double(), factors[1].double())
    if B is None:
        lam, V = torch.linalg.eigh(S)                                                  # ascending
        sig_skew = torch.linalg.svdvals(A)[:n_sigma]
    else:
        with small_matrices():                                                         # r × r: one thread
            lam, Y = torch.linalg.eigh(B.T @ S @ B)                                    # [r], [r r]
            sig_skew = torch.linalg.svdvals(B.T @ A @ B)[:n_sigma]
        V = B @ Y                                                                      # [d r]
        pad = min(n_sigma, W.shape[0]) - sig_skew.numel()
        sig_skew = torch.cat([sig_skew, sig_skew.new_zeros(max(pad, 0))])
    order = torch.argsort(lam.abs(), descending=True, stable=True)
    lam, V = lam[order], V[:, order]
    tol = rel_tol * float(lam.abs().max()) if lam.numel() else 0.0
    rank = int((lam.abs() > tol).sum())
    lam, V = lam[:max(rank, 1)], V[:, :max(rank, 1)]
    return BilinearForm(
        layer=layer, head=head, eigenvalues=lam, eigenvectors=V, skew=A,
        sigma_sym=lam.abs()[:n_sigma].clone(), sigma_skew=sig_skew,
        n_negative_top=int((lam[:top] < -tol).sum()), n_negative=int((lam < -tol).sum()),
        n_positive=int((lam > tol).sum()), top=top, tol=tol, basis=B,
    )


def explain_score(form: BilinearForm, x_t: Float[Tensor, "d"], x_s: Float[Tensor, "d"], *, top: int = 5,
                  divisor: float = 1.0) -> dict:
    """Split x̂_t W x̂_sᵀ/divisor into eigen-direction terms λ_i (x̂_t·v_i)(x̂_s·v_i) plus the skew term."""
    a = x_t.double() @ form.eigenvectors                                               # [r]
    b = x_s.double() @ form.eigenvectors
    terms = form.eigenvalues * a * b / divisor                                         # [r]
    skew = float(x_t.double() @ form.skew @ x_s.double()) / divisor
    idx = torch.argsort(terms.abs(), descending=True, stable=True)[:top]
    return {
        "score": float(terms.sum()) + skew,
        "sym": float(terms.sum()), "skew": skew,
        "negative_part": float(terms[form.eigenvalues < 0].sum()),
        "positive_part": float(terms[form.eigenvalues > 0].sum()),
        "top_directions": [{"index": int(i), "eigenvalue": float(form.eigenvalues[i]),
                            "contribution": float(terms[i])} for i in idx],
    }


# -- chunked vocab × vocab top-k ---------------------------------------------------------------


@torch.no_grad()
def topk_targets(
    Q: Float[Tensor, "n e"],
    K: Float[Tensor, "m e"],
    k: int,
    *,
    self_index: Int[Tensor, "n"] | None = None,
    chunk: int = 2048,
    return_lse: bool = False,
):
    """Top-k keys of every query by q·k, chunked over queries ([chunk m] at a time).

    ``self_index[i]`` is the key index of query i itself (−1: none); it is excluded.
    Returns (values [n k], indices [n k]) and, with ``return_lse``, the logsumexp of
    every row [n] (so ``exp(value − lse)`` is the attention the query would pay the
    key if all m keys were in context). The chunk shrinks when [chunk m] scores and
    their temporaries would not fit a quarter of the available memory
    (:func:`headscope._memory.rows_that_fit`); each row's result is the same either way.
    """
    n, m = Q.shape[0], K.shape[0]
    chunk = rows_that_fit(3 * m * Q.element_size(), chunk)                            # scores, topk, logsumexp
    k = min(k, m - (1 if self_index is not None else 0))
    vals = torch.empty(n, k, dtype=Q.dtype)
    idx = torch.empty(n, k, dtype=torch.long)
    lse = torch.empty(n, dtype=Q.dtype) if return_lse else None
    Kt = K.T.contiguous()                                                              # [e m]
    # one [chunk m] buffer for every chunk's scores (the same product, written in place): a fresh one
    # per chunk is a fresh mapping above malloc's mmap threshold, every page faulted in again
    buf = torch.empty(min(chunk, n) * m, dtype=torch.promote_types(Q.dtype, K.dtype))
    for a in range(0, n, chunk):
        qa = Q[a:a + chunk]                                                            # [c e]
        s = torch.mm(qa, Kt, out=buf[:qa.shape[0] * m].view(qa.shape[0], m))          # [c m]
        if self_index is not None:
            si = self_index[a:a + chunk]
            rows = torch.nonzero(si >= 0).squeeze(1)
            s[rows, si[rows]] = float("-inf")
        v, i = torch.topk(s, k, dim=1)
        vals[a:a + chunk], idx[a:a + chunk] = v, i
        if return_lse:
            lse[a:a + chunk] = _logsumexp_rows(s, v[:, :1] if k else None)
    return (vals, idx, lse) if return_lse else (vals, idx)


def _logsumexp_rows(s: Tensor, row_max: Tensor | None) -> Tensor:
    """``torch.logsumexp(s, dim=1)`` with the same operations in the same order (max, a ±inf max
    taken as 0, Σ exp(s − max), log, + max), reading the row max from the top-k already taken
    (`row_max` [c 1], None: compute it) and overwriting `s` (no [c m] temporary)."""
    mx = s.amax(1, keepdim=True) if row_max is None else row_max.clone()            # [c 1]
    mx.masked_fill_(mx.abs() == math.inf, 0)
    return s.sub_(mx).exp_().sum(1).log_().add_(mx[:, 0])


@torch.no_grad()
def matmul_floor(Q: Tensor, K: Tensor, *, chunk: int = 2048) -> float:
    """The same chunked products as :func:`topk_targets` without selection (benchmark floor)."""
    Kt = K.T.contiguous()
    acc = 0.0
    for a in range(0, Q.shape[0], chunk):
        acc += float((Q[a:a + chunk] @ Kt)[0, 0])
    return acc


def head_qk(weights: Weights, layer: int, head: int, X: Tensor) -> tuple[Tensor, Tensor]:
    """Queries and keys of effective embeddings without biases, scaled so q·k is the attention logit."""
    b = weights.blocks[layer]
    d = math.sqrt(weights.cfg.attn_scale(layer))
    e = b.W_Q.shape[-1]
    # one pass over X for both: each column of X [W_Q W_K] is the same dot product as in X W_Q or X W_K
    # (test_head_qk_one_product), and X is read once ([V d] for a vocabulary-keyed head)
    QK = (X @ torch.cat([b.W_Q[head], b.W_K[head]], 1)).div_(d)                        # [n 2e]
    return QK[:, :e], QK[:, e:]                                                         # [n e] each (views)
