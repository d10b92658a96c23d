"""Contextual MLP0 neurons from the calibrated contextual circuit (seed 000, last part).

Layer 0's MLP reads ``LN2(resid_mid) = w₂ ⊙ c(resid_mid)/σ₂ + b₂`` (c centres over
d_model). The contextual circuit (:mod:`.contextual`) adds
``Σ_i pos[n, i] · contribution[n, t_q, x_i]`` to resid_mid, a kernel-weighted average
of per-token vectors. The seed's score (the default, variant ``paper``) is its formula as
written, ``max[j] = sup_t contribution[n, t_q, t] · mlp[:, j]``:

    score[t, j] = c(contribution[n, t_q, t]) ⊙ w₂ · W_in[:, j]            (ln2=none)

with no LayerNorm-2 scale (Gibson's threshold cells divide by none either,
main.py:868, main.py:907 at 4a2c7ab). **Variant ``scaled``** (``ln2=median``) divides
by σ̄₂, the median of layer 0's ``ln2.hook_scale`` on the calibration text: a context
made only of token t then moves neuron j's *pre-activation* by score[t, j] — the
physical unit (the neuron's own input, comparable across models and across GELU's
knee), since LN2 divides the residual by σ₂ before W_in reads it. LN2's centring and
weight are exact (linear), its bias does not depend on t and is left out.
The seed's maximum token contribution is ``max[j] = max_t score[t, j]`` over the whole
vocabulary; neurons with ``max[j] ≥ threshold`` (default :data:`DEFAULT_THRESHOLD`)
are *contextual*, reported with the tokens of largest and smallest score.

**Threshold.** 5.0 is the seed's value for GPT-2 Small and is the default. On the
planted checkpoint (seed 0, shipped calibration text, n = 1023) the four planted
neurons score 9.1–12.6 and every other neuron ≤ 0.645 (variant ``paper``; ``scaled``
multiplies every score by 1/σ̄₂ ≈ 6.4) *provided the contextual heads' value dims beyond
the planted features are zero*; 5.0 then separates them (the integration tests check
precision and recall). While those dims still hold the base's
random weights, the keyword heads (content boost e^2.5 on ~150 tokens) push their
random OV output through every MLP0 neuron and 584 neurons exceed 5.0 (the 5th
largest max is 8.8): those neurons really are contextual in that model, so no
threshold on max[j] is right there. For other models choose the threshold from the
distribution of ``max[j]`` (``NeuronScan.max_all``), e.g. well above its median plus
ten median absolute deviations.

**Variants** (:class:`ContributionVariant`, ``--variant`` on the command line, compared
with the authors' code in docs/fidelity.md): the value vector with or without its
W_pos[n] part (``pos=with|without``), the LayerNorm-2 scale (``ln2=median|none|X``: the
calibration's median σ̄₂, no division, or a constant X), ``max=signed|abs`` (max_t score
or max_t |score|), ``glitch=keep|exclude|FILE`` (exclude under-trained tokens, or those
listed in a JSON file) and ``position=N`` (the query position n). ``paper`` (the default)
follows the seed's text; ``scaled`` is ``paper`` with ``ln2=median``; ``code`` follows
Gibson's public code.

**Robust ranking** (:func:`rank_neurons`): the max over 50 257 tokens is an extreme
value; a neuron whose readout happens to align with one outlier token reaches a high
max without responding to any *context*. The robust score compares a neuron's k-th
largest token score (k = 10 by default: a context needs many tokens, one outlier cannot
lift the k-th) with the same statistic for random readout directions of the same norm
(the null): robust[j] = kth[j] / (|m_j| · median_r kth(ĝ_r)), ĝ_r uniform unit vectors
orthogonal to 1 (see :func:`rank_neurons`).

**The scan** never forms [d_vocab d_mlp] nor the d_model-sized contributions:
with Y[t] = (content_h[n, t]/S̄_h[n] · (LN1(W_E[t] + W_pos[n]) W_V[h] + b_V[h]))_{h ∈ H}
(concatenated over heads, [d_vocab |H|·d_head], kept) and
M = stack_h(c(W_O[h]) ⊙ w₂ W_in / σ̄₂) ([|H|·d_head d_mlp]), score = Y @ M. Pass 1
multiplies chunks of Y by M and keeps a running max and min per neuron; pass 2
recomputes score only for the neurons above threshold, ``Y @ M[:, sel]`` chunk by chunk,
keeping a running top and bottom k.
"""

from __future__ import annotations

import dataclasses

import torch
from jaxtyping import Float, Int

from .._errors import HeadscopeError, NotApplicable
from .._html_repr import HtmlRepr
from .contextual import Circuit, HeadChoice, check_log_weights
from .topk import BLOCK, _beyond, _block_extremes, _running_topk, _topk_step  # noqa: F401  (the scan's top-k)
from .variants import (  # noqa: F401  (re-exported: the variants are part of this module's namespace)
    AUTHORS_LN2, DEFAULT_VARIANT, GLITCH_Z, VARIANTS, ContributionVariant, excluded_tokens, glitch_tokens, ln2_divisor,
    parse_variant,
)
from ..core.applicability import learned_positions, mlp_reads_attention
from ..core.forward import run_with_cache
from ..stats import pearson
from ..core.tokenizer import to_str_tokens

Tensor = torch.Tensor

DEFAULT_THRESHOLD = 5.0
CHUNK = 4096


def pre_activation(w) -> tuple[Tensor, Tensor]:
    """(W [d m], b [m]) of block 0's pre-activation ``mlp.hook_pre`` (the input of the nonlinearity): W_in, b_in,
    or W_gate, b_gate for a gated MLP (SwiGLU: post = act(x W_gate + b_gate) ⊙ (x W_in + b_in))."""
    b = w.blocks[0]
    return (b.W_gate, b.b_gate) if w.cfg.gated_mlp else (b.W_in, b.b_in)


def readout_vectors(circuit: Circuit, neurons: list[int] | None = None, ln2_scale: float | None = None
                    ) -> Float[Tensor, "d s"]:
    """m_j = c(w₂ ⊙ W_in[:, j]) / σ̄₂ for each neuron j (default: all): residual → pre-activation.

    With LN2's scale fixed at σ̄₂, a residual vector r moves neuron j's pre-activation by
    ``(c(r) ⊙ w₂)·W_in[:, j] / σ̄₂ = r · m_j`` (c centres over d_model; c(r)·v = r·c(v)).
    ``ln2_scale`` replaces σ̄₂ (the calibration's median) by another divisor (variants).
    """
    b = circuit.weights.blocks[0]
    mlp_reads_attention(circuit.weights.cfg, "contextual MLP0 neurons")
    W_pre = pre_activation(circuit.weights)[0]
    W_in = W_pre if neurons is None else W_pre[:, neurons]                # [d s]
    m = b.ln2_w[:, None] * W_in / (circuit.calibration.ln2_scale if ln2_scale is None else ln2_scale)
    return m if circuit.weights.cfg.norm == "rmsnorm" else m - m.mean(0, keepdim=True)   # RMSNorm: no centring


def readout(circuit: Circuit, dtype=torch.float32, ln2_scale: float | None = None) -> Float[Tensor, "he m"]:
    """M = stack_h(W_O[h]) @ (m_j)_j: a head's value vector → every neuron's pre-activation."""
    W_O = circuit.weights.blocks[0].W_O[circuit.heads]                    # [H e d]
    return (W_O.reshape(-1, W_O.shape[-1]) @ readout_vectors(circuit, ln2_scale=ln2_scale)).to(dtype)   # [H*e m]


def token_values(circuit: Circuit, n: int, dtype=torch.float32, chunk: int = CHUNK, position_part: bool = True
                 ) -> Float[Tensor, "v he"]:
    """Y[t] for the whole vocabulary (see the module docstring), [d_vocab |H|·d_head].

    ``position_part=False`` leaves the W_pos[n] part out of the value input: it reads
    w₁ ⊙ c(W_E[t])/σ_t + b₁ instead of LN1(W_E[t] + W_pos[n]) = w₁ ⊙ c(W_E[t] + W_pos[n])/σ_t + b₁
    (same σ_t, the LN scale of W_E[t] + W_pos[n]; the content weight keeps the whole key),
    as Gibson's code does (ab.py:329-332: only the LN scale of position n enters).
    """
    w, b = circuit.weights, circuit.weights.blocks[0]
    if w.cfg.positional == "rotary":                  # no W_pos: values read N₁(W_E[t]) (layer0.rotary_split)
        from . import rotary_split
        circuit._check_n(n)
        return rotary_split.token_values(w, circuit.token, circuit.heads,
                                         circuit.calibration.log_seed_denom[circuit.heads, n].to(w.W_E.dtype), n,
                                         dtype, chunk)
    fr = circuit.frame(n)
    H, e = len(circuit.heads), w.cfg.d_head
    log_S = circuit.calibration.log_seed_denom[circuit.heads, n].to(dtype)           # [H]
    Wcat = torch.cat([fr.Kq[:, circuit.heads], b.W_V[circuit.heads].permute(1, 0, 2).reshape(w.cfg.d_model, H * e)],
                     dim=1).to(dtype)                                                # [d H + H*e]
    bq, bV = fr.bq[circuit.heads].to(dtype), b.b_V[circuit.heads].reshape(H * e).to(dtype)
    wpos = w.W_pos[n].to(dtype)
    ln_w, ln_b = b.ln1_w.to(dtype), b.ln1_b.to(dtype)
    V = w.cfg.vocab
    Y = torch.empty(V, H * e, dtype=dtype)                                           # tokens: no padding rows
    rows = min(chunk, V)
    xb, sq = torch.empty(rows, w.cfg.d_model, dtype=dtype), torch.empty(rows, w.cfg.d_model, dtype=dtype)
    ob = torch.empty(rows, Wcat.shape[1], dtype=dtype)          # one set of [chunk ·] buffers for every chunk
    for s in range(0, V, chunk):
        c = min(s + chunk, V) - s
        x, out = xb[:c], ob[:c]
        x.copy_(w.W_E[s:s + c]).add_(wpos)                                           # [c d] = W_E[t].to(dtype) + wpos
        x.sub_(x.mean(-1, keepdim=True))
        sigma = (torch.pow(x, 2, out=sq[:c]).mean(-1, keepdim=True) + w.cfg.ln_eps).sqrt()   # [c 1]
        x.div_(sigma).mul_(ln_w).add_(ln_b)                                          # in place: the same values
        torch.mm(x, Wcat, out=out)                                                   # [c H + H*e]
        a = (out[:, :H] + bq - log_S).exp()                                          # [c H] content/S̄
        val = out[:, H:]
        if not position_part:                                                        # drop w₁ ⊙ c(W_pos[n])/σ_t
            pc = (wpos - wpos.mean()) * ln_w                                         # [d]
            val = val - (pc @ Wcat[:, H:])[None, :] / sigma
        val.add_(bV)                                                                 # val + bV, in its buffer
        torch.mul(val.view(-1, H, e), a[:, :, None], out=Y[s:s + c].view(-1, H, e))  # into Y: no copy
    return Y


def _scan_overflow(circuit: Circuit, n: int) -> None:
    """Raise :class:`NotApplicable` for a float64 scan whose scores overflow, naming the head if its
    token weights content/S̄ are what passes float64's range."""
    check_log_weights(_log_token_weights(circuit, n), circuit.heads, n)
    raise NotApplicable("contextual circuit: neuron scores of the scan overflow float64 (the chosen heads' "
                        "token weights times their value read-outs exceed its range)")


def _log_token_weights(circuit: Circuit, n: int, chunk: int = CHUNK) -> Tensor:
    """log content_h[n, t] − log S̄_h[n] for the chosen heads over the vocabulary [H V] (float64)."""
    fr = circuit.frame(n)
    log_S = circuit.calibration.log_seed_denom[circuit.heads, n].to(fr.q.dtype)
    V = circuit.weights.cfg.vocab
    return torch.cat([fr.content_logits(circuit.weights, torch.arange(s, min(s + chunk, V)))[circuit.heads]
                      for s in range(0, V, chunk)], dim=1) - log_S[:, None]


@dataclasses.dataclass
class NeuronScan(HtmlRepr):
    """Contextual neurons: max token contribution of every MLP0 neuron, and the top ones."""

    heads: list[int]
    head_choice: HeadChoice
    position: int
    query: str
    threshold: float
    top: int
    max_all: list[float]          # max_t score[t, j] for every neuron j
    min_all: list[float]
    neurons: list[dict]           # above threshold, by max_contribution descending
    fingerprint: str
    processing: dict
    ln2_scale: float
    variant: dict | None = None   # the ContributionVariant (None: the default "paper")
    excluded_tokens: int = 0      # tokens left out of the max (glitch variants)

    def score_all(self) -> list[float]:
        """The score each neuron is selected by: max_all, or max |·| for ``max=abs``."""
        if self.variant and self.variant.get("max") == "abs":
            return [max(a, -b) for a, b in zip(self.max_all, self.min_all)]
        return list(self.max_all)

    def to_dict(self) -> dict:
        d = dataclasses.asdict(dataclasses.replace(self, neurons=[], max_all=[], min_all=[]))
        d["neurons"] = [{k: list(v) if isinstance(v, list) else v for k, v in nr.items()}   # a copy, without
                        for nr in self.neurons]                                          # asdict's deep walk
        d["head_choice"] = self.head_choice.to_dict()
        d["n_neurons"] = len(self.max_all)
        d.pop("max_all"), d.pop("min_all")
        if self.variant is None:
            d.pop("variant"), d.pop("excluded_tokens")
        return d


#: the scan keeps every neuron's top / bottom k in its first pass (no second pass over the
#: vocabulary) when its first chunk alone already puts this fraction of the neurons over the
#: threshold — a lower bound on how many the whole vocabulary selects (random weights: all
#: of them), and at least ONE_PASS_MIN. float32 only: there a column of Y @ M equals the same
#: column of Y @ M[:, sel] bit for bit (sel ≥ 12 columns; float64's blocking differs), so both
#: ways give the same scan.
ONE_PASS_FRACTION = 0.5
ONE_PASS_MIN = 32


def _one_pass(key_lower_bound: Tensor, threshold: float, dtype) -> bool:
    """Whether the scan keeps every neuron's top-k in pass 1 (see ONE_PASS_FRACTION)."""
    n = int((key_lower_bound >= threshold).sum())
    return dtype == torch.float32 and n >= max(ONE_PASS_MIN, ONE_PASS_FRACTION * key_lower_bound.numel())


@torch.no_grad()
def scan_neurons(
    circuit: Circuit,
    choice: HeadChoice,
    tokenizer,
    *,
    threshold: float = DEFAULT_THRESHOLD,
    top: int = 50,
    position: int | None = None,
    chunk: int = CHUNK,
    dtype=torch.float32,
    variant: ContributionVariant | str | None = None,
) -> NeuronScan:
    """Scan the whole vocabulary through the circuit for every MLP0 neuron.

    ``variant`` (:class:`ContributionVariant` or a ``--variant`` string) changes how a
    token's contribution becomes a score; the default reproduces ``paper``.
    """
    if top < 1:
        raise HeadscopeError(f"--top must be at least 1, got {top}")
    mlp_reads_attention(circuit.weights.cfg, "contextual MLP0 neurons")      # before the vocabulary pass
    given = variant is not None
    v = parse_variant(variant)
    n = choice.position if position is None else position
    if v.position is not None and position is None:
        n = v.position
    circuit._check_n(n)
    Y, ids = _scored_tokens(circuit, v, n, dtype, chunk, tokenizer)       # [V' H*e], [V']
    M = readout(circuit, dtype, ln2_scale=ln2_divisor(circuit, v))        # [H*e m]
    m, k = M.shape[1], min(top, Y.shape[0])
    hi = torch.full((m,), float("-inf"), dtype=dtype)
    lo = torch.full((m,), float("inf"), dtype=dtype)
    best: list | None = None          # one pass: every neuron's running top / bottom k (see below)
    buf = torch.empty(m * min(chunk, Y.shape[0]), dtype=dtype)          # every chunk's scores (nothing kept in it)
    for s in range(0, Y.shape[0], chunk):                                 # pass 1: running max / min
        c = min(chunk, Y.shape[0] - s)
        scoreT = buf[:m * c].view(m, c)                                   # [m c], contiguous
        torch.mm(Y[s:s + chunk], M, out=scoreT.T)                         # [m c]: (Y M)ᵀ written transposed
        if best is not None:
            _topk_step(best, scoreT, s, k)
            continue
        torch.maximum(hi, scoreT.amax(1), out=hi)                         # along contiguous rows
        torch.minimum(lo, scoreT.amin(1), out=lo)
        if s == 0 and _one_pass(hi if v.max == "signed" else torch.maximum(hi, -lo), threshold, dtype):
            best = [None, None]
            _topk_step(best, scoreT, s, k)
    if best is not None:                                                  # max / min: each neuron's top-1
        hi, lo = best[0][0][:, 0].contiguous(), best[1][0][:, 0].contiguous()
    if not bool(torch.isfinite(hi).all() and torch.isfinite(lo).all()):
        # scores beyond float32 (e^88: a token's content/S̄ that large): redo in float64; beyond that, n/a
        if dtype != torch.float64:
            return scan_neurons(circuit, choice, tokenizer, threshold=threshold, top=top, position=position,
                                chunk=chunk, dtype=torch.float64, variant=variant)
        _scan_overflow(circuit, n)
    key = hi if v.max == "signed" else torch.maximum(hi, -lo)
    sel = (key >= threshold).nonzero().squeeze(1)
    sel = sel[torch.argsort(key[sel], descending=True, stable=True)]
    neurons = []
    if len(sel) and best is not None:                                     # one pass: the selected rows
        (tv, ti), (bv, bi) = [(val[sel].T, idx[sel].T) for val, idx in best]   # [k s] each
    elif len(sel):
        (tv, ti), (bv, bi) = _running_topk(Y, M[:, sel], k, chunk)      # pass 2: [k s] each
    if len(sel):
        ti, bi = ids[ti], ids[bi]                                         # rows → token ids
        uniq = torch.cat([ti, bi]).unique().tolist()                      # each token decoded once
        text = dict(zip(uniq, to_str_tokens(tokenizer, uniq)))
        rows = zip(ti.T.tolist(), tv.T.tolist(), bi.T.tolist(), bv.T.tolist())   # per selected neuron
        his, los, keys = hi.tolist(), lo.tolist(), key.tolist()
        for j, (t_ids, t_vals, b_ids, b_vals) in zip(sel.tolist(), rows):
            neurons.append({
                "neuron": j, "max_contribution": his[j], "min_contribution": los[j],
                "top_tokens": [text[i] for i in t_ids], "top_ids": t_ids, "top_values": t_vals,
                "bottom_tokens": [text[i] for i in b_ids], "bottom_ids": b_ids, "bottom_values": b_vals,
                **({"score": keys[j]} if given else {}),     # the selection score (max or max |·|)
            })
    cal = circuit.calibration
    return NeuronScan(heads=circuit.heads, head_choice=choice, position=n, query=cal.query, threshold=threshold,
                      top=top, max_all=hi.tolist(), min_all=lo.tolist(), neurons=neurons,
                      fingerprint=cal.fingerprint, processing=cal.processing, ln2_scale=cal.ln2_scale,
                      variant=v.to_dict() if given else None, excluded_tokens=circuit.weights.cfg.d_vocab - len(ids))


def _scored_tokens(circuit: Circuit, v: ContributionVariant, n: int, dtype, chunk: int, tokenizer=None
                   ) -> tuple[Tensor, Tensor]:
    """(Y rows of the tokens the variant scores, their token ids)."""
    if v.computation == "code":                                                   # Gibson's cell, code_variant
        from . import code_variant
        learned_positions(circuit.weights.cfg, "--variant code (Gibson's computation)")

        toks = circuit.calibration.tokens
        if toks is None:
            raise HeadscopeError("--variant code needs the calibration text's tokens; this calibration file has "
                                 "none (recalibrate with `headscope calibrate`)")
        Y = code_variant.token_values(circuit.weights, circuit.heads, toks, n,
                                      window=min(code_variant.WINDOW, n)).to(dtype)          # [V H*e]
    else:
        Y = token_values(circuit, n, dtype, chunk, position_part=v.position_part)     # [V H*e]
    ids = torch.arange(Y.shape[0])
    drop = excluded_tokens(circuit, v, tokenizer)
    drop = sorted(set(drop) | set(range(circuit.weights.cfg.vocab, Y.shape[0])))   # padding rows (code variant)
    if drop:
        keep = torch.ones(Y.shape[0], dtype=torch.bool)
        keep[drop] = False
        ids = ids[keep]
        Y = Y[ids]
    return Y, ids


# -- a ranking robust to one outlier token -----------------------------------------------


@dataclasses.dataclass
class NeuronRanking(HtmlRepr):
    """Every MLP0 neuron scored by its max and by a null-calibrated k-th largest token score."""

    heads: list[int]
    position: int
    variant: dict
    k: int
    n_random: int
    seed: int
    max: list[float]               # per neuron: max_t score (or max_t |score|, variant max=abs)
    kth: list[float]               # per neuron: its k-th largest score
    topk_mean: list[float]         # per neuron: mean of its k largest scores (for reference)
    null_max: list[float]          # |m_j| · median over random readouts of their max
    null_kth: list[float]          # |m_j| · median over random readouts of their k-th largest
    robust: list[float]            # kth / null_kth (0 where the null is ≤ 0)
    order_max: list[int]           # neurons by max, descending
    order_robust: list[int]        # neurons by robust, descending
    fingerprint: str

    def to_dict(self, top: int | None = None) -> dict:
        d = dataclasses.asdict(self)
        for key in ("max", "kth", "topk_mean", "null_max", "null_kth", "robust"):
            d.pop(key)
        d["order_max"], d["order_robust"] = self.order_max[:top], self.order_robust[:top]
        d["neurons"] = [{"neuron": j, "max": self.max[j], "kth": self.kth[j], "topk_mean": self.topk_mean[j],
                         "null_max": self.null_max[j], "null_kth": self.null_kth[j], "robust": self.robust[j]}
                        for j in self.order_robust[:top]]
        return d


#: the largest k of the robust ranking: its running top-k holds 2 × k × (d_mlp + n_random) scores and ids
#: (about 24·k·(d_mlp + 32) bytes, 90 MB at k = 1024 for GPT-2), so memory stays bounded
MAX_K = 1024


def check_k(k: int) -> None:
    """Refuse a k of the robust ranking past :data:`MAX_K` (its memory grows with k)."""
    if k > MAX_K:
        raise HeadscopeError(f"--k: expected at most {MAX_K} (the robust score's running top-k takes memory in "
                             f"proportion to k), got {k}")


@torch.no_grad()
def rank_neurons(circuit: Circuit, choice: HeadChoice, tokenizer=None, *, variant=None, k: int = 10,
                 n_random: int = 32, seed: int = 0, chunk: int = CHUNK, dtype=torch.float32) -> NeuronRanking:
    """Rank every MLP0 neuron by its k-th largest token score over the null's (module docstring).

    score[t, j] = Y[t] · (W_O m_j) as in :func:`scan_neurons` (same variant). The null
    replaces m_j by |m_j| ĝ_r, ĝ_r Gaussian directions projected on 1⊥ (the readouts are
    centred) and normalised, r = 1..n_random (seeded); scores are linear in the readout,
    so the null of a readout of norm s is s times the unit null. A neuron no more
    selective than a random readout of its norm scores ≈ 1; one carried by fewer than k
    tokens also stays near the null (its k-th score is ordinary); one driven by a whole
    set of tokens scores ≫ 1. ``max=abs`` ranks |score|.
    """
    if k < 1 or n_random < 1:
        raise HeadscopeError(f"rank_neurons: expected k ≥ 1 and n_random ≥ 1, got k {k}, n_random {n_random}")
    check_k(k)
    v = parse_variant(variant)
    n = choice.position if v.position is None else v.position
    circuit._check_n(n)
    Y, _ = _scored_tokens(circuit, v, n, dtype, chunk, tokenizer)           # [V' H*e]
    k = min(k, Y.shape[0])
    m = readout_vectors(circuit, ln2_scale=ln2_divisor(circuit, v))          # [d m]
    W_O = circuit.weights.blocks[0].W_O[circuit.heads]
    W_Ocat = W_O.reshape(-1, W_O.shape[-1])                                  # [H*e d]
    g = torch.Generator().manual_seed(seed)
    G = torch.randn(m.shape[0], n_random, generator=g, dtype=m.dtype)
    G = G - G.mean(0, keepdim=True)
    G = G / G.norm(dim=0, keepdim=True)                                      # [d r] unit, ⟂ 1
    M = torch.cat([W_Ocat @ m, W_Ocat @ G], dim=1).to(dtype)                 # [H*e m+r]
    (tv, _), (bv, _) = _running_topk(Y, M, k, chunk)                         # [k m+r] each, sorted
    if not bool(torch.isfinite(tv).all() and torch.isfinite(bv).all()):     # as scan_neurons: float64, then n/a
        if dtype != torch.float64:
            return rank_neurons(circuit, choice, tokenizer, variant=v, k=k, n_random=n_random, seed=seed,
                                chunk=chunk, dtype=torch.float64)
        _scan_overflow(circuit, n)
    if v.max == "abs":
        tv = torch.cat([tv, -bv]).topk(k, dim=0).values                      # k largest |score|
    tv = tv.double()
    mx, kth, tk = tv[0], tv[k - 1], tv.mean(0)                               # [m+r]
    n_m = m.shape[1]
    norms = m.norm(dim=0)                                                    # [m]
    null_max = norms * mx[n_m:].median()
    null_kth = norms * kth[n_m:].median()
    robust = torch.where(null_kth > 0, kth[:n_m] / null_kth.clamp_min(1e-300), torch.zeros_like(null_kth))
    if not bool(torch.isfinite(robust).all()):
        raise NotApplicable("robust neuron ranking: a neuron's k-th score over its null passes float64's range "
                            "(the null of random readouts is that close to 0)")
    order = lambda x: torch.argsort(x, descending=True, stable=True).tolist()   # noqa: E731
    return NeuronRanking(heads=circuit.heads, position=n, variant=v.to_dict(), k=k, n_random=n_random, seed=seed,
                         max=mx[:n_m].tolist(), kth=kth[:n_m].tolist(), topk_mean=tk[:n_m].tolist(),
                         null_max=null_max.tolist(), null_kth=null_kth.tolist(), robust=robust.tolist(),
                         order_max=order(mx[:n_m]), order_robust=order(robust),
                         fingerprint=circuit.calibration.fingerprint)


# -- one neuron on texts ---------------------------------------------------------------


@dataclasses.dataclass
class NeuronTrace:
    """A neuron's true MLP0 pre-activation on texts beside the circuit's prediction."""

    neuron: int
    heads: list[int]
    query: str
    texts: list[dict]             # per text: tokens, ids, true, predicted, correlation
    correlation: float | None     # over all evaluated positions of all texts (None: a constant side)
    fingerprint: str
    processing: dict

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


@torch.no_grad()
def predict_neurons(circuit: Circuit, neurons: list[int], tokens: Int[Tensor, "p"]) -> Float[Tensor, "p s"]:
    """Circuit prediction of neurons' pre-activations at every position n < len(tokens).

    pred[n, j] = (Σ_i pos[n, i] · contribution[n, t_q, x_i] + off[n]) · m_j + b_in[j]
    (:meth:`Circuit.predict` · :func:`readout_vectors`), positions capped at the calibration's.
    """
    cfg = circuit.weights.cfg
    neurons = [cfg.check_neuron(j) for j in neurons]
    p = min(len(tokens), circuit.calibration.n_positions)
    resid = circuit.predict(tokens[:p], list(range(p)))                   # [p d]
    b_in = pre_activation(circuit.weights)[1][neurons]
    return resid @ readout_vectors(circuit, neurons) + b_in               # [p s]


def predict_neuron(circuit: Circuit, j: int, tokens: Int[Tensor, "p"]) -> Float[Tensor, "p"]:
    """:func:`predict_neurons` for one neuron."""
    return predict_neurons(circuit, [j], tokens)[:, 0]


@torch.no_grad()
def neuron_traces(circuit: Circuit, neurons: list[int], tokenizer, texts: list[Tensor]) -> list[NeuronTrace]:
    """True ``blocks.0.mlp.hook_pre[:, :, j]`` (the texts' own queries) vs :func:`predict_neurons`,
    for several neurons at once (one forward pass and one prediction per text).

    Positions are capped at the calibration's; correlations exclude BOS (position 0).
    """
    neurons = [circuit.weights.cfg.check_neuron(j) for j in neurons]
    rows: list[list[dict]] = [[] for _ in neurons]
    t_all, p_all = [], []
    for tokens in texts:
        pred = predict_neurons(circuit, neurons, tokens)                           # [p s]
        p = pred.shape[0]
        cache = run_with_cache(circuit.weights, tokens[None, :p], names=["blocks.0.mlp.hook_pre"], stop_at_layer=1)
        true = cache["blocks.0.mlp.hook_pre"][0][:, neurons]                       # [p s]
        ids = tokens[:p].tolist()
        strs = to_str_tokens(tokenizer, ids)
        for c in range(len(neurons)):
            rows[c].append({"ids": ids, "tokens": strs, "true": true[:, c].tolist(), "predicted": pred[:, c].tolist(),
                            "correlation": pearson(true[1:, c], pred[1:, c]) if p > 2 else None})
        t_all.append(true[1:])
        p_all.append(pred[1:])
    T, P = torch.cat(t_all), torch.cat(p_all)                                      # [N s]
    cal = circuit.calibration
    return [NeuronTrace(neuron=j, heads=circuit.heads, query=cal.query, texts=rows[c],
                        correlation=pearson(T[:, c], P[:, c]), fingerprint=cal.fingerprint,
                        processing=cal.processing) for c, j in enumerate(neurons)]


def neuron_trace(circuit: Circuit, j: int, tokenizer, texts: list[Tensor]) -> NeuronTrace:
    """:func:`neuron_traces` for one neuron."""
    return neuron_traces(circuit, [j], tokenizer, texts)[0]
