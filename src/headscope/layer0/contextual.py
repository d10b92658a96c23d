"""The contextual circuit: several broad, weakly content-dependent layer-0 heads as one sum.

Derivation (seed 000; notation of :mod:`.layer0`). For a fixed query token t_q at position
n, head h writes

    out_h[n] = Σ_{i ≤ n} A_h[n, i] · v_h[i] W_O[h]
             ≈ Σ_i pos_h[n, i] · content_h[n, x_i] / S_h[n] · (OV_h[n, x_i] + OVP_h[n, i])

with the key split in A_h and the value split of :mod:`.layer0`. Three further steps give the
seed's circuit:

1. **calibrated denominators**: S_h[n] is replaced by the calibration's S̄_h[n]
   (:mod:`.calibration`), which makes the expression linear in per-token terms;
2. **shared kernel**: the chosen heads have very similar kernels, so pos_h[n, i] is
   replaced by their mean  pos[n, i] = mean_{h ∈ H} pos_h[n, i];
3. **positional values**: the small positional value term is taken with
   content/S̄ ≈ 1, i.e. as the input-independent offset
   off[n] = Σ_{h ∈ H} Σ_i pos_h[n, i] · OVP_h[n, i].

Together::

    Σ_{h ∈ H} out_h[n] ≈ Σ_{i ≤ n} pos[n, i] · contribution[n, t_q, x_i] + off[n]
    contribution[n, t_q, t] = Σ_{h ∈ H} content_h[n, t] · OV_h[n, t] / S̄_h[n]        [d_model]

Each step is exact in a known case: the split at i = n and when W_pos = 0; the shared
kernel when the heads' kernels coincide; the calibration on the calibration text
itself. ``out_h`` excludes b_O (it is the forward's ``hook_result``).

Head choice (:func:`select_heads`), at the reference position n of the calibration:
a head is a candidate when its kernel is broad (effective width 1/Σ_i pos² ≥
``min_width``) and its content dependence weak (std over the vocabulary of
log content ≤ ``max_content_std``); candidates are grouped by single linkage on the
total-variation distance between kernels (≤ ``max_kernel_tv``) and the largest group
is chosen (ties: the broader group). All thresholds live in :data:`SELECTION`.

Fidelity (:func:`circuit_fidelity`): on texts, at every evaluated query position,
the circuit's prediction is compared with the true summed output of the chosen heads
*with the same fixed query token* (keys and values are the text's own): Pearson
correlation over the d_model coordinates and the fraction of variance unexplained
FVU = |true − pred|² / |true − mean(true)|², with medians over positions and texts.
"""

from __future__ import annotations

import dataclasses

import torch
from jaxtyping import Float, Int

from . import split as layer0
from .._errors import HeadscopeError, NotApplicable
from .._json import finite_or_none
from .calibration import Calibration
from ..core.forward import run_with_cache
from .split import Frame, centred
from ..core.model import Model
from ..stats import LOG_FLOAT64_MAX, correlation, fraction_unexplained, median
from ..core.weights import Weights

Tensor = torch.Tensor

#: thresholds of the automatic head choice (see the module docstring)
SELECTION = {"min_width": 8.0, "max_content_std": 1.0, "max_kernel_tv": 0.25}
#: named head sets (``--heads``; docs/fidelity.md): the seed's text, and Gibson's code, which
#: adds head 11 (gbmi/exp_max_of_n/probabilistic_experiments/main.py:286 at 4a2c7ab)
HEAD_SETS = {"seed": [0, 2, 6, 8, 9, 10], "code": [0, 2, 6, 8, 9, 10, 11]}


@dataclasses.dataclass
class HeadChoice:
    """Which heads form the contextual circuit, and why."""

    heads: list[int]
    position: int
    automatic: bool
    width: list[float]            # per layer-0 head, 1/Σ pos² at `position`
    content_std: list[float]      # per head, std over the vocabulary of log content
    candidates: list[int]
    groups: list[list[int]]
    thresholds: dict
    reason: str

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def head_metrics(w: Weights, token: int, n: int, c: float, block: int | None = None
                 ) -> tuple[Tensor, Tensor, Tensor]:
    """(width [head], content_std [head], kernel TV distances [head head]) at position n.
    ``block``: the heads are consecutive blocks of `block` (a null layer packing several draws of
    a layer, claims.null.null_layer); TV only within a block, [n_blocks block block]."""
    fr = layer0.frame(w, token, n, c)
    width = 1.0 / fr.pos.pow(2).sum(-1)                                    # [head]
    content_std = layer0.log_content_factors(w, token, n).std(dim=1)       # [head]
    P = fr.pos if block is None else fr.pos.reshape(-1, block, fr.pos.shape[-1])   # [(R) head k]
    tv = 0.5 * (P[..., :, None, :] - P[..., None, :, :]).abs().sum(-1)     # [(R) head head]
    return width, content_std, tv


def group_heads(width: Tensor, content_std: Tensor, tv: Tensor, th: dict) -> tuple[list[int], list[list[int]]]:
    """(candidates, groups) of :func:`select_heads`: the heads with width ≥ th["min_width"] and
    content std ≤ th["max_content_std"], linked (single linkage) when their kernels are within TV
    th["max_kernel_tv"]; groups largest first (ties: the broader, then by index)."""
    cand = [h for h in range(len(width)) if width[h] >= th["min_width"] and content_std[h] <= th["max_content_std"]]
    groups: list[list[int]] = []
    for h in cand:                                                         # single linkage
        linked = [g for g in groups if any(tv[h, k] <= th["max_kernel_tv"] for k in g)]
        merged = sorted({h, *[k for g in linked for k in g]})
        groups = [g for g in groups if g not in linked] + [merged]
    groups.sort(key=lambda g: (-len(g), -float(width[g].mean()), g))
    return cand, groups


def select_heads(
    w: Weights, token: int, n: int, c: float, heads: list[int] | None = None, **thresholds,
) -> HeadChoice:
    """Choose the contextual heads automatically (or record a given choice)."""
    th = {**SELECTION, **thresholds}
    width, cstd, tv = head_metrics(w, token, n, c)
    H = w.cfg.n_heads
    cand, groups = group_heads(width, cstd, tv, th)
    if heads is not None:
        bad = [h for h in heads if not 0 <= h < H]
        if bad or not heads:
            raise HeadscopeError(f"--heads: expected layer-0 head indices in 0..{H - 1}, got {heads}")
        chosen, auto = sorted(set(heads)), False
        reason = "heads given by the user"
    else:
        if not groups:
            raise NotApplicable(
                f"no contextual circuit: no layer-0 head has a broad kernel (width ≥ {th['min_width']}) and weak "
                f"content dependence (content std ≤ {th['max_content_std']}) at position {n}; pass --heads")
        chosen, auto = groups[0], True
        reason = (f"largest group of heads with width ≥ {th['min_width']:g} tokens, content std ≤ "
                  f"{th['max_content_std']:g} and kernels within TV {th['max_kernel_tv']:g} of each other "
                  f"at position {n} (widths {', '.join(f'{float(width[h]):.1f}' for h in chosen)})")
    return HeadChoice(heads=chosen, position=n, automatic=auto, width=width.tolist(),
                      content_std=cstd.tolist(), candidates=cand, groups=groups, thresholds=th, reason=reason)


def check_log_weights(log_w: Tensor, heads: list[int], n: int) -> None:
    """Refuse circuit token weights content/S̄ = exp(log_w) that float64 cannot hold."""
    if log_w.numel() and not bool((log_w <= LOG_FLOAT64_MAX).all()):
        k = int(log_w.amax(1).argmax())
        raise NotApplicable(
            f"contextual circuit: head {heads[k]}'s token weight content/S̄ at position {n} reaches "
            f"e^{float(log_w[k].max()):.4g}, beyond float64 (e^{LOG_FLOAT64_MAX:.0f}); the linear circuit does "
            "not apply to these heads")


def finite_or_not_applicable(x: Tensor, what: str) -> Tensor:
    """`x` if every entry is finite, else :class:`NotApplicable` (the circuit's sums overflow float64)."""
    if not bool(torch.isfinite(x).all()):
        raise NotApplicable(f"{what} overflows float64 (the chosen heads' value vectors times their token "
                            "weights exceed its range); the linear circuit does not apply to these heads")
    return x


@dataclasses.dataclass
class Circuit:
    """A calibrated contextual circuit over layer-0 heads `heads` (fixed query token)."""

    weights: Weights              # float64, the calibration's processing
    calibration: Calibration
    heads: list[int]

    @property
    def token(self) -> int:
        return self.calibration.query_id

    def _check_n(self, n: int) -> None:
        if not 0 <= n < self.calibration.n_positions:
            raise HeadscopeError(f"position {n} is not calibrated (the calibration covers 0..{self.calibration.n_positions - 1})")

    def frame(self, n: int) -> Frame:
        self._check_n(n)
        return layer0.frame(self.weights, self.token, n, self.calibration.c)

    def token_weights(self, fr: Frame, tokens: Int[Tensor, "t"]) -> Float[Tensor, "head t"]:
        """content_h[n, t] / S̄_h[n] for the chosen heads.

        Formed as exp(log content − log S̄); a weight beyond float64 (log weight > 709)
        means the linear circuit does not apply to these heads: :class:`NotApplicable`.
        """
        log_S = self.calibration.log_seed_denom[self.heads, fr.n].to(fr.q.dtype)
        log_w = fr.content_logits(self.weights, tokens)[self.heads] - log_S[:, None]          # [H t]
        check_log_weights(log_w, self.heads, fr.n)
        return log_w.exp()

    def shared_kernel(self, fr: Frame) -> Float[Tensor, "k"]:
        return fr.pos[self.heads].mean(0)

    def offset(self, fr: Frame) -> Float[Tensor, "d"]:
        """off[n] = Σ_h Σ_i pos_h[n, i] · OVP_h[n, i] (0 for a rotary model: its values carry no position)."""
        b = self.weights.blocks[0]
        if self.weights.cfg.positional == "rotary":
            return torch.zeros(self.weights.cfg.d_model, dtype=self.weights.W_E.dtype)
        P = layer0.positional_term(self.weights, fr.n, fr.c)                  # [k d]
        out = torch.zeros(self.weights.cfg.d_model, dtype=P.dtype)
        for h in self.heads:
            out += (fr.pos[h] @ P) @ b.W_V[h] @ b.W_O[h]
        return out

    def contribution(self, n: int, tokens: Int[Tensor, "t"] | None = None) -> Float[Tensor, "t d"]:
        """contribution[n, t_q, t] for the given tokens (default: the whole vocabulary)."""
        fr = self.frame(n)
        w, b = self.weights, self.weights.blocks[0]
        tokens = torch.arange(w.cfg.vocab) if tokens is None else tokens
        a = self.token_weights(fr, tokens)                                 # [H t]
        X = layer0.value_inputs(w, tokens, n)                                  # [t d]
        out = torch.zeros(len(tokens), w.cfg.d_model, dtype=X.dtype)
        for k, h in enumerate(self.heads):
            out += a[k][:, None] * ((X @ b.W_V[h] + b.b_V[h]) @ b.W_O[h])
        return finite_or_not_applicable(out, "the contextual circuit's token contributions")

    def predict(self, tokens: Int[Tensor, "p"], positions: list[int], *,
                block_bytes: int = 128 * 2**20, content: bool = True) -> Float[Tensor, "n d"]:
        """Σ_i pos[n, i] · contribution[n, t_q, x_i] + off[n] for each n in `positions`.

        ``content=False``: the content-free approximation, every token weight content/S̄ replaced by 1
        (the heads attend by the shared positional kernel alone): the baseline that lacks the seed's
        mechanism (row circuit_fidelity's null).

        :meth:`token_weights`, :meth:`shared_kernel` and :meth:`offset` evaluated for blocks of
        positions at once (:func:`headscope.layer0.query_frames`; blocks whose [m k d] extent stays
        within `block_bytes`, though LN(W_E[x_i] + W_pos[n]) is never formed: :func:`grouped_predict`):
        a few large products instead of a dozen small ones per position. The offset uses Σ_i pos[n, i]·scale_i·(r_i − r_n) =
        Σ_i pos[n, i]·scale_i·r_i − (Σ_i pos[n, i]·scale_i)·r_n (:func:`~headscope.layer0.positional_basis`).
        """
        w, b = self.weights, self.weights.blocks[0]
        positions = [int(n) for n in positions]
        for n in positions:
            self._check_n(n)
        if w.cfg.positional == "rotary":                     # kernel over distance × content (rotary_split)
            from . import rotary_split
            log_S = self.calibration.log_seed_denom[self.heads].to(w.W_E.dtype)
            return finite_or_not_applicable(rotary_split.predict(w, self.token, self.heads, log_S, tokens, positions,
                                                                 content=content),
                                            "the contextual circuit's prediction")
        return grouped_predict(w, self.token, self.calibration.c, self.calibration.log_seed_denom, [self.heads],
                               tokens, positions, block_bytes=block_bytes, content=content)[:, 0]

    def true_output(self, tokens: Int[Tensor, "p"]) -> Float[Tensor, "p d"]:
        """Σ_{h ∈ H} out_h[n] for every n, with the fixed query token at each n."""
        w, b = self.weights, self.weights.blocks[0]
        cache = run_with_cache(w, tokens[None], names=["blocks.0.attn.hook_k", "blocks.0.attn.hook_v"], stop_at_layer=1)
        pattern = torch.softmax(layer0.fixed_query_scores(w, cache["blocks.0.attn.hook_k"], self.token), -1)  # [1 H q k]
        z = torch.einsum("hqk,khe->qhe", pattern[0], cache["blocks.0.attn.hook_v"][0])                      # [q H e]
        return torch.einsum("qhe,hed->qd", z[:, self.heads], b.W_O[self.heads])


#: at most this many query positions per block of :func:`grouped_predict`: a block's keys run to
#: its largest position, so small blocks of ascending positions skip most hidden (i > n) keys
BLOCK_POSITIONS = 16


def _position_blocks(positions: list[int], key_bytes: int, block_bytes: int) -> list[tuple[int, int]]:
    """Consecutive [a0, a1) slices of `positions`: at most :data:`BLOCK_POSITIONS` each, and each
    one's [m k d] block (k = its largest position + 1, `key_bytes` per key) within `block_bytes`
    (one position at least)."""
    out, a0 = [], 0
    while a0 < len(positions):
        a1, k = a0 + 1, positions[a0] + 1
        while (a1 < len(positions) and a1 - a0 < BLOCK_POSITIONS
               and (a1 - a0 + 1) * max(k, positions[a1] + 1) * key_bytes <= block_bytes):
            k = max(k, positions[a1] + 1)
            a1 += 1
        out.append((a0, a1))
        a0 = a1
    return out


#: at most this many query positions share one :func:`~headscope.layer0.query_frames` call in
#: :func:`grouped_predict` (several of its position blocks: larger products, the weights permuted once)
FRAME_POSITIONS = 128


def _frame_chunks(blocks: list[tuple[int, int]]) -> list[tuple[int, int, list[tuple[int, int]]]]:
    """Consecutive runs of position blocks spanning at most :data:`FRAME_POSITIONS` positions (one
    block at least): (first, end, the run's blocks)."""
    out, i = [], 0
    while i < len(blocks):
        j = i + 1
        while j < len(blocks) and blocks[j][1] - blocks[i][0] <= FRAME_POSITIONS:
            j += 1
        out.append((blocks[i][0], blocks[j - 1][1], blocks[i:j]))
        i = j
    return out


def grouped_predict(w: Weights, token: int, c: float, log_seed_denom: Float[Tensor, "head pos"],
                    groups: list[list[int]], tokens: Int[Tensor, "p"], positions: list[int], *,
                    block_bytes: int = 128 * 2**20, content: bool = True) -> Float[Tensor, "n group d"]:
    """:meth:`Circuit.predict` of several circuits at once (learned positions): circuit g over the
    heads ``groups[g]`` of `w`'s layer 0 (its own shared kernel, S̄ = exp(log_seed_denom[h, n])),
    all with query `token` and c. Many circuits (the packed null draws of row circuit_fidelity,
    claims.null.null_heads_packed) cost a few products more than one.

    The value input x̂[n, i] = LN1(W_E[x_i] + W_pos[n]) = r[n, i]·(ê_i + p̂_n) + b₁ (ê = w₁ ⊙ c(W_E[x_i]),
    p̂ = w₁ ⊙ c(W_pos[n]), r = 1/sqrt(|c(W_E[x_i]) + c(W_pos[n])|²/d + eps), the |·|² expanded) is
    never formed as an [m k d] block: its score readouts and kernel-weighted sums are
    ê @ Kq, p̂·Kq and (a·r) @ ê — [k d] by [d m·H] and [m·H k] by [k d] products of the text's
    own ê (one per call), with O(m·k·H) elementwise work instead of O(m·k·d)."""
    b = w.blocks[0]
    positions = [int(n) for n in positions]
    G, sizes = len(groups), {len(g) for g in groups}
    if len(sizes) != 1:
        raise ValueError(f"grouped_predict: expected groups of one size, got sizes {sorted(sizes)}")
    H = [h for g in groups for h in g]                                            # [G·s] heads, group-major
    s, nH = sizes.pop(), len(H)
    d = w.cfg.d_model
    K = max(positions, default=-1) + 1                                             # keys of the last block
    Ec = centred(w.W_E[tokens[:K]])                                                # [K d] c(W_E[x_i])
    Ew, e2 = Ec * b.ln1_w, Ec.pow(2).sum(-1)                                       # [K d], [K]
    W_V, W_O, b_V, log_SH = b.W_V[H], b.W_O[H], b.b_V[H], log_seed_denom[H]       # gathered once
    rw, scale = layer0.positional_basis(w, K, c)                                   # [n_ctx d] w₁ ⊙ c(W_pos), [K]
    blocks = _position_blocks(positions, d * w.W_E.element_size(), block_bytes)
    rows = []
    for f0, f1, chunk in _frame_chunks(blocks):
        _, Kq, bq, pos = layer0.query_frames(w, token, torch.tensor(positions[f0:f1]), c)   # [f d h], [f h], [f h K']
        Kq, bq, pos = Kq[:, :, H], bq[:, H], pos[:, H]                             # the circuits' heads
        for a0, a1 in chunk:
            ns = torch.tensor(positions[a0:a1])                                    # [m]
            k, m = int(ns.max()) + 1, len(ns)
            KqH, bqH, posH = Kq[a0 - f0:a1 - f0], bq[a0 - f0:a1 - f0], pos[a0 - f0:a1 - f0, :, :k]   # [m d H] [m H] [m H k]
            Pc, Pw = centred(w.W_pos[ns]), rw[ns]                                  # [m d] c(W_pos[n]), p̂
            r = ((e2[None, :k] + 2.0 * (Pc @ Ec[:k].T) + Pc.pow(2).sum(-1)[:, None]) / d
                 + w.cfg.ln_eps).rsqrt()                                           # [m k] 1/σ of W_E[x_i] + W_pos[n]
            EK = (Ew[:k] @ KqH.permute(1, 0, 2).reshape(d, m * nH)).view(k, m, nH).permute(1, 2, 0)   # [m H k] ê·Kq
            PK = torch.einsum("md,mdh->mh", Pw, KqH)                               # [m H] p̂·Kq
            BK = b.ln1_b @ KqH                                                     # [m H] b₁·Kq
            scores = (EK + PK[:, :, None]) * r[:, None, :] + (BK + bqH)[:, :, None]   # [m H k] content logits
            log_S = log_SH[:, ns].T.to(scores.dtype)                               # [m H]
            kernel = posH.reshape(m, G, s, k).mean(2)                              # [m G k] shared kernel per group
            kernel = kernel.repeat_interleave(s, dim=1)                            # [m H k]
            a = ((scores - log_S[:, :, None]).exp() if content else torch.ones_like(scores)) * kernel
            a = a.masked_fill(layer0.hidden(w, ns, k)[:, None, :], 0.0)           # keys n does not see
            ar = a * r[:, None, :]                                                 # [m H k]
            a_sum = a.sum(-1)[:, :, None]                                          # [m H 1]
            u = ((ar.reshape(m * nH, k) @ Ew[:k]).view(m, nH, d) + ar.sum(-1)[:, :, None] * Pw[:, None, :]
                 + a_sum * b.ln1_b)                                                # [m H d] Σ_i a·x̂_i
            ps = posH * scale[:k]                                                  # [m H k]
            t = ps @ rw[:k] - ps.sum(-1, keepdim=True) * Pw[:, None, :]            # [m H d] Σ_i pos·term
            z = torch.einsum("mhd,hde->mhe", u + t, W_V) + a_sum * b_V             # [m H e]
            out = torch.einsum("mhe,hed->mhd", z, W_O)                             # [m H d]
            rows.append(out.reshape(m, G, s, d).sum(2))                            # [m G d]
    out = torch.cat(rows) if rows else torch.empty(0, G, d, dtype=w.W_E.dtype)
    return finite_or_not_applicable(out, "the contextual circuit's prediction")


def grouped_true_output(w: Weights, token: int, c: float, groups: list[list[int]], tokens: Int[Tensor, "p"],
                        positions: list[int], block_bytes: int = 64 * 2**20) -> Float[Tensor, "n group d"]:
    """Σ_{h ∈ groups[g]} out_h[n] at `positions` (learned positions), the query `token` at each n:
    :meth:`Circuit.true_output` of several head sets at once, read from `w`'s layer-0 tensors (which
    may hold more heads than its config: packed null draws). Exact, no forward pass: a key's score
    q·(x̂_i W_K + b_K)/s = x̂_i·Kq + bq (:func:`~headscope.layer0.query_frames`; x̂ = LN1(W_E[x_i] +
    W_pos[i]), the same for every head) and, the pattern A summing to 1, Σ_i A[n, i] (x̂_i W_V + b_V) =
    (Σ_i A[n, i] x̂_i) W_V + b_V."""
    b = w.blocks[0]
    H = [h for g in groups for h in g]
    s = len(groups[0])
    if any(len(g) != s for g in groups):
        raise ValueError(f"grouped_true_output: expected groups of one size, got sizes {[len(g) for g in groups]}")
    ns = torch.tensor([int(n) for n in positions])
    k = int(ns.max()) + 1
    x_hat = layer0.ln1(w, w.W_E[tokens[:k]] + w.W_pos[:k])                          # [k d]
    step = max(1, block_bytes // (k * len(H) * x_hat.element_size()))
    rows = []
    for a in range(0, len(ns), step):
        m = ns[a:a + step]
        _, Kq, bq, _ = layer0.query_frames(w, token, m, c)                          # [m d h], [m h]
        scores = torch.einsum("kd,mdh->mhk", x_hat, Kq[:, :, H]) + bq[:, H, None]     # [m H k]
        A = torch.softmax(scores.masked_fill_(layer0.hidden(w, m, k)[:, None, :], float("-inf")), -1)
        z = torch.einsum("mhd,hde->mhe", A @ x_hat, b.W_V[H]) + b.b_V[H]            # [m H e]
        rows.append(torch.einsum("mhe,hed->mhd", z, b.W_O[H]).reshape(len(m), len(groups), s, -1).sum(2))
    return torch.cat(rows)                                                        # [n G d]


def build_circuit(model: Model, calibration: Calibration, heads: list[int] | None = None,
                  position: int | None = None) -> tuple[Circuit, HeadChoice]:
    """Check the calibration against `model` (and its bound processing), choose heads,
    return (circuit, choice)."""
    calibration.check(model)
    w = layer0.view(model)
    n = calibration.n_positions - 1 if position is None else position
    if not 0 <= n < calibration.n_positions:
        raise HeadscopeError(f"position {n} is not calibrated (0..{calibration.n_positions - 1})")
    choice = select_heads(w, calibration.query_id, n, calibration.c, heads)
    return Circuit(weights=w, calibration=calibration, heads=choice.heads), choice


@dataclasses.dataclass
class Fidelity:
    """How well the circuit reproduces the chosen heads' summed output on texts."""

    heads: list[int]
    query: str
    n_texts: int
    positions: list[int]
    correlation: list[list[float | None]]   # [text position]; None where either side is constant
    fvu: list[list[float | None]]           # None where the true output is constant
    median_correlation: float | None   # over the positions where both are defined
    median_fvu: float | None
    fingerprint: str
    processing: dict

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


@torch.no_grad()
def circuit_fidelity(circuit: Circuit, texts: list[Tensor], positions: list[int] | None = None,
                     stride: int = 16) -> Fidelity:
    """Correlation and FVU of prediction vs true summed output (token id texts, BOS first)."""
    if not texts:
        raise HeadscopeError("circuit fidelity needs at least one text")
    corr, fvu, pos_used = [], [], None
    for tokens in texts:
        p = min(len(tokens), circuit.calibration.n_positions)
        pos = positions if positions is not None else list(range(stride, p, stride)) or [p - 1]
        pos = [n for n in pos if n < p]
        if not pos:
            raise HeadscopeError(f"text of {len(tokens)} tokens has no evaluable position")
        true = circuit.true_output(tokens[:p])[pos]                         # [n d]
        pred = circuit.predict(tokens, pos)                                 # [n d]
        corr.append([finite_or_none(r) for r in correlation(pred, true).tolist()])
        fvu.append([finite_or_none(f) for f in fraction_unexplained(true, pred).tolist()])
        pos_used = pos_used or pos
    flat = lambda xs: torch.tensor([v for row in xs for v in row if v is not None], dtype=torch.float64)  # noqa: E731
    cal = circuit.calibration
    return Fidelity(heads=circuit.heads, query=cal.query, n_texts=len(texts), positions=pos_used,
                    correlation=corr, fvu=fvu, median_correlation=median(flat(corr)),
                    median_fvu=median(flat(fvu)), fingerprint=cal.fingerprint, processing=cal.processing)
