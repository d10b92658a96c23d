"""Seed 000's claims on where layer 0's context comes from: the keyword density that makes the
worst denominator heads fluctuate, and the broad context (not the neighbours) that the contextual
neurons read. One check per claim (:func:`claim`), each against its null.

Keyword density (row ``keyword_density``). The seed: "The worst behaved heads are Head 6 and
Head 8, which depend on local keyword density, which fluctuates". With the query ' the' at
every position n (as :attr:`Work.denominators`), head h's keywords are the tokens whose content
factor is at least e times the typical token's, ``log content_h[n_mid, t] ≥ median_u + 1``
(u: the windows' unigram distribution; n_mid the middle of the window); the head's local
keyword density at n is the kernel-weighted share of keywords,

    D_h[n](x) = Σ_{1 ≤ i ≤ n} pos_h[n, i] · [x_i is a keyword of h].

The statistic: Pearson r, over the windows and positions n ≥ n_min (every ``KEYWORD_STRIDE``-th),
between log S_h[n] and D_h[n], both centred per n over the windows (what fluctuates from text to
text; the input-independent trend removed); the smallest r over the worst heads. A head without
keywords has r = 0. Null: the same r of null heads (:attr:`Work.denominator_null`: Gaussian
W_Q, W_K, W_V, W_O of each contextual head's norms, its biases permuted), each with its own
keywords.

Broad context (row ``broad_context``). The seed: contextual neurons "are sensitive to broad
contextual patterns rather than just immediate neighboring tokens". On one held-out window, the
input of an MLP0 neuron with readout w at position n is resid_mid[n]·w / σ₂[n] (σ₂ the LN2
scale; the processed readers are centred). Split it by where it comes from: the layer-0 heads'
output from keys at distance n − i ≥ ``NEAR`` (far, BOS excluded), BOS, and the rest (near:
the token's own embedding, the position embedding and keys within ``NEAR``). The statistic:
per readout, the far share of the variation over positions n ≥ ``FIRST``,

    far share = Σ_n (far_n·w − mean)² / (Σ_n (far_n·w − mean)² + Σ_n (near_n·w − mean)²),

the median over the contextual neurons. Null: random readouts (Gaussian, centred where the
readers are; the share is scale-free), one readout per draw: the median over the neurons must
clear the 95th percentile of single readouts (the median of n null readouts is tighter).
"""

from __future__ import annotations

import statistics

import torch

from .._errors import NotApplicable
from ..core.forward import run_with_cache
from ..corpus import windows
from .null import READOUT_DRAWS, compare, generator, random_readouts
from .reference import check_layer0_heads, seed_component
from .table import claim, margin_of, share_of

KEYWORD_NATS = 1.0        #: a keyword's content factor over the typical token's: e-fold (1 nat)
KEYWORD_STRIDE = 16       #: every 16th position n ≥ n_min of the denominator windows
NEAR = 4                  #: keys within 4 tokens (distance 0..3) are neighbours: 2 decay lengths of a local kernel
FIRST = 64                #: positions n ≥ 64 of the broad-context window (room for the far keys)


# -- keyword density --------------------------------------------------------------------------------


def keyword_correlation(model, w, wins: list[torch.Tensor], log_traces, heads: list[int], n_min: int,
                        c: float | None = None, stride: int = KEYWORD_STRIDE) -> dict[int, dict]:
    """Per head of `heads`: r between log S_h[n] and its keyword density D_h[n] (module docstring),
    the number of keyword tokens and the mean density. `w`: the layer-0 view of the weights the
    traces came from (:func:`headscope.layer0.view`, or a null layer of it); `wins`: the windows [p]
    the traces came from; `log_traces` [window head p] (DenominatorStability.log_traces); `c` the
    split's c (default: measured on `w`; a null layer shares the model's embeddings, hence its c)."""
    from .. import layer0
    from ..layer0.split import SEED_QUERY

    X = torch.stack([x[:len(log_traces[0][0])] for x in wins[:len(log_traces)]])          # [b p]
    logS = torch.tensor(log_traces, dtype=torch.float64)                                    # [b head p]
    b, _, p = logS.shape
    if b < 2:
        raise NotApplicable("the keyword density needs at least 2 windows")
    qid = layer0.token_id(model, SEED_QUERY)
    ns = torch.arange(max(n_min, 1), p, stride)
    ids, counts = X[:, 1:].reshape(-1).unique(return_counts=True)
    lc = layer0.log_content_factors(w, qid, p // 2, ids)                                    # [head t]
    u = counts.double() / counts.sum()
    c = layer0.measure_c(w) if c is None else c
    _, _, _, pos = layer0.query_frames(w, qid, ns, c)                                       # [m head k]
    out = {}
    for h in heads:
        order = torch.argsort(lc[h])                                                        # the u-weighted median
        med = lc[h][order][int(torch.searchsorted(u[order].cumsum(0), torch.tensor(0.5, dtype=torch.float64)))]
        kw_ids = ids[lc[h] >= med + KEYWORD_NATS]
        is_kw = torch.isin(X, kw_ids).double()                                              # [b p]
        is_kw[:, 0] = 0.0                                                                   # BOS is no keyword
        k = pos.shape[-1]
        D = torch.einsum("mk,bk->bm", pos[:, h].double(), is_kw[:, :k])                     # [b m]
        y = logS[:, h, ns]                                                                  # [b m]
        Dc, yc = D - D.mean(0), y - y.mean(0)
        den = float(Dc.norm() * yc.norm())
        r = float((Dc * yc).sum()) / den if den > 0 else 0.0
        out[h] = {"r": r, "n_keywords": int(kw_ids.numel()), "density": float(D.mean())}
    return out


def used_windows(w, stab) -> list[torch.Tensor]:
    """The windows of Work.denominators in the order of its traces (full-length ones, cut to the window)."""
    return [x[:stab.window] for x in w.denominator_windows if len(x) >= stab.window]


def keyword_null(w, heads: list[int]) -> list[float]:
    """r of the null heads that stand for `heads` (one per head and null layer of Work.denominator_null)."""
    from .. import layer0
    from .null import null_layer

    view = layer0.view(w.model)
    c = layer0.measure_c(view)
    draws = []
    for r, stab in enumerate(w.denominator_null):
        nv = null_layer(view, 0, f"denominators:{r}", 1)        # the draw of Work.denominator_null, on the view
        got = keyword_correlation(w.model, nv, used_windows(w, stab), stab.log_traces, heads, stab.n_min, c)
        draws += [got[h]["r"] for h in heads]
    return draws


@claim("keyword_density")
def _keyword_density(c, ref, w):
    """The worst heads' denominators track the local density of their keywords (module docstring)."""
    heads = list(ref.worst_heads)
    H = w.model.cfg.n_heads
    if not heads:
        raise NotApplicable("no worst denominator heads to test")
    seed_component(ref, check_layer0_heads, heads, H)
    stab = w.denominators
    from .. import layer0

    mine = keyword_correlation(w.model, layer0.view(w.model), used_windows(w, stab), stab.log_traces, heads, stab.n_min)
    worst = min(mine[h]["r"] for h in heads)
    ctx = [h for h in ref.contextual_heads if 0 <= h < H] or heads
    draws = w.memo(("keyword_null", tuple(ctx)), (), lambda: keyword_null(w, ctx))   # once per process and heads
    null = compare(worst, draws, statistic="smallest r(log S, keyword density) over the worst heads",
                   null="null heads of the contextual heads (Gaussian W_Q, W_K, W_V, W_O of their norms), each with "
                        "its own keywords", direction="above", **margin_of(c["null"]),
                   null_passes=share_of(draws, lambda x: x >= c["min_r"]))
    note = "; ".join(f"head {h}: r {mine[h]['r']:.3f}, {mine[h]['n_keywords']} keywords (content ≥ e × the typical "
                     f"token's), mean density {mine[h]['density']:.3f}" for h in heads)
    note += f"; {stab.n_texts} windows of distinct texts, n ≥ {stab.n_min} every {KEYWORD_STRIDE}th"
    return c["published_text"], round(worst, 4), c["tolerance"], worst >= c["min_r"], note, null


# -- broad context ----------------------------------------------------------------------------------


def far_shares(model, tokens: torch.Tensor, R: torch.Tensor, near: int = NEAR, first: int = FIRST) -> torch.Tensor:
    """[r] the far share of each readout's input variation (columns of R [d r]; module docstring)
    on one window `tokens` [p] (BOS first)."""
    W = model.weights()
    names = ["blocks.0.attn.hook_pattern", "blocks.0.attn.hook_v", "blocks.0.hook_resid_mid", "blocks.0.ln2.hook_scale"]
    cache = run_with_cache(W, tokens[None], names=names, stop_at_layer=1)
    A = cache["blocks.0.attn.hook_pattern"][0].double()                                   # [h q k]
    v = cache["blocks.0.attn.hook_v"][0].double()                                          # [k h e]
    p = A.shape[-1]
    if p <= first + 8:
        raise NotApplicable(f"the window holds {p} tokens: the far share needs more than {first + 8}")
    R = R.double()
    W_O = W.blocks[0].W_O.double()                                                          # [h e d]
    vw = torch.einsum("khe,hed,dr->hkr", v, W_O, R)                                         # [h k r]
    q = torch.arange(p)
    far = ((q[:, None] - q[None, :]) >= near) & (q[None, :] >= 1)                           # [q k]
    far_in = torch.einsum("hqk,hkr->qr", A * far, vw)                                       # [q r]
    bos_in = torch.einsum("hq,hr->qr", A[:, :, 0], vw[:, 0])
    total = cache["blocks.0.hook_resid_mid"][0].double() @ R                               # [q r]
    scale = cache["blocks.0.ln2.hook_scale"][0].double()[:, None]                           # [q 1]
    f = (far_in / scale)[first:]
    n_ = ((total - far_in - bos_in) / scale)[first:]
    f, n_ = f - f.mean(0), n_ - n_.mean(0)
    vf, vn = f.pow(2).sum(0), n_.pow(2).sum(0)
    return torch.where(vf + vn > 0, vf / (vf + vn).clamp_min(1e-300), torch.zeros_like(vf))


@claim("broad_context")
def _broad_context(c, ref, w):
    """The contextual neurons read far keys more than random readouts do (module docstring)."""
    from .work import held_out_text

    model = w.model
    neurons = list(ref.neuron_indices) if ref.neuron_indices else [n["neuron"] for n in w.scan.neurons]
    if not neurons:
        raise NotApplicable("no contextual neuron to test")
    for j in neurons:
        model.cfg.check_neuron(j)
    W = model.weights()
    W_in = W.blocks[0].W_in.double()                                                        # [d m]
    R = random_readouts(W_in[:, neurons[0]], READOUT_DRAWS, generator("broad_context"), W.reads_centred)
    tokens = windows(model, [held_out_text()], n_ctx=model.cfg.n_ctx)[0]
    shares = far_shares(model, tokens, torch.cat([W_in[:, neurons], R], dim=1))
    mine, draws = shares[:len(neurons)].tolist(), shares[len(neurons):].tolist()
    med = statistics.median(mine)
    null = compare(med, draws, statistic="median far share of the contextual neurons' input variation",
                   null="random readouts (Gaussian, centred where the readers are), one per draw", direction="above",
                   **margin_of(c["null"]), null_passes=share_of(draws, lambda x: x >= c["min_share"]))
    note = (f"{len(neurons)} neurons; far: keys at distance ≥ {NEAR} (BOS apart), near: the token, its position "
            f"and keys within {NEAR}; positions {FIRST}–{len(tokens) - 1} of one held-out window; "
            f"shares " + ", ".join(f"{j}: {s:.2f}" for j, s in list(zip(neurons, mine))[:8]) +
            ("…" if len(neurons) > 8 else ""))
    return c["published_text"], round(med, 4), c["tolerance"], med >= c["min_share"], note, null
