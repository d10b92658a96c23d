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
"""

from __future__ import annotations

import dataclasses
import math

import torch

from . import layer0
from ._errors import HeadscopeError
from .corpus import windows
from .forward import run_with_cache
from .layer0 import SEED_QUERY
from .loading import Model
from .weights import Processing

Tensor = torch.Tensor


@dataclasses.dataclass
class DenominatorStability:
    """Measured vs predicted spread of every layer-0 head's denominator."""

    heads: list[int]
    query: str | None
    normalisation: str
    n_texts: int
    window: int
    n_min: int
    delta: float
    positions: list[int]                  # positions with predictions
    mean: list[list[float]]               # [head pos] over texts (trace, all positions)
    rel_spread: list[list[float]]         # [head pos] std/mean over texts
    traces: list[list[list[float]]]       # [text head pos], first `n_traces` texts
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

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


@torch.no_grad()
def denominator_stability(
    model: Model,
    texts: list[str] | list[Tensor],
    *,
    query: str | None = SEED_QUERY,
    processing: Processing | None = None,
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
    processing = Processing.default() if processing is None else processing
    w = layer0.view(model, processing)
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
        L = torch.logsumexp(layer0.fixed_query_scores(w, cache["blocks.0.attn.hook_k"], qid), -1)  # [b head p]
        log_Z = layer0.log_Z(w, qid, window, c)                                 # [head p]
        S = (L - log_Z).exp()
        norm = "seed: S = sum_j pos[n,j]*content[n,x_j] = exp(logsumexp(scores) - log Z[n]), fixed query"
    else:
        S = cache["blocks.0.attn.hook_denom"].exp()                              # [b head p]
        norm = "model: exp(hook_denom) = sum_j exp(score[n,j]), the text's own query tokens"
    mean = S.mean(0)                                                             # [head p]
    rel = S.std(0) / mean
    ns = torch.arange(n_min, window, dtype=torch.float64)
    y = mean[:, n_min:].log()
    nc = ns - ns.mean()
    slope = ((y - y.mean(1, keepdim=True)) * nc).sum(1) / nc.pow(2).sum()
    positions = list(range(stride, window, stride))
    dev = ((S - mean) / mean).abs()                                              # [b head p]
    meas_q = torch.quantile(dev[:, :, positions], 1 - delta, dim=0)              # [head P]
    out = dict(pred_mean=None, pred_std=None, cheb=None, hoeff=None, s2=None)
    if query is not None:
        keys = X[:, 1:].reshape(-1)
        ids, counts = keys.unique(return_counts=True)
        u = counts.double() / counts.sum()                                       # unigram [support]
        pm, ps, ch, ho, s2s = [], [], [], [], []
        for n in positions:
            fr = layer0.frame(w, qid, n, c)
            cfac = fr.content_logits(w, ids).exp()                               # [head support]
            cbos = fr.content_logits(w, torch.tensor([model.bos_id])).exp()[:, 0]
            mu = cfac @ u
            var = (cfac.pow(2) @ u - mu.pow(2)).clamp_min(0)
            R = cfac.amax(1) - cfac.amin(1)
            p0 = fr.pos[:, 0]
            s2 = fr.pos[:, 1:].pow(2).sum(1)
            ES = p0 * cbos + (1 - p0) * mu
            pm.append(ES)
            ps.append((var * s2).sqrt() / ES)
            ch.append((var * s2 / delta).sqrt() / ES)
            ho.append(R * (s2 * math.log(2 / delta) / 2).sqrt() / ES)
            s2s.append(s2)
        st = lambda xs: torch.stack(xs, 1).tolist()                             # [head P]
        out = dict(pred_mean=st(pm), pred_std=st(ps), cheb=st(ch), hoeff=st(ho), s2=st(s2s))
    return DenominatorStability(
        heads=list(range(H)), query=query, normalisation=norm, n_texts=len(wins), window=window, n_min=n_min,
        delta=delta, positions=positions, mean=mean.tolist(), rel_spread=rel.tolist(),
        traces=S[:n_traces].tolist(), trend_slope=slope.tolist(),
        median_rel_spread=rel[:, n_min:].median(1).values.tolist(),
        predicted_mean=out["pred_mean"], predicted_rel_std=out["pred_std"], chebyshev_rel=out["cheb"],
        hoeffding_rel=out["hoeff"], measured_rel_std=rel[:, positions].tolist(),
        measured_rel_quantile=meas_q.tolist(), sum_pos2=out["s2"],
        fingerprint=model.fingerprint, processing=processing.to_dict(),
    )
