"""An atlas of every head of a model, from its weights alone (one row per head).

Notation: X̂_l [N d] the effective embeddings of the N most frequent tokens T for the
heads of layer l (:func:`headscope.bilinear.effective_embeddings_by_layer`, variant
``full``: LN1_l of W_E[t] + mean W_pos + the mean attention outputs and the MLPs of the
blocks below, one pass up the residual stream for all layers), e = d_head,
q_t = x̂_t W_Q[h], k_t = x̂_t W_K[h] (rows of Q = X̂ W_Q, K = X̂ W_K), and
B = Q Kᵀ [N N] the head's token-token bilinear form over the effective embeddings.
Token frequency is :func:`headscope.clustering.frequent_tokens` (corpus counts or the
BPE merge-order proxy). All metric maths is float64; the N × N and vocabulary-sized
matrices below are never formed — every quantity is read off matrices of size at most
2e × 2e or d × d through the identities stated with it.

Metrics (one value per head; ``None`` = not applicable, stated in the rendering)
-------------------------------------------------------------------------------
``qk_symmetry``  ‖B_sym‖_F / (‖B_sym‖_F + ‖B_skew‖_F), with B_sym = (B + Bᵀ)/2 =
  X̂ S X̂ᵀ and B_skew = X̂ A X̂ᵀ for W_QK = W_Q W_Kᵀ = S + A. In [0, 1]: 1 for a
  symmetric W_QK, 0 for a skew one, None when B = 0. Computed as follows: with
  C = [Q K] [N 2e], B = C E Cᵀ for E = [[0, I], [0, 0]], so B_sym = C M_S Cᵀ and
  B_skew = C M_A Cᵀ with M_S = (E + Eᵀ)/2, M_A = (E − Eᵀ)/2. If CᵀC = RᵀR
  (R [2e 2e] the triangular factor of C = Q_C R), then ‖C M Cᵀ‖_F = ‖R M Rᵀ‖_F (both
  squared equal tr(M CᵀC Mᵀ CᵀC)). Taking the norm of the small matrix R M Rᵀ from a
  QR factor — rather than the trace formula, or a factor of the Gram matrix CᵀC —
  keeps the skew part of an exactly symmetric head at rounding level (ε, not √ε). One QR of
  N rows per head serves this column and qk_negative_mass: that of the token-centred
  C̃ = C − 1 c̄ᵀ gives R̃, and since 1ᵀC̃ = 0, CᵀC = C̃ᵀC̃ + N c̄ c̄ᵀ, so R is the factor of
  the 2e + 1 rows [[R̃], [√N c̄ᵀ]] (:func:`headscope.lowrank.centred_column_factors`).

``qk_negative_fraction``  the share of negative eigenvalues among the (at most 64,
  ``TOP``) eigenvalues of largest |λ| of the symmetric part S of P W_Q W_Kᵀ P (P the
  projector onto 1⊥ when the weights are processed with fold_ln — exactly the matrix
  :func:`headscope.bilinear.qk_matrix` and ``headscope head`` decompose); eigenvalues
  with |λ| ≤ ``REL_TOL`` · max|λ| count as zero and are left out, as in
  :func:`headscope.bilinear.bilinear_form`. Low-rank identity: S = U M_S Uᵀ with
  U = [P W_Q, P W_K] [d 2e]; its nonzero eigenvalues are those of R M_S Rᵀ [2e 2e] for
  UᵀU = RᵀR (R from U's QR) (nonzero eigenvalues of AB and BA agree: take A = U, B = M_S Uᵀ, then
  A = M_S Rᵀ, B = R). No d × d eigen-decomposition is needed.
  It carries no information for small heads: S = sym(W_Q W_Kᵀ) has rank ≤ 2e, and
  generically d_head positive and d_head negative nonzero eigenvalues (Sylvester's law
  of inertia: S = U M_S Uᵀ and M_S has inertia (e, e, 0)), so whenever 2·d_head ≤ TOP
  the fraction is exactly 0.5 for every head of full rank; at GPT-2-small's shape
  (2e = 128 > 64) it reads 0.484–0.516 on the 144 random heads of a GPT-2-small-shaped
  checkpoint. ``qk_negative_mass`` is the
  column that separates.

``qk_negative_mass``  Σ_{λ<0} |λ| / Σ |λ| over the eigenvalues λ of the token-token form
  X̃ S X̃ᵀ [N N], X̃ = X̂ − mean_t x̂_t the token-centred effective embeddings: the
  negative eigenvalues of S weighted by how much of the vocabulary's variance each
  reads (its eigenvalues are those of Σ^½ S Σ^½, Σ = X̃ᵀX̃). Equals (1 − tr(X̃ S X̃ᵀ)/Σ|λ|)/2.
  A head whose scores ignore token identity on the self diagonal gives ≈ 0.5 (the
  signs of a random S's weighted eigenvalues balance: measured 0.481–0.523 over the
  144 heads of a random GPT-2-small-shaped checkpoint); towards 1 a token scores itself below its
  typical key (self-suppression, seed 002's L1H5); towards 0 it attends to itself.
  Centring removes the common component of the vocabulary, which adds a large rank-one
  term unrelated to token identity (uncentred, random heads spread 0.41–0.63). From
  R M_S Rᵀ [2e 2e] with [X̃ W_Q, X̃ W_K] = Q R, as for qk_symmetry. None when S reads nothing.

``qk_self``  mean over the N tokens of the standardised self score
  z_t = (s_tt − mean_s s_ts) / std_s s_ts, the diagonal entry of row t of the head's
  scores s_ts = (q_t + b_Q)·(k_s + b_K) over the N tokens as keys (mean and population
  std over all N keys). Negative: a token scores itself below its typical key —
  self-suppression, the seed-002 signature. Row moments from e × e matrices:
  mean_s s_ts = q̃_t·k̄, var_s s_ts = q̃_t Σ_k q̃_tᵀ (k̄, Σ_k the mean and covariance of
  the keys). A row whose std is at most ``SILENT`` times the head's largest row std is
  constant up to rounding (the head reads nothing from that query token), so its z is
  0/0, undefined: such rows are left out of the mean (``n_self_rows`` counts the rest;
  None when no row is left).

``ov_copying_framework``  the copying score of "A Mathematical Framework for Transformer
  Circuits": Σ_i λ_i / Σ_i |λ_i| over the eigenvalues of the full OV circuit
  W_E W_V[h] W_O[h] W_U [vocab vocab] — every token, the (processed) token embeddings
  W_E as the head's input, no LayerNorm, no positions, no earlier blocks. Its nonzero
  eigenvalues are those of W_O[h] (W_U W_E) W_V[h] [e e]
  (:func:`headscope.composition.framework_ov_eigenvalues`; W_U W_E formed once per
  model). In [−1, 1]: +1 copies, −1 suppresses copying. TransformerLens users get this
  figure from ``model.OV`` and ``W_E``/``W_U``.

``ov_copying_effective``  the same score over what the head actually reads in the
  atlas's model of the residual stream: the eigenvalues of M = X̂ W_V[h] W_O[h] W_U[:, T]
  [N N] (the logit change of every token of T when the head attends to every token of
  T; W_U processed: final LN folded, centred). M has rank ≤ e: its nonzero eigenvalues
  are those of the e × e matrix W_O[h] (W_U[:, T] X̂) W_V[h] (AB vs BA with A = X̂ W_V,
  B = W_O W_U[:, T]); W_U[:, T] X̂ [d d] is formed once per layer. None when M = 0
  (both columns: every |λ| ≤ REL_TOL · ‖W_O‖_F ‖middle‖_F ‖W_V‖_F, its rounding).

  When they differ: for a layer-0 head X̂ is LN1(W_E + mean W_pos), close to W_E up to
  a per-token scale, so the two agree; for deeper heads x̂_t carries what the MLPs and
  attention of earlier blocks add to the token (GPT-2's MLP0 rewrites the embedding
  almost entirely), which the Framework's score ignores, and the effective score reads
  only the N frequent tokens, not the whole vocabulary (rare tokens, many of them
  glitch tokens, weigh equally in the Framework's trace). On a trained model the two can
  disagree in sign; on the planted copying (2.3) and copy-suppression (2.7) heads, whose
  OV acts on the free block every token carries unchanged, both are ±1.

``dla_logit_diff``  (on demand: ``logit_diff=(A, B)``, CLI ``--logit-diff A B``) direct
  logit attribution of the head's OV circuit to the token pair from weights: the mean
  over the N frequent tokens t of x̂_t W_V[h] W_O[h] (W_U[:, A] − W_U[:, B]) — the
  logit difference A − B the head adds when it attends with weight one to a typical
  token; the token with the largest such value is kept as ``dla_top_token``.

``positional_share``  Σ_rows Var_i(position part) / Σ_rows (Var_i(position part) +
  Var_i(content part)) of the head's scores on a window of ``WINDOW`` tokens drawn
  (seeded, with replacement) from T, rows n ≥ 1 over their keys i ≤ n (row constants do
  not move softmax). Layer 0: the seed-000 split (:func:`headscope.layer0.split_scores`,
  content q_n·E[n, x_i]/s and position q_n·P[n, i]/s, c the measured median token
  norm). Layers l ≥ 1: the residual of token t at position i is taken as the token's
  effective residual plus the position's deviation δ_i = W_pos[i] − mean W_pos
  (first order: the blocks' responses to position are not followed), so to first
  order in δ, x̂(t, i) = x̂_t + p̂_i with p̂_i = w₁ ⊙ c(δ_i) / σ_t (σ_t LN1_l's scale of the
  token's residual); content part q_n·(x̂_{t_i} W_K)/s and position part
  q_n·(p̂_i W_K)/s, q_n = (x̂_{t_n} + p̂_n) W_Q + b_Q. None when both parts are constant.

``kernel_category``  layer 0: the seed-000 category of the head's positional kernel
  (:func:`headscope.kernels.kernel_categories` by the default ``shape`` rule, as
  :func:`headscope.kernels.analyse_kernels`, query ' the'); None elsewhere.
``semantic_loss``  the survey's semantic loss (:func:`headscope.survey.survey`) when
  computed (``survey=True``, or merged from a report's survey stage).

Per head the atlas also keeps the top ``EIGEN_SHOWN`` eigenvalues of S (by |λ|) and of
the OV circuits (by modulus, [re, im]) for the head's page, and ``directions``: the
singular values of W_OV and W_QK and, for their top singular directions, the frequent
tokens each reads and writes (:func:`headscope.composition.head_directions`).

Cost: one pass of the N tokens through the MLPs (the weights' dtype), then per layer
Q, K = X̂ W_Q, X̂ W_K and W_U[:, T] X̂ (3 N d² multiply-adds) and (W_U X̂) W_V (d³), in
float64; per head one QR of N × 2e (above) and otherwise only e × e and 2e × 2e matrices.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Sequence

import numpy as np
import torch

from . import composition
from .head_metrics import (  # noqa: F401  (re-exported: the metrics are part of this module's namespace)
    REL_TOL, SILENT, TOP,
    form_norms, token_forms, symmetry_ratio, symmetric_eigenvalues, negative_fraction, self_scores, mean_self_score,
    low_rank_eigenvalues, copying_score, weighted_eigenvalues, negative_mass, positional_share,
    _sorted_complex, _per_head, _groups, _f64, _float, _positional_share_deep, HeadColumns, position_deviation,
)
from .._json import plain
from ..layer0 import split as layer0
from ..semantic import bilinear, clustering
from .._errors import HeadscopeError
from .._threads import split_heads
from .._html_repr import HtmlRepr, render_text
from ..core.model import Model
from ..core.tokenizer import to_str_tokens
from ..core.applicability import branch_norm_caveat, softcap_caveat

Tensor = torch.Tensor

DEFAULT_TOKENS = 2000  #: N most frequent tokens
WINDOW = 256           #: tokens of the positional_share window (capped at n_ctx)
SEED = 0               #: window draw and reference prompts
EIGEN_SHOWN = 16       #: eigenvalues kept per head for its page
PROMPTS = 32           #: category prompts whose mean attention outputs enter the effective embeddings


@dataclasses.dataclass(frozen=True)
class Column:
    """One column of the atlas: a :class:`HeadRow` field and how every view shows it.

    The one list of columns, :data:`COLUMNS`, is read by the text render, the JSON's
    ``metrics``, the report's grids, colour scales, table, tooltips and head pages, the
    notebook view, and README's table of definitions (a test holds README to it).
    """

    key: str        #: the HeadRow field
    label: str      #: grid title, table header, tooltip and head-page line
    meaning: str    #: one line under the grid; the JSON's ``metrics`` entry
    short: str      #: text-render header (at most 8 characters)
    scale: str      #: "signed" (diverging colours), "unit" ([0, 1]), "log" (decades) or "category"
    detail: str = ""  #: added after the value in tooltips and head pages: {field}s of the row

    @property
    def metric(self) -> bool:
        """A number per head (a grid and an entry of :data:`METRICS`), not a category."""
        return self.scale != "category"


#: the atlas's columns, in the order of the text render and the report's table
COLUMNS = (
    Column("qk_self", "self score z",
           "mean standardised score of a token for itself (negative: self-suppression)", "self z", "signed",
           "over {n_self_rows} tokens"),
    Column("ov_copying_effective", "OV copying (effective)",
           "Σλ/Σ|λ| of the OV circuit over the N frequent tokens' effective embeddings (negative: copy suppression)",
           "copy eff", "signed"),
    Column("ov_copying_framework", "OV copying (Framework)",
           "Σλ/Σ|λ| of the full OV circuit W_E W_OV W_U over the whole vocabulary", "copy FW", "signed"),
    Column("qk_negative_mass", "negative λ mass",
           "Σ|λ<0|/Σ|λ| of sym(W_QK) over token-centred effective embeddings (0.5 random, → 1 self-suppression)",
           "neg mass", "unit"),
    Column("qk_symmetry", "QK symmetry", "‖sym‖/(‖sym‖+‖skew‖) of W_QK over effective embeddings", "symm", "unit",
           "rms sym {qk_sym_rms}, skew {qk_skew_rms}"),
    Column("qk_negative_fraction", "negative λ share",
           "share of negative eigenvalues among the top 64 of sym(W_QK) (exactly 0.5 when 2·d_head ≤ 64: "
           "Sylvester's inertia)", "neg λ", "unit", "{n_negative_top} of the top {n_eigen_top}"),
    Column("positional_share", "positional share",
           "share of score variance from position rather than content", "pos", "unit"),
    Column("kernel_category", "kernel category", "seed-000 category of the layer-0 positional kernel", "kernel",
           "category"),
    Column("semantic_loss", "semantic loss", "the survey's semantic loss (lower: more semantic)", "sem loss", "log"),
)
#: columns computed on demand only (``atlas(logit_diff=…)``)
OPTIONAL_COLUMNS = (
    Column("dla_logit_diff", "logit diff (DLA)", "mean over frequent tokens of x̂ W_OV (W_U[A] − W_U[B])", "DLA A−B",
           "signed", "largest for token id {dla_top_token}"),
)
COLUMN = {c.key: c for c in COLUMNS + OPTIONAL_COLUMNS}
#: metric → (short label, what it means); the order of the report's grids
METRICS = {c.key: (c.label, c.meaning) for c in COLUMNS if c.metric}
#: on demand only (atlas(logit_diff=…)): not a grid unless computed
OPTIONAL = {c.key: (c.label, c.meaning) for c in OPTIONAL_COLUMNS}
SIGNED = {c.key for c in COLUMNS + OPTIONAL_COLUMNS if c.scale == "signed"}     #: metrics with a meaningful sign
UNIT = {c.key for c in COLUMNS if c.scale == "unit"}                            #: metrics in [0, 1]


# -- results ------------------------------------------------------------------------------------


@dataclasses.dataclass
class HeadRow:
    """Every atlas figure of one head (definitions in the module docstring)."""

    layer: int
    head: int
    qk_symmetry: float | None
    qk_sym_rms: float                  # ‖B_sym‖_F / N, in attention-logit units
    qk_skew_rms: float                 # ‖B_skew‖_F / N
    qk_negative_fraction: float | None
    n_negative_top: int                # negative eigenvalues among the top TOP of S
    n_eigen_top: int                   # nonzero eigenvalues among the top TOP of S
    qk_self: float | None
    n_self_rows: int                   # tokens whose self score is defined (module docstring)
    ov_copying_effective: float | None
    ov_copying_framework: float | None
    qk_negative_mass: float | None
    positional_share: float | None
    kernel_category: str | None = None
    semantic_loss: float | None = None
    qk_eigenvalues: list[float] = dataclasses.field(default_factory=list)        # S, by |λ|
    ov_eigenvalues: list[list[float]] = dataclasses.field(default_factory=list)  # [re, im], by modulus
    ov_framework_eigenvalues: list[list[float]] = dataclasses.field(default_factory=list)  # [re, im]
    directions: dict = dataclasses.field(default_factory=dict)   # composition.head_directions: SVD of W_OV, W_QK
    dla_logit_diff: float | None = None   # on demand (module docstring)
    dla_top_token: int | None = None

    @property
    def name(self) -> str:
        return f"L{self.layer}H{self.head}"

    def to_dict(self) -> dict:
        return plain(self)


@dataclasses.dataclass
class Atlas(HtmlRepr):
    """One row per head of the chosen layers (``rows`` in layer, head order)."""

    fingerprint: str
    processing: dict
    config: dict                       # n_layers, n_heads, d_model, d_head
    layers: list[int]
    spec: dict                         # how it was computed (tokens, window, tolerances, seeds)
    rows: list[HeadRow]
    notes: list[str] = dataclasses.field(default_factory=list)

    def row(self, layer: int, head: int) -> HeadRow:
        for r in self.rows:
            if (r.layer, r.head) == (layer, head):
                return r
        raise HeadscopeError(f"head {layer}.{head} is not in the atlas (layers {self.layers})")

    def grid(self, metric: str) -> list[list]:
        """[layer][head] values of `metric` for the atlas's layers."""
        by = {(r.layer, r.head): getattr(r, metric) for r in self.rows}
        return [[by[(l, h)] for h in range(self.config["n_heads"])] for l in self.layers]

    def add_kernel_categories(self, categories: dict[int, str]) -> None:
        """Set layer-0 rows' kernel_category from {head: category} (e.g. a report's kernels stage)."""
        for r in self.rows:
            if r.layer == 0 and r.head in categories:
                r.kernel_category = categories[r.head]

    def add_semantic_loss(self, losses: dict[tuple[int, int], float]) -> None:
        """Set semantic_loss from {(layer, head): loss} (e.g. a survey)."""
        for r in self.rows:
            if (r.layer, r.head) in losses:
                r.semantic_loss = losses[(r.layer, r.head)]

    def to_dict(self) -> dict:
        return {"fingerprint": self.fingerprint, "processing": self.processing, "config": self.config,
                "layers": self.layers, "spec": self.spec, "metrics": {k: v[1] for k, v in METRICS.items()},
                "rows": [r.to_dict() for r in self.rows], "notes": self.notes}

    def render(self) -> str:
        """One line per head, then the extremes, as text (headscope.report.views.atlas.text)."""
        return render_text(self)


# -- the atlas ----------------------------------------------------------------------------------


def _check_layers(cfg, layers: Sequence[int] | None) -> list[int]:
    if layers is None:
        return list(range(cfg.n_layers))
    out = sorted({cfg.check_layer(l) for l in layers})
    if not out:
        raise HeadscopeError("layers: expected at least one layer, got none")
    return out


def _kernel_categories(model: Model, view, c: float) -> tuple[dict[int, str], str | None]:
    """Seed-000 category of every layer-0 head's kernel for ' the' by the default rule
    (:func:`headscope.kernels.kernel_categories`, as analyse_kernels)."""
    from ..layer0 import kernels

    try:
        q_id = layer0.token_id(model, layer0.SEED_QUERY)
    except HeadscopeError as e:
        return {}, f"kernel categories not applicable: {e}"
    n = min(kernels.N_REF, model.cfg.n_ctx - 1)
    if n < 1:
        return {}, f"kernel categories not applicable: n_ctx {model.cfg.n_ctx} leaves no query position"
    cats = kernels.kernel_categories(view, q_id, c, n).categories
    return dict(enumerate(cats)), None


@torch.no_grad()
def atlas(model: Model, layers: Sequence[int] | None = None, *, n_tokens: int = DEFAULT_TOKENS,
          corpus: str | Path | None = None, kernels: bool = True, survey: bool = False,
          logit_diff: tuple[str, str] | None = None,
          progress=None) -> Atlas:
    """One row per head of `layers` (default: every layer) from the weights (module docstring).

    ``kernels`` adds layer 0's kernel categories, ``survey`` runs the semantic-head survey
    for its loss, ``logit_diff`` = (A, B) (two strings, each one token) the dla_logit_diff column. ``progress``, if given, has ``set_total(n)`` and ``update()`` (called per layer).
    """
    cfg = model.cfg
    layers = _check_layers(cfg, layers)
    from ..core.applicability import weight_circuits
    weight_circuits(cfg, "the atlas")                              # OLMo 2 (QK-norm, no pre-norms): refused
    if n_tokens < 2:
        raise HeadscopeError(f"tokens: expected ≥ 2, got {n_tokens}")
    W = model.weights()
    centred = W.reads_centred
    freq = clustering.frequent_tokens(model.tokenizer, n_tokens, corpus)
    if len(freq) < 2:
        raise HeadscopeError(f"tokens: the vocabulary offers {len(freq)} frequent tokens, expected ≥ 2")
    ids = torch.tensor(freq)
    N, e, H = len(freq), cfg.d_head, cfg.n_heads
    notes: list[str] = []

    from ..semantic.prompts import prompts_for

    upto = max(layers)
    prompts, _ = prompts_for(model, None, n_prompts=PROMPTS, length=16, seed=SEED)
    attn_means = bilinear.attn_means_as_needed(W, upto, "prompts", prompts.tokens)  # run as the pass below reads them
    rng = np.random.default_rng(SEED)
    P = min(WINDOW, cfg.n_ctx)
    win = torch.from_numpy(rng.integers(0, N, size=P))                               # indices into freq
    W_U = W.W_U[:, ids].to("cpu", torch.float64)                                     # [d N]
    W_E = W.W_E[ids].to("cpu", torch.float64)                                        # [N d]
    vocab = composition.direction_vocab(W_E, W_U)                                   # with max row norms, every layer
    names: dict[int, str] = {}                                                       # token id → string, every layer

    def token_strs(t: list[int]) -> list[str]:
        new = [i for i in dict.fromkeys(t) if i not in names]
        names.update(zip(new, to_str_tokens(model.tokenizer, new)))
        return [names[i] for i in t]
    gram = composition.vocab_gram(W)                                                 # [d d] W_U W_E
    pair = None if logit_diff is None else _logit_diff_direction(model, W, logit_diff)  # (ids, [d])

    if softcap_caveat(cfg):                       # Gemma 2: QK and OV readings are of the uncapped scores and logits
        notes.append(softcap_caveat(cfg))
    if branch_norm_caveat(cfg):                   # Gemma 2: what the post-attention norm leaves approximate
        notes.append(branch_norm_caveat(cfg))

    pos_l0, categories = None, {}
    rotary = cfg.positional != "learned"
    if rotary:
        notes.append("positional_share not applicable: a rotary model adds no W_pos to the token embedding "
                     "(positions rotate queries and keys inside attention); layer 0's kernel categories are "
                     "those of the relative kernel (headscope.layer0.relative)")
        if kernels and 0 in layers:
            from ..layer0 import relative
            categories = dict(enumerate(relative.relative_kernels(W).shape))
    elif 0 in layers:
        if centred:
            view = layer0.view(model)
            c = layer0.measure_c(view)
            content, position = layer0.split_scores(view, ids[win], c)                 # [h P P]
            pos_l0 = positional_share(content, position)
            if kernels:
                categories, note = _kernel_categories(model, view, c)
                notes += [note] if note else []
            del view, content, position
        else:
            notes.append("positional_share and kernel categories of layer 0 not applicable: "
                         "the seed's split needs fold_ln")

    if not rotary and any(l > 0 for l in layers):
        delta = position_deviation(_f64(W.W_pos), P)                                 # [P d] c(δ), every layer ≥ 1
        pos = torch.arange(P)
    masks: dict = {}                                                                 # by local window: hidden keys [P P]

    if progress is not None:
        progress.set_total(len(layers))
    rows: list[HeadRow] = []
    for l, X, sigma in bilinear.effective_embeddings_by_layer(W, ids, attn_means=attn_means, upto=upto,
                                                              scales=True):
        if l not in layers:
            continue
        b = W.blocks[l]
        X, sigma = _f64(X), _f64(sigma)                                              # [N d], [N]
        hw = composition.head_weights(W, l)                                          # float64, once for every reader
        W_Q, W_K, W_V, W_O, b_Q, b_K = hw                                            # [h d e] ×3, [h e d], [h e] ×2
        cols_Q, cols_K, cols_V = HeadColumns(W_Q), HeadColumns(W_K), HeadColumns(W_V)  # [d h·e] each
        s = cfg.attn_scale(l)
        Q, K = _per_head(X, cols_Q), _per_head(X, cols_K)                            # [h N e] each
        sym, skew, lam_c, z, lam = _qk_metrics(Q, K, b_Q, b_K, W_Q, W_K, centred)
        lam = lam / s                                                                # [h 2e], logit units
        HX = W_U @ X                                                                 # [d d] = W_U[:, T] X̂
        ov = low_rank_eigenvalues(_per_head(HX, cols_V), W_O)                        # [h e]
        ov_fw = composition.framework_ov_eigenvalues(W, l, gram, block=hw)           # [h e]
        bound = W_O.flatten(1).norm(dim=1) * W_V.flatten(1).norm(dim=1)              # [h] ‖W_O‖‖W_V‖
        bound_eff, bound_fw = (bound * HX.norm()).tolist(), (bound * gram.norm()).tolist()
        dirs = composition.head_directions(W, l, ids, token_strs, vocab=vocab, block=hw)
        if pair is not None:
            dla = _per_head(X, cols_V) @ (W_O @ pair[1])[..., None]                  # [h N 1]
            dla = dla[..., 0]                                                        # [h N]
        if rotary:
            share = None
        elif l == 0:
            share = pos_l0
        else:
            if cfg.window(l) not in masks:
                masks[cfg.window(l)] = cfg.hidden_keys(l, pos[:, None], pos[None, :])     # [P P]
            share = _positional_share_deep(X, sigma, win, delta, _f64(b.ln1_w), cols_Q, b_Q, cols_K, s,
                                           masks[cfg.window(l)])
        for h in range(H):
            n_neg, n_top, frac = negative_fraction(lam[h])
            qk_self, n_rows = mean_self_score(z[h])
            rows.append(HeadRow(
                layer=l, head=h, qk_symmetry=symmetry_ratio(float(sym[h]), float(skew[h])),
                qk_sym_rms=float(sym[h]) / (N * s), qk_skew_rms=float(skew[h]) / (N * s),
                qk_negative_fraction=frac, n_negative_top=n_neg, n_eigen_top=n_top,
                qk_self=qk_self, n_self_rows=n_rows, ov_copying_effective=copying_score(ov[h], bound_eff[h]),
                ov_copying_framework=copying_score(ov_fw[h], bound_fw[h]), qk_negative_mass=negative_mass(lam_c[h]),
                ov_framework_eigenvalues=_sorted_complex(ov_fw[h], EIGEN_SHOWN), directions=dirs[h],
                dla_logit_diff=None if pair is None else _float(dla[h].mean()),
                dla_top_token=None if pair is None else int(ids[int(dla[h].argmax())]),
                positional_share=None if share is None else _float(share[h]),
                qk_eigenvalues=lam[h][:EIGEN_SHOWN].tolist(), ov_eigenvalues=_sorted_complex(ov[h], EIGEN_SHOWN),
            ))
        del X, Q, K, HX
        if progress is not None:
            progress.update()

    result = Atlas(
        fingerprint=model.fingerprint, processing=W.processing.to_dict(),
        config={"n_layers": cfg.n_layers, "n_heads": H, "d_model": cfg.d_model, "d_head": e},
        layers=layers, rows=rows, notes=notes,
        spec={"n_tokens": N, "frequency": "corpus" if corpus else "bpe-merge-order", "top": TOP,
              "rel_tol": REL_TOL, "silent": SILENT, "window": P, "seed": SEED, "prompts": PROMPTS,
              "embeddings": "full", "embedding_dtype": str(W.dtype).replace("torch.", ""), "metric_dtype": "float64",
              "eigen_shown": EIGEN_SHOWN},
    )
    if pair is not None:
        result.spec["logit_diff"] = {"tokens": list(logit_diff), "ids": pair[0]}
    result.add_kernel_categories(categories)
    if survey:
        from ..semantic.survey import survey as run_survey

        res = run_survey(model, layers)
        result.add_semantic_loss({(r.layer, r.head): r.semantic_loss for r in res.rows})
    return result


def _qk_metrics(Q, K, b_Q, b_K, W_Q, W_K, centred: bool) -> tuple[Tensor, ...]:
    """(‖B_sym‖, ‖B_skew‖ [h], λ̃ [h 2e] of the token-centred form, z [h N], λ [h 2e] of sym(W_Q W_Kᵀ)
    (P W_Q, P W_K when `centred`)) of a layer's heads from Q, K [h N e] (their biases are added in
    place: Q, K are read no more). Per head, small decompositions and passes: the heads are split
    over the caller's threads, one torch thread each (:func:`headscope._threads.split_heads`); the
    keys' mean over the tokens is taken whole first (a reduction over a strided slice of a few heads
    can round differently from the same one over all heads: bits independent of the split)."""
    def forms(sl: slice) -> tuple[Tensor, ...]:
        # [h] ×2 and, token-centred ((X − 1 x̄ᵀ) W = X W − 1 (x̄ᵀ W), the mean row of X W), [h 2e]
        return (*token_forms(Q[sl], K[sl]), symmetric_eigenvalues(W_Q[sl], W_K[sl], centre=centred))
    sym, skew, lam_c, lam = (torch.cat(p) for p in zip(*split_heads(forms, Q.shape[0])))
    Q.add_(b_Q[:, None])
    K.add_(b_K[:, None])
    k_mean = K.mean(-2)                                                              # [h e]
    z = torch.cat(split_heads(lambda sl: self_scores(Q[sl], K[sl], k_mean=k_mean[sl]), Q.shape[0]))  # [h N]
    return sym, skew, lam_c, z, lam


def _logit_diff_direction(model: Model, W, pair: tuple[str, str]) -> tuple[list[int], Tensor]:
    """([id_A, id_B], W_U[:, A] − W_U[:, B] float64 [d]); each string must be exactly one token."""
    if len(pair) != 2:
        raise HeadscopeError(f"logit diff: expected two tokens, got {len(pair)}")
    ids = [layer0.token_id(model, text, "logit diff") for text in pair]
    return ids, (W.W_U[:, ids[0]].double() - W.W_U[:, ids[1]].double()).cpu()
