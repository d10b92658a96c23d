"""Steering a head by scaling eigenvalues of its QK form, written as a real checkpoint (seed 002).

In processed space (fold_ln on, so LN1 only centres and scales and x̂ ⊥ 1) take
``W = P W_Q W_Kᵀ P = S + A`` with ``S = Σ_i λ_i v_i v_iᵀ`` (see :mod:`headscope.bilinear`).
Steering replaces λ_i by α·λ_i for the selected i (default: every negative λ_i)::

    W' = S + Σ_{i ∈ sel} (α − 1) λ_i v_i v_iᵀ + A        (A dropped if keep_skew=False)

and rebuilds the head from the SVD ``W' = U Σ Vᵀ`` of rank r:
``W_Q' = U_r Σ_r^½``, ``W_K' = V_r Σ_r^½`` (zero columns beyond r). This is exact when
r ≤ d_head (always for α = 1; for a symmetric head scaling eigenvalues never raises
the rank); otherwise the d_head largest singular values are kept and the discarded
part is reported as ``rebuild_error``. The key-only bias term ``x̂·v`` with
``v = P W_K b_Q`` is kept exactly: ``b_Q'[:r] = Σ_r^-½ V_rᵀ v`` and, if v has a part
outside span V_r, one spare column with ``W_Q' = 0``, ``W_K' = v⊥/‖v⊥‖``,
``b_Q' = ‖v⊥‖``. Query-only terms (``x̂ W_Q b_Kᵀ``) do not change any pattern; their
projection on span U_r is kept.

Processed → raw (what a GPT-2 checkpoint stores): ``W_raw = W'/ln1_w`` row-wise and
``b_raw = b' − ln1_b W_raw``, inverting fold_ln.

The authors' way (:func:`authors_steer`, ``steer --preset seed``; Mamiglia et al.,
``svd_group_scaling_heatmap.py:24-51`` at 6c45e47): eigen-decompose S, keep the 64
eigenpairs of largest |λ| (W_sym has rank up to 2·d_head, so this truncates), scale the
strictly negative ones among them by α, add the whole skew part back,
``W'_α = Q₆₄ diag(λ'_α) Q₆₄ᵀ + A``, and read the raw bilinear scores ``E W'_α Eᵀ``
(no 1/√d_head, no biases, no softmax; rows = queries) of 30 chosen tokens
(``data/seed_steering_tokens.json``) over effective embeddings E. No checkpoint is
written, and ``W'_1 ≠ W_QK`` (the truncation error is reported). Headscope's rebuilt
checkpoint is measured beside it, with its rebuild error.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence
import math
from pathlib import Path

import torch
from jaxtyping import Float

from .._atomic import refuse_foreign_dir
from .._errors import HeadscopeError
from .._html_repr import HtmlRepr, render_text
from .._json import dumps, plain
from .bilinear import bilinear_form, key_bias_vector, qk_factors, qk_matrix
from ..core.model import Model
from ..lowrank import small_matrices
from ..core.sources import WEIGHTS_FILE, file_sha256
from ..maps.patterns import head_pattern, head_patterns_of_sets
from .options import SteerOptions
from .prompts import CategoryPrompts, prompts_for
from ..core.weights import Block, Weights

Tensor = torch.Tensor
MARKER = "steering.json"
AUTHORS_TOP = 64                                   #: eigenpairs kept by the authors' steering
SEED_ALPHAS = (1.1, 0.0, -0.5)                     #: the authors' α
SELECTS = ("negative", "negative-top64")


@dataclasses.dataclass
class Rebuild:
    W_Q: Tensor        # [d e] processed
    W_K: Tensor
    b_Q: Tensor        # [e]
    b_K: Tensor
    rank: int
    rebuild_error: float      # ‖W_Q' W_K'ᵀ − W'‖_F / ‖W_QK‖_F (the unsteered form's norm)
    key_bias_error: float     # ‖W_K' b_Q' − v‖ / ‖v‖ (0 when v = 0)
    selected: list[int]
    selected_eigenvalues: list[float]
    query_only: bool = False  # W_K, b_K kept (grouped-query attention: the key is shared by the group)


def _check_steerable(alpha: float, W_new: Tensor, cfg) -> None:
    """Refuse an α whose steered form overflows, or whose W_Q', W_K' (≈ √|W'| each) would pass the
    bound a checkpoint must keep to load (:func:`headscope.core.checkpoint.max_weight`)."""
    from ..core.checkpoint import max_weight

    top = float(W_new.abs().max()) if W_new.numel() else 0.0
    bound = max_weight(cfg)
    if not math.isfinite(top) or math.sqrt(top) > bound:
        raise HeadscopeError(f"--scale-negative {alpha:g}: the steered QK form reaches {top:.3g}, so its W_Q', W_K' "
                             f"would pass the bound {bound:.3g} of a loadable checkpoint (README, JSON notes); "
                             "choose a smaller |α|")


def steered_qk(weights: Weights, layer: int, head: int, alpha: float, *, select: str | list[int] = "negative",
               keep_skew: bool = True, rel_tol: float = 1e-9) -> Rebuild:
    """Processed W_Q', W_K', b_Q', b_K' of the steered head (module docstring)."""
    from ..core.applicability import weight_circuits
    weight_circuits(weights.cfg, "steering the QK form")          # post-LN, QK-norm: refused with the reason
    if not weights.processing.fold_ln:
        raise HeadscopeError("steering needs weights processed with fold_ln (the default processing)")
    cfg = weights.cfg
    e = cfg.d_head
    W = qk_matrix(weights, layer, head)                                               # [d d] float64
    form = bilinear_form(W, layer, head, factors=qk_factors(weights, layer, head))
    B = form.basis                                                                    # [d r], r ≤ 2e
    lam, V = form.eigenvalues, form.eigenvectors
    if select == "negative":
        sel = [i for i in range(len(lam)) if lam[i] < -form.tol]
    elif select == "negative-top64":                 # the authors' components: negative among the top 64 by |λ|
        sel = [i for i in range(min(AUTHORS_TOP, len(lam))) if lam[i] < -form.tol]
    elif select == "positive":
        sel = [i for i in range(len(lam)) if lam[i] > form.tol]
    else:
        sel = [int(i) for i in select]
        bad = [i for i in sel if not 0 <= i < len(lam)]
        if bad:
            raise HeadscopeError(f"eigenvalue index {bad[0]} out of range (the form has {len(lam)} non-zero eigenvalues)")
    Vs, ls = V[:, sel], lam[sel]
    # from W itself, not from form.sym + form.skew: the form drops eigenvalues below its tolerance
    # (|λ| ≤ 1e-6 max|λ|), which would make even α = 1 inexact
    W_new = (W if keep_skew else (W + W.T) / 2) + (Vs * ((alpha - 1.0) * ls)) @ Vs.T
    _check_steerable(alpha, W_new, cfg)
    if cfg.kv_heads != cfg.n_heads:
        return _query_only(weights, layer, head, W, W_new, sel, ls)
    # W' and W live in span B on both sides (W' = B (BᵀW'B) Bᵀ): their SVDs are those of r × r cores
    with small_matrices():                                                            # r × r: one thread
        Uc, sig, Vhc = torch.linalg.svd(B.T @ W_new @ B)
        # ranks and errors on the scale of the unsteered head: a steered form that vanishes
        # (α = 0 on every eigenvalue) is rank 0, not rank d_head of rounding noise
        scale = float(torch.linalg.matrix_norm(B.T @ W @ B, ord=2))
    U, Vh = B @ Uc, Vhc @ B.T                                                         # [d r], [r d]
    tol = rel_tol * scale
    r = min(int((sig > tol).sum()), e)
    root = sig[:r].sqrt()
    WQ = torch.zeros(cfg.d_model, e, dtype=torch.float64)
    WK = torch.zeros_like(WQ)
    WQ[:, :r] = U[:, :r] * root
    WK[:, :r] = Vh[:r].T * root
    err = float((WQ @ WK.T - W_new).norm() / W.norm()) if W.norm() > 0 else 0.0
    # key-only bias term, kept exactly (one spare column if needed)
    v = key_bias_vector(weights, layer, head)                                          # [d]
    bQ = torch.zeros(e, dtype=torch.float64)
    bQ[:r] = (Vh[:r] @ v) / root
    perp = v - Vh[:r].T @ (Vh[:r] @ v)
    if float(perp.norm()) > 1e-12 * max(1.0, float(v.norm())) and r < e:
        WK[:, r] = perp / perp.norm()
        bQ[r] = perp.norm()
    kb_err = float((WK @ bQ - v).norm() / v.norm()) if v.norm() > 0 else 0.0
    # query-only bias term: softmax-invariant, keep its projection on span U_r
    blk = weights.blocks[layer]
    u = blk.W_Q[head].double() @ blk.b_K[head].double()
    bK = torch.zeros(e, dtype=torch.float64)
    bK[:r] = (U[:, :r].T @ (u - u.mean())) / root
    return Rebuild(WQ, WK, bQ, bK, r, err, kb_err, sel, [float(x) for x in ls])


def _query_only(weights: Weights, layer: int, head: int, W: Tensor, W_new: Tensor, sel, ls) -> Rebuild:
    """Grouped-query attention: the head's key weights are shared with its group, so only the query
    side changes: ``W_Q' = W' V (VᵀV)⁺`` with V = P W_K (the least-squares W_Q' with W_Q' Vᵀ ≈ W'),
    biases kept. Exact when W' reads keys only through span(W_K) — always for the negative
    eigenvalues of a symmetric head; otherwise the rest is ``rebuild_error``."""
    blk = weights.blocks[layer]
    _, V = qk_factors(weights, layer, head)                                            # [d e]
    WQ = W_new @ V @ torch.linalg.pinv(V.T @ V)                                        # [d e]
    err = float((WQ @ V.T - W_new).norm() / W.norm()) if W.norm() > 0 else 0.0
    return Rebuild(WQ, blk.W_K[head].double(), blk.b_Q[head].double(), blk.b_K[head].double(),
                   int(torch.linalg.matrix_rank(WQ)), err, 0.0, sel, [float(x) for x in ls], query_only=True)


def unfold_into_raw(raw_block: Block, head: int, rb: Rebuild, *, qk_bias: bool = True) -> Block:
    """Raw `raw_block` (modified in place and returned) with `head`'s W_Q, W_K, b_Q, b_K replaced,
    fold_ln inverted: ``W_raw = W'/ln1_w`` row-wise and ``b_raw = b' − ln1_b W_raw``. A query-only
    rebuild leaves W_K, b_K as stored; a model without query/key biases (``qk_bias`` false: GPT-Neo,
    bias-free Llama) keeps raw biases 0, so its bias terms are those the new weights imply."""
    w = raw_block.ln1_w.double()
    inv = torch.where(w != 0, 1 / torch.where(w != 0, w, torch.ones_like(w)), torch.zeros_like(w))
    dtype = raw_block.W_Q.dtype
    for X, Wp, bp in (("Q", rb.W_Q, rb.b_Q), ("K", rb.W_K, rb.b_K)):
        if X == "K" and rb.query_only:
            continue
        W_raw = Wp * inv[:, None]                                                      # [d e]
        b_raw = bp - raw_block.ln1_b.double() @ W_raw
        getattr(raw_block, f"W_{X}")[head] = W_raw.to(dtype)
        getattr(raw_block, f"b_{X}")[head] = (b_raw if qk_bias else torch.zeros_like(b_raw)).to(dtype)
    return raw_block


def steered_weights(W: Weights, layer: int, head: int, rb: Rebuild) -> Weights:
    """Processed weights `W` with head (layer, head)'s W_Q, W_K, b_Q, b_K replaced by the rebuild;
    every other block is shared, not copied."""
    blk = W.blocks[layer]
    new = Block(**{k: getattr(blk, k) for k in blk.shapes(W.cfg)})
    for X, Wp, bp in (("Q", rb.W_Q, rb.b_Q), ("K", rb.W_K, rb.b_K)):
        Wh, bh = getattr(blk, f"W_{X}").clone(), getattr(blk, f"b_{X}").clone()
        Wh[head], bh[head] = Wp.to(Wh.dtype), bp.to(bh.dtype)
        setattr(new, f"W_{X}", Wh)
        setattr(new, f"b_{X}", bh)
    return W.with_blocks({layer: new})


def _reprocessed(W: Weights, layer: int, raw_block: Block) -> Weights:
    """Processed weights `W` with block `layer` replaced by `raw_block` under W's processing."""
    from ..core.weights import process_block

    new = process_block(raw_block, W.processing)
    return W.with_blocks({layer: Block(**{k: getattr(new, k).to(W.dtype) for k in new.shapes(W.cfg)})})


# -- measuring the effect --------------------------------------------------------------------


def self_attention_stats(weights: Weights, tokens: Tensor, layer: int, head: int) -> dict:
    """Mean self-attention probability A[q, q] and mean rank of self among keys 0..q (1 = top), q ≥ 1."""
    return pattern_self_stats(head_pattern(weights, tokens, layer, head))


def pattern_self_stats(A: Float[Tensor, "b q k"]) -> dict:
    """:func:`self_attention_stats` of an attention pattern A [b q k]."""
    diag = torch.diagonal(A, dim1=-2, dim2=-1)                                         # [b q]
    p = A.shape[-1]
    causal = torch.ones(p, p, dtype=torch.bool).tril()
    above = ((A > diag[..., None]) & causal).sum(-1) + 1                               # [b q]
    return {"self_attention": float(diag[:, 1:].mean()), "self_rank": float(above[:, 1:].double().mean())}


@dataclasses.dataclass
class SteerResult(HtmlRepr):
    layer: int
    head: int
    alpha: float
    select: str | list[int]
    keep_skew: bool
    n_selected: int
    selected_eigenvalues: list[float]
    rank: int
    rebuild_error: float
    key_bias_error: float
    self_attention_before: float
    self_attention_after: float
    self_rank_before: float
    self_rank_after: float
    out: str | None
    fingerprint: str
    steered_fingerprint: str | None
    processing: dict

    def to_dict(self) -> dict:
        return plain(self)

    def render(self) -> str:
        """The measurements as text (headscope.report.views.steering.text)."""
        return render_text(self)


@dataclasses.dataclass
class Steered:
    """A steered model: what was measured, and the steered weights."""

    result: SteerResult
    weights: Weights          # processed weights of the steered model (other blocks shared)
    also: list[tuple[Tensor, Tensor]] = dataclasses.field(default_factory=list)   # steer(also=…)'s patterns
    make_raw_block: Callable[[], Block] | None = dataclasses.field(default=None, repr=False)

    @functools.cached_property
    def raw_block(self) -> Block:
        """The raw weights of the steered head's block (fold_ln inverted), what :func:`save_steered`
        writes: read from the checkpoint on first access (a measurement alone never reads them,
        unless the model has no query/key biases, whose steered weights are measured from them)."""
        return self.make_raw_block()


MEASURE_PROMPTS, MEASURE_LENGTH = 32, 16           #: steer's measurement prompts: how many, tokens after BOS


def measurement_prompts(model: Model, options: SteerOptions = SteerOptions()) -> CategoryPrompts:
    """The category prompts :func:`steer` measures on when given no tokens: ``MEASURE_PROMPTS`` of
    ``MEASURE_LENGTH`` tokens from the options' categories and seed (drawn prompt by prompt, so the
    first k of them are the k prompts of the same seed)."""
    return prompts_for(model, options.categories, n_prompts=MEASURE_PROMPTS, length=MEASURE_LENGTH,
                       seed=options.seed)[0]


def steer(model: Model, layer: int, head: int, alpha: float, options: SteerOptions = SteerOptions(), *,
          tokens: Tensor | None = None, also: Sequence[Tensor] = ()) -> Steered:
    """Scale eigenvalues of head (layer, head) by α and measure self-attention before and after.

    `options` (:class:`~headscope.semantic.options.SteerOptions`): which eigenvalues, whether
    the skew part is kept, the measurement prompts' categories and seed (used when `tokens`
    [b p] is not given). Both measurements use the model's bound processing (default: the
    seed studies'; it must include fold_ln). :func:`save_steered` writes the steered weights as a checkpoint.
    `also`: further token batches [b p] whose head patterns before and after ([b q k] each) come
    back in ``Steered.also``, from the same walk up the blocks as the measurement's.
    """
    o = options.resolved()
    select = o.select if isinstance(o.select, str) else [int(i) for i in o.select]
    model.cfg.check_head(layer, head)
    W = model.weights()
    rb = steered_qk(W, layer, head, alpha, select=select, keep_skew=o.keep_skew)
    def make_raw_block() -> Block:
        return unfold_into_raw(model.raw_block(layer), head, rb, qk_bias=model.cfg.qk_bias)

    if model.cfg.qk_bias:
        W_new = steered_weights(W, layer, head, rb)                  # the raw block is read if saved
    else:                                   # the biases are what the written weights imply: measure those
        raw_block = make_raw_block()
        W_new = _reprocessed(W, layer, raw_block)
        make_raw_block = lambda: raw_block  # noqa: E731
    if tokens is None:
        tokens = measurement_prompts(model, o).tokens
    measured, *also_patterns = head_patterns_of_sets([W, W_new], [tokens, *also], layer, head)
    before, after = (pattern_self_stats(A) for A in measured)
    res = SteerResult(
        layer=layer, head=head, alpha=float(alpha), select=select, keep_skew=o.keep_skew,
        n_selected=len(rb.selected), selected_eigenvalues=rb.selected_eigenvalues, rank=rb.rank,
        rebuild_error=rb.rebuild_error, key_bias_error=rb.key_bias_error,
        self_attention_before=before["self_attention"], self_attention_after=after["self_attention"],
        self_rank_before=before["self_rank"], self_rank_after=after["self_rank"],
        out=None, fingerprint=model.fingerprint, steered_fingerprint=None, processing=W.processing.to_dict(),
    )
    return Steered(result=res, weights=W_new, also=[tuple(p) for p in also_patterns], make_raw_block=make_raw_block)


def save_steered(model: Model, steered: Steered, out: str | Path) -> SteerResult:
    """Write the steered checkpoint to `out` (with steering.json); returns the result with its path and sha256."""
    out = Path(out)
    refuse_foreign_dir(out, MARKER)
    res = dataclasses.replace(steered.result, out=str(out))
    meta = {k: v for k, v in res.to_dict().items() if k not in ("out", "steered_fingerprint")}
    meta["source"] = model.source
    model.save(out, blocks={res.layer: steered.raw_block}, extra_files={MARKER: dumps(meta)})
    res.steered_fingerprint = file_sha256(out / WEIGHTS_FILE)
    return res


# -- the authors' way: truncated eigen-form, raw scores of chosen tokens ---------------------


@dataclasses.dataclass
class AuthorsSteer:
    """Raw bilinear scores E W'_α Eᵀ of chosen tokens for each α (module docstring)."""

    layer: int
    head: int
    top: int
    n_negative_top: int               # strictly negative eigenvalues among the top `top` by |λ| (as the authors:
                                      # on a W_sym of rank < top, numerical zeros below 0 count too)
    truncation_error: float           # ‖W'_1 − W_QK‖_F / ‖W_QK‖_F
    attn_mean: str                    # effective embeddings' attention means (bilinear.ATTN_MEANS)
    tokens: list[str]
    groups: list[str]
    alphas: list[float]
    scores: dict                      # "unsteered" and each α as str → [[float]] (rows queries)
    summary: list[dict]               # per α: self_mean, same_group_mean, other_group_mean, self_rank_mean
    fingerprint: str

    def to_dict(self) -> dict:
        return plain(self)

    def render(self) -> str:
        """Per α, the scores' summary as text (headscope.report.views.steering.authors_text)."""
        return render_text(self)


def _authors_eigen(Wqk: Tensor, top: int) -> tuple[Tensor, Tensor, Tensor]:
    """(λ, Q, A): the `top` eigenpairs of S = (W + Wᵀ)/2 of largest |λ| and the skew part A."""
    W = Wqk.double()
    S, A = (W + W.T) / 2, (W - W.T) / 2
    lam, V = torch.linalg.eigh(S)
    order = torch.argsort(lam.abs(), descending=True, stable=True)[:top]
    return lam[order], V[:, order], A


def _authors_scaled(lam: Tensor, V: Tensor, A: Tensor, alpha: float) -> Tensor:
    return (V * torch.where(lam < 0, lam * alpha, lam)) @ V.T + A


def authors_form(Wqk: Tensor, alpha: float, top: int = AUTHORS_TOP) -> tuple[Tensor, int]:
    """(W'_α = Q_top diag(λ'_α) Q_topᵀ + A, number of negative λ among the top) for W_QK [d d].

    S = (W + Wᵀ)/2 = Σ λ_i v_i v_iᵀ sorted by |λ| descending, Q_top its first `top`
    eigenvectors, λ'_α = α λ where λ < 0 (strictly), A = (W − Wᵀ)/2 whole.
    """
    lam, V, A = _authors_eigen(Wqk, top)
    return _authors_scaled(lam, V, A, alpha), int((lam < 0).sum())


def _score_summary(S: Tensor, groups: list[str]) -> dict:
    n = S.shape[0]
    names = sorted(set(groups))
    g = torch.tensor([names.index(x) for x in groups])                                   # [n] group index
    same = (g[:, None] == g[None, :]) & ~torch.eye(n, dtype=torch.bool)
    other = g[:, None] != g[None, :]
    diag = S.diagonal()
    rank = (S > diag[:, None]).sum(1).double() + 1                                       # 1 = self on top
    return {"self_mean": float(diag.mean()), "same_group_mean": float(S[same].mean()) if same.any() else 0.0,
            "other_group_mean": float(S[other].mean()) if other.any() else 0.0, "self_rank_mean": float(rank.mean())}


@torch.no_grad()
def authors_steer(model: Model, layer: int, head: int, alphas=SEED_ALPHAS, *, tokens: dict[str, list[str]] | None = None,
                  attn_mean: str = "authors", top: int = AUTHORS_TOP
                  ) -> AuthorsSteer:
    """The authors' steering (module docstring) for each α in `alphas`, and the unsteered form."""
    from .. import shipped
    from .bilinear import attn_means_for, effective_embeddings

    model.cfg.check_head(layer, head)
    W = model.weights()
    groups_src = shipped.seed_steering_tokens() if tokens is None else tokens
    ids, strs, groups = [], [], []
    for name, words in groups_src.items():
        for w in words:
            enc = model.tokenizer.encode(w)
            if len(enc) == 1:
                ids.append(int(enc[0]))
                strs.append(w)
                groups.append(name)
    if len(ids) < 2:
        raise HeadscopeError(f"steering tokens: expected at least 2 single tokens, got {len(ids)}")
    prompts = prompts_for(model, None, n_prompts=32, length=16)[0].tokens if attn_mean == "prompts" else None
    means = attn_means_for(W, max(layer, 0), attn_mean, prompts)
    E = effective_embeddings(W, layer, torch.tensor(ids), attn_means=means).double()    # [t d]
    Wqk = qk_matrix(W, layer, head)                                                   # [d d] float64
    norm = float(Wqk.norm()) or 1.0
    scores = {"unsteered": (E @ Wqk @ E.T).tolist()}
    summary = [{"alpha": "unsteered", **_score_summary(E @ Wqk @ E.T, groups)}]
    lam, V, A = _authors_eigen(Wqk, top)
    W1, n_neg = _authors_scaled(lam, V, A, 1.0), int((lam < 0).sum())
    for a in [float(x) for x in alphas]:
        S = E @ _authors_scaled(lam, V, A, a) @ E.T
        scores[repr(a)] = S.tolist()
        summary.append({"alpha": a, **_score_summary(S, groups)})
    return AuthorsSteer(layer=layer, head=head, top=top, n_negative_top=n_neg,
                        truncation_error=float((W1 - Wqk).norm()) / norm, attn_mean=attn_mean, tokens=strs, groups=groups,
                        alphas=[float(x) for x in alphas], scores=scores, summary=summary,
                        fingerprint=model.fingerprint)
