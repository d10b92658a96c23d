"""The null of a claim: the same statistic measured on seeded components with the structure removed.

A row of ``headscope reproduce`` passes only when the seed's component passes its tolerance
AND its statistic clears the null by the row's stated margin; where the component passes but
does not clear the null, the verdict is "indistinguishable from random" (a finding).

Null components are drawn from the model under test, with the shapes and norms of the
component they stand for:

* a head: W_Q, W_K, W_V, W_O each replaced by a Gaussian matrix of the same Frobenius norm
  (:func:`gaussian_like`; centred over d_model where the processed readers are centred),
  its biases' entries permuted (:func:`null_heads`; every head of the layer replaced by an
  independent draw, so one forward pass gives ``n_heads`` draws);
* a neuron: a random readout of the same norm (:func:`random_readouts`);
* a text statistic: the paired differences' signs flipped (:func:`headscope.stats.sign_flip_means`)
  or other texts.

Every draw is seeded from the row's id (:func:`generator`): the same inputs give the same
draws, and byte-identical JSON.
"""

from __future__ import annotations

import dataclasses
import math
import zlib
from typing import Sequence

import torch

from .._errors import NotApplicable
from ..core.model import Model
from ..core.weights import Weights
from ..stats import binomial_quantiles, null_tail

#: draws of a null whose draws cost a forward pass per n_heads heads (position independence):
#: at least this many (24 on GPT-2 Small: 2 passes), enough for the 95th percentile to sit
#: between the 23rd and 24th order statistics; more would add passes for ~1 % of the row's p95
HEAD_DRAWS = 24
#: draws of a null that costs only weight algebra (eigenvalues of a d_model² form in its
#: rank-2·d_head span, a readout's dot product): cheap, so many
WEIGHT_DRAWS = 64
READOUT_DRAWS = 256


def generator(key: str, round_: int = 0, seed: int = 0) -> torch.Generator:
    """A torch generator seeded from (seed, the row's key, round): independent streams per row."""
    return torch.Generator().manual_seed((seed * 1_000_003 + zlib.crc32(key.encode()) * 131 + round_) % 2 ** 63)


def gaussian_like(W: torch.Tensor, g: torch.Generator, centre_dim: int | None = None) -> torch.Tensor:
    """A Gaussian matrix with the shape, dtype and Frobenius norm of `W` (centred along
    `centre_dim` first when given: a reader of a centred residual)."""
    G = torch.randn(W.shape, generator=g, dtype=torch.float64)
    if centre_dim is not None:
        G = G - G.mean(centre_dim, keepdim=True)
    n = float(W.double().norm())
    return (G * (n / float(G.norm()) if float(G.norm()) > 0 else 0.0)).to(W.dtype)


def permuted(x: torch.Tensor, g: torch.Generator) -> torch.Tensor:
    """The entries of a vector in a seeded random order."""
    return x[torch.randperm(x.numel(), generator=g)].reshape(x.shape)


def null_heads(weights: Weights, layer: int, head: int, g: torch.Generator) -> Weights:
    """`weights` with every head of `layer` replaced by an independent null draw of head `head`:
    Gaussian W_Q, W_K, W_V, W_O of its Frobenius norms, its b_Q, b_K, b_V entries permuted."""
    b = weights.blocks[layer]
    centre = 0 if weights.reads_centred else None                   # W_Q[h]: [d_model d_head]
    H = b.W_Q.shape[0]
    new = {}
    for name in ("W_Q", "W_K", "W_V"):
        new[name] = torch.stack([gaussian_like(getattr(b, name)[head], g, centre) for _ in range(H)])
    new["W_O"] = torch.stack([gaussian_like(b.W_O[head], g) for _ in range(H)])    # [d_head d_model]
    for name in ("b_Q", "b_K", "b_V"):
        new[name] = torch.stack([permuted(getattr(b, name)[head], g) for _ in range(H)])
    return weights.with_blocks({layer: dataclasses.replace(b, **new)})


def null_layer(weights: Weights, layer: int, key: str, rounds: int, keep: Sequence[int] | None = None) -> Weights:
    """`weights` whose layer `layer` holds rounds × n_heads null heads: slot r·n_heads + h a null draw
    of head h (as :func:`null_heads`: Gaussian W_Q, W_K, W_V, W_O of head h's norms, its biases'
    entries permuted). Only for analyses that read the heads from the block's tensors (the
    layer-0 kernels), not for a forward pass: the config still says n_heads. ``keep``: only the
    draws of these heads are kept (slot r·len(keep) + j: head keep[j]); every head is still drawn,
    so the kept draws are the same numbers."""
    b = weights.blocks[layer]
    centre = 0 if weights.reads_centred else None
    H = b.W_Q.shape[0]
    kept = set(range(H) if keep is None else keep)
    g = generator(key)
    new: dict = {k: [] for k in ("W_Q", "W_K", "W_V", "W_O", "b_Q", "b_K", "b_V")}
    for _ in range(rounds):
        drawn: dict = {}
        for h in range(H):
            if h not in kept:                           # the stream advances as if drawn
                for name in ("W_Q", "W_K", "W_V", "W_O"):
                    torch.randn(getattr(b, name)[h].shape, generator=g, dtype=torch.float64)
                for name in ("b_Q", "b_K", "b_V"):
                    torch.randperm(getattr(b, name)[h].numel(), generator=g)
                continue
            for name in ("W_Q", "W_K", "W_V"):
                drawn[h, name] = gaussian_like(getattr(b, name)[h], g, centre)
            drawn[h, "W_O"] = gaussian_like(b.W_O[h], g)
            for name in ("b_Q", "b_K", "b_V"):
                drawn[h, name] = permuted(getattr(b, name)[h], g)
        for h in (range(H) if keep is None else keep):
            for name in new:
                new[name].append(drawn[h, name])
    return weights.with_blocks({layer: dataclasses.replace(b, **{k: torch.stack(v) for k, v in new.items()})})  # [rounds·H …]


def null_heads_packed(weights: Weights, layer: int, heads: Sequence[int], keys: Sequence[str]) -> Weights:
    """`weights` whose layer `layer` holds the heads `heads` of the null layers ``null_layer(weights,
    layer, key, 1)`` for every key of `keys`, packed: slot i·len(heads) + j is draw keys[i] of head
    heads[j], the same numbers as that null layer's head. Only for analyses that read the heads
    from the block's tensors: the config still says n_heads."""
    layers = [null_layer(weights, layer, key, 1, keep=heads).blocks[layer] for key in keys]
    names = ("W_Q", "W_K", "W_V", "W_O", "b_Q", "b_K", "b_V")
    return weights.with_blocks({layer: dataclasses.replace(
        weights.blocks[layer], **{k: torch.cat([getattr(nb, k) for nb in layers]) for k in names})})


def null_head_models(model: Model, layer: int, head: int, key: str, n_draws: int = HEAD_DRAWS) -> list[Model]:
    """Models whose layer `layer` holds null draws of head (layer, head) in every head slot:
    ⌈n_draws / n_heads⌉ of them (the draws are every head of every model)."""
    W = model.weights()
    H = model.cfg.n_heads
    return [model.with_weights(null_heads(W, layer, head, generator(key, r))) for r in range(math.ceil(n_draws / H))]


def random_readouts(w: torch.Tensor, n: int, g: torch.Generator, centred: bool) -> torch.Tensor:
    """[d n]: n Gaussian readouts with the norm of `w` [d] (orthogonal to 1 when `centred`)."""
    G = torch.randn(w.shape[0], n, generator=g, dtype=torch.float64)
    if centred:
        G = G - G.mean(0, keepdim=True)
    return G * (float(w.double().norm()) / G.norm(dim=0, keepdim=True))


def sym_eigenvalues(U: torch.Tensor, V: torch.Tensor) -> torch.Tensor:
    """The non-zero eigenvalues of S = (U Vᵀ + V Uᵀ)/2 (U, V [... d e], batched), sorted by |λ|
    descending along the last dimension.

    S = X M Xᵀ with X = [U V] ([... d 2e]) and M = [[0, I/2], [I/2, 0]]: its non-zero eigenvalues
    are those of the 2e × 2e matrix Lᵀ M L, where XᵀX = L Lᵀ (Cholesky; a QR of X when X is rank
    deficient) — O(d·e²), which is what makes many null draws cheap. The same eigenvalues as
    :func:`headscope.semantic.bilinear.bilinear_form` with ``factors`` (tested equal)."""
    L = _span_factor(U, V)
    lam = torch.linalg.eigvalsh(L.mT @ _pairing(U.shape[-1], 1.0) @ L)          # [... 2e]
    return lam.gather(-1, torch.argsort(lam.abs(), dim=-1, descending=True, stable=True))


def _span_factor(U: torch.Tensor, V: torch.Tensor) -> torch.Tensor:
    """L [... 2e 2e] with XᵀX = L Lᵀ, X = [U V] ([... d 2e], float64): X = Q Lᵀ, Q orthonormal, so
    X M Xᵀ = Q (Lᵀ M L) Qᵀ has the spectrum of the 2e × 2e matrix Lᵀ M L (Cholesky; a QR of X
    when X is rank deficient)."""
    X = torch.cat([U.double(), V.double()], dim=-1)                              # [... d 2e]
    L, info = torch.linalg.cholesky_ex(X.mT @ X)                                 # [... 2e 2e]
    if bool((info != 0).any()):
        L = torch.linalg.qr(X)[1].mT                                             # XᵀX = Rᵀ R
    return L


def _pairing(e: int, sign: float) -> torch.Tensor:
    """M [2e 2e] = [[0, I/2], [sign·I/2, 0]]: X M Xᵀ = (U Vᵀ + sign·V Uᵀ)/2 (sign +1: the symmetric
    part of W = U Vᵀ, −1: the skew part)."""
    M = torch.zeros(2 * e, 2 * e, dtype=torch.float64)
    M[:e, e:] = 0.5 * torch.eye(e, dtype=torch.float64)
    M[e:, :e] = 0.5 * sign * torch.eye(e, dtype=torch.float64)
    return M


def sym_skew_sigma(U: torch.Tensor, V: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(σ₁(S), σ₁(A)) [...] of W = U Vᵀ (U, V [... d e], batched): the top singular values of its
    symmetric part S = (W + Wᵀ)/2 and skew part A = (W − Wᵀ)/2, in span(U, V) as
    :func:`sym_eigenvalues` — O(d·e²) per draw. A Gaussian U, V gives σ₁(A)/σ₁(S) ≈ 1 (0.95–1.02
    at d 768, e 64): neither part dominates a random form (row sym_vs_skew's null: :func:`pairing_null`)."""
    return _sigmas(_span_factor(U, V), U.shape[-1])


def _sigmas(F: torch.Tensor, e: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(σ₁(S), σ₁(A)) from a factor F [... 2e 2e] with X = Q Fᵀ (Q orthonormal): S, A have the
    spectra of Fᵀ M± F; σ₁(S) = max |λ| (symmetric), σ₁(A) = √λ_max(AᵀA) (AᵀA = −A²)."""
    S = F.mT @ _pairing(e, 1.0) @ F
    A = F.mT @ _pairing(e, -1.0) @ F
    return torch.linalg.eigvalsh(S).abs().amax(-1), torch.linalg.eigvalsh(A.mT @ A).amax(-1).clamp_min(0).sqrt()


def negative_mass(eigenvalues: torch.Tensor, top: int = 64) -> float:
    """Σ_{λ<0} |λ| / Σ |λ| over the `top` eigenvalues of largest |λ| (sorted by |λ| descending):
    ≈ ½ for a random symmetric part, → 1 for a form whose large eigenvalues are negative."""
    lam = eigenvalues[:top].double()
    total = float(lam.abs().sum())
    return float(lam.clamp(max=0).abs().sum()) / total if total > 0 else 0.0


def form_null(U: torch.Tensor, V: torch.Tensor, key: str, *, centred: bool, n_draws: int = WEIGHT_DRAWS,
              top: int = 64) -> dict:
    """Null draws of a head's bilinear form W_QK = U Vᵀ: U, V replaced by Gaussian matrices of
    their Frobenius norms (centred over d_model when `centred`); per draw the number of negative
    eigenvalues among the `top` of largest |λ| (|λ| > 1e-6·max, as bilinear_form) and the negative
    eigen-mass (:func:`negative_mass`). All draws in one batched decomposition."""
    g = generator(key)

    def draws(W):                                                                # [n d e], each of W's norm
        G = torch.randn((n_draws, *W.shape), generator=g, dtype=torch.float64)
        if centred:
            G = G - G.mean(1, keepdim=True)
        return G * (float(W.double().norm()) / G.flatten(1).norm(dim=1))[:, None, None]

    lam = sym_eigenvalues(draws(U), draws(V))                                    # [n 2e]
    tol = 1e-6 * lam.abs().amax(-1, keepdim=True)
    counts = (lam[:, :top] < -tol).sum(-1).tolist()
    return {"counts": [int(x) for x in counts], "masses": [negative_mass(x, top) for x in lam]}


def pairing_null(U: torch.Tensor, V: torch.Tensor, key: str, n_draws: int = WEIGHT_DRAWS) -> list[float]:
    """σ₁(A)/σ₁(S) (:func:`sym_skew_sigma`) of W = U O Vᵀ for n_draws Haar-random orthogonal O
    [e e]: the head's own W_Q and W_K (their norms, spectra and any scaling they share, e.g. a
    folded LayerNorm gain) with the pairing of their d_head coordinates scrambled — the one thing
    that makes U Vᵀ symmetric (V = U up to a positive rescaling of coordinates). [U, V Oᵀ] =
    [U V] diag(I, Oᵀ), so one factor L of [U V] serves every draw: F = diag(I, O) L."""
    g = generator(key)
    e = U.shape[-1]
    Q, R = torch.linalg.qr(torch.randn(n_draws, e, e, generator=g, dtype=torch.float64))
    O = Q * torch.sign(torch.diagonal(R, dim1=-2, dim2=-1))[:, None, :]           # Haar [n e e]
    L = _span_factor(U, V)                                                       # [2e 2e]
    F = torch.cat([L[:e].expand(n_draws, e, 2 * e), O @ L[e:]], dim=-2)          # [n 2e 2e]
    s, a = _sigmas(F, e)
    return (a / s.clamp_min(1e-300)).tolist()


def readout_null(dx: torch.Tensor, w: torch.Tensor, key: str, *, centred: bool, n_draws: int = READOUT_DRAWS
                 ) -> tuple[float, list[float]]:
    """(dx · w, dx · r for n_draws random readouts r of w's norm): a neuron's statistic that is
    linear in its readout (a difference of mean pre-activations between two texts) against the
    same statistic for random neurons of its norm."""
    R = random_readouts(w, n_draws, generator(key), centred)                        # [d n]
    return float(dx.double() @ w.double()), (dx.double() @ R).tolist()


MARGINS = ("diff", "ratio", "complement_ratio")


@dataclasses.dataclass
class NullComparison:
    """A claim's statistic against its null (module docstring)."""

    statistic: str              # what is compared (the row's measured value or a statistic beside it)
    null: str                   # what the draws are
    measured: float
    n_draws: int
    median: float
    p95: float                  # the 95th percentile in the claim's direction (the 5th for "below")
    direction: str              # "above": the claim's statistic is large; "below": small
    margin: float
    margin_kind: str            # diff: beyond p95 by margin; ratio: margin × p95; complement_ratio: 1 − x ÷ margin
    bar: float                  # the value the measured statistic must reach (from p95 and the margin)
    clears: bool
    null_passes: float | None = None    # share of the draws that pass the row's own tolerance

    def to_dict(self) -> dict:
        """Floats to 6 decimals; a non-finite one (a loss of +∞) as None, never NaN or inf in JSON."""
        return {k: ((round(v, 6) if math.isfinite(v) else None) if isinstance(v, float) else v)
                for k, v in dataclasses.asdict(self).items()}

    def text(self) -> str:
        pct = "p95" if self.direction == "above" else "p5"
        return f"null median {self.median:.4g}, {pct} {self.p95:.4g} ({self.n_draws} draws)"


def compare(measured: float, draws: Sequence[float], *, statistic: str, null: str, direction: str,
            margin: float, margin_kind: str = "diff", null_passes: float | None = None) -> NullComparison:
    """`measured` against the null `draws`: the bar it must reach, and whether it does.

    diff: measured ≥ p95 + margin ("above") or ≤ p5 − margin ("below");
    ratio: measured ≥ margin · p95 ("above") or ≤ p5 / margin ("below");
    complement_ratio (statistics in [0, 1], "above"): 1 − measured ≤ (1 − p95) / margin, the
    unexplained share at most 1/margin of the null's."""
    if margin_kind not in MARGINS:
        raise ValueError(f"compare: expected margin_kind in {MARGINS}, got {margin_kind!r}")
    if not any(math.isfinite(float(d)) for d in draws):
        raise NotApplicable(f"the null of {statistic} has no finite draw")
    med, tail = null_tail(draws, direction)
    up = direction == "above"
    if margin_kind == "diff":
        bar = tail + margin if up else tail - margin
    elif margin_kind == "ratio":
        bar = tail * margin if up else tail / margin
    else:
        if not up:
            raise ValueError("compare: complement_ratio needs direction 'above'")
        bar = 1 - (1 - tail) / margin
    ok = measured >= bar if up else measured <= bar
    n = sum(1 for d in draws if math.isfinite(float(d)))
    return NullComparison(statistic=statistic, null=null, measured=float(measured), n_draws=n, median=med, p95=tail,
                          direction=direction, margin=float(margin), margin_kind=margin_kind, bar=float(bar),
                          clears=bool(ok), null_passes=null_passes)


def share_null(measured: float, n: int, hits: int, trials: int, *, statistic: str, null: str, margin: float
               ) -> NullComparison:
    """A share of n components meeting a criterion against the share n null components reach: the
    null's count is Binomial(n, p̂), p̂ = hits / trials the rate among `trials` null draws (exact
    quantiles, :func:`headscope.stats.binomial_quantiles`); clears when measured ≥ p95/n + margin."""
    if trials <= 0 or n <= 0:
        raise NotApplicable(f"the null of {statistic} has no draw")
    med, p95 = binomial_quantiles(n, hits / trials)
    bar = p95 / n + margin
    return NullComparison(statistic=statistic, null=f"{null}; the share of {n} such: Binomial({n}, {hits}/{trials})",
                          measured=float(measured), n_draws=trials, median=med / n, p95=p95 / n, direction="above",
                          margin=float(margin), margin_kind="diff", bar=float(bar), clears=bool(measured >= bar),
                          null_passes=round(hits / trials, 4))
