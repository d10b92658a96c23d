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

**Threshold.** 5.0 is the seed's value for GPT-2 Small and is the default. On
planted checkpoints (seed 0) the planted neurons score ≈ 25–100 and the
unremarkable ones ≤ ≈ 3, so 5.0 separates them with a wide margin (the
integration tests check precision and recall). For other models: choose the
threshold from the distribution of ``max[j]`` (``NeuronScan.max_all``), e.g. well
above its median plus ten median absolute deviations.

**The scan** never forms [d_vocab d_mlp] nor the d_model-sized contributions:
with Y[t] = (content_h[n, t]/S̄_h[n] · (LN1(W_E[t] + W_pos[n]) W_V[h] + b_V[h]))_{h ∈ H}
(concatenated over heads, [d_vocab |H|·d_head], kept) and
M = stack_h(c(W_O[h]) ⊙ w₂ W_in / σ̄₂) ([|H|·d_head d_mlp]), score = Y @ M. Pass 1
multiplies chunks of Y by M and keeps a running max and min per neuron; pass 2
recomputes score only for the neurons above threshold, ``Y @ M[:, sel]``, and takes
their top and bottom k tokens.
"""

from __future__ import annotations

import dataclasses

import torch
from jaxtyping import Float, Int

from . import _l0
from ._errors import HeadscopeError
from .contextual import Circuit, HeadChoice
from .forward import run_with_cache
from .tokenizer import to_str_tokens

Tensor = torch.Tensor

DEFAULT_THRESHOLD = 5.0
CHUNK = 4096


def readout(circuit: Circuit, dtype=torch.float32) -> Float[Tensor, "he m"]:
    """M = stack_h( c(W_O[h]) ⊙ w₂ @ W_in / σ̄₂ ) for the circuit's heads."""
    b = circuit.weights.blocks[0]
    W_O = b.W_O[circuit.heads]                                            # [H e d]
    W_O = (W_O - W_O.mean(-1, keepdim=True)) * b.ln2_w                    # centre, LN2 weight
    M = W_O.reshape(-1, W_O.shape[-1]) @ b.W_in / circuit.calibration.ln2_scale   # [H*e m]
    return M.to(dtype)


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


@dataclasses.dataclass
class NeuronScan:
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
    sel = (hi >= threshold).nonzero().squeeze(1)
    sel = sel[torch.argsort(hi[sel], descending=True, stable=True)]
    neurons = []
    if len(sel):
        score = Y @ M[:, sel]                                             # pass 2: [V s]
        k = min(top, score.shape[0])
        tv, ti = score.topk(k, dim=0)
        bv, bi = score.topk(k, dim=0, largest=False)
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
    correlation: float            # over all evaluated positions of all texts
    fingerprint: str
    processing: dict

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def _pearson(a: Tensor, b: Tensor) -> float:
    a, b = a - a.mean(), b - b.mean()
    den = float(a.norm() * b.norm())
    return float((a * b).sum()) / den if den > 0 else float("nan")


@torch.no_grad()
def predict_neuron(circuit: Circuit, j: int, tokens: Int[Tensor, "p"]) -> Float[Tensor, "p"]:
    """Circuit prediction of neuron j's pre-activation at every position n < len(tokens).

    pred[n] = Σ_i pos[n, i] · score[x_i, j](n) + off[n]·m_j + b_in[j] with
    m_j = c(·) ⊙ w₂ · W_in[:, j] / σ̄₂ (the readout of :func:`readout` for one neuron)."""
    w, b = circuit.weights, circuit.weights.blocks[0]
    d_mlp = w.cfg.d_mlp
    if not 0 <= j < d_mlp:
        raise HeadscopeError(f"neuron {j} out of range (layer 0 has neurons 0..{d_mlp - 1})")
    m_j = b.ln2_w * b.W_in[:, j] / circuit.calibration.ln2_scale               # [d]
    m_j = m_j - m_j.mean()                                                     # c(r)·m = r·c(m)
    Vj = torch.stack([b.W_V[h] @ (b.W_O[h] @ m_j) for h in circuit.heads], 1)  # [d H]
    bj = torch.stack([b.b_V[h] @ (b.W_O[h] @ m_j) for h in circuit.heads])     # [H]
    p = min(len(tokens), circuit.calibration.n_positions)
    out = torch.empty(p, dtype=w.W_E.dtype)
    for n in range(p):
        fr = circuit.frame(n)
        a = circuit.token_weights(fr, tokens[: n + 1]) * circuit.shared_kernel(fr)  # [H k]
        X = _l0.ln1(w, w.W_E[tokens[: n + 1]] + w.W_pos[n])                        # [k d]
        out[n] = (a * ((X @ Vj).T + bj[:, None])).sum() + circuit.offset(fr) @ m_j + b.b_in[j]
    return out


@torch.no_grad()
def neuron_trace(circuit: Circuit, j: int, tokenizer, texts: list[Tensor]) -> NeuronTrace:
    """True ``blocks.0.mlp.hook_pre[:, :, j]`` (the text's own queries) vs :func:`predict_neuron`."""
    rows, t_all, p_all = [], [], []
    for tokens in texts:
        pred = predict_neuron(circuit, j, tokens)
        p = len(pred)
        cache = run_with_cache(circuit.weights, tokens[None, :p], names=["blocks.0.mlp.hook_pre"], stop_at_layer=1)
        true = cache["blocks.0.mlp.hook_pre"][0, :, j]
        rows.append({"ids": tokens[:p].tolist(), "tokens": to_str_tokens(tokenizer, tokens[:p].tolist()),
                     "true": true.tolist(), "predicted": pred.tolist(),
                     "correlation": _pearson(true[1:], pred[1:]) if p > 2 else float("nan")})
        t_all.append(true[1:])
        p_all.append(pred[1:])
    cal = circuit.calibration
    return NeuronTrace(neuron=j, heads=circuit.heads, query=cal.query, texts=rows,
                       correlation=_pearson(torch.cat(t_all), torch.cat(p_all)),
                       fingerprint=cal.fingerprint, processing=cal.processing)
