"""The claims of the two seed studies, measured on a checkpoint: one row per claim.

Every row holds the published figure, headscope's figure on the model, the tolerance
and pass / fail. The published column is one of two references:

* ``seed (GPT-2 Small)``: the figures of the seed studies (``data/seed_claims.json``);
  they refer to GPT-2 Small, so on another model a row compares that model with GPT-2
  Small (a note says so when the shapes differ);
* ``planted manifest``: for a checkpoint written by ``headscope plant``, the mechanisms
  its ``planted.json`` documents (contextual heads, kernel categories, contextual
  neurons, semantic head, eigenvalue signs, symmetric W_QK). A claim the manifest does
  not plant (the TV of the key split, the steering gain) keeps the seed's threshold and
  says so.

Each measurement reuses headscope's own analyses with the defaults the report uses
(query ' the', the shipped calibration and sample texts, seeded category prompts), so
``headscope reproduce`` and ``headscope report`` agree. A claim that cannot be measured
on the model (no head 1.5, no neuron 704) is a failing row whose note gives the reason;
it never stops the other rows.
"""

from __future__ import annotations

import dataclasses
import functools
import statistics
from pathlib import Path

from . import bilinear, shipped
from ._errors import HeadscopeError, NotApplicable
from ._html_repr import HtmlRepr
from .calibration import calibrate
from .contextual import build_circuit
from .corpus import windows
from .kernels import analyse_kernels
from .layer0 import SEED_QUERY
from .loading import Model
from .neurons import DEFAULT_THRESHOLD, readout, scan_neurons, token_values
from .planted.build import MANIFEST, read_manifest
from .shipped import seed_claims
from .steering import steer
from .survey import position_independence, survey
from .weights import Processing

KERNEL_WINDOWS = 16          #: windows of the shipped texts for the TV claim (as the report)
TOP = 50                     #: token lists compared for neuron claims
SEED_REFERENCE = "seed (GPT-2 Small)"
PLANTED_REFERENCE = "planted manifest"
GPT2_SMALL = {"n_layers": 12, "n_heads": 12, "d_model": 768, "d_head": 64, "d_mlp": 3072,
              "n_ctx": 1024, "d_vocab": 50257}


@dataclasses.dataclass
class ClaimRow:
    id: str
    seed: str
    claim: str
    measure: str
    published: object              # a number, list or text (from the seeds or the manifest)
    measured: object               # None when it could not be measured
    tolerance: str
    passed: bool | None            # None: nothing to compare with (stated in note)
    note: str = ""

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclasses.dataclass
class ReproduceResult(HtmlRepr):
    rows: list[ClaimRow]
    source: str
    fingerprint: str
    reference: str
    notes: list[str]
    details: dict

    @property
    def ok(self) -> bool:
        """Every row that has a verdict passes."""
        return all(r.passed is not False for r in self.rows)

    def to_dict(self) -> dict:
        return {"source": self.source, "fingerprint": self.fingerprint, "reference": self.reference,
                "ok": self.ok, "n_pass": sum(r.passed is True for r in self.rows),
                "n_fail": sum(r.passed is False for r in self.rows),
                "rows": [r.to_dict() for r in self.rows], "notes": self.notes, "details": self.details}

    def render(self) -> str:
        w = max(len(r.id) for r in self.rows)
        lines = [f"headscope reproduce: {self.source} (sha256 {self.fingerprint[:12]}…), "
                 f"published column: {self.reference}", ""]
        lines.append(f"{'claim':<{w}}  {'published':<28}  {'measured':<34}  {'tolerance':<24}  result")
        for r in self.rows:
            verdict = {True: "PASS", False: "FAIL", None: "n/a"}[r.passed]
            lines.append(f"{r.id:<{w}}  {_short(r.published, 28):<28}  {_short(r.measured, 34):<34}  "
                         f"{_short(r.tolerance, 24):<24}  {verdict}")
            if r.note:
                lines.append(f"{'':<{w}}  ↳ {r.note}")
        n_pass = sum(r.passed is True for r in self.rows)
        n_fail = sum(r.passed is False for r in self.rows)
        lines += ["", f"{n_pass} pass, {n_fail} fail, {len(self.rows) - n_pass - n_fail} without a verdict"]
        lines += [f"note: {n}" for n in self.notes]
        return "\n".join(lines)


def _short(x, width: int = 30) -> str:
    if x is None:
        s = "—"
    elif isinstance(x, float):
        s = f"{x:.4g}"
    elif isinstance(x, (list, tuple)):
        s = ", ".join(_short(v, width) for v in x) if len(x) <= 8 else f"{len(x)} items"
    else:
        s = str(x)
    return s if len(s) <= width else s[: width - 1] + "…"


# -- the reference: seed figures or a planted manifest -------------------------------------------


@dataclasses.dataclass
class Reference:
    """What each claim is compared with (see the module docstring)."""

    name: str
    contextual_heads: list[int]
    categories: dict[int, str] | None            # planted: head → category
    n_neurons: int | None                        # planted: exact count; seed: None (range)
    neuron_indices: list[int] | None
    neuron: int
    neuron_label: str
    top_tokens: list[str]
    bottom_tokens: list[str]
    semantic_head: tuple[int, int]
    n_negative_top64: int
    sigma: tuple[float, float] | None            # seed: (sym, skew)
    planted_sigma_sym: float | None              # planted: the largest |λ| planted


def seed_reference(claims: dict) -> Reference:
    by = {c["id"]: c for c in claims["claims"]}
    return Reference(
        name=SEED_REFERENCE, contextual_heads=by["contextual_heads"]["published"], categories=None,
        n_neurons=None, neuron_indices=None, neuron=by["neuron_704_top"]["neuron"], neuron_label="704",
        top_tokens=by["neuron_704_top"]["published"], bottom_tokens=by["neuron_704_bottom"]["published"],
        semantic_head=(1, 5), n_negative_top64=by["negative_eigenvalues"]["published"],
        sigma=tuple(by["sym_vs_skew"]["published"]), planted_sigma_sym=None)


def planted_reference(manifest: dict) -> Reference:
    """The mechanisms a ``headscope plant`` manifest documents."""
    try:
        l0, l1 = manifest["layer0"], manifest["layer1"]
        cats = {h: c for c, heads in l0["categories"].items() for h in heads}
        neurons = l0["neurons"]
        n704 = next((n for n in neurons if n["name"] == "commonwealth_spelling"), neurons[0])
        form = l1["bilinear_form"]
        sem = l1["semantic_head"]
        return Reference(
            name=PLANTED_REFERENCE, contextual_heads=sorted(l0["contextual_heads"]), categories=cats,
            n_neurons=len(neurons), neuron_indices=sorted(n["index"] for n in neurons), neuron=int(n704["index"]),
            neuron_label=f"{n704['index']} ({n704['name']})", top_tokens=list(n704["positive"]),
            bottom_tokens=list(n704["negative"]), semantic_head=(int(sem["layer"]), int(sem["head"])),
            n_negative_top64=int(form["n_negative"]), sigma=None,
            planted_sigma_sym=max(abs(float(form["negative_eigenvalue"])), abs(float(form["positive_eigenvalue"]))))
    except (KeyError, TypeError, ValueError, IndexError, StopIteration) as e:
        raise HeadscopeError(f"planted.json: malformed manifest ({type(e).__name__}: {e})") from None


def reference_for(model: Model) -> Reference:
    if model.directory is not None and (Path(model.directory) / MANIFEST).is_file():   # None: a model in memory
        return planted_reference(read_manifest(model.directory))
    return seed_reference(seed_claims())


# -- the measurements, computed once and shared by the rows ---------------------------------------


class _Work:
    def __init__(self, model: Model, processing: Processing, head: tuple[int, int]):
        self.model, self.processing, self.head = model, processing, head

    def _check_head(self) -> tuple[int, int]:
        return self.model.cfg.check_head(*self.head)

    @functools.cached_property
    def kernels(self):
        texts = [(t.name, t.text) for t in [shipped.calibration_text(), *shipped.samples()]]
        wins = windows(self.model, texts, max_windows=KERNEL_WINDOWS)
        return analyse_kernels(self.model, layer=0, query=SEED_QUERY, c="measured", windows=wins,
                               processing=self.processing)

    @functools.cached_property
    def circuit(self):
        cal = calibrate(self.model, shipped.calibration_text().text, query=SEED_QUERY, processing=self.processing)
        return build_circuit(self.model, cal, processing=self.processing)       # (circuit, choice)

    @functools.cached_property
    def scan(self):
        circuit, choice = self.circuit
        return scan_neurons(circuit, choice, self.model.tokenizer, threshold=DEFAULT_THRESHOLD, top=TOP)

    def neuron_tokens(self, j: int) -> dict:
        """Top and bottom `TOP` tokens of neuron j through the circuit (decoded strings)."""
        self.model.cfg.check_neuron(j)
        hit = next((n for n in self.scan.neurons if n["neuron"] == j), None)
        if hit is not None:                                                         # the scan has its lists
            return {"top": hit["top_tokens"], "bottom": hit["bottom_tokens"],
                    "max_contribution": hit["max_contribution"], "min_contribution": hit["min_contribution"]}
        circuit, choice = self.circuit                                              # below threshold: score it
        score = token_values(circuit, choice.position) @ readout(circuit)[:, j]     # [V he] @ [he] → [V]
        k = min(TOP, score.numel())
        top, bottom = score.topk(k), score.topk(k, largest=False)
        dec = self.model.to_str_tokens
        return {"top": dec(top.indices.tolist()), "bottom": dec(bottom.indices.tolist()),
                "max_contribution": float(top.values[0]), "min_contribution": float(bottom.values[0])}

    @functools.cached_property
    def survey(self):
        return survey(self.model, n_prompts=64, length=16, seed=0, processing=self.processing)

    def survey_row(self):
        l, h = self._check_head()
        return next(r for r in self.survey.rows if (r.layer, r.head) == (l, h))

    @functools.cached_property
    def position(self):
        l, h = self._check_head()
        return position_independence(self.model, l, h, processing=self.processing)

    @functools.cached_property
    def form(self):
        l, h = self._check_head()
        W = self.model.weights(self.processing)
        return bilinear.bilinear_form(bilinear.qk_matrix(W, l, h, centred=W.processing.fold_ln), l, h)

    @functools.lru_cache(maxsize=None)
    def steer(self, alpha: float):
        l, h = self._check_head()
        return steer(self.model, l, h, alpha, select="negative", processing=self.processing).result


# -- one function per claim: (published, measured, tolerance, passed, note) ------------------------

def _tv(c, ref, w):
    rep = w.kernels
    heads = [h for h in ref.contextual_heads if h < len(rep.heads)]
    if not heads:
        raise HeadscopeError(f"no contextual head {ref.contextual_heads} exists in layer 0")
    med = statistics.median(rep.heads[h].tv_median for h in heads)
    note = "" if ref.name == SEED_REFERENCE else "not planted: the seed's figure and threshold"
    return c["published"], round(med, 6), c["tolerance"], med <= c["max"], note


def _categories(c, ref, w):
    rep = w.kernels
    got = {hk.head: hk.category for hk in rep.heads}
    counts = {cat: sum(v == cat for v in got.values()) for cat in c["published"]}
    measured = ", ".join(f"{k} {v}" for k, v in counts.items())
    if ref.categories is None:
        return c["published_text"], measured, c["tolerance"], all(counts.values()), ""
    want = {cat: sorted(h for h, v in ref.categories.items() if v == cat) for cat in c["published"]}
    have = {cat: sorted(h for h, v in got.items() if v == cat) for cat in c["published"]}
    wrong = sorted(h for h in got if got[h] != ref.categories.get(h))
    note = f"heads {wrong} differ from the manifest" if wrong else ""
    return _fmt_groups(want), _fmt_groups(have), "every head's category as planted", not wrong, note


def _fmt_groups(groups: dict) -> str:
    return "; ".join(f"{k} {v}" for k, v in groups.items())


def _contextual(c, ref, w):
    _, choice = w.circuit
    tol = c["tolerance"]
    return ref.contextual_heads, list(choice.heads), tol, sorted(choice.heads) == sorted(ref.contextual_heads), ""


def _n_neurons(c, ref, w):
    scan = w.scan
    found = sorted(n["neuron"] for n in scan.neurons)
    if ref.n_neurons is None:
        lo, hi = c["range"]
        return c["published_text"], len(found), c["tolerance"], lo <= len(found) <= hi, ""
    extra = sorted(set(found) - set(ref.neuron_indices))
    missing = sorted(set(ref.neuron_indices) - set(found))
    note = "; ".join(s for s in [f"missing {missing}" if missing else "", f"extra {extra}" if extra else ""] if s)
    return ref.neuron_indices, found, "exactly the planted neurons", not extra and not missing, note


def _neuron_side(c, ref, w):
    side = c["side"]
    want = ref.top_tokens if side == "top" else ref.bottom_tokens
    got = w.neuron_tokens(ref.neuron)
    k = min(TOP, len(want))
    overlap = len(set(want) & set(got[side]))
    need = int(-(-c["min_fraction"] * k // 1))                                     # ceil
    measured = f"{overlap}/{len(want)} in headscope's {side} {TOP}"
    note = (f"neuron {ref.neuron_label}; headscope's {side} 5: {', '.join(repr(t) for t in got[side][:5])}; "
            f"{'max' if side == 'top' else 'min'} contribution "
            f"{got['max_contribution' if side == 'top' else 'min_contribution']:.3f}")
    return c["published_text"] if ref.name == SEED_REFERENCE else f"{len(want)} planted tokens", measured, \
        f"≥ {need} of {len(want)}", overlap >= need, note


def _survey_top(c, ref, w):
    rows = w.survey.rows
    l, h = w._check_head()
    first = f"{rows[0].layer}.{rows[0].head}"
    mine = w.survey_row()
    note = f"{l}.{h} has rank {mine.rank} (semantic loss {mine.semantic_loss:.3f}); 2nd: {rows[1].layer}.{rows[1].head}" \
        if len(rows) > 1 else ""
    return f"{l}.{h}", first, c["tolerance"], (rows[0].layer, rows[0].head) == (l, h), note


def _defined(what: str, *values):
    """Refuse a verdict on an undefined rate (None: no query of the prompts it applies to)."""
    if any(v is None for v in values):
        raise NotApplicable(f"{what} is undefined on this model's prompts (no query it applies to)")


def _self_suppression(c, ref, w):
    r = w.survey_row()
    _defined("copy or same-category attention", r.copy_attention, r.same_category)
    ok = r.self_attention <= c["max"] and r.copy_attention <= c["max"] and \
        max(r.self_attention, r.copy_attention) < r.same_category
    measured = f"self {r.self_attention:.3f}, copy {r.copy_attention:.3f}, same-category {r.same_category:.3f}"
    return c["published_text"], measured, c["tolerance"], ok, ""


def _bos(c, ref, w):
    r = w.survey_row()
    _defined("BOS fallback", r.bos_fallback)
    return c["published_text"], round(r.bos_fallback, 6), c["tolerance"], r.bos_fallback >= c["min"], ""


def _position(c, ref, w):
    p = w.position
    _defined("the token-identity share (the head's scores are constant)", p.identity_fraction)
    return c["published_text"], round(p.identity_fraction, 6), c["tolerance"], p.identity_fraction >= c["min"], \
        f"mean within-pair score std {p.within_pair_std:.3g} over {p.n_pairs} pairs"


def _negative(c, ref, w):
    f = w.form
    if ref.name == SEED_REFERENCE:
        tol, ok = c["tolerance"], abs(f.n_negative_top - ref.n_negative_top64) <= c["abs"]
    else:
        tol, ok = "exact", f.n_negative_top == ref.n_negative_top64
    return ref.n_negative_top64, f.n_negative_top, tol, ok, f"{f.n_negative} negative, {f.n_positive} positive in all"


def _sigma(c, ref, w):
    f = w.form
    sym, skew = float(f.sigma_sym[0]), float(f.sigma_skew[0]) if f.sigma_skew.numel() else 0.0
    measured = [round(sym, 4), round(skew, 4)]
    if ref.sigma is not None:
        ps, pk = ref.sigma
        ok = abs(sym - ps) <= c["rel"] * ps and abs(skew - pk) <= c["rel"] * pk and sym > skew
        return list(ref.sigma), measured, c["tolerance"], ok, ""
    want = ref.planted_sigma_sym
    ok = abs(sym - want) <= 1e-4 * want and skew <= 1e-6 * sym
    return [round(want, 4), 0.0], measured, "sym within 0.01%, skew ≤ 1e-6 × sym", ok, \
        "planted: symmetric W_QK with |λ| up to the manifest's"


def _steer(c, ref, w):
    r = w.steer(0.0)
    gain = r.self_attention_after - r.self_attention_before
    note = f"{r.n_selected} negative eigenvalues scaled; rebuild error {r.rebuild_error:.1e}"
    if ref.name != SEED_REFERENCE:
        note += "; not planted: the seed's qualitative claim with headscope's threshold"
    return c["published_text"], f"{r.self_attention_before:.3f} → {r.self_attention_after:.3f}", c["tolerance"], \
        gain >= c["min_gain"], note


CHECKS = {
    "tv_contextual": _tv, "kernel_categories": _categories, "contextual_heads": _contextual,
    "n_contextual_neurons": _n_neurons, "neuron_704_top": _neuron_side, "neuron_704_bottom": _neuron_side,
    "survey_top": _survey_top, "self_suppression": _self_suppression, "bos_fallback": _bos,
    "position_independence": _position, "negative_eigenvalues": _negative, "sym_vs_skew": _sigma,
    "steer_restores_self": _steer,
}


def _details(w: _Work, claims: dict, ref: Reference) -> dict:
    """Supporting figures (each only if its measurement succeeded)."""
    d: dict = {}

    def put(key, fn):
        try:
            d[key] = fn()
        except HeadscopeError as e:
            d[key] = {"error": str(e)}

    put("kernels", lambda: [{"head": k.head, "category": k.category, "width": k.width, "tv_median": k.tv_median,
                              "tv_p90": k.tv_p90} for k in w.kernels.heads])
    put("head_choice", lambda: w.circuit[1].to_dict())
    put("neurons_above_threshold", lambda: [{"neuron": n["neuron"], "max_contribution": n["max_contribution"]}
                                            for n in w.scan.neurons])
    put("neuron", lambda: {"neuron": ref.neuron, **w.neuron_tokens(ref.neuron)})
    put("survey_top5", lambda: [r.to_dict() for r in w.survey.rows[:5]])
    put("eigenvalues_top64", lambda: w.form.eigenvalues[:64].tolist())
    sweep = next(c for c in claims["claims"] if c["id"] == "steer_restores_self")["sweep"]
    put("steering_sweep", lambda: [{"alpha": a, "self_attention_before": w.steer(a).self_attention_before,
                                    "self_attention_after": w.steer(a).self_attention_after,
                                    "self_rank_after": w.steer(a).self_rank_after} for a in sweep])
    return d


def reproduce(model: Model, *, processing: Processing | None = None, reference: Reference | None = None,
              details: bool = True) -> ReproduceResult:
    """Measure every seed claim on `model` against `reference` (default: :func:`reference_for`)."""
    processing = Processing.default() if processing is None else processing
    claims = seed_claims()
    ref = reference_for(model) if reference is None else reference
    w = _Work(model, processing, ref.semantic_head)
    rows = []
    for c in claims["claims"]:
        base = dict(id=c["id"], seed=c["seed"], claim=c["claim"], measure=c["measure"])
        try:
            published, measured, tol, passed, note = CHECKS[c["id"]](c, ref, w)
            rows.append(ClaimRow(**base, published=published, measured=measured, tolerance=tol,
                                 passed=None if passed is None else bool(passed), note=note))
        except HeadscopeError as e:
            rows.append(ClaimRow(**base, published=c.get("published_text"), measured=None,
                                 tolerance=c["tolerance"], passed=False, note=f"not measured: {e}"))
    notes = []
    shape = {k: getattr(model.cfg, k) for k in GPT2_SMALL}
    if ref.name == SEED_REFERENCE and shape != GPT2_SMALL:
        diff = ", ".join(f"{k} {shape[k]} (GPT-2 Small {v})" for k, v in GPT2_SMALL.items() if shape[k] != v)
        notes.append(f"the published figures are GPT-2 Small's; this model differs: {diff}")
    if ref.name == PLANTED_REFERENCE:
        notes.append("planted checkpoint: the published column is its planted.json manifest")
    return ReproduceResult(rows=rows, source=model.source, fingerprint=model.fingerprint, reference=ref.name,
                           notes=notes, details=_details(w, claims, ref) if details else {})
