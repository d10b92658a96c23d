"""Contextual MLP0 neurons from the calibrated contextual circuit (seed 000, last part).

Layer 0's MLP reads ``LN2(resid_mid) = w₂ ⊙ c(resid_mid)/σ₂ + b₂`` (c centres over
d_model). The contextual circuit (:mod:`.contextual`) adds
``Σ_i pos[n, i] · contribution[n, t_q, x_i]`` to resid_mid, a kernel-weighted average
of per-token vectors, so a context made only of token t moves neuron j's
pre-activation by

    score[t, j] = c(contribution[n, t_q, t]) ⊙ w₂ · W_in[:, j] / σ̄₂

**LayerNorm 2** is handled by fixing its scale to σ̄₂, the median of layer 0's
``ln2.hook_scale`` on the calibration text (stored in the calibration); its centring
and weight are exact (linear), its bias does not depend on t and is left out.
The seed's maximum token contribution is ``max[j] = max_t score[t, j]`` over the whole
vocabulary; neurons with ``max[j] ≥ threshold`` (default :data:`DEFAULT_THRESHOLD`)
are *contextual*, reported with the tokens of largest and smallest score.

**Threshold.** 5.0 is the seed's value for GPT-2 Small and is the default. On the
planted checkpoint (seed 0, shipped calibration text, n = 1023) the four planted
neurons score 12.9 (language), 48–56 (spelling, topic, sentiment) and every other
neuron ≤ 2.8 (median 0.9) *provided the contextual heads' value dims beyond the
planted features are zero*; 5.0 then separates them with a wide margin (the
integration tests check precision and recall). While those dims still hold the base's
random weights, the keyword heads (content boost e^2.5 on ~150 tokens) push their
random OV output through every MLP0 neuron and 584 neurons exceed 5.0 (the 5th
largest max is 8.8): those neurons really are contextual in that model, so no
threshold on max[j] is right there. For other models choose the threshold from the
distribution of ``max[j]`` (``NeuronScan.max_all``), e.g. well above its median plus
ten median absolute deviations.

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

from ._errors import HeadscopeError, NotApplicable
from ._html_repr import HtmlRepr
from .contextual import Circuit, HeadChoice, check_log_weights
from .forward import run_with_cache
from .stats import pearson
from .tokenizer import to_str_tokens

Tensor = torch.Tensor

DEFAULT_THRESHOLD = 5.0
CHUNK = 4096


def readout_vectors(circuit: Circuit, neurons: list[int] | None = None) -> Float[Tensor, "d s"]:
    """m_j = c(w₂ ⊙ W_in[:, j]) / σ̄₂ for each neuron j (default: all): residual → pre-activation.

    With LN2's scale fixed at σ̄₂, a residual vector r moves neuron j's pre-activation by
    ``(c(r) ⊙ w₂)·W_in[:, j] / σ̄₂ = r · m_j`` (c centres over d_model; c(r)·v = r·c(v)).
    """
    b = circuit.weights.blocks[0]
    W_in = b.W_in if neurons is None else b.W_in[:, neurons]              # [d s]
    m = b.ln2_w[:, None] * W_in / circuit.calibration.ln2_scale
    return m - m.mean(0, keepdim=True)


def readout(circuit: Circuit, dtype=torch.float32) -> Float[Tensor, "he m"]:
    """M = stack_h(W_O[h]) @ (m_j)_j: a head's value vector → every neuron's pre-activation."""
    W_O = circuit.weights.blocks[0].W_O[circuit.heads]                    # [H e d]
    return (W_O.reshape(-1, W_O.shape[-1]) @ readout_vectors(circuit)).to(dtype)   # [H*e m]


def token_values(circuit: Circuit, n: int, dtype=torch.float32, chunk: int = CHUNK) -> Float[Tensor, "v he"]:
    """Y[t] for the whole vocabulary (see the module docstring), [d_vocab |H|·d_head]."""
    w, b = circuit.weights, circuit.weights.blocks[0]
    fr = circuit.frame(n)
    H, e = len(circuit.heads), w.cfg.d_head
    log_S = circuit.calibration.log_seed_denom[circuit.heads, n].to(dtype)           # [H]
    Wcat = torch.cat([fr.Kq[:, circuit.heads], b.W_V[circuit.heads].permute(1, 0, 2).reshape(w.cfg.d_model, H * e)],
                     dim=1).to(dtype)                                                # [d H + H*e]
    bq, bV = fr.bq[circuit.heads].to(dtype), b.b_V[circuit.heads].reshape(H * e).to(dtype)
    W_E, wpos = w.W_E.to(dtype), w.W_pos[n].to(dtype)
    ln_w, ln_b = b.ln1_w.to(dtype), b.ln1_b.to(dtype)
    Y = torch.empty(w.cfg.d_vocab, H * e, dtype=dtype)
    for s in range(0, w.cfg.d_vocab, chunk):
        x = W_E[s:s + chunk] + wpos                                                  # [c d]
        x = x - x.mean(-1, keepdim=True)
        x = x / (x.pow(2).mean(-1, keepdim=True) + w.cfg.ln_eps).sqrt() * ln_w + ln_b
        out = x @ Wcat                                                               # [c H + H*e]
        a = (out[:, :H] + bq - log_S).exp()                                          # [c H] content/S̄
        Y[s:s + chunk] = ((out[:, H:] + bV).view(-1, H, e) * a[:, :, None]).view(-1, H * e)
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
    V = circuit.weights.cfg.d_vocab
    return torch.cat([fr.content_logits(circuit.weights, torch.arange(s, min(s + chunk, V)))[circuit.heads]
                      for s in range(0, V, chunk)], dim=1) - log_S[:, None]


def _running_topk(Y: Tensor, Ms: Tensor, k: int, chunk: int) -> tuple[tuple[Tensor, Tensor], tuple[Tensor, Tensor]]:
    """((top values, ids), (bottom values, ids)), each [k s], of Y @ Ms over the vocabulary,
    chunk by chunk: [d_vocab s] is never formed."""
    best = [(torch.empty(0, Ms.shape[1], dtype=Y.dtype), torch.empty(0, Ms.shape[1], dtype=torch.long))
            for _ in range(2)]
    for s in range(0, Y.shape[0], chunk):
        score = Y[s:s + chunk] @ Ms                                       # [c s]
        ids = torch.arange(s, s + score.shape[0])[:, None].expand_as(score)
        for side, largest in ((0, True), (1, False)):
            vals, idx = torch.cat([best[side][0], score]), torch.cat([best[side][1], ids])
            v, pick = vals.topk(min(k, vals.shape[0]), dim=0, largest=largest)   # [k s]
            best[side] = (v, idx.gather(0, pick))
    return best[0], best[1]


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

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["head_choice"] = self.head_choice.to_dict()
        d["n_neurons"] = len(self.max_all)
        d.pop("max_all"), d.pop("min_all")
        return d


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
) -> NeuronScan:
    """Scan the whole vocabulary through the circuit for every MLP0 neuron."""
    if top < 1:
        raise HeadscopeError(f"--top must be at least 1, got {top}")
    n = choice.position if position is None else position
    circuit._check_n(n)
    Y = token_values(circuit, n, dtype, chunk)                            # [V H*e]
    M = readout(circuit, dtype)                                           # [H*e m]
    hi = torch.full((M.shape[1],), float("-inf"), dtype=dtype)
    lo = torch.full((M.shape[1],), float("inf"), dtype=dtype)
    for s in range(0, Y.shape[0], chunk):                                 # pass 1: running max / min
        score = Y[s:s + chunk] @ M                                        # [c m]
        torch.maximum(hi, score.amax(0), out=hi)
        torch.minimum(lo, score.amin(0), out=lo)
    if not bool(torch.isfinite(hi).all() and torch.isfinite(lo).all()):
        # scores beyond float32 (e^88: a token's content/S̄ that large): redo in float64; beyond that, n/a
        if dtype != torch.float64:
            return scan_neurons(circuit, choice, tokenizer, threshold=threshold, top=top, position=position,
                                chunk=chunk, dtype=torch.float64)
        _scan_overflow(circuit, n)
    sel = (hi >= threshold).nonzero().squeeze(1)
    sel = sel[torch.argsort(hi[sel], descending=True, stable=True)]
    neurons = []
    if len(sel):
        k = min(top, Y.shape[0])
        (tv, ti), (bv, bi) = _running_topk(Y, M[:, sel], k, chunk)      # pass 2: [k s] each
        for c, j in enumerate(sel.tolist()):
            neurons.append({
                "neuron": j, "max_contribution": float(hi[j]), "min_contribution": float(lo[j]),
                "top_tokens": to_str_tokens(tokenizer, ti[:, c].tolist()), "top_ids": ti[:, c].tolist(),
                "top_values": tv[:, c].tolist(),
                "bottom_tokens": to_str_tokens(tokenizer, bi[:, c].tolist()), "bottom_ids": bi[:, c].tolist(),
                "bottom_values": bv[:, c].tolist(),
            })
    cal = circuit.calibration
    return NeuronScan(heads=circuit.heads, head_choice=choice, position=n, query=cal.query, threshold=threshold,
                      top=top, max_all=hi.tolist(), min_all=lo.tolist(), neurons=neurons,
                      fingerprint=cal.fingerprint, processing=cal.processing, ln2_scale=cal.ln2_scale)


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
    b_in = circuit.weights.blocks[0].b_in[neurons]
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
