"""MLP0 neurons read from the token embedding alone: a score for plain and gated (SwiGLU) MLPs.

The seed-001 neuron scan (:mod:`headscope.layer0.neurons`) scores a neuron by what the
layer-0 *contextual circuit* writes into it; that circuit needs GPT-2's learned positions
(:mod:`headscope.core.applicability`). The score here needs neither positions nor a
circuit, so it applies to every family, and it is defined for gated MLPs.

Maths
-----
MLP0 reads x̂_t = N₂(W_E[t]), the block's second norm (LayerNorm, or RMSNorm when
``cfg.norm == "rmsnorm"``) of token t's embedding alone (no attention output, no
position). Neuron n's activation on it is

    plain:   a_n(t) = act(x̂_t · W_in[:, n] + b_in[n])
    gated:   a_n(t) = act(x̂_t · W_gate[:, n] + b_gate[n]) · (x̂_t · W_in[:, n] + b_in[n])   (SwiGLU: act = silu)

and the neuron writes a_n(t) · W_out[n] into the residual stream, so its contribution has
norm |a_n(t)| · ‖W_out[n]‖. The *score* of neuron n on token t is the signed

    s_n(t) = a_n(t) · ‖W_out[n]‖                                       (residual-stream units)

and a neuron's *token selectivity* is the mean of its K largest |s_n(t)| over the
vocabulary minus the median |s_n(t)| (a neuron that fires for a few tokens — a planted
"contextual" neuron, a token detector — ranks first; one that fires alike for every
token scores 0). For a plain MLP with GPT-2's act this is the direct-path analogue of the
seed's score with the attention term left out; the gated form differs only in the
product with the linear ("up") branch, which can flip the sign.
"""

from __future__ import annotations

import dataclasses

import torch
from jaxtyping import Float

from .._errors import HeadscopeError
from ..core.forward import activation, normalize
from ..core.weights import Weights

Tensor = torch.Tensor

TOP_K = 8          #: tokens averaged for a neuron's selectivity
CHUNK = 4096       #: tokens per pass


def normalised_embeddings(w: Weights, ids: Tensor) -> Float[Tensor, "t d"]:
    """x̂_t = N₂(W_E[t]) under block 0's second norm (LayerNorm or RMSNorm), float64."""
    b = w.blocks[0]
    return normalize(w.W_E[ids].double(), b.ln2_w.double(), b.ln2_b.double(), w.cfg)[0]


def token_scores(w: Weights, ids: Tensor | None = None) -> Float[Tensor, "t m"]:
    """s_n(t) = a_n(t) · ‖W_out[n]‖ for tokens `ids` (default: the vocabulary) and every MLP0 neuron."""
    b, cfg = w.blocks[0], w.cfg
    ids = torch.arange(cfg.vocab) if ids is None else torch.as_tensor(ids).long()
    if cfg.gated_mlp and b.W_gate is None:
        raise HeadscopeError("gated MLP: block 0 has no W_gate")
    out_norm = b.W_out.double().norm(dim=-1)                                         # [m]
    parts = []
    for a in range(0, len(ids), CHUNK):
        x = normalised_embeddings(w, ids[a:a + CHUNK])                              # [t d]
        lin = x @ b.W_in.double() + b.b_in.double()                                  # [t m]
        if cfg.gated_mlp:
            gate = x @ b.W_gate.double() + (0 if b.b_gate is None else b.b_gate.double())
            act = activation(cfg.act_fn, gate) * lin                                        # [t m]
        else:
            act = activation(cfg.act_fn, lin)
        parts.append(act * out_norm)
    return torch.cat(parts)


@dataclasses.dataclass
class TokenNeuronRanking:
    """Neurons by token selectivity (module docstring), highest first."""

    neurons: list[int]
    selectivity: list[float]
    top_tokens: list[list[int]]      # per neuron, the K tokens of largest |s_n(t)|
    top_scores: list[list[float]]    # their signed scores

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def rank_token_neurons(w: Weights, k: int = TOP_K, top: int | None = None, n_tokens: int | None = None
                       ) -> TokenNeuronRanking:
    """Rank MLP0's neurons by selectivity = mean of the k largest |s_n(t)| − median |s_n(t)| over the
    first `n_tokens` ids (default ``cfg.vocab``: every token, no padding rows)."""
    n = w.cfg.vocab if n_tokens is None else n_tokens
    if not isinstance(k, int) or not 1 <= k <= n:
        raise HeadscopeError(f"k: expected an integer in 1..{n}, got {k}")
    s = token_scores(w, torch.arange(n))                                             # [v m]
    mag = s.abs()
    top_vals, top_idx = mag.topk(k, dim=0)                                           # [k m]
    sel = top_vals.mean(0) - mag.median(dim=0).values                                # [m]
    if not torch.isfinite(sel).all():
        raise HeadscopeError("token neuron scores overflow float64")
    order = torch.sort(sel, descending=True, stable=True).indices[: top or w.cfg.d_mlp].tolist()
    return TokenNeuronRanking(
        neurons=order,
        selectivity=[float(sel[n]) for n in order],
        top_tokens=[top_idx[:, n].tolist() for n in order],
        top_scores=[s[top_idx[:, n], n].tolist() for n in order],
    )
