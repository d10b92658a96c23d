"""The claims of the two seed studies, measured on a checkpoint: one row per claim.

Every row holds the published figure, headscope's figure on the model, the tolerance
and pass / fail. The published column is one of two references:

* ``seed (GPT-2 Small)``: the figures of the seed studies (``data/seed_claims.json``);
  they refer to GPT-2 Small, so on another model a row compares that model with GPT-2
  Small (a note says so when the shapes differ);
* ``planted manifest``: for a checkpoint written by ``headscope plant``, the mechanisms
  its ``planted.json`` documents (contextual heads, keyword heads, kernel categories,
  contextual neurons, semantic head and categories, eigenvalue signs, symmetric W_QK).
  A claim the manifest does not plant (the TV of the key split, the steering gains)
  keeps the seed's threshold and says so.

Layer-0 rows do not rest on headscope's own head-choice thresholds: the downstream
rows (neuron count, neuron 704's lists and texts, circuit fidelity, worst denominators)
use the *published* heads (0, 2, 6, 8, 9, 10 for GPT-2 Small; the manifest's for a
planted model), or the set given by ``heads=`` (``--heads``: indices, ``seed``,
``code`` = 0, 2, 6, 8, 9, 10, 11 as Gibson's code, or ``auto``). The automatic choice
(:data:`headscope.contextual.SELECTION`) is its own row, ``contextual_heads_auto``.

Every row is also measured against a null (issue 32, :mod:`headscope.claims.null`): the same
statistic on seeded components of the model under test with the structure removed (null heads,
forms, readouts, sign-flipped windows, the model's other head sets). A row passes only when the
component passes AND clears the null by the margin of its ``null`` entry in seed_claims.json;
else "indistinguishable from random" (:func:`verdict`).

Each measurement reuses headscope's own analyses (query ' the', the shipped calibration
and sample texts, seeded category prompts). The survey's rank rows follow the L1H5
authors' prompt recipe (:data:`headscope.survey.PRESETS` ``seed``); the neuron rows use
the contribution variant ``paper`` (or ``variant=``) and the details give the neuron
count under every variant of :data:`NEURON_VARIANTS`. docs/fidelity.md compares every
definition with the authors' code. A claim that cannot be measured on the model (no
head 1.5, no neuron 704) is a failing row whose note gives the reason; it never stops
the other rows.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import json
import math
import statistics
from pathlib import Path

import torch

from . import shipped
from .semantic import bilinear
from ._errors import HeadscopeError, NotApplicable
from ._html_repr import HtmlRepr, render_text
from .layer0.calibration import MIN_SAMPLES, STRIDE, calibrate, check_samples
from .layer0.contextual import HEAD_SETS, build_circuit, circuit_fidelity
from .corpus import windows
from .layer0.denominators import denominator_stability
from .core.forward import run_with_cache
from .layer0.kernels import analyse_kernels
from .layer0.split import SEED_QUERY
from .core.model import Model
from .layer0.neurons import (AUTHORS_LN2, DEFAULT_THRESHOLD, ln2_divisor, parse_variant, rank_neurons, readout,
                      scan_neurons, token_values)
from .planted.build import MANIFEST, read_manifest
from .shipped import seed_claims
from .stats import hypergeometric_quantiles, robust_z, roc_auc, sign_flip_means, spearman
from .semantic.options import SteerOptions
from .semantic.steering import authors_steer, steer
from .semantic.survey import position_independence, position_independence_heads, survey
from .claims.null import NullComparison, compare, form_null, generator, negative_mass, null_head_models, readout_null

KERNEL_WINDOWS = 16          #: windows of the shipped texts for the TV claim (as the report)
TOP = 50                     #: token lists compared for neuron claims
SEED_REFERENCE = "seed (GPT-2 Small)"
PLANTED_REFERENCE = "planted manifest"
#: contribution variants whose neuron counts the details list (neurons.parse_variant specs)
NEURON_VARIANTS = ("paper", "scaled", "code", "pos=without", f"ln2={AUTHORS_LN2:g}", "max=abs", "glitch=exclude",
                   "position=500", "position=255")
FIDELITY_STRIDE = 8          #: every 8th query position of the sample texts for the circuit-fidelity row
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
    source: str = ""               # where the published figure comes from (seed_claims.json)
    rejects: str = ""              # the wrong convention the tolerance rejects (seed_claims.json)
    null: dict | None = None       # the statistic against its null (claims.null.NullComparison.to_dict)
    verdict: str = ""              # PASS, FAIL, "indistinguishable from random" or "no verdict"
    component: str = ""            # --find: the component the row used (claims.find) …
    why: str = ""                  # … and why it is that component

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        return d if self.component else {k: v for k, v in d.items() if k not in ("component", "why")}


RANDOM = "indistinguishable from random"


def verdict(passed: bool | None, null: NullComparison | None) -> tuple[bool | None, str]:
    """(passed, verdict) of a row: PASS only when the component passes AND clears its null."""
    if passed is None:
        return None, "no verdict"
    if not passed:
        return False, "FAIL"
    if null is not None and not null.clears:
        return False, RANDOM
    return True, "PASS"


@dataclasses.dataclass
class ReproduceResult(HtmlRepr):
    rows: list[ClaimRow]
    source: str
    fingerprint: str
    reference: str
    notes: list[str]
    details: dict
    components: list | None = None  # --find: every component located (claims.find.Found.to_dict)

    @property
    def ok(self) -> bool:
        """Every row that has a verdict passes."""
        return all(r.passed is not False for r in self.rows)

    def to_dict(self) -> dict:
        return {"source": self.source, "fingerprint": self.fingerprint, "reference": self.reference,
                "ok": self.ok, "n_pass": sum(r.passed is True for r in self.rows),
                "n_fail": sum(r.passed is False for r in self.rows),
                "rows": [r.to_dict() for r in self.rows], "notes": self.notes, "details": self.details,
                **({} if self.components is None else {"components": self.components})}

    def render(self) -> str:
        """The claims table as text (headscope.report.views.reproduce.text)."""
        return render_text(self)


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
    worst_heads: list[int] = dataclasses.field(default_factory=list)   # least stable denominators
    survey_categories: object = "seed"           # categories of the survey's rank rows ("seed" or a dict)
    found: object = None                         # --find: the claims.find.Found the components come from

    @property
    def planted(self) -> bool:
        return self.name == PLANTED_REFERENCE


def seed_reference(claims: dict) -> Reference:
    by = {c["id"]: c for c in claims["claims"]}
    return Reference(
        name=SEED_REFERENCE, contextual_heads=by["contextual_heads"]["published"], categories=None,
        n_neurons=None, neuron_indices=None, neuron=by["neuron_704_top"]["neuron"], neuron_label="704",
        top_tokens=by["neuron_704_top"]["published"], bottom_tokens=by["neuron_704_bottom"]["published"],
        semantic_head=(1, 5), n_negative_top64=by["negative_eigenvalues"]["published"],
        sigma=tuple(by["sym_vs_skew"]["published"]), planted_sigma_sym=None,
        worst_heads=by["denominator_worst_heads"]["published"], survey_categories="seed")


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
            planted_sigma_sym=max(abs(float(form["negative_eigenvalue"])), abs(float(form["positive_eigenvalue"]))),
            worst_heads=sorted(int(h) for h in l0["keyword_heads"]),
            survey_categories={k: list(v["tokens"]) for k, v in l1["categories"].items()})
    except (KeyError, TypeError, ValueError, IndexError, StopIteration) as e:
        raise HeadscopeError(f"planted.json: malformed manifest ({type(e).__name__}: {e})") from None


def reference_for(model: Model) -> Reference:
    if model.directory is not None and (Path(model.directory) / MANIFEST).is_file():   # None: a model in memory
        return planted_reference(read_manifest(model.directory))
    return seed_reference(seed_claims())


# -- the measurements, computed once and shared by the rows ---------------------------------------


def resolve_heads(spec, ref: Reference, n_heads: int) -> list[int] | None:
    """The head set of ``heads=``: "published" (default), "auto" (None: automatic), "seed",
    "code", a comma-separated string or a list of indices."""
    if spec is None or spec == "published":
        return list(ref.contextual_heads)
    if spec == "auto":
        return None
    if isinstance(spec, str) and spec in HEAD_SETS:
        return list(HEAD_SETS[spec])
    if isinstance(spec, str):
        try:
            spec = [int(x) for x in spec.split(",") if x.strip()]
        except ValueError:
            raise HeadscopeError(f"--heads: expected published, auto, seed, code or indices such as 0,2,6, "
                                 f"got {spec!r}") from None
    heads = sorted({int(h) for h in spec})
    if not heads or any(not 0 <= h < n_heads for h in heads):
        raise HeadscopeError(f"--heads: expected layer-0 head indices in 0..{n_heads - 1}, got {spec!r}")
    return heads


def held_out_text() -> str:
    """The shipped sample texts and sample_corpus.txt joined: text the calibration never saw."""
    return "\n\n".join([t.text for t in shipped.samples()] + [shipped.sample_corpus()[0][1]])


class _Work:
    def __init__(self, model: Model, ref: Reference, heads=None, variant=None):
        self.model, self.ref = model, ref
        self.head = ref.semantic_head
        self.heads_spec = "published" if heads is None else heads
        self.variant = parse_variant(variant)
        self.__dict__.update(getattr(ref.found, "shared", None) or {})     # --find's measurements, reused

    def _check_head(self) -> tuple[int, int]:
        return self.model.cfg.check_head(*self.head)

    @functools.cached_property
    def kernels(self):
        texts = [(t.name, t.text) for t in [shipped.calibration_text(), *shipped.samples()]]
        wins = windows(self.model, texts, max_windows=KERNEL_WINDOWS)
        return analyse_kernels(self.model, layer=0, query=SEED_QUERY, c="measured", windows=wins)

    @functools.cached_property
    def split_tv(self) -> dict:
        """Median TV(true, approx) per head over positions n ≥ 1 of the kernel windows, for the
        seed's split, for the crude split √(|W_pos[i]|² + c²) (row key_split_vs_crude) and for the
        split with its content term removed (the positional kernel alone: row tv_contextual's null);
        ``*_w``: the same medians per window ([window][head])."""
        from . import layer0

        w = layer0.view(self.model)
        c = self.kernels.c
        texts = [(t.name, t.text) for t in [shipped.calibration_text(), *shipped.samples()]]
        seed, crude, kernel = [], [], []
        for tokens in windows(self.model, texts, max_windows=KERNEL_WINDOWS):
            true = layer0.true_pattern(w, tokens)
            seed.append(layer0.tv_distance(true, layer0.approx_pattern(w, tokens, c))[:, 1:])      # [h p-1]
            crude.append(layer0.tv_distance(true, layer0.crude_pattern(w, tokens, c))[:, 1:])
            kernel.append(layer0.tv_distance(true, layer0.text_positional_kernels(w, tokens, c))[:, 1:])
            del true
        med = lambda xs: torch.cat(xs, dim=1).double().median(dim=1).values.tolist()   # noqa: E731
        per = lambda xs: [x.double().median(dim=1).values.tolist() for x in xs]         # noqa: E731
        return {"seed": med(seed), "crude": med(crude), "kernel": med(kernel), "c": c, "n_windows": len(seed),
                "seed_w": per(seed), "crude_w": per(crude), "kernel_w": per(kernel)}

    @functools.cached_property
    def calibration(self):
        return calibrate(self.model, shipped.calibration_text().text, query=SEED_QUERY)

    @functools.cached_property
    def heads(self) -> list[int] | None:
        return resolve_heads(self.heads_spec, self.ref, self.model.cfg.n_heads)

    @functools.cached_property
    def circuit(self):
        """(circuit, choice) over the heads the downstream rows use (the published ones by default),
        at the last calibrated position; NotApplicable when the calibration text gives fewer than
        calibration.MIN_SAMPLES samples of the denominators there."""
        circuit, choice = build_circuit(self.model, self.calibration, heads=self.heads)
        check_samples(self.calibration, choice.position)
        return circuit, choice

    @functools.cached_property
    def auto_choice(self):
        return build_circuit(self.model, self.calibration, heads=None)[1]

    @functools.cached_property
    def scan(self):
        circuit, choice = self.circuit
        bar = getattr(self.ref.found, "neuron_threshold", None)            # --find: the model's own bar
        return scan_neurons(circuit, choice, self.model.tokenizer, threshold=DEFAULT_THRESHOLD if bar is None else bar,
                            top=TOP,
                            variant=self.variant if self.variant.name != "paper" else None)

    def neuron_tokens(self, j: int) -> dict:
        """Top and bottom `TOP` tokens of neuron j through the circuit (decoded strings)."""
        self.model.cfg.check_neuron(j)
        hit = next((n for n in self.scan.neurons if n["neuron"] == j), None)
        if hit is not None:                                                         # the scan has its lists
            return {"top": hit["top_tokens"], "bottom": hit["bottom_tokens"],
                    "max_contribution": hit["max_contribution"], "min_contribution": hit["min_contribution"]}
        circuit, choice = self.circuit                                              # below threshold: score it
        v = self.variant
        n = choice.position if v.position is None else v.position
        score = token_values(circuit, n, position_part=v.position_part) @ \
            readout(circuit, ln2_scale=ln2_divisor(circuit, v))[:, j]               # [V he] @ [he] → [V]
        k = min(TOP, score.numel())
        top, bottom = score.topk(k), score.topk(k, largest=False)
        dec = self.model.to_str_tokens
        return {"top": dec(top.indices.tolist()), "bottom": dec(bottom.indices.tolist()),
                "max_contribution": float(top.values[0]), "min_contribution": float(bottom.values[0])}

    @functools.cached_property
    def survey(self):
        """headscope's survey (64 prompts × 16 words): the rate rows."""
        return survey(self.model, n_prompts=64, length=16, seed=0)

    @functools.cached_property
    def seed_survey(self):
        """The authors' prompt recipe (one prompt of 255 words): the rank rows."""
        return survey(self.model, seed=0, preset="seed",
                      categories=self.ref.survey_categories)

    def survey_row(self, res=None):
        l, h = self._check_head()
        res = self.survey if res is None else res
        return next(r for r in res.rows if (r.layer, r.head) == (l, h))

    @functools.cached_property
    def position(self):
        l, h = self._check_head()
        return position_independence(self.model, l, h)

    @functools.cached_property
    def form(self):
        l, h = self._check_head()
        W = self.model.weights()
        return bilinear.bilinear_form(bilinear.qk_matrix(W, l, h), l, h)

    @functools.cached_property
    def semantic_null(self) -> list[Model]:
        """Models whose semantic-head layer holds null draws of the semantic head in every head slot
        (claims.null.null_head_models: HEAD_DRAWS draws in ⌈HEAD_DRAWS / n_heads⌉ models)."""
        l, h = self._check_head()
        return null_head_models(self.model, l, h, "semantic_head")

    @functools.cached_property
    def position_null(self) -> list[float]:
        """identity_fraction of the semantic head's null draws (one pass per null model and order)."""
        l, _ = self._check_head()
        draws = []
        for m in self.semantic_null:
            draws += [r.identity_fraction for r in position_independence_heads(m, [(l, k) for k in range(m.cfg.n_heads)])]
        return [d for d in draws if d is not None]

    @functools.cached_property
    def survey_null(self) -> list:
        """The survey's rows (headscope's 64 prompts × 16 words, as :attr:`survey`) of the null draws."""
        l, _ = self._check_head()
        return [r for m in self.semantic_null for r in survey(m, [l], n_prompts=64, length=16, seed=0).rows]

    @functools.cached_property
    def seed_survey_null(self) -> list:
        """The authors' survey recipe (as :attr:`seed_survey`) on the null draws."""
        l, _ = self._check_head()
        return [r for m in self.semantic_null
                for r in survey(m, [l], seed=0, preset="seed", categories=self.ref.survey_categories).rows]

    @functools.cached_property
    def negative_null(self) -> dict:
        """Top-64 negative count and negative eigen-mass of WEIGHT_DRAWS null forms of the semantic
        head (claims.null.form_null)."""
        l, h = self._check_head()
        W = self.model.weights()
        U, V = bilinear.qk_factors(W, l, h)
        return form_null(U, V, "negative_eigenvalues", centred=W.reads_centred)

    def text_readout_null(self, j: int, texts: list[str]) -> tuple[float, list[float]]:
        """(difference of neuron j's mean true pre-activation between texts[0] and texts[1] over
        positions ≥ 1, the same difference for random readouts of W_in[:, j]'s norm: claims.null.readout_null)."""
        self.model.cfg.check_neuron(j)
        circuit, _ = self.circuit
        Wc = circuit.weights
        xs = []
        for text in texts:
            tokens = windows(self.model, [text], n_ctx=circuit.calibration.n_positions)[0]
            cache = run_with_cache(Wc, tokens[None], names=["blocks.0.ln2.hook_normalized"], stop_at_layer=1)
            xs.append(cache["blocks.0.ln2.hook_normalized"][0, 1:].double().mean(0))     # [d]
        return readout_null(xs[0] - xs[1], Wc.blocks[0].W_in[:, j], f"readout:{j}", centred=Wc.reads_centred)

    @functools.lru_cache(maxsize=None)
    def steer(self, alpha: float):
        l, h = self._check_head()
        return steer(self.model, l, h, alpha, SteerOptions(select="negative")).result

    @functools.cached_property
    def authors_steer(self):
        l, h = self._check_head()
        return authors_steer(self.model, l, h)

    @functools.cached_property
    def denominators(self):
        """S_h[n] over full-length windows (n up to n_ctx − 1, as the seed's traces run): windows of
        the calibration text and of the held-out texts joined, starting every calibration.STRIDE tokens."""
        texts = [shipped.calibration_text().text, held_out_text()]
        win = self.model.cfg.n_ctx
        wins = windows(self.model, texts, n_ctx=win, stride=min(STRIDE, win - 1))
        return denominator_stability(self.model, wins, window=win, n_min=min(16, win - 2), stride=max(1, win // 8))

    @functools.cached_property
    def fidelity(self):
        """Circuit fidelity on one held-out window: the shipped sample texts and sample_corpus.txt
        joined (none is the calibration text), every FIDELITY_STRIDE-th position and the last."""
        circuit, _ = self.circuit
        tokens = windows(self.model, [held_out_text()], n_ctx=circuit.calibration.n_positions)[0]
        p = len(tokens)
        positions = sorted(set(range(FIDELITY_STRIDE, p, FIDELITY_STRIDE)) | {p - 1})
        return circuit_fidelity(circuit, [tokens], positions=positions)

    @functools.lru_cache(maxsize=None)
    def neuron_scores(self, j: int) -> torch.Tensor:
        """score[t, j] of every token t through the circuit ([d_vocab]; variant and position of the scan)."""
        from .layer0.neurons import ln2_divisor, readout, token_values

        self.model.cfg.check_neuron(j)
        circuit, choice = self.circuit
        v = self.variant
        n = choice.position if v.position is None else v.position
        return token_values(circuit, n, torch.float64, position_part=v.position_part) @ \
            readout(circuit, torch.float64, ln2_scale=ln2_divisor(circuit, v))[:, j]       # [V]

    @functools.cached_property
    def vocab_index(self) -> dict[str, int]:
        """Decoded token string → its first id (every id decoded on its own, as to_str_tokens)."""
        out: dict[str, int] = {}
        from .core.tokenizer import n_tokens

        for i, t in enumerate(self.model.to_str_tokens(list(range(n_tokens(self.model.tokenizer, self.model.cfg.d_vocab))))):
            out.setdefault(t, i)
        return out

    def token_ids(self, tokens: list[str]) -> tuple[list[int], list[str]]:
        """(ids of the token strings that are one token here, the strings that are not)."""
        idx = self.vocab_index
        return [idx[t] for t in tokens if t in idx], [t for t in tokens if t not in idx]

    @functools.cached_property
    def topic_labels(self) -> list:
        """topics.label_neuron for every neuron of the scan (its top and bottom TOP tokens)."""
        from .layer0.topics import label_neuron

        return [label_neuron(n["neuron"], n["top_tokens"], n["bottom_tokens"]) for n in self.scan.neurons]

    def true_activation(self, j: int, text: str) -> tuple[float, float, int]:
        """(mean true pre-activation of neuron j over positions ≥ 1, mean circuit prediction over
        every FIDELITY_STRIDE-th position, tokens)."""
        from .layer0.neurons import readout_vectors

        self.model.cfg.check_neuron(j)
        circuit, _ = self.circuit
        tokens = windows(self.model, [text], n_ctx=circuit.calibration.n_positions)[0]
        cache = run_with_cache(circuit.weights, tokens[None], names=["blocks.0.mlp.hook_pre"], stop_at_layer=1)
        true = cache["blocks.0.mlp.hook_pre"][0, 1:, j]
        pos = list(range(1, len(tokens), FIDELITY_STRIDE))
        pred = circuit.predict(tokens, pos) @ readout_vectors(circuit, [j])[:, 0] + circuit.weights.blocks[0].b_in[j]
        return float(true.mean()), float(pred.mean()), len(tokens) - 1


# -- one function per claim: (published, measured, tolerance, passed, note) ------------------------

def _tv_null(c, w, heads, med):
    """The split against the same split with its content term removed (the positional kernel
    alone), per window and head: the split must be closer by the stated margin, else its
    closeness says nothing about content (a head whose scores ignore content)."""
    d = w.split_tv
    draws = [row[h] for row in d["kernel_w"] for h in heads]
    return compare(med, draws, statistic="median TV of the seed's split", direction="below",
                   null="TV of the positional kernel alone (content term removed), per window and head",
                   **_margin(c["null"]), null_passes=_share_of(draws, lambda x: c["min"] <= x <= c["max"]))


def _tv(c, ref, w):
    rep = w.kernels
    heads = [h for h in ref.contextual_heads if h < len(rep.heads)]
    if not heads:
        raise HeadscopeError(f"no contextual head {ref.contextual_heads} exists in layer 0")
    med = statistics.median(rep.heads[h].tv_median for h in heads)
    null = _tv_null(c, w, heads, med)
    crude = statistics.median(w.split_tv["crude"][h] for h in heads)
    extra = f"crude split {crude:.4f}, content term removed {null.median:.4f} (median over the windows)"
    if ref.planted:
        lo = c["planted_min"]
        return c["published"], round(med, 6), f"{lo:g}–{c['max']:g}", lo <= med <= c["max"], \
            f"not planted: the seed's upper threshold; below {lo:g} the split would be exact (a degenerate comparison); " \
            + extra, null
    return c["published"], round(med, 6), c["tolerance"], c["min"] <= med <= c["max"], extra, null


def _margin(spec: dict) -> dict:
    """The margin of a claim's ``null`` entry in seed_claims.json."""
    return {"margin": float(spec["margin"]), "margin_kind": spec.get("margin_kind", "diff")}


def _share_of(draws, ok) -> float | None:
    """The share of the null draws that pass the row's own tolerance."""
    draws = list(draws)
    return round(sum(bool(ok(x)) for x in draws) / len(draws), 4) if draws else None


def _categories(c, ref, w):
    """Exactly the seed's three categories occur (another, e.g. ``increasing``, is a finding and
    fails); every head in its category: the manifest's on a planted model, and on GPT-2 the
    published contextual heads (\"very similar\" kernels) in one category that is not local."""
    rep = w.kernels
    got = {hk.head: hk.category for hk in rep.heads}
    three = list(c["published"])
    have = {cat: sorted(h for h, v in got.items() if v == cat) for cat in sorted(set(got.values()), key=str)}
    extra = sorted(set(have) - set(three))
    missing = [cat for cat in three if cat not in have]
    figures = "; ".join(f"{hk.head}: {hk.category} (width {hk.width:.1f}, κ_n "
                        f"{', '.join(f'{k:.3g}' for k in (hk.shape_decay_rate or []))})" for hk in rep.heads)
    problems = [f"categories {extra} beyond the seed's three" if extra else "",
                f"no {missing} head" if missing else ""]
    if ref.categories is None:
        ctx = [h for h in ref.contextual_heads if h in got]
        ctx_cats = sorted({got[h] for h in ctx})
        same = len(ctx_cats) == 1 and ctx_cats[0] != "local"
        problems.append("" if same else f"contextual heads {ctx} fall in {ctx_cats}")
        ok = not extra and not missing and same
        note = "; ".join(p for p in problems if p) or f"contextual heads all {ctx_cats[0]}"
        return c["published_text"], _fmt_groups(have), c["tolerance"], ok, f"{note}; per head: {figures}"
    want = {cat: sorted(h for h, v in ref.categories.items() if v == cat) for cat in three}
    wrong = sorted(h for h in got if got[h] != ref.categories.get(h))
    problems.append(f"heads {wrong} differ from the manifest" if wrong else "")
    note = "; ".join(p for p in problems if p)
    return _fmt_groups(want), _fmt_groups(have), "every head's category as planted, exactly three categories", \
        not wrong and not extra and not missing, (note + "; " if note else "") + f"per head: {figures}"


def _fmt_groups(groups: dict) -> str:
    return "; ".join(f"{k} {v}" for k, v in groups.items())


def subset_spreads(pos: torch.Tensor, k: int, key: str, exclude: tuple = (), n_max: int = 1000) -> list[float]:
    """For k-subsets S of the heads other than `exclude` (every one when there are ≤ n_max, else
    n_max seeded ones): max_{h ∈ S} TV(kernel_h, mean kernel of S). pos [H n]: the heads' kernels."""
    H = pos.shape[0]
    if math.comb(H, k) <= n_max:
        subsets = list(itertools.combinations(range(H), k))
    else:
        g = generator(key)
        subsets = [tuple(sorted(torch.randperm(H, generator=g)[:k].tolist())) for _ in range(n_max)]
    subsets = [S for S in subsets if S != exclude]
    if not subsets:
        return []
    P = pos.double()[torch.tensor(subsets)]                                      # [S k n]
    return (0.5 * (P - P.mean(1, keepdim=True)).abs().sum(-1)).amax(-1).tolist()


def _contextual(c, ref, w):
    """The sentence claims the published heads' kernels are very similar: the largest TV of a
    member's kernel to the members' mean kernel, against the same spread of every other set of as
    many heads of this model (the null: sets drawn from the model's own heads) by the stated margin.
    Exclusivity (every other head 2× farther) is reported apart: the sentence does not claim it."""
    circuit, choice = w.circuit
    H = w.model.cfg.n_heads
    S = [h for h in ref.contextual_heads]
    if not S or any(not 0 <= h < H for h in S):
        raise HeadscopeError(f"published heads {S}: expected indices in 0..{H - 1}")
    pos = circuit.frame(choice.position).pos.double()                            # [H n+1]
    mean = pos[S].mean(0)
    tv = 0.5 * (pos - mean).abs().sum(-1)                                        # [H]
    inside = max(float(tv[h]) for h in S)
    others = [h for h in range(H) if h not in S]
    draws = subset_spreads(pos, len(S), "contextual_heads", exclude=tuple(sorted(S)))
    null = None if not draws else compare(inside, draws, statistic="largest member TV to the members' mean kernel",
                   direction="below", null=f"every other set of {len(S)} of the {H} layer-0 heads", **_margin(c["null"]))
    note = f"kernel TV to the published mean at n = {choice.position}: members ≤ {inside:.4f}"
    if others:
        near = min(others, key=lambda h: float(tv[h]))
        note += (f"; exclusivity (not claimed): nearest other head {near} at {float(tv[near]):.4f}, "
                 f"{float(tv[near]) / inside if inside > 0 else math.inf:.3g}× the members'")
    return ref.contextual_heads, ref.contextual_heads, c["tolerance"], inside <= c["max_tv"], note, null


def _contextual_auto(c, ref, w):
    choice = w.auto_choice
    return ref.contextual_heads, list(choice.heads), c["tolerance"], sorted(choice.heads) == sorted(ref.contextual_heads), \
        f"automatic choice ({choice.reason})"


def _worst_heads(c, ref, w):
    d = w.denominators
    used = w.circuit[1].heads
    spread = {h: d.median_rel_spread[h] for h in used}
    k = len(ref.worst_heads)
    worst = sorted(sorted(used, key=lambda h: -spread[h])[:k])
    note = "relative spread " + ", ".join(f"{h}: {spread[h]:.3f}" for h in sorted(used)) + \
        f" over {d.n_texts} windows of {d.window} tokens (n {d.n_min}–{d.window - 1})"
    if ref.planted:
        note += "; planted: the keyword-density heads"
    return ref.worst_heads, worst, c["tolerance"], worst == sorted(ref.worst_heads), note


def _denominator_vs_local(c, ref, w):
    """The worst contextual head's denominator spread below the best local head's (same windows)."""
    d = w.denominators
    used = w.circuit[1].heads
    local = [hk.head for hk in w.kernels.heads if hk.category == "local" and hk.head not in used]
    if not local:
        raise NotApplicable("no layer-0 head has a local kernel to compare with")
    worst = max(used, key=lambda h: d.median_rel_spread[h])
    best = min(local, key=lambda h: d.median_rel_spread[h])
    a, b = d.median_rel_spread[worst], d.median_rel_spread[best]
    note = (f"worst contextual head {worst}: {a:.3f}; local heads " +
            ", ".join(f"{h}: {d.median_rel_spread[h]:.3f}" for h in local) +
            f"; over {d.n_texts} windows of {d.window} tokens")
    measured = f"{a:.3f} vs {b:.3f} (ratio {b / a:.2f})" if a > 0 else f"0 vs {b:.3f}"
    if ref.planted:
        return c["published_text"], measured, c["tolerance"], None, note + \
            "; no verdict: the planted local heads read content only through small random W_Q, W_K (no keyword boost)"
    return c["published_text"], measured, c["tolerance"], a * c["min_ratio"] <= b, note


def _key_split_vs_crude(c, ref, w):
    """The seed's split (add and subtract W_pos[n]) beats the crude split on every contextual head,
    and "significantly": the relative improvement (crude − seed)/crude, averaged over the heads and
    windows, clears its paired sign-flip null (per window) by the stated margin."""
    d = w.split_tv
    heads = w.circuit[1].heads
    better = [h for h in heads if d["seed"][h] < d["crude"][h]]
    rel = torch.tensor([[(cw[h] - sw[h]) / cw[h] if cw[h] > 0 else 0.0 for h in heads]
                        for sw, cw in zip(d["seed_w"], d["crude_w"])], dtype=torch.float64).mean(1)     # [window]
    null = compare(float(rel.mean()), sign_flip_means(rel).tolist(), statistic="relative improvement over the crude split",
                   direction="above", null="the windows' paired differences with random signs", **_margin(c["null"]))
    note = "median TV seed / crude: " + ", ".join(f"{h}: {d['seed'][h]:.4f} / {d['crude'][h]:.4f}" for h in heads) + \
        f" (c = {d['c']:.3g}, {d['n_windows']} windows); relative improvement {float(rel.mean()):.2%}"
    measured = f"{len(better)}/{len(heads)} heads better; median {statistics.median(d['seed'][h] for h in heads):.4f} " \
        f"vs {statistics.median(d['crude'][h] for h in heads):.4f}"
    if ref.planted:
        return c["published_text"], measured, c["tolerance"], None, note + \
            "; no verdict: planted token norms are all ≈ c and W_E ⟂ W_pos, so the crude split is as exact as the seed's", \
            null
    return c["published_text"], measured, c["tolerance"], len(better) == len(heads), note, null


def _naive_bayes(c, ref, w):
    """Classify labelled texts by the sum of the neuron's token contributions over their tokens:
    top and bottom tokens together, top tokens only, and the neuron's true mean activation."""
    k = c["k"]
    score = w.neuron_scores(ref.neuron)
    top = set(score.topk(k).indices.tolist())
    bottom = set(score.topk(k, largest=False).indices.tolist())
    rows = []
    for label, text in shipped.spelling_texts():
        ids = w.model.tokenizer.encode(text)
        both = sum(float(score[t]) for t in ids if t in top or t in bottom)
        only_top = sum(float(score[t]) for t in ids if t in top)
        only_bottom = sum(float(score[t]) for t in ids if t in bottom)
        true = w.true_activation(ref.neuron, text)[0]
        rows.append((label == "commonwealth", both, only_top, only_bottom, true))
    y = [r[0] for r in rows]
    auc = [roc_auc([r[i] for r in rows], y) for i in (1, 2, 3, 4)]
    acc = sum((r[1] > 0) == r[0] for r in rows) / len(rows)
    measured = (f"AUC {auc[0]:.3f} (top+bottom), {auc[1]:.3f} (top only), {auc[2]:.3f} (bottom only), "
                f"{auc[3]:.3f} (true activation); accuracy {acc:.2f}")
    note = (f"neuron {ref.neuron_label}; {len(rows)} shipped texts (data/spelling_texts.json, written for headscope), "
            f"{k} top and {k} bottom tokens of the scan; accuracy of 'Commonwealth if the sum > 0'")
    ok = auc[0] >= c["min_auc"] and acc >= c["min_accuracy"] and auc[2] >= c["min_auc"]
    return c["published_text"], measured, c["tolerance"], ok, note


#: a topic label → the shipped sample text of that topic (row neuron_transfer)
LABEL_TEXTS = {"sport": "sports_report", "cooking": "cooking", "language:fr": "french",
               "commonwealth_spelling": "british_news", "american_spelling": "american_news"}


def _neuron_topics(c, ref, w):
    labels = w.topic_labels
    if not labels:
        raise NotApplicable("no contextual neuron above the threshold to label")
    share = sum(x.labelled for x in labels) / len(labels)
    shown = "; ".join(f"{x.neuron}: {'/'.join(x.top) or '—'} vs {'/'.join(x.bottom) or '—'}" for x in labels[:12])
    note = f"{len(labels)} neurons (top vs bottom labels): {shown}" + ("; …" if len(labels) > 12 else "")
    if ref.planted:
        note += "; planted: the lexicons and the planted token sets share topic words by construction"
    return c["published_text"], round(share, 4), c["tolerance"], share >= c["min_share"], note


def _neuron_transfer(c, ref, w):
    """Neurons labelled with a topic that has a shipped sample text: true mean activation on that
    text above (top label) or below (bottom label) the mean over the other sample texts."""
    by = {t.name: t.text for t in shipped.samples()}
    tests = []
    for x in w.topic_labels:
        for side, sign in (("top", 1.0), ("bottom", -1.0)):
            for label in getattr(x, side):
                if LABEL_TEXTS.get(label) in by:
                    tests.append((x.neuron, label, LABEL_TEXTS[label], sign))
    if not tests:
        raise NotApplicable("no contextual neuron has a label with a shipped sample text (sport, cooking, "
                            "French, Commonwealth or American spelling)")
    results = []
    for j, label, name, sign in tests:
        act = {n: w.true_activation(j, t)[0] for n, t in by.items()}
        others = statistics.mean(v for n, v in act.items() if n != name)
        results.append((j, label, act[name], others, sign * (act[name] - others) > 0))
    share = sum(r[4] for r in results) / len(results)
    note = "; ".join(f"{j} ({label}): {a:.3f} vs {o:.3f}" for j, label, a, o, _ in results[:10]) + \
        " (true mean activation on the topic's sample vs the other samples; calibrated on calibration.txt)"
    return c["published_text"], f"{sum(r[4] for r in results)}/{len(results)}", c["tolerance"], \
        share >= c["min_share"], note


def pair_prompts(c, model) -> list[tuple[str, list[int], list[int], list[int]]]:
    """The seed's named examples as prompts (query, sequence, partner ids, filler ids): BOS, filler,
    partner, filler, partner, … , query."""
    fillers = c["fillers"]
    out = []
    for ex in c["examples"]:
        words = [ex["query"], *ex["targets"], *fillers]
        ids = [model.tokenizer.encode(x) for x in words]
        bad = [x for x, i in zip(words, ids) if len(i) != 1]
        if bad:
            raise NotApplicable(f"{bad[0]!r} is not one token in this model's vocabulary")
        q, targets, fill = ids[0][0], [i[0] for i in ids[1:1 + len(ex["targets"])]], [i[0] for i in ids[-len(fillers):]]
        seq = [model.bos_id]
        for k in range(max(len(targets), len(fill))):                       # filler, target, filler, target, …
            seq += fill[k:k + 1] + targets[k:k + 1]
        seq.append(q)
        out.append((ex["query"], seq, targets, fill))
    return out


def pair_attention(model, layer: int, prompts) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """Per prompt: (partner share [H], min partner − max filler attention [H], self attention [H])
    of every head of `layer`, from the query (the last position)."""
    W = model.weights()
    out = []
    for _, seq, targets, fill in prompts:
        cache = run_with_cache(W, torch.tensor([seq]), names=[f"blocks.{layer}.attn.hook_pattern"],
                               stop_at_layer=layer + 1)
        att = cache[f"blocks.{layer}.attn.hook_pattern"][0, :, -1].double()       # [H k] from the query
        t = torch.tensor([i for i, x in enumerate(seq) if x in targets])
        f = torch.tensor([i for i, x in enumerate(seq) if x in fill])
        out.append((att[:, t].sum(-1), att[:, t].amin(-1) - att[:, f].amax(-1), att[:, -1]))
    return out


def _semantic_pairs(c, ref, w):
    """The seed's named examples as prompts: fillers and the example's category partners, then the
    query word; the semantic head's attention from the query on the partners. Null: the same
    prompts through null draws of the head; the statistic is the smallest partner share."""
    l, h = w._check_head()
    prompts = pair_prompts(c, w.model)
    res = pair_attention(w.model, l, prompts)
    results = [(q, float(share[h]), float(self_[h]), float(share[h]) >= c["min_share"] and float(gap[h]) > 0)
               for (q, *_), (share, gap, self_) in zip(prompts, res)]
    draws = []
    for m in w.semantic_null:
        draws += torch.stack([share for share, _, _ in pair_attention(m, l, prompts)]).amin(0).tolist()
    worst = min(s for _, s, _, _ in results)
    null = None if not draws else compare(worst, draws, statistic="smallest partner share over the examples", direction="above",
                   null="null heads of the semantic head (Gaussian W_Q, W_K, W_V, W_O of its norms)",
                   **_margin(c["null"]), null_passes=_share_of(draws, lambda x: x >= c["min_share"]))
    measured = "; ".join(f"{q.strip()}: {s:.3f}" for q, s, _, _ in results)
    note = "attention share on the partners from the query (" + ", ".join(
        f"{q.strip()} → {'/'.join(t.strip() for t in ex['targets'])}" for (q, *_), ex in zip(results, c["examples"])) + \
        f"); self {', '.join(f'{s:.3f}' for _, _, s, _ in results)}; fillers {', '.join(x.strip() for x in c['fillers'])}"
    return c["published_text"], measured, c["tolerance"], all(r[3] for r in results), note, null


def rules_by_category(pattern: torch.Tensor, prompts) -> dict[str, dict]:
    """Per category of `prompts`: same-category attention (queries with a partner), self and copy
    attention, BOS attention (queries without a partner); pattern [b q k] of one head."""
    from .semantic.survey import target_masks

    A = pattern.double()
    m = target_masks(prompts.tokens, prompts.labels, prompts.related)
    q = slice(1, None)
    lab = prompts.labels[:, q]
    part = (A[:, q] * m["partner"][:, q]).sum(-1)                                 # [b q]
    copy = (A[:, q] * m["copy"][:, q]).sum(-1)
    diag = torch.diagonal(A, dim1=-2, dim2=-1)[:, q]
    bos = A[:, q, 0]
    has_p, has_c = m["has_partner"][:, q], m["copy"].any(-1)[:, q]
    mean = lambda x, sel: float(x[sel].mean()) if bool(sel.any()) else None     # noqa: E731
    out = {}
    for c, name in enumerate(prompts.names):
        mine = lab == c
        out[name] = {"same_category": mean(part, mine & has_p), "self": mean(diag, mine),
                     "copy": mean(copy, mine & has_c), "bos_fallback": mean(bos, mine & ~has_p),
                     "n_queries": int(mine.sum())}
    return out


def _three_rules(c, ref, w):
    """The three rules per category of the seed's list (data/categories_rules.json)."""
    from .semantic.prompts import prompts_for

    l, h = w._check_head()
    data = {k: v for k, v in json.loads(shipped.read("categories_rules.json")).items() if not k.startswith("_")}
    prompts, _ = prompts_for(w.model, data, n_prompts=c["n_prompts"], length=c["length"], seed=0,
                             cats_per_prompt=c["cats_per_prompt"])
    W = w.model.weights()
    cache = run_with_cache(W, prompts.tokens, names=[f"blocks.{l}.attn.hook_pattern"], stop_at_layer=l + 1)
    per = rules_by_category(cache[f"blocks.{l}.attn.hook_pattern"][:, h], prompts)
    planted = set(ref.survey_categories) if isinstance(ref.survey_categories, dict) else None
    verdicts, skipped = {}, []
    for name, r in per.items():
        if planted is not None and name not in planted:
            skipped.append(name)
            continue
        if r["same_category"] is None or r["bos_fallback"] is None:
            skipped.append(name)
            continue
        verdicts[name] = (r["same_category"] >= c["min_same"] and r["self"] <= c["max_self"]
                          and (r["copy"] is None or r["copy"] <= c["max_self"]) and r["bos_fallback"] >= c["min_bos"])
    if not verdicts:
        raise NotApplicable("no category of the seed's list has both queries with and without a partner here")
    fmt = lambda v: "—" if v is None else f"{v:.2f}"                               # noqa: E731
    measured = "; ".join(f"{n}: {'PASS' if ok else 'FAIL'}" for n, ok in verdicts.items())
    note = "same / self / copy / BOS per category: " + "; ".join(
        f"{n} {fmt(r['same_category'])}/{fmt(r['self'])}/{fmt(r['copy'])}/{fmt(r['bos_fallback'])}"
        for n, r in per.items())
    if skipped:
        note += f"; no verdict for {skipped}" + (" (not planted categories)" if planted is not None else
                                                  " (no query with or without a partner)")
    return c["published_text"], measured, c["tolerance"], all(verdicts.values()), note


def _share(c, ref, w, values: dict, ok_value, what: str, planted_note: str = ""):
    """A share of heads meeting a per-head criterion, against the claim's minimum share."""
    good = sorted(h for h, v in values.items() if ok_value(v))
    share = len(good) / len(values)
    note = f"{what}: " + ", ".join(f"{h}: {v:.3g}" for h, v in sorted(values.items())) + f"; meeting it: {good}"
    return c["published_text"], round(share, 4), c["tolerance"], share >= c["min_share"], note + planted_note


def _translation(c, ref, w):
    vals = {hk.head: hk.translation_tv for hk in w.kernels.heads}
    return _share(c, ref, w, vals, lambda v: v <= c["max_tv"], "max TV between a head's kernels at n = 32, 64, 128, 255")


def _query_dependence(c, ref, w):
    """The seed's "they" is every kernel of layer 0, not only the contextual heads'."""
    vals = {hk.head: hk.query_tv for hk in w.kernels.heads}
    return _share(c, ref, w, vals, lambda v: v <= c["max_tv"],
                  "mean TV of every layer-0 head's kernel, ' the' vs 64 random query tokens")


def _mostly_local(c, ref, w):
    """One meaning of local across the table: the kernel category (row kernel_categories: decay
    length 1/κ ≤ 2 tokens at every n); the population is the heads the post studies (the
    contextual heads used downstream); the share over every layer-0 head is in the note."""
    cats = {hk.head: hk.category for hk in w.kernels.heads}
    heads = [h for h in w.circuit[1].heads if h in cats]
    local = sorted(h for h in heads if cats[h] == "local")
    share = len(local) / len(heads)
    every = sorted(h for h, v in cats.items() if v == "local")
    note = (f"local (category: decay length ≤ 2 tokens) among the heads studied {heads}: {local}; among every "
            f"layer-0 head: {len(every)}/{len(cats)} {every}")
    if ref.planted:
        return c["published_text"], round(share, 4), c["tolerance"], None, \
            note + "; no verdict: the manifest plants the contextual heads slowly decaying, not local"
    return c["published_text"], round(share, 4), c["tolerance"], share > c["min_share"], note


def _denominator_decay(c, ref, w):
    """The mean log S_h[n] falls with n (n ≥ 16) for at least half the contextual heads."""
    d = w.denominators
    heads = w.circuit[1].heads
    slopes = {h: d.trend_slope[h] for h in heads}
    falling = sorted(h for h, v in slopes.items() if v * (d.window - d.n_min) <= -c["min_drop"])
    share = len(falling) / len(heads)
    note = ("change of mean log S over n " + f"{d.n_min}–{d.window - 1}: " +
            ", ".join(f"{h}: {v * (d.window - d.n_min):+.3f}" for h, v in sorted(slopes.items())) +
            f" over {d.n_texts} windows")
    if ref.planted:
        return c["published_text"], round(share, 4), c["tolerance"], None, \
            note + "; no verdict: the planted manifest plants no decay of the denominators"
    return c["published_text"], round(share, 4), c["tolerance"], share >= c["min_share"], note


FIDELITY_NEAR = 64           #: the fidelity row: positions within this many tokens below the scan's position


def fidelity_near(f, n: int, near: int = FIDELITY_NEAR) -> tuple[list[int], float | None, float | None]:
    """(positions, median r, median FVU) of a one-text Fidelity over positions in [n − near, n]."""
    keep = [k for k, m in enumerate(f.positions) if n - near <= m <= n]
    r = [f.correlation[0][k] for k in keep if f.correlation[0][k] is not None]
    v = [f.fvu[0][k] for k in keep if f.fvu[0][k] is not None]
    return [f.positions[k] for k in keep], (statistics.median(r) if r else None), (statistics.median(v) if v else None)


def _fidelity(c, ref, w):
    f = w.fidelity
    n = w.scan.position
    if max(f.positions) < n:
        raise NotApplicable(f"the held-out text has {max(f.positions) + 1} tokens, fewer than the scan's position {n}")
    pos, r, fvu = fidelity_near(f, n)
    if r is None or fvu is None:
        raise NotApplicable("circuit fidelity undefined (constant outputs)")
    note = (f"heads {f.heads}; over the {w.model.cfg.d_model} d_model coordinates at the {len(pos)} positions "
            f"{pos[0]}–{pos[-1]} (the scan's n = {n}) of the held-out samples joined; every position in the details")
    (rlo, _), (_, fhi) = c["r_range"], c["fvu_range"]           # one-sided: a closer fit never fails
    if ref.planted:
        note += "; not planted: the seed's bounds (the keyword heads make S̄ text-dependent by design)"
    return c["published"], [round(r, 4), round(fvu, 4)], c["tolerance"], r >= rlo and fvu <= fhi, note


def _scaled_count(w) -> str:
    """The count under variant ``scaled`` (the same scan ÷ σ̄₂), for the row's note."""
    if w.variant.ln2 != "none" or w.variant.max != "signed":
        return ""
    sigma = w.circuit[0].calibration.ln2_scale
    n = sum(x / sigma >= DEFAULT_THRESHOLD for x in w.scan.max_all)
    return f"seed unit (no LN2 scale); under 'scaled' (÷ σ̄₂ = {sigma:.3f}): {n} neurons"


def _n_neurons(c, ref, w):
    scan = w.scan
    found = sorted(n["neuron"] for n in scan.neurons)
    if ref.n_neurons is None:
        lo, hi = c["range"]
        return c["published_text"], len(found), c["tolerance"], lo <= len(found) <= hi, _scaled_count(w)
    extra = sorted(set(found) - set(ref.neuron_indices))
    missing = sorted(set(ref.neuron_indices) - set(found))
    note = "; ".join(s for s in [f"missing {missing}" if missing else "", f"extra {extra}" if extra else "",
                                 _scaled_count(w)] if s)
    return ref.neuron_indices, found, "exactly the planted neurons", not extra and not missing, note


def list_agreement(want: list[str], got: list[str], k: int = 10) -> dict:
    """Overlap of the whole lists, of their top k, and Spearman's ρ of the shared tokens' ranks
    (kept for the details: the seed's lists are selections, not rankings — rows use :func:`set_agreement`)."""
    shared = [t for t in want if t in got]
    rho = spearman([want.index(t) for t in shared], [got.index(t) for t in shared])
    return {"overlap": len(set(want) & set(got)), "top_k": k, "overlap_top_k": len(set(want[:k]) & set(got[:k])),
            "n_shared": len(shared), "spearman": None if rho is None else round(rho, 4)}


def set_agreement(selected: torch.Tensor, scores: torch.Tensor, largest: bool = True) -> dict:
    """A published selection (token ids, any order) against a neuron's token scores [V], as sets.

    ``overlap`` / ``jaccard``: with headscope's selection of the same size (the |P| tokens of
    largest score, or smallest for the bottom list); ``threshold``: the score τ whose selection
    {t : s_t ≥ τ} (≤ τ for the bottom) reproduces the published one best (largest Jaccard), with
    that Jaccard and the selection's size. Order never enters: a list in token-id order (as the
    seed prints them) and one by score are the same selection."""
    P = torch.zeros(scores.numel(), dtype=torch.bool)
    P[selected] = True
    k = int(P.sum())
    order = torch.argsort(scores.double(), descending=largest, stable=True)
    hits = P[order].double().cumsum(0)                                         # |prefix_m ∩ P|, m = 1..V
    m = torch.arange(1, scores.numel() + 1, dtype=torch.float64)
    jac = hits / (m + k - hits)
    best = int(jac.argmax())
    overlap = int(hits[k - 1]) if k else 0
    return {"size": k, "overlap": overlap, "jaccard": round(overlap / (2 * k - overlap), 4) if k else None,
            "threshold": round(float(scores[order[best]]), 6), "threshold_jaccard": round(float(jac[best]), 4),
            "threshold_size": best + 1}


def _neuron_side(c, ref, w):
    """The published list as a set (seed 000 prints thresholded selections in ascending token-id
    order): its overlap and Jaccard with headscope's selection of the same size, and the threshold
    that reproduces it best; the null is the overlap of a random selection of that size."""
    side = c["side"]
    want = ref.top_tokens if side == "top" else ref.bottom_tokens
    scores = w.neuron_scores(ref.neuron)                                           # [V]
    ids, missing = w.token_ids(want)
    if not ids:
        raise NotApplicable(f"none of the published {side} tokens is one token of this vocabulary")
    a = set_agreement(torch.tensor(ids), scores, largest=side == "top")
    need = int(-(-c["min_fraction"] * a["size"] // 1))                             # ceil
    med, p95 = hypergeometric_quantiles(scores.numel(), a["size"])
    null = NullComparison(statistic=f"overlap with the {a['size']} of {'largest' if side == 'top' else 'smallest'} score",
                          null=f"a random selection of {a['size']} of {scores.numel()} tokens (hypergeometric)",
                          measured=float(a["overlap"]), n_draws=0, median=float(med), p95=float(p95), direction="above",
                          margin=float(c["null"]["margin"]), margin_kind="diff", bar=float(p95 + c["null"]["margin"]),
                          clears=a["overlap"] >= p95 + c["null"]["margin"])
    measured = (f"{a['overlap']}/{a['size']} in its {side} {a['size']} (Jaccard {a['jaccard']:.2f}); "
                f"τ {a['threshold']:.3g} selects {a['threshold_size']} (Jaccard {a['threshold_jaccard']:.2f})")
    note = (f"neuron {ref.neuron_label}; compared as sets (order ignored); headscope's "
            f"{'max' if side == 'top' else 'min'} contribution {float(scores.max() if side == 'top' else scores.min()):.3f}"
            + (f"; not one token here: {missing[:5]}" if missing else ""))
    published = f"{len(want)} tokens" + (" (planted)" if ref.planted else " (a selection)")
    tol = f"≥ {need} of {a['size']} in the selection of the same size"
    return published, measured, tol, a["overlap"] >= need, note, null


def _survey_top(c, ref, w):
    res = w.seed_survey
    rows = res.rows
    l, h = w._check_head()
    first = f"{rows[0].layer}.{rows[0].head}"
    mine = w.survey_row(res)
    note = f"{l}.{h} has rank {mine.rank} (semantic loss {mine.semantic_loss:.3f}); 2nd: {rows[1].layer}.{rows[1].head}" \
        if len(rows) > 1 else ""
    note += f"; {res.prompts['n_prompts']} prompt of {res.prompts['length']} words"
    draws = [x.semantic_loss for x in w.seed_survey_null]
    null = None if not draws else compare(
        mine.semantic_loss, draws, statistic=f"{l}.{h}'s semantic loss", direction="below",
        null="null heads of the semantic head (Gaussian W_Q, W_K, W_V, W_O of its norms)", **_margin(c["null"]))
    return f"{l}.{h}", first, c["tolerance"], (rows[0].layer, rows[0].head) == (l, h), note, null


def _survey_outlier(c, ref, w):
    res = w.seed_survey
    mine = w.survey_row(res)
    others = torch.tensor([r.semantic_loss for r in res.rows if r is not mine], dtype=torch.float64)
    if others.numel() < 3:
        raise HeadscopeError(f"an outlier needs at least 3 other heads, got {others.numel()}")
    z = float(robust_z(torch.tensor([mine.semantic_loss], dtype=torch.float64), others)[0])
    zs = f"{z:.2f}" if abs(z) < 1e6 else ("−∞" if z < 0 else "+∞")
    note = f"loss {mine.semantic_loss:.3f} vs the others' median {float(others.median()):.3f}"
    return c["published_text"], f"z = {zs}", c["tolerance"], z <= c["max_z"], note


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
    pref = lambda x: x.same_category - max(x.self_attention, x.copy_attention)     # noqa: E731
    rows = [x for x in w.survey_null if x.same_category is not None and x.copy_attention is not None]
    passes = lambda x: x.self_attention <= c["max"] and x.copy_attention <= c["max"] and pref(x) > 0   # noqa: E731
    null = None if not rows else compare(
        pref(r), [pref(x) for x in rows], statistic="same-category minus max(self, copy) attention", direction="above",
        null="null heads of the semantic head (Gaussian W_Q, W_K, W_V, W_O of its norms)", **_margin(c["null"]),
        null_passes=_share_of(rows, passes))
    return c["published_text"], measured, c["tolerance"], ok, "", null


def _bos(c, ref, w):
    r = w.survey_row()
    _defined("BOS fallback", r.bos_fallback)
    draws = [x.bos_fallback for x in w.survey_null if x.bos_fallback is not None]
    null = None if not draws else compare(
        r.bos_fallback, draws, statistic="BOS attention without a partner", direction="above",
        null="null heads of the semantic head (Gaussian W_Q, W_K, W_V, W_O of its norms)", **_margin(c["null"]),
        null_passes=_share_of(draws, lambda x: x >= c["min"]))
    return c["published_text"], round(r.bos_fallback, 6), c["tolerance"], r.bos_fallback >= c["min"], "", null


def _position(c, ref, w):
    p = w.position
    _defined("the token-identity share (the head's scores are constant)", p.identity_fraction)
    l, h = w._check_head()
    draws, spec = w.position_null, c["null"]
    null = compare(p.identity_fraction, draws, statistic="identity share", direction="above",
                   null=f"null heads of {l}.{h}: Gaussian W_Q, W_K, W_V, W_O of its Frobenius norms", **_margin(spec),
                   null_passes=_share_of(draws, lambda x: x >= c["min"]))
    return c["published_text"], round(p.identity_fraction, 6), c["tolerance"], p.identity_fraction >= c["min"], \
        f"mean within-pair score std {p.within_pair_std:.3g} over {p.n_pairs} pairs", null


def _negative(c, ref, w):
    """The exact count (the seed's figure), and the negative eigen-mass that separates a
    self-suppressing form from a random one (the count cannot: random heads give 30–34 of 64)."""
    f = w.form
    tol = c["tolerance"] if ref.name == SEED_REFERENCE else "exact"
    ok = f.n_negative_top == ref.n_negative_top64                              # exact: 33, not 32 or 34
    nd = w.negative_null
    counts = torch.tensor(nd["counts"], dtype=torch.float64)
    same = _share_of(nd["counts"], lambda x: x == ref.n_negative_top64)
    mass = negative_mass(f.eigenvalues, f.top)
    null = compare(mass, nd["masses"], statistic=f"negative eigen-mass of the top {f.top}", direction="above",
                   null="W_Q, W_K of the head replaced by Gaussian matrices of their Frobenius norms", **_margin(c["null"]))
    note = (f"{f.n_negative} negative, {f.n_positive} positive in all; count null median "
            f"{float(counts.median()):g}, 5–95 % {float(torch.quantile(counts, 0.05)):g}–"
            f"{float(torch.quantile(counts, 0.95)):g} ({same:.0%} of the draws give exactly "
            f"{ref.n_negative_top64}: the count alone cannot separate the claim from chance); "
            f"negative eigen-mass {mass:.3f}")
    return ref.n_negative_top64, f.n_negative_top, tol, ok, note, null


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


def _rebuilt(c, results) -> None:
    """Refuse a steering verdict that rests on a matrix far from the steered form: the rebuilt
    W_Q' W_K'ᵀ must be within the claim's max_rebuild_error (relative Frobenius) of it."""
    worst = max(r.rebuild_error for r in results)
    if worst > c["max_rebuild_error"]:
        raise NotApplicable(f"the rank-d_head rebuild is {worst:.2g} (relative) from the steered form, above "
                            f"{c['max_rebuild_error']:g}: the steered checkpoint is not the steered form")


def _steer(c, ref, w):
    r = w.steer(0.0)
    _rebuilt(c, [r])
    gain = r.self_attention_after - r.self_attention_before
    note = f"{r.n_selected} negative eigenvalues scaled; rebuild error {r.rebuild_error:.1e}"
    if ref.name != SEED_REFERENCE:
        note += "; not planted: the seed's qualitative claim with headscope's threshold"
    return c["published_text"], f"{r.self_attention_before:.3f} → {r.self_attention_after:.3f}", c["tolerance"], \
        gain >= c["min_gain"], note


def _steer_sweep(c, ref, w):
    """α = 1.1: suppression kept; α = 0: self-attention restored; α = −0.5: at least as much as α = 0."""
    a1, a0, am = (w.steer(float(a)) for a in c["sweep"])
    _rebuilt(c, [a1, a0, am])
    before = a0.self_attention_before
    verdicts = [a1.self_attention_after <= before + c["max_rise"],
                a0.self_attention_after >= before + c["min_gain"],
                am.self_attention_after >= a0.self_attention_after]
    word = lambda ok: "PASS" if ok else "FAIL"  # noqa: E731
    measured = "; ".join(f"α {r.alpha:g}: {r.self_attention_after:.3f} {word(ok)}" for r, ok in zip((a1, a0, am), verdicts))
    note = f"before {before:.3f}; rebuild errors " + ", ".join(f"{r.rebuild_error:.1e}" for r in (a1, a0, am))
    if ref.name != SEED_REFERENCE:
        note += "; not planted: the seed's qualitative claim with headscope's thresholds"
    return c["published_text"], measured, c["tolerance"], all(verdicts), note


def _neuron_texts(c, ref, w):
    names = c["texts"]
    by = {t.name: t.text for t in shipped.samples()}
    uk, us = (w.true_activation(ref.neuron, by[n]) for n in names)
    diff, draws = w.text_readout_null(ref.neuron, [by[n] for n in names])
    null = compare(diff, draws, statistic="Commonwealth − American mean pre-activation", direction="above",
                   null=f"random readouts of W_in[:, {ref.neuron}]'s norm", **_margin(c["null"]),
                   null_passes=_share_of(draws, lambda x: x > 0))
    note = (f"neuron {ref.neuron_label}: true {uk[0]:.3f} ({names[0]}, {uk[2]} tokens) vs {us[0]:.3f} ({names[1]}, "
            f"{us[2]} tokens), difference {diff:.3f}; circuit prediction {uk[1]:.3f} vs {us[1]:.3f}")
    return c["published_text"], f"{uk[0]:.3f} vs {us[0]:.3f}", c["tolerance"], uk[0] > us[0], note, null


CHECKS = {
    "tv_contextual": _tv, "kernel_categories": _categories, "contextual_heads": _contextual,
    "contextual_heads_auto": _contextual_auto, "denominator_worst_heads": _worst_heads,
    "denominator_vs_local": _denominator_vs_local, "circuit_fidelity": _fidelity,
    "key_split_vs_crude": _key_split_vs_crude, "translation_equivariance": _translation, "query_dependence": _query_dependence, "mostly_local": _mostly_local,
    "denominator_decay": _denominator_decay,
    "n_contextual_neurons": _n_neurons, "neuron_704_top": _neuron_side, "neuron_704_bottom": _neuron_side,
    "neuron_704_texts": _neuron_texts, "naive_bayes": _naive_bayes, "neuron_topics": _neuron_topics,
    "neuron_transfer": _neuron_transfer, "survey_top": _survey_top, "survey_outlier": _survey_outlier,
    "semantic_pairs": _semantic_pairs, "three_rules_by_category": _three_rules, "self_suppression": _self_suppression, "bos_fallback": _bos,
    "position_independence": _position, "negative_eigenvalues": _negative, "sym_vs_skew": _sigma,
    "steer_restores_self": _steer, "steer_alpha_sweep": _steer_sweep,
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
                              "tv_p90": k.tv_p90, "category_width": k.category_width,
                              "shape_decay_rate": k.shape_decay_rate} for k in w.kernels.heads])
    put("heads_used", lambda: {"spec": w.heads_spec if isinstance(w.heads_spec, str) else list(w.heads_spec),
                               "heads": w.circuit[1].heads})
    put("head_choice", lambda: w.circuit[1].to_dict())
    put("head_choice_auto", lambda: w.auto_choice.to_dict())
    put("neurons_above_threshold", lambda: [{"neuron": n["neuron"], "max_contribution": n["max_contribution"]}
                                            for n in w.scan.neurons])
    put("calibration", lambda: {"n_text_tokens": w.calibration.n_text_tokens, "n_windows": w.calibration.n_windows,
                                "stride": STRIDE, "min_samples": MIN_SAMPLES,
                                "samples_at": {str(n): w.calibration.counts[n] for n in sorted(
                                    {0, 255, 500, w.calibration.n_positions - 1}) if n < w.calibration.n_positions}})
    put("neuron_variants", lambda: _neuron_variants(w))
    put("neuron_head_sets", lambda: _neuron_head_sets(w))
    put("neuron_calibration_texts", lambda: _neuron_calibrations(w))
    put("neurons_robust_top", lambda: _robust_top(w))
    put("neuron", lambda: {"neuron": ref.neuron, **w.neuron_tokens(ref.neuron)})
    put("denominators", lambda: {"window": w.denominators.window, "n_windows": w.denominators.n_texts,
                                 "median_rel_spread": w.denominators.median_rel_spread})
    put("circuit_fidelity", lambda: {"heads": w.fidelity.heads, "query": w.fidelity.query,
                                     "scan_position": w.scan.position,
                                     "by_position": [{"position": m, "r": w.fidelity.correlation[0][k],
                                                      "fvu": w.fidelity.fvu[0][k]}
                                                     for k, m in enumerate(w.fidelity.positions)],
                                     "median_all_positions": [w.fidelity.median_correlation, w.fidelity.median_fvu]})
    put("survey_top5", lambda: [r.to_dict() for r in w.survey.rows[:5]])
    put("survey_seed_top5", lambda: {"prompts": w.seed_survey.prompts,
                                     "rows": [r.to_dict() for r in w.seed_survey.rows[:5]]})
    put("eigenvalues_top64", lambda: w.form.eigenvalues[:64].tolist())
    sweep = next(c for c in claims["claims"] if c["id"] == "steer_restores_self")["sweep"]
    put("steering_sweep", lambda: [{"alpha": a, "self_attention_before": w.steer(a).self_attention_before,
                                    "self_attention_after": w.steer(a).self_attention_after,
                                    "self_rank_after": w.steer(a).self_rank_after,
                                    "rebuild_error": w.steer(a).rebuild_error} for a in sweep])
    put("authors_steering", lambda: {k: v for k, v in w.authors_steer.to_dict().items() if k != "scores"})
    return d


def _neuron_variants(w: _Work) -> list[dict]:
    """The neuron count (threshold 5.0) under every contribution variant, same heads and calibration.

    Variants that differ only in the LN2 divisor or in max vs max |·| share one pass over
    the vocabulary: a neuron's scores are linear in 1/divisor, so its max (and min) under
    divisor D is (max, min) at divisor 1 over D (tests/integration/test_fidelity_neurons.py
    checks this against separate scans).
    """
    circuit, choice = w.circuit
    passes: dict = {}
    out = []
    for spec in NEURON_VARIANTS:
        v = parse_variant(spec)
        key = (v.position, v.position_part, v.glitch)
        try:
            if key not in passes:
                base = dataclasses.replace(v, ln2="none", max="signed")
                passes[key] = scan_neurons(circuit, choice, w.model.tokenizer, threshold=math.inf, top=1, variant=base)
            scan = passes[key]
        except HeadscopeError as e:
            out.append({"variant": spec, "spec": v.spec(), "error": str(e)})
            continue
        d = ln2_divisor(circuit, v)
        hi, lo = torch.tensor(scan.max_all) / d, torch.tensor(scan.min_all) / d
        score = hi if v.max == "signed" else torch.maximum(hi, -lo)
        found = (score >= DEFAULT_THRESHOLD).nonzero().squeeze(1).tolist()
        out.append({"variant": spec, "spec": v.spec(), "position": scan.position, "n_neurons": len(found),
                    "neurons": sorted(found) if len(found) <= 30 else None})
    return out


def _neuron_head_sets(w: _Work) -> list[dict]:
    """The neuron count (variant ``paper``) with the published, Gibson's and the automatic head sets."""
    out = []
    for spec in ("published", "code", "auto"):
        try:
            heads = resolve_heads(spec, w.ref, w.model.cfg.n_heads)
            if heads == w.circuit[1].heads and w.variant.name == "paper":
                choice, n = w.circuit[1], len(w.scan.neurons)
            else:
                circuit, choice = build_circuit(w.model, w.calibration, heads=heads)
                n = len(scan_neurons(circuit, choice, w.model.tokenizer, threshold=DEFAULT_THRESHOLD, top=1).neurons)
        except HeadscopeError as e:
            out.append({"heads": spec, "error": str(e)})
            continue
        out.append({"heads": spec, "head_ids": choice.heads, "n_neurons": n})
    return out


def _neuron_calibrations(w: _Work) -> list[dict]:
    """The neuron count (variant ``paper``, the heads used) with another calibration text, at the
    largest position it samples at least MIN_SAMPLES times."""
    name, text = shipped.sample_corpus()[0]
    cal = calibrate(w.model, text, query=SEED_QUERY)
    ok = [n for n, k in enumerate(cal.counts) if k >= MIN_SAMPLES]
    out = [{"calibration": "headscope:calibration.txt", "position": w.scan.position, "n_neurons": len(w.scan.neurons),
            "samples": w.calibration.counts[w.scan.position]}]
    if not ok:
        return out + [{"calibration": name, "error": f"no position has {MIN_SAMPLES} samples"}]
    circuit, choice = build_circuit(w.model, cal, heads=w.circuit[1].heads, position=ok[-1])
    scan = scan_neurons(circuit, choice, w.model.tokenizer, threshold=DEFAULT_THRESHOLD, top=1)
    return out + [{"calibration": name, "position": scan.position, "n_neurons": len(scan.neurons),
                   "samples": cal.counts[scan.position]}]


def _robust_top(w: _Work, n: int = 10) -> dict:
    circuit, choice = w.circuit
    r = rank_neurons(circuit, choice, w.model.tokenizer, variant=w.variant)
    return {"k": r.k, "n_random": r.n_random,
            "by_robust": [{"neuron": j, "robust": r.robust[j], "max": r.max[j]} for j in r.order_robust[:n]],
            "by_max": r.order_max[:n]}


def reproduce(model: Model, *, reference: Reference | None = None,
              details: bool = True, heads=None, variant=None) -> ReproduceResult:
    """Measure every seed claim on `model` against `reference` (default: :func:`reference_for`).

    ``heads``: the layer-0 heads of the downstream rows ("published" by default, "auto",
    "seed", "code", or indices); ``variant``: the neurons' contribution variant
    (:func:`headscope.neurons.parse_variant`; default ``paper``).
    """
    claims = seed_claims()
    ref = reference_for(model) if reference is None else reference
    w = _Work(model, ref, heads=heads, variant=variant)
    if heads not in (None, "published"):
        resolve_heads(heads, ref, model.cfg.n_heads)          # a bad --heads is an error, not a failing row
    rows = []
    for c in claims["claims"]:
        base = dict(id=c["id"], seed=c["seed"], claim=c["claim"], measure=c["measure"],
                    source=c.get("source", "no source found"), rejects=c.get("rejects", ""))
        try:
            published, measured, tol, passed, note, *null = CHECKS[c["id"]](c, ref, w)
            null = null[0] if null else None
            ok, word = verdict(None if passed is None else bool(passed), null)
            if null is not None:
                note = (note + "; " if note else "") + null.text() + (
                    f"; {word}: the null's bar is {null.bar:.4g}" if word == RANDOM else "")
            rows.append(ClaimRow(**base, published=published, measured=measured, tolerance=tol, passed=ok, note=note,
                                 null=None if null is None else {**null.to_dict(), "component_passes": passed},
                                 verdict=word))
        except NotApplicable as e:                  # the claim cannot apply here: no verdict, one line why
            rows.append(ClaimRow(**base, published=c.get("published_text"), measured=None,
                                 tolerance=c["tolerance"], passed=None, note=f"no verdict: {e}", verdict="no verdict"))
        except HeadscopeError as e:
            rows.append(ClaimRow(**base, published=c.get("published_text"), measured=None,
                                 tolerance=c["tolerance"], passed=False, note=f"not measured: {e}", verdict="FAIL"))
    if ref.found is not None:                       # --find: each row's component; none rests on one not found
        ref.found.annotate(rows)
    notes = []
    shape = {k: getattr(model.cfg, k) for k in GPT2_SMALL}
    if ref.name == SEED_REFERENCE and shape != GPT2_SMALL:
        diff = ", ".join(f"{k} {shape[k]} (GPT-2 Small {v})" for k, v in GPT2_SMALL.items() if shape[k] != v)
        notes.append(f"the published figures are GPT-2 Small's; this model differs: {diff}")
    if ref.name == PLANTED_REFERENCE:
        notes.append("planted checkpoint: the published column is its planted.json manifest")
    if w.heads_spec != "published" or w.variant.name != "paper":
        notes.append(f"downstream layer-0 rows use heads {w.heads_spec!r} and contribution variant {w.variant.name!r}")
    return ReproduceResult(rows=rows, source=model.source, fingerprint=model.fingerprint, reference=ref.name,
                           notes=notes, details=_details(w, claims, ref) if details else {},
                           components=None if ref.found is None else ref.found.to_dict()["components"])
