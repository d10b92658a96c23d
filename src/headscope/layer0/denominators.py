"""Stability of the layer-0 softmax denominators across texts (seed 000).

Normalisation reported. With a fixed query token t_q placed at every query position
n (default ' the'; keys are each text's true keys, as in :mod:`.calibration`), the
measured quantity is the seed's denominator

    S_h[n](x) = exp( L_h[n](x) − log Z_h[n] ) ≈ Σ_{j ≤ n} pos_h[n, j] · content_h[n, x_j]

where L_h[n] = logsumexp_i q·key_i/√e is the model's own log-denominator and Z_h[n] the
positional kernel's normaliser (:mod:`.layer0`). Z_h[n] does not depend on the text, so
the relative spread of S equals that of the model's denominator exp(L). With
``query=None`` the text's own token is the query at each n and the model's
``blocks.0.attn.hook_denom`` is used as it is: the reported quantity is then exp(L)
(the model's normalisation) and no i.i.d. prediction is made, since the query varies.

Per head and position n, over texts: the mean, the relative spread std/mean, and the
input-independent trend — the mean trace itself and the least-squares slope of
log mean S over n ≥ ``n_min``.

Predictions under an i.i.d. token model. Tokens x_1..x_n are drawn i.i.d. from the
unigram distribution u of the texts' tokens (x_0 is BOS). With c_t = content_h[n, t],
μ = E_u[c], σ² = Var_u[c], the range R = max c − min c over u's support and
s₂ = Σ_{i ≥ 1} pos_h[n, i]²:

    E[S]        = pos_0 · c_BOS + (1 − pos_0) μ
    std[S]      = σ sqrt(s₂)                                   (exact under the model)
    Chebyshev   P(|S − E S| ≥ σ sqrt(s₂/δ)) ≤ δ
    Hoeffding   P(|S − E S| ≥ R sqrt(s₂ ln(2/δ)/2)) ≤ δ

Each is reported relative to E[S] beside the measured relative std and the measured
(1 − δ)-quantile of |S − mean|/mean. Both bounds shrink with s₂, i.e. with the kernel's
width, and with the content factor's spread.

Numerics. Everything is computed from log S in float64 and stays finite on any finite
weights: relative quantities are scale-free, so they are formed from
S/mean = exp(log S − log mean S) (per head and position, the log-mean a log-sum-exp);
the predictions from content factors shifted by their largest log per head
(c' = exp(log c − max log c) ∈ (0, 1], so μ' ≥ min u > 0) and from pos_0, 1 − pos_0 and
s₂ as log-sum-exps of the kernel's logits. Their relative forms are bounded (the
predicted std/mean ≤ σ/μ ≤ sqrt(1/min u)). The absolute S itself — ``mean``,
``traces``, ``predicted_mean`` — can exceed float64 on extreme weights (log S > 709);
then those fields are None, ``absolute_overflow`` says why, and ``log_mean``,
``log_traces``, ``log_predicted_mean`` (always given) carry them.
"""

from __future__ import annotations

import dataclasses
import math

import torch
from jaxtyping import Float

from . import split as layer0
from .._errors import HeadscopeError
from .._html_repr import HtmlRepr
from .._json import plain
from ..corpus import windows
from ..lowrank import small_matrices
from ..core.forward import run_with_cache
from .split import SEED_QUERY
from ..core.model import Model
from ..core.weights import Weights
from ..stats import LOG_FLOAT64_MAX

Tensor = torch.Tensor


#: query positions per block of the fixed-query log-denominators: a window's keys above each block's
#: last query are left out (−∞ scores), 62 % of the products and exponentials of one 256-query block
#: at the default window; the same values to float64 rounding (sums of other lengths)
QUERY_BLOCK = 64


@dataclasses.dataclass
class DenominatorStability(HtmlRepr):
    """Measured vs predicted spread of every layer-0 head's denominator."""

    heads: list[int]
    query: str | None
    normalisation: str
    n_texts: int
    window: int
    n_min: int
    delta: float
    positions: list[int]                  # positions with predictions
    mean: list[list[float]] | None        # [head pos] over texts (trace, all positions); None: overflow
    rel_spread: list[list[float]]         # [head pos] std/mean over texts
    traces: list[list[list[float]]] | None   # [text head pos], first `n_traces` texts; None: overflow
    trend_slope: list[float]              # per head, d log mean S / dn over n ≥ n_min
    median_rel_spread: list[float]        # per head over n ≥ n_min
    predicted_mean: list[list[float]] | None      # [head positions]
    predicted_rel_std: list[list[float]] | None
    chebyshev_rel: list[list[float]] | None       # deviation bound at level δ, / E S
    hoeffding_rel: list[list[float]] | None
    measured_rel_std: list[list[float]]           # [head positions]
    measured_rel_quantile: list[list[float]]      # (1 − δ)-quantile of |S − mean|/mean
    sum_pos2: list[list[float]] | None            # s₂ per head, position
    fingerprint: str
    processing: dict
    log_mean: list[list[float]] = dataclasses.field(default_factory=list)          # [head pos] log mean S
    log_traces: list[list[list[float]]] = dataclasses.field(default_factory=list)  # [text head pos] log S
    log_predicted_mean: list[list[float]] | None = None                            # [head positions] log E[S]
    absolute_overflow: str | None = None   # why mean / traces / predicted_mean are None (else None)

    def to_dict(self) -> dict:
        return plain(self)   # asdict's values without its deep copy of every float


@torch.no_grad()
@small_matrices()     # 8-window forward of layer 0, [head support] products per position: one thread
def denominator_stability(
    model: Model,
    texts: list[str] | list[Tensor],
    *,
    query: str | None = SEED_QUERY,
    window: int = 256,
    n_min: int = 32,
    stride: int = 16,
    delta: float = 0.1,
    n_traces: int = 8,
) -> DenominatorStability:
    """Sample S_h[n] on windows of `texts` (strings, or token windows with BOS first).

    Windows of exactly `window` tokens are used (shorter ones dropped, so every
    position has the same number of samples); predictions at n = stride, 2·stride, ….
    """
    w = layer0.view(model)
    if not 0 < delta < 1:
        raise HeadscopeError(f"delta must lie in (0, 1), got {delta}")
    if not 0 <= n_min < window - 1 or not 1 <= stride < window:
        raise HeadscopeError(f"expected 0 ≤ n_min < window − 1 and 1 ≤ stride < window, "
                             f"got n_min {n_min}, stride {stride}, window {window}")
    if texts and isinstance(texts[0], str):
        wins = windows(model, texts, n_ctx=window)
    else:
        wins = list(texts)
    wins = [x[:window] for x in wins if len(x) >= window]
    if len(wins) < 2:
        raise HeadscopeError(f"denominator stability needs at least 2 windows of {window} tokens, got {len(wins)}")
    X = torch.stack(wins)                                                        # [b p]
    names = ["blocks.0.attn.hook_k"] if query is not None else ["blocks.0.attn.hook_denom"]
    cache = run_with_cache(w, X, names=names, stop_at_layer=1, batch_size=8)
    H = model.cfg.n_heads
    c = layer0.measure_c(w)
    if query is not None:
        qid = layer0.token_id(model, query)
        L = layer0.fixed_query_log_denominators(w, cache["blocks.0.attn.hook_k"], qid,  # [b head p]
                                                block=QUERY_BLOCK)
        log_Z = layer0.log_Z(w, qid, window, c)                                 # [head p]
        logS = L - log_Z                                                         # [b head p] log S
        norm = "seed: S = sum_j pos[n,j]*content[n,x_j] = exp(logsumexp(scores) - log Z[n]), fixed query"
    else:
        logS = cache["blocks.0.attn.hook_denom"].double()                        # [b head p] log exp(L)
        norm = "model: exp(hook_denom) = sum_j exp(score[n,j]), the text's own query tokens"
    log_mean = torch.logsumexp(logS, 0) - math.log(logS.shape[0])                # [head p] log mean_texts S
    R = (logS - log_mean).exp()                                                  # [b head p] S / mean, mean 1
    rel = R.std(0)                                                               # std/mean
    ns = torch.arange(n_min, window, dtype=torch.float64)
    y = log_mean[:, n_min:]
    nc = ns - ns.mean()
    slope = ((y - y.mean(1, keepdim=True)) * nc).sum(1) / nc.pow(2).sum()
    positions = list(range(stride, window, stride))
    dev = (R - 1).abs()                                                          # [b head p] |S − mean|/mean
    meas_q = torch.quantile(dev[:, :, positions], 1 - delta, dim=0)              # [head P]
    out = dict(pred_std=None, cheb=None, hoeff=None, s2=None, log_pred=None)
    if query is not None:
        keys = X[:, 1:].reshape(-1)
        ids, counts = keys.unique(return_counts=True)
        u = counts.double() / counts.sum()                                       # unigram [support]
        ns = torch.tensor(positions)                                             # [P]
        lc, lp = layer0.frames_at(w, qid, ns, c, torch.cat([ids, torch.tensor([model.bos_id])]))
        lc, lbos = lc[..., :-1], lc[..., -1]                                     # [P head support] log c, [P head]
        m = lc.amax(-1)                                                          # [P head] shift
        cp = (lc - m[..., None]).exp_()                                          # c' = c e^{-m} in (0, 1]
        mu = cp @ u                                                              # μ' ≥ min u > 0
        var = (cp - mu[..., None]).pow_(2) @ u                                   # Var'[c]
        R_ = 1 - cp.amin(-1)                                                     # (max c − min c) e^{-m}
        log_Z = torch.logsumexp(lp, -1)                                          # [P head]; lp −inf beyond n
        log_p0 = lp[..., 0] - log_Z
        log_rest = torch.logsumexp(lp[..., 1:], -1) - log_Z                      # log(1 − pos_0)
        log_s2 = torch.logsumexp(2 * lp[..., 1:], -1) - 2 * log_Z                # log Σ_{i≥1} pos_i²
        log_ES = torch.logaddexp(log_p0 + lbos, log_rest + m + mu.log())         # log E[S]
        unit = (m + 0.5 * log_s2 - log_ES).exp()                                 # e^m sqrt(s₂) / E[S]
        st = lambda x: x.T.contiguous()                                          # [head P]
        out = dict(log_pred=st(log_ES), pred_std=st(var.sqrt() * unit).tolist(),
                   cheb=st((var / delta).sqrt() * unit).tolist(),
                   hoeff=st(R_ * math.sqrt(math.log(2 / delta) / 2) * unit).tolist(), s2=st(log_s2.exp()).tolist())
    # absolute S where float64 holds it (log S ≤ 709); the logs are always given
    logs = [logS[:n_traces], log_mean] + ([out["log_pred"]] if out["log_pred"] is not None else [])
    top = max(float(x.max()) for x in logs)
    overflow = None if top <= LOG_FLOAT64_MAX else (
        f"S exceeds float64 (log S up to {top:.4g} > {LOG_FLOAT64_MAX:.1f}): see log_mean, log_traces, "
        "log_predicted_mean")
    absolute = (lambda t: None if overflow else t.exp().tolist())  # noqa: E731
    return DenominatorStability(
        heads=list(range(H)), query=query, normalisation=norm, n_texts=len(wins), window=window, n_min=n_min,
        delta=delta, positions=positions, mean=absolute(log_mean), rel_spread=rel.tolist(),
        traces=absolute(logS[:n_traces]), trend_slope=slope.tolist(),
        median_rel_spread=rel[:, n_min:].median(1).values.tolist(),
        predicted_mean=None if out["log_pred"] is None else absolute(out["log_pred"]),
        predicted_rel_std=out["pred_std"], chebyshev_rel=out["cheb"],
        hoeffding_rel=out["hoeff"], measured_rel_std=rel[:, positions].tolist(),
        measured_rel_quantile=meas_q.tolist(), sum_pos2=out["s2"],
        fingerprint=model.fingerprint, processing=model.resolved_processing().to_dict(),
        log_mean=log_mean.tolist(), log_traces=logS[:n_traces].tolist(),
        log_predicted_mean=None if out["log_pred"] is None else out["log_pred"].tolist(),
        absolute_overflow=overflow,
    )


@torch.no_grad()
def log_mean_S_at(w: Weights, wins: list[Tensor], token: int, positions: list[int], c: float,
                  block_bytes: int = 64 * 2**20) -> Float[Tensor, "head P"]:
    """log mean over the windows `wins` (token ids, BOS first) of S_h[n] at `positions` only
    (learned positions; `w` a layer-0 view, whose layer 0 may hold more heads than its config: packed
    null draws): :func:`denominator_stability`'s ``log_mean`` there (query `token`, c), with no forward
    pass. A key's score is q·(x̂_i W_K + b_K)/s = x̂_i·Kq + bq (:func:`~headscope.layer0.query_frames`), so
    L_h[n] = logsumexp_{i visible} (x̂_i·Kq_n + bq_n) needs the windows' LN1 outputs x̂ (the same for every
    head) and one [k d] × [d m·head] product per window, not every key of every head."""
    ns = torch.tensor([int(n) for n in positions])
    k = int(ns.max()) + 1
    if any(len(x) < k for x in wins) or len(wins) < 1:
        raise HeadscopeError(f"log_mean_S_at: expected windows of at least {k} tokens, got lengths {[len(x) for x in wins]}")
    _, Kq, bq, _ = layer0.query_frames(w, token, ns, c)                             # [m d h], [m h]
    m, d, H = Kq.shape
    mask = layer0.hidden(w, ns, k)[:, None, :]                                      # [m 1 k]
    x_hat = layer0.ln1(w, w.W_E[torch.stack([x[:k] for x in wins])] + w.W_pos[:k])  # [b k d]
    step = max(1, block_bytes // (k * H * x_hat.element_size()))                   # query positions per block
    L = torch.empty(len(wins), m, H, dtype=x_hat.dtype)
    for a in range(0, m, step):
        z = min(a + step, m)
        s = torch.einsum("bkd,mdh->bmhk", x_hat, Kq[a:z]) + bq[a:z, :, None]        # [b m' H k]
        L[:, a:z] = torch.logsumexp(s.masked_fill_(mask[a:z], float("-inf")), -1)
    logS = L - layer0.log_Z_at(w, token, ns, c).T                                  # [b m H] log S
    return (torch.logsumexp(logS, 0) - math.log(len(wins))).T                     # [H m]
