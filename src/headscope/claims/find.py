"""Locate a model's own components for the seeds' claims (``headscope reproduce --find``).

The claims table is anchored to components: GPT-2 Small's indices (contextual heads 0, 2, 6,
8, 9, 10 of layer 0; semantic head 1.5; neuron 704; worst denominator heads 6, 8) or a planted
checkpoint's manifest. On any other model those indices mean nothing, so :func:`find_components`
first locates the model's own components, each by a criterion relative to the model's own null
and scale (never GPT-2's absolute thresholds), and :func:`find_reference` turns them into the
:class:`headscope.reproduce.Reference` the rows run on. Every row then says which component it
used and why (``component`` / ``why``); a component that cannot be located is reported as
"not found: reason", and a row resting on it cannot pass.

The criteria (one :class:`Component` each; its ``statistic``, ``null`` and ``why`` in the JSON):

* **contextual heads** (layer 0): the heads whose kernel category
  (:func:`headscope.layer0.kernels.analyse_kernels`, the shape rule) is the seed's contextual one,
  ``slowly_decaying``, grouped by single linkage on the total variation between their kernels at
  the calibrated position (≤ ``KERNEL_TV``; TV is scale-free); the largest group. Found when
  the group's spread (largest member TV to the members' mean kernel) is at most ½ × the 5th
  percentile of the spreads of the model's other head sets of as many heads (the null of row
  ``contextual_heads``).
* **semantic head**: by its weights, the negative eigen-mass of the top 64 eigenvalues of the
  symmetric part of W_QK (Σ_{λ<0}|λ| / Σ|λ|; self-suppression puts the large eigenvalues on the
  negative side) against a null of Gaussian W_Q, W_K of matched shape (the mass is invariant to
  the factors' norms, so one null serves every head of the model): a candidate clears its 95th
  percentile + 0.05 (the margin of row ``negative_eigenvalues``). Among the candidates, the
  head the survey ranks best (semantic loss on the shipped category prompts); without a survey
  (or none of its heads a candidate), the candidate of largest mass. A head whose categories
  are not among the shipped prompts is still found by its weights.
* **the semantic head's own categories** (the survey rows, ``three_rules_by_category``): the
  Leiden clusters of its QK form over the frequent tokens (:func:`~headscope.claims.own_clusters.head_clusters`: the authors'
  graph, as row ``semantic_clusters``), the ``OWN_CATEGORIES`` tightest of 3–32 words; every null
  draw of those rows is judged on its own clusters alike. A head without such clusters (a random
  one) has no categories to be judged on: those rows give no verdict.
* **contextual neurons** (MLP0): the scan's largest token score of every neuron through the
  contextual circuit against a random readout of the neuron's norm (:func:`neuron_null`): a neuron
  is found when m × P(a random readout's largest score ≥ its own) ≤ ``FAMILY_ALPHA`` (m neurons
  tried; P bounded by the union over the tokens of each token's Gaussian tail). The null is the
  tail, not a median: a few tokens of very large content weight carry the max, so the max of
  random readouts is broad. A checkpoint whose contextual neurons all score below the seed's 5.0
  still has them found.
* **dialect neuron**: the labelled texts (``data/spelling_texts.json``: Commonwealth vs
  American spelling): per neuron, the cosine between its readout W_in[:, j] and the difference of
  the mean LN2-normalised residual of the two labels' texts; found when the largest cosine is ≥
  1.5 × the 95th percentile of the largest cosine over as many random readouts (the selection
  over every neuron is in the null). The claim rows then test it on other texts (the sample
  texts british_news / american_news) against their own null.
* **worst denominator heads**: among the contextual heads, those whose denominator's median
  relative spread is ≥ ``WORST_RATIO`` × the contextual heads' median spread.

Compute → typed result: :class:`Found` (``to_dict``) holds the components, the Reference
and the measurements the claims table reuses.
"""

from __future__ import annotations

import dataclasses
import math
import statistics

import torch

from .. import shipped
from .._errors import HeadscopeError, NotApplicable
from ..core.forward import run_with_cache
from ..core.model import Model
from .null import compare, form_null, generator, negative_mass, random_readouts, sym_eigenvalues
from .own_clusters import own_categories
from .reference import FOUND_REFERENCE

CONTEXTUAL_CATEGORY = "slowly_decaying"     #: the kernel category of the seed's contextual heads
KERNEL_TV = 0.25                            #: single-linkage bar on kernel TV (as contextual.SELECTION)
FAMILY_ALPHA = 0.05                         #: contextual neurons: the family-wise level over MLP0's neurons
WORST_RATIO = 2.0                           #: a worst head's spread over the contextual heads' median
DIALECT_DRAWS = 32                          #: null draws of the dialect neuron's largest cosine
#: the _Work measurements that do not depend on the reference, handed to the claims table
SHARED = ("kernels", "calibration", "split_tv", "survey", "denominators", "auto_choice")

#: row id → the component it reads (kinds of :class:`Component`)
ROW_COMPONENTS = {
    "tv_contextual": "contextual_heads", "key_split_vs_crude": "contextual_heads",
    "kernel_categories": "layer0_heads", "contextual_heads": "contextual_heads",
    "contextual_heads_auto": "layer0_heads", "translation_equivariance": "layer0_heads",
    "query_dependence": "layer0_heads", "mostly_local": "contextual_heads",
    "denominator_worst_heads": "worst_heads", "denominator_vs_local": "contextual_heads",
    "denominator_concentration": "layer0_heads",
    "denominator_decay": "contextual_heads", "circuit_fidelity": "contextual_heads",
    "n_contextual_neurons": "contextual_neurons", "neuron_704_top": "dialect_neuron",
    "neuron_704_bottom": "dialect_neuron", "neuron_704_texts": "dialect_neuron", "naive_bayes": "dialect_neuron",
    "neuron_topics": "contextual_neurons", "neuron_transfer": "contextual_neurons",
    "keyword_density": "worst_heads", "broad_context": "contextual_neurons",
}
#: the rows of seed 002 read the semantic head; a row not listed reads the contextual heads
SEMANTIC = "semantic_head"


@dataclasses.dataclass
class Component:
    """One located component: what it is, whether the criterion found it, and why."""

    kind: str                       # contextual_heads, semantic_head, contextual_neurons, dialect_neuron, worst_heads
    label: str                      # e.g. "L0 heads 0, 2, 6" or "1.5" or "neuron 1602"
    found: bool
    why: str                        # the criterion and its figures, or "not found: reason"
    layer: int | None = None
    heads: list[int] | None = None
    head: list[int] | None = None   # [layer, head] of the semantic head
    neurons: list[int] | None = None
    statistic: float | None = None
    null: dict | None = None        # claims.null.NullComparison.to_dict where the criterion has one
    candidates: list | None = None  # the figures the choice was made from

    def to_dict(self) -> dict:
        return {k: v for k, v in dataclasses.asdict(self).items() if v is not None}


LAYER0 = Component(kind="layer0_heads", label="every layer-0 head", found=True,
                   why="the claim is about every layer-0 head: nothing to locate", layer=0)


@dataclasses.dataclass
class Found:
    """The components of a model located by :func:`find_components` (module docstring)."""

    components: dict[str, Component]
    source: str
    fingerprint: str
    shared: dict = dataclasses.field(default_factory=dict, repr=False)     # _Work measurements, reused
    neuron_threshold: float | None = None    # the scan's bar (seed unit) that selects the found neurons

    def to_dict(self) -> dict:
        return {"source": self.source, "fingerprint": self.fingerprint, "reference": FOUND_REFERENCE,
                "components": [c.to_dict() for c in self.components.values()],
                "neuron_threshold": None if self.neuron_threshold is None or not math.isfinite(self.neuron_threshold)
                else round(self.neuron_threshold, 6)}

    def component_of(self, row_id: str) -> Component:
        kind = ROW_COMPONENTS.get(row_id, SEMANTIC)
        return LAYER0 if kind == "layer0_heads" else self.components[kind]

    def annotate(self, rows) -> None:
        """Each row's ``component`` and ``why``; a row resting on a component that was not found
        cannot pass (its verdict becomes FAIL, the reason first in its note)."""
        for r in rows:
            c = self.component_of(r.id)
            r.component, r.why = c.label, c.why
            if not c.found and r.passed is True:
                r.passed, r.verdict = False, "FAIL"
                r.note = f"{c.kind.replace('_', ' ')} not found ({c.why.removeprefix('not found: ')}): " \
                         f"measured on the best candidate, no verdict can rest on it; " + (r.note or "")

    def rows(self) -> list[dict]:
        """Each component kind with the rows that read it (for the claims page)."""
        return [{"kind": k, "rows": sorted(r for r, v in ROW_COMPONENTS.items() if v == k)
                 if k != SEMANTIC else "every seed-002 row"} for k in self.components]


# -- the criteria ----------------------------------------------------------------------------------


def _not_found(kind: str, reason: str, **kw) -> Component:
    return Component(kind=kind, label=kw.pop("label", "not found"), found=False, why=f"not found: {reason}", **kw)


def find_contextual_heads(w) -> Component:
    """Contextual heads of layer 0 (module docstring); ``w``: the claims table's measurements."""
    from ..layer0.contextual import build_circuit
    from ..shipped import seed_claims
    from .seed000_heads import subset_spreads
    from .table import margin_of as _margin

    try:
        kernels = w.kernels.heads
        cats = {k.head: k.category for k in kernels}
        cand = [h for h, c in cats.items() if c == CONTEXTUAL_CATEGORY]
        if len(cand) < 2:
            return _not_found("contextual_heads", f"{len(cand)} layer-0 head(s) with a {CONTEXTUAL_CATEGORY} kernel "
                              f"(categories: {_groups(cats)})", layer=0, heads=cand or None)
        circuit, choice = build_circuit(w.model, w.calibration, heads=cand)
        pos = circuit.frame(choice.position).pos.double()                          # [H n+1]
    except HeadscopeError as e:
        return _not_found("contextual_heads", str(e), layer=0)
    tv = 0.5 * (pos[:, None] - pos[None]).abs().sum(-1)                            # [H H]
    groups: list[list[int]] = []
    for h in cand:                                                                 # single linkage
        linked = [g for g in groups if any(float(tv[h, k]) <= KERNEL_TV for k in g)]
        groups = [g for g in groups if g not in linked] + [sorted({h, *[k for g in linked for k in g]})]
    groups.sort(key=lambda g: (-len(g), g))
    S = groups[0]
    label = "L0 heads " + ", ".join(map(str, S))
    if len(S) < 2:
        return _not_found("contextual_heads", f"no two {CONTEXTUAL_CATEGORY} kernels within TV {KERNEL_TV:g} of "
                          "each other", label=label + " (best candidate)", layer=0, heads=S)
    spread = float((0.5 * (pos[S] - pos[S].mean(0)).abs().sum(-1)).max())
    draws = subset_spreads(pos, len(S), "find:contextual_heads", exclude=tuple(S))
    spec = next(c for c in seed_claims()["claims"] if c["id"] == "contextual_heads")["null"]
    base = dict(layer=0, heads=S, statistic=round(spread, 6), candidates=groups)
    if not draws:
        return _not_found("contextual_heads", f"no other set of {len(S)} heads to compare with", label=label, **base)
    null = compare(spread, draws, statistic="largest member TV to the members' mean kernel", direction="below",
                   null=f"every other set of {len(S)} of the {pos.shape[0]} layer-0 heads", **_margin(spec))
    why = (f"{CONTEXTUAL_CATEGORY} kernels within TV {KERNEL_TV:g} of each other (largest group of {cand}); "
           f"spread {spread:.3g} vs other sets' p5 {null.p95:.3g} (bar {null.bar:.3g})")
    if not null.clears:
        return _not_found("contextual_heads", why + ": no closer than other head sets", label=label,
                          null=null.to_dict(), **base)
    return Component(kind="contextual_heads", label=label, found=True, why=why, null=null.to_dict(), **base)


def find_semantic_head(w) -> Component:
    """The semantic head: negative eigen-mass against its null, then the survey (module docstring)."""
    from ..semantic import bilinear
    from ..shipped import seed_claims
    from .table import margin_of as _margin

    model = w.model
    try:
        from ..core.applicability import weight_circuits

        weight_circuits(model.cfg, "the QK bilinear form of the semantic head")
        W = model.weights()
        masses, shape = {}, None
        for l in range(model.cfg.n_layers):
            for h in range(model.cfg.n_heads):
                U, V = bilinear.qk_factors(W, l, h)                       # the row's form: W_QK = U Vᵀ
                masses[(l, h)] = negative_mass(sym_eigenvalues(U, V))
                shape = tuple(U.shape)                                    # every head has one shape
    except HeadscopeError as e:
        return _not_found(SEMANTIC, str(e))
    ones = torch.ones(shape, dtype=torch.float64)          # any non-zero norm: the mass is scale-free
    nd = form_null(ones, ones, "find:semantic_head", centred=W.reads_centred)
    spec = next(c for c in seed_claims()["claims"] if c["id"] == "negative_eigenvalues")["null"]
    nulls = {k: compare(m, nd["masses"], statistic="negative eigen-mass of the top 64", direction="above",
                        null="Gaussian W_Q, W_K of the head's shape (the mass does not depend on their norms)",
                        **_margin(spec)) for k, m in masses.items()}
    cand = sorted((k for k in masses if nulls[k].clears), key=lambda k: -masses[k])
    try:
        ranked = [(r.layer, r.head) for r in w.survey.rows]
        losses = {(r.layer, r.head): r.semantic_loss for r in w.survey.rows}
    except HeadscopeError:
        ranked, losses = [], {}
    best_mass = max(masses, key=lambda k: masses[k])
    listed = [{"head": f"{l}.{h}", "negative_mass": round(masses[(l, h)], 4),
               "survey_rank": ranked.index((l, h)) + 1 if (l, h) in ranked else None}
              for l, h in sorted(masses, key=lambda k: -masses[k])[:8]]
    if not cand:
        pick = ranked[0] if ranked else best_mass
        null = nulls[pick]
        return _not_found(SEMANTIC, f"no head's negative eigen-mass clears its null (largest {masses[best_mass]:.3f} "
                          f"at {best_mass[0]}.{best_mass[1]}; bar {null.bar:.3f})",
                          label=f"{pick[0]}.{pick[1]} (best candidate: {'survey top' if ranked else 'largest mass'})",
                          head=list(pick), statistic=round(masses[pick], 6), null=null.to_dict(), candidates=listed)
    by_survey = [k for k in ranked if k in cand]
    pick = by_survey[0] if by_survey else cand[0]
    how = (f"the survey's best of them (rank {ranked.index(pick) + 1}, semantic loss {losses[pick]:.3g})"
           if by_survey else "the largest mass (no survey)")
    null = nulls[pick]
    why = (f"negative eigen-mass {masses[pick]:.3f} ≥ null p95 {null.p95:.3f} + {null.margin:g} "
           f"({len(cand)} head(s) clear it); {how}")
    return Component(kind=SEMANTIC, label=f"{pick[0]}.{pick[1]}", found=True, why=why, head=list(pick),
                     layer=pick[0], statistic=round(masses[pick], 6), null=null.to_dict(), candidates=listed)


@torch.no_grad()
def neuron_null(circuit, choice, tokenizer=None, chunk: int = 4096, dtype=torch.float32) -> dict:
    """Every MLP0 neuron's scan score against a random readout of its norm, family-wise.

    The score (the seed's, variant ``paper``) is ``x_j = max_t Y[t]·M_j`` with M_j = W_O m_j
    (:mod:`headscope.layer0.neurons`); per unit readout ``s_j = x_j / |m_j|``. Under the null the
    readout is a uniform direction ĝ (orthogonal to 1 where LN2 centres): each token's score
    u_t·ĝ, u_t = c(W_O Y[t]), is ≈ N(0, σ_t²) with σ_t = |u_t| / √k (k = d − 1, or d), so
    ``P(max_t u_t·ĝ ≥ s) ≤ Σ_t Φ̄(s / σ_t)`` (:func:`headscope.stats.log_union_tail`) whatever the
    tokens' correlations. A few tokens of very large content weight carry the max, which makes its
    null broad (over 3072 random readouts of a random GPT-2-sized layer the max is 4× the median),
    so a neuron is compared with the bound's tail, not a median; and since every one of the m
    neurons is tried, with ``m · P`` (Bonferroni over the neurons). Returns the per-neuron score
    x [m], norm [m], log P [m], and the unit score ``bar`` at which m · P = :data:`FAMILY_ALPHA`."""
    from ..layer0.neurons import _scored_tokens, ln2_divisor, parse_variant, readout_vectors
    from ..stats import log_union_tail

    v = parse_variant(None)
    n = choice.position
    circuit._check_n(n)
    Y, _ = _scored_tokens(circuit, v, n, dtype, chunk, tokenizer)               # [V' H*e]
    m = readout_vectors(circuit, ln2_scale=ln2_divisor(circuit, v)).double()   # [d m]
    W_O = circuit.weights.blocks[0].W_O[circuit.heads].double()
    W_Ocat = W_O.reshape(-1, W_O.shape[-1])                                      # [H*e d]
    M = (W_Ocat @ m).to(dtype)                                                   # [H*e m]
    centred = circuit.weights.cfg.norm != "rmsnorm"                              # as readout_vectors
    k = m.shape[0] - 1 if centred else m.shape[0]
    mx = torch.full((m.shape[1],), -math.inf, dtype=dtype)
    sig = torch.empty(Y.shape[0], dtype=torch.float64)
    for s in range(0, Y.shape[0], chunk):
        y = Y[s:s + chunk]
        torch.maximum(mx, (y @ M).amax(0), out=mx)
        u = (y @ W_Ocat.to(dtype)).double()                                      # [c d]
        if centred:
            u = u - u.mean(1, keepdim=True)
        sig[s:s + chunk] = u.norm(dim=1) / math.sqrt(k)
    if not bool(torch.isfinite(mx).all() and torch.isfinite(sig).all()):        # beyond float32: float64
        if dtype != torch.float64:
            return neuron_null(circuit, choice, tokenizer, chunk, torch.float64)
        raise NotApplicable("contextual neurons: the scan's scores overflow float64")
    mx = mx.double()
    norms = m.norm(dim=0)
    unit = torch.where(norms > 0, mx / norms.clamp_min(1e-300), torch.zeros_like(mx))
    logp = log_union_tail(unit, sig)
    target = math.log(FAMILY_ALPHA / m.shape[1])
    lo, hi = 0.0, max(float(unit.max()), float(sig.max()), 1e-300)
    while float(log_union_tail(torch.tensor([hi]), sig)[0]) > target:           # the bar: a bracket, refined
        lo, hi = hi, 2 * hi
    for _ in range(5):                                                           # 32 steps a round: 32⁻⁵ of the bracket
        grid = torch.linspace(lo, hi, 33, dtype=torch.float64)
        above = (log_union_tail(grid, sig) > target).nonzero()                   # the bound decreases along the grid
        i = int(above[-1]) if len(above) else 0
        lo, hi = float(grid[i]), float(grid[min(i + 1, 32)])
    return {"max": mx, "norm": norms, "log_p": logp, "bar": hi, "n": m.shape[1]}


def find_contextual_neurons(w, heads: list[int] | None) -> tuple[Component, float | None]:
    """Contextual neurons of MLP0 (module docstring, :func:`neuron_null`) through the circuit of
    `heads`; with the scan's bar (seed unit) that lists them."""
    from ..layer0.contextual import build_circuit

    if not heads:
        return _not_found("contextual_neurons", "no contextual heads to build the circuit from"), None
    try:
        circuit, choice = build_circuit(w.model, w.calibration, heads=heads)
    except HeadscopeError as e:
        return _not_found("contextual_neurons", str(e)), None
    return contextual_neurons(circuit, choice, w.model.tokenizer)


def contextual_neurons(circuit, choice, tokenizer=None) -> tuple[Component, float | None]:
    """:func:`find_contextual_neurons` on a built circuit: the neurons that clear their family-wise
    null (:func:`neuron_null`), and the scan's bar (seed unit) that lists them (∞: none)."""
    try:
        r = neuron_null(circuit, choice, tokenizer)
    except HeadscopeError as e:
        return _not_found("contextual_neurons", str(e)), None
    mx, norms, n_m = r["max"], r["norm"], r["n"]
    fw = (r["log_p"] + math.log(n_m)).clamp_max(0.0).exp()                      # m · P, capped at 1
    bar = r["bar"] * norms                                                       # per neuron, seed unit
    ratio = torch.where(bar > 0, mx / bar.clamp_min(1e-300), torch.zeros_like(mx))
    order = torch.argsort(ratio, descending=True, stable=True).tolist()
    found = sorted(j for j in order if float(fw[j]) <= FAMILY_ALPHA and float(mx[j]) > 0)
    top = [{"neuron": j, "score": round(float(mx[j]), 4), "bar": round(float(bar[j]), 4),
            "ratio": round(float(ratio[j]), 3), "family_p": float(f"{float(fw[j]):.3g}")} for j in order[:12]]
    crit = (f"scan score (max token score) against a random readout of the neuron's norm, family-wise over the "
            f"{n_m} neurons: {n_m} × P(max_t ≥ score) ≤ {FAMILY_ALPHA:g} (union bound over the tokens)")
    if not found:
        j = order[0]
        return _not_found("contextual_neurons", f"no MLP0 neuron clears its null ({crit}; best {float(ratio[j]):.2f}× "
                          f"its bar, {n_m} × P = {float(fw[j]):.3g})", label=f"neuron {j} (best candidate)",
                          layer=0, neurons=[j], candidates=top), math.inf
    tau = float(min(mx[j] for j in found)) * (1 - 1e-9)
    by = sorted(found, key=lambda j: -float(mx[j]))
    why = (f"{crit}: {len(found)} neurons, scores {', '.join(f'{float(mx[j]):.3g}' for j in by[:6])}"
           + ("…" if len(found) > 6 else "") + f" (bars {', '.join(f'{float(bar[j]):.3g}' for j in by[:6])})")
    shown = ", ".join(map(str, found[:8])) + ("…" if len(found) > 8 else "")
    return Component(kind="contextual_neurons", label=f"{len(found)} MLP0 neurons ({shown})", found=True, why=why,
                     layer=0, neurons=found, statistic=round(float(min(ratio[j] for j in found)), 4),
                     candidates=top), tau


def _mean_normalised(model: Model, W, text: str) -> torch.Tensor:
    """Mean LN2-normalised residual of layer 0 over a text's positions ≥ 1 ([d], float64)."""
    from ..corpus import windows

    tokens = windows(model, [text], n_ctx=model.cfg.n_ctx)[0]
    cache = run_with_cache(W, tokens[None], names=["blocks.0.ln2.hook_normalized"], stop_at_layer=1)
    return cache["blocks.0.ln2.hook_normalized"][0, 1:].double().mean(0)


def find_dialect_neuron(w) -> Component:
    """The MLP0 neuron that best separates the labelled spelling texts (module docstring)."""
    from ..shipped import seed_claims
    from .table import margin_of as _margin

    model = w.model
    try:
        W = model.weights()
        texts = shipped.spelling_texts()
        by = {lab: torch.stack([_mean_normalised(model, W, t) for l2, t in texts if l2 == lab]).mean(0)
              for lab in ("commonwealth", "american")}
    except (HeadscopeError, KeyError) as e:
        return _not_found("dialect_neuron", str(e))
    dx = by["commonwealth"] - by["american"]                                            # [d]
    W_in = W.blocks[0].W_in.double()                                                    # [d m]
    norms = W_in.norm(dim=0).clamp_min(1e-300)
    cos = (dx @ W_in) / (dx.norm().clamp_min(1e-300) * norms)                           # [m]
    g = generator("find:dialect_neuron")
    unit = torch.ones(W_in.shape[0], dtype=torch.float64)
    draws = []
    for _ in range(DIALECT_DRAWS):
        R = random_readouts(unit, W_in.shape[1], g, W.reads_centred)                    # [d m]
        draws.append(float(((dx @ R) / (dx.norm().clamp_min(1e-300) * R.norm(dim=0))).max()))
    j = int(torch.argmax(cos))
    spec = next(c for c in seed_claims()["claims"] if c["id"] == "neuron_704_texts")["null"]
    null = compare(float(cos[j]), draws, statistic="largest cosine of a readout with the labels' mean difference",
                   direction="above", null=f"the largest over {W_in.shape[1]} random readouts", **_margin(spec))
    top = torch.argsort(cos, descending=True)[:5].tolist()
    n_texts = {lab: sum(l2 == lab for l2, _ in texts) for lab in ("commonwealth", "american")}
    why = (f"Commonwealth − American mean LN2 input over the labelled texts ({n_texts['commonwealth']} + "
           f"{n_texts['american']}, data/spelling_texts.json): cosine with W_in[:, {j}] {float(cos[j]):.3f} vs the "
           f"largest of random readouts p95 {null.p95:.3f} (bar {null.bar:.3f})")
    base = dict(layer=0, neurons=[j], statistic=round(float(cos[j]), 6), null=null.to_dict(),
                candidates=[{"neuron": k, "cosine": round(float(cos[k]), 4)} for k in top])
    if not null.clears:
        return _not_found("dialect_neuron", why, label=f"neuron {j} (best candidate)", **base)
    return Component(kind="dialect_neuron", label=f"neuron {j}", found=True, why=why, **base)


def find_worst_heads(w, ctx: Component) -> Component:
    """The least stable denominators among the contextual heads (module docstring)."""
    heads = ctx.heads or []
    if len(heads) < 2:
        return _not_found("worst_heads", "fewer than two contextual heads", heads=heads or None)
    try:
        spread = {h: w.denominators.median_rel_spread[h] for h in heads}
    except HeadscopeError as e:
        return _not_found("worst_heads", str(e), heads=heads[:2])
    med = statistics.median(spread.values())
    worst = sorted(h for h in heads if spread[h] >= WORST_RATIO * med and spread[h] > 0)
    figures = ", ".join(f"{h}: {spread[h]:.3g}" for h in heads)
    cands = sorted(sorted(heads, key=lambda h: -spread[h])[:2])
    if not worst or len(worst) == len(heads):
        return _not_found("worst_heads", f"no contextual head's denominator spread is {WORST_RATIO:g}× the median "
                          f"{med:.3g} ({figures})", label="L0 heads " + ", ".join(map(str, cands)) + " (best candidates)",
                          layer=0, heads=cands)
    return Component(kind="worst_heads", label="L0 heads " + ", ".join(map(str, worst)), found=True, layer=0,
                     heads=worst, statistic=round(min(spread[h] for h in worst) / med, 4) if med > 0 else None,
                     why=f"median relative denominator spread ≥ {WORST_RATIO:g}× the contextual heads' median "
                         f"{med:.3g} ({figures})")


def _groups(cats: dict) -> str:
    out: dict = {}
    for h, c in sorted(cats.items()):
        out.setdefault(c, []).append(h)
    return "; ".join(f"{c} {v}" for c, v in out.items())


# -- the whole search --------------------------------------------------------------------------------


def find_components(model: Model, *, variant=None) -> Found:
    """Locate every component the claims read (module docstring)."""
    from ..shipped import seed_claims
    from .reference import seed_reference
    from .work import Work

    w = Work(model, seed_reference(seed_claims()), variant=variant)
    ctx = find_contextual_heads(w)
    sem = find_semantic_head(w)
    neurons, tau = find_contextual_neurons(w, ctx.heads)
    dialect = find_dialect_neuron(w)
    worst = find_worst_heads(w, ctx)
    comps = {c.kind: c for c in (ctx, sem, neurons, dialect, worst)}
    shared = {k: w.__dict__[k] for k in SHARED if k in w.__dict__}
    return Found(components=comps, source=model.source, fingerprint=model.fingerprint, shared=shared,
                 neuron_threshold=tau)


def find_reference(model: Model, found: Found | None = None, *, variant=None):
    """The :class:`headscope.reproduce.Reference` of the components :func:`find_components`
    locates: ``reproduce(model, reference=find_reference(model))`` asks the seeds' questions of
    them. Where a component is not found, the rows use its best candidate and cannot pass.

    The seeds' figures that only describe GPT-2 Small — neuron 704's token lists, σ_sym / σ_skew —
    give those rows no verdict here (:func:`~headscope.claims.reference.gpt2_only`): they are compared only on GPT-2 Small. The
    exact negative count of the semantic head is its own (the row's verdict rests on the negative
    eigen-mass against its null); the survey rows use the head's own clusters (:func:`own_categories`)."""
    from ..shipped import seed_claims
    from .reference import Reference, seed_reference

    found = find_components(model, variant=variant) if found is None else found
    seed = seed_reference(seed_claims())
    c = found.components
    ctx = c["contextual_heads"].heads or list(range(min(2, model.cfg.n_heads)))
    sem = tuple(c[SEMANTIC].head) if c[SEMANTIC].head else seed.semantic_head
    neurons = c["contextual_neurons"].neurons if c["contextual_neurons"].found else []
    dialect = (c["dialect_neuron"].neurons or [seed.neuron])[0]
    n_negative = seed.n_negative_top64
    try:                                        # the semantic head's form, as the claims table computes it
        from .work import Work
        n_negative = Work(model, dataclasses.replace(seed, semantic_head=sem)).form.n_negative_top
    except HeadscopeError:
        pass
    return Reference(
        name=FOUND_REFERENCE, contextual_heads=sorted(ctx), categories=None, n_neurons=len(neurons),
        neuron_indices=neurons, neuron=int(dialect),
        neuron_label=f"{dialect} (dialect neuron{'' if c['dialect_neuron'].found else ', not found: best candidate'})",
        top_tokens=seed.top_tokens, bottom_tokens=seed.bottom_tokens, semantic_head=sem,
        n_negative_top64=int(n_negative), sigma=seed.sigma, planted_sigma_sym=None,
        worst_heads=c["worst_heads"].heads or [],
        # the survey rows ask about the found head on its own clusters (head_clusters: the Leiden
        # clusters of its QK form), not the authors' 8 lists of GPT-2's 1.5 nor the shipped prompts:
        # a head whose categories are none of the shipped ones is judged on its own
        survey_categories=_own_categories(model, sem), own_categories=True, found=found)


def _own_categories(model: Model, head: tuple[int, int]) -> dict[str, list[str]]:
    try:
        return own_categories(model, head)
    except HeadscopeError:                      # no QK form here (applicability): no categories of its own
        return {}


def reference_components(model: Model, ref) -> Found:
    """The components a seed or planted :class:`~headscope.reproduce.Reference` names, as a
    :class:`Found` (every one "found": the reference names it), so that every table (the
    report's claims page) says which component each row used."""
    why = "the planted manifest" if ref.planted else "the seed's published index (GPT-2 Small)"
    l, h = ref.semantic_head
    neurons = ref.neuron_indices
    comps = [
        Component(kind="contextual_heads", label="L0 heads " + ", ".join(map(str, ref.contextual_heads)), found=True,
                  why=why, layer=0, heads=list(ref.contextual_heads)),
        Component(kind=SEMANTIC, label=f"{l}.{h}", found=True, why=why, layer=l, head=[l, h]),
        Component(kind="contextual_neurons", found=True, layer=0, neurons=list(neurons) if neurons else None,
                  label=f"{len(neurons)} MLP0 neurons" if neurons else "MLP0 neurons above 5.0 (the seed's unit)",
                  why=why if neurons else "the seed's threshold 5.0 on the scan"),
        Component(kind="dialect_neuron", label=f"neuron {ref.neuron}", found=True, why=why, layer=0,
                  neurons=[ref.neuron]),
        Component(kind="worst_heads", label="L0 heads " + ", ".join(map(str, ref.worst_heads)), found=True, why=why,
                  layer=0, heads=list(ref.worst_heads)),
    ]
    return Found(components={c.kind: c for c in comps}, source=model.source, fingerprint=model.fingerprint)
