"""The rotary analogue of seed 000's positional kernel: a kernel over relative position.

A rotary model (GPT-NeoX/Pythia, Llama, Qwen2; ``cfg.positional == "rotary"``) has no
``W_pos``, so the seed's key split (:mod:`headscope.layer0.split`) has no position part
(:mod:`headscope.core.applicability`). But RoPE makes scores translation-equivariant: with
``rot(x, p)`` the rotation of a query or key at position p (:mod:`headscope.core.rotary`,
the one implementation),

    rot(q, i) · rot(k, j) = rot(q, i − j) · rot(k, 0) = rot(q, Δ) · k,      Δ = i − j ≥ 0,

so positions enter a layer-0 score only through the offset Δ. For a fixed query vector q̄
and key vector k̄ the *relative kernel* of head h is

    κ_h(Δ) = rot(q̄_h, Δ) · k̄_h / s          (logit units, s = cfg.attn_scale(0)),  Δ = 0..D−1

and at query position n it gives the attention a query with these q̄, k̄ pays to key i:

    p_{h,n}(i) = softmax_{i ≤ n} κ_h(n − i)

— the analogue of the seed's pos_{n, i} (there: q·P[n, i]/s with the position part of
the key). Which vectors: x̂_t = N₁(W_E[t]) (block 0's first norm of token t's embedding
alone), q̄_h = mean_t(x̂_t) W_Q[h] + b_Q[h] and k̄_h = mean_t(x̂_t) W_K[h] + b_K[h], the
mean over the whole vocabulary (a linear map of the mean = the mean query and the mean
key). So κ is the kernel of "a typical token attending to typical tokens"; a head whose
content terms dominate has a flat κ, a previous-token head a κ that peaks at Δ = 1.

D = min(n_ctx, MAX_OFFSETS): a Llama 3 context of 131072 positions would make κ a 4-million-number
table; the categories read offsets up to N_REF = 255 and the shape rule's positions only.

Categories: those of :mod:`headscope.layer0.kernels`, the ``shape`` rule (one home,
:func:`headscope.layer0.kernels.fit_decay_rate` and :func:`~headscope.layer0.kernels.categorise_shape`
at the rule's query positions, key 0 left out) and the ``width`` rule at N_REF (capped at
n_ctx − 1). Since κ is translation-equivariant by construction, the seed's translation TV
is 0 and not reported.
"""

from __future__ import annotations

import dataclasses

import torch
from jaxtyping import Float

from .._errors import HeadscopeError
from ..core import rotary
from ..core.applicability import softcap_caveat, weight_circuits
from ..core.forward import normalize
from ..core.weights import Weights
from . import kernels as K

Tensor = torch.Tensor

MAX_OFFSETS = 1024     #: offsets Δ of κ computed and reported (the categories read Δ ≤ 1023)
CHUNK = 8192           #: vocabulary rows normalised at a time for the mean query and key


def normalised_embeddings(w: Weights, ids: Tensor | None = None) -> Float[Tensor, "t d"]:
    """x̂_t = N₁(W_E[t]) under block 0's first norm (LayerNorm, or RMSNorm), float64."""
    b = w.blocks[0]
    x = w.W_E.double() if ids is None else w.W_E[ids].double()
    return normalize(x, b.ln1_w.double(), b.ln1_b.double(), w.cfg)[0]


def mean_query_key(w: Weights) -> tuple[Float[Tensor, "h e"], Float[Tensor, "h e"]]:
    """(q̄, k̄): the mean layer-0 query and key over the vocabulary (module docstring)."""
    b = w.blocks[0]
    total = torch.zeros(w.cfg.d_model, dtype=torch.float64)                          # Σ_t x̂_t [d]
    for a in range(0, w.cfg.vocab, CHUNK):                   # no vocab-sized float64 copy (Llama 3: 2 GB)
        total += normalised_embeddings(w, torch.arange(a, min(a + CHUNK, w.cfg.vocab))).sum(0)
    x = total / w.cfg.vocab                                                          # [d] (padding rows left out)
    q = torch.einsum("d,hde->he", x, b.W_Q.double()) + b.b_Q.double()               # [h e]
    k = torch.einsum("d,hde->he", x, b.W_K.double()) + b.b_K.double()               # [h e]
    return q, k


def relative_logits(w: Weights, q: Float[Tensor, "h e"] | None = None, k: Float[Tensor, "h e"] | None = None,
                    n_offsets: int | None = None) -> Float[Tensor, "h delta"]:
    """κ_h(Δ) = rot(q_h, Δ) · k_h / s for Δ = 0..n_offsets−1 (default n_ctx); q, k default to q̄, k̄."""
    cfg = w.cfg
    if cfg.positional != "rotary":
        raise HeadscopeError(f"relative kernel: expected a rotary model, got positional {cfg.positional!r}")
    if q is None or k is None:
        q0, k0 = mean_query_key(w)
        q, k = (q0 if q is None else q), (k0 if k is None else k)
    D = min(cfg.n_ctx, MAX_OFFSETS) if n_offsets is None else n_offsets
    cos, sin = rotary.cos_sin(torch.arange(D), cfg, dtype=torch.float64)             # [Δ rd] each
    q_rot = rotary.rotate(q.double()[None].expand(D, *q.shape), cos, sin)            # [Δ h e]
    return torch.einsum("ahe,he->ha", q_rot, k.double()) / cfg.attn_scale(0)          # [h Δ]


def visible(w: Weights, kappa: Float[Tensor, "h delta"]) -> Float[Tensor, "h delta"]:
    """κ with −inf at the offsets layer 0 does not see (Δ ≥ its local window; :meth:`Config.hidden_keys`)."""
    return kappa.masked_fill(w.cfg.hidden_keys(0, torch.arange(kappa.shape[1]), 0), float("-inf"))


def kernel_at(kappa: Float[Tensor, "h delta"], n: int) -> Float[Tensor, "h i"]:
    """p_{h,n}(i) = softmax_{i ≤ n} κ_h(n − i): the kernel at query position n over keys i = 0..n
    (:func:`visible` κ: zero outside a local window)."""
    return torch.softmax(kappa[:, : n + 1].flip(-1), dim=-1)


@dataclasses.dataclass
class RelativeKernels:
    """Every layer-0 head's relative kernel, its peak and both categories."""

    kappa: list[list[float]]          # κ_h(Δ), Δ = 0..n_ctx−1, logit units
    peak_offset: list[int]            # argmax_Δ κ_h(Δ) over Δ ≤ n_ref
    n_ref: int
    widths: list[float]               # effective width 1/Σ p² at n_ref
    positions: list[int]              # query positions of the shape rule
    rates: list[list[float]]          # fitted κ̂_n per head and shape position
    width: list[str]                  # width rule's category per head
    shape: list[str]                  # shape rule's category per head
    #: what the model's soft-capped scores do to κ (Gemma 2: κ is of the uncapped scores;
    #: :func:`headscope.core.applicability.softcap_caveat`); None, and absent from to_dict, without caps
    caveat: str | None = None

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        if d["caveat"] is None:
            del d["caveat"]
        return d


def relative_kernels(w: Weights, n_ref: int | None = None) -> RelativeKernels:
    """κ, peaks and categories of every layer-0 head of a rotary model (module docstring)."""
    cfg = w.cfg
    weight_circuits(cfg, "the relative kernel (layer 0's mean query against its mean key)")
    kappa = relative_logits(w)                                                        # [h Δ]
    D = kappa.shape[1]
    n_ref = min(K.N_REF if n_ref is None else n_ref, D - 1)
    seen = visible(w, kappa)                                                          # −inf outside the window
    kern = kernel_at(seen, n_ref)                                                     # [h n_ref+1]
    widths = K.effective_width(kern).tolist()
    s_pos = K.shape_positions(D)
    rates = [[K.fit_decay_rate(seen[h, : m + 1].flip(0), logits=True) for m in s_pos] for h in range(cfg.n_heads)]
    if not torch.isfinite(kappa).all():
        raise HeadscopeError("relative kernel: the mean query or key is not finite")
    return RelativeKernels(
        kappa=kappa.tolist(), peak_offset=seen[:, : n_ref + 1].argmax(-1).tolist(), n_ref=n_ref,
        widths=widths, positions=s_pos, rates=rates,
        width=[K.categorise(x, n_ref) for x in widths],
        shape=[K.categorise_shape(dict(zip(s_pos, r))) for r in rates],
        caveat=softcap_caveat(cfg),
    )
