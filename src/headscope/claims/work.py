"""The measurements the claims share, each computed once per run (:class:`Work`), and once per
process for the same model (:func:`~headscope.claims.memo.shared`, the process memo in memo.py)."""

from __future__ import annotations

import dataclasses
import functools
import json

import torch

from .. import shipped
from .._errors import HeadscopeError, NotApplicable
from ..core.forward import run_with_cache
from ..core.model import Model
from ..corpus import windows
from ..layer0.calibration import STRIDE, calibrate, check_samples
from ..layer0.contextual import build_circuit, circuit_fidelity
from ..stats import correlation, fraction_unexplained, median
from ..layer0.denominators import denominator_stability
from ..layer0.kernels import analyse_kernels
from ..layer0.neurons import DEFAULT_THRESHOLD, ln2_divisor, parse_variant, readout, scan_neurons, token_values
from ..layer0.split import SEED_QUERY
from ..semantic import bilinear
from ..semantic.options import SteerOptions
from ..semantic.steering import authors_steer, steer
from ..semantic.survey import position_independence, position_independence_heads, survey
from .memo import _INPUTS, _MEMO, _memo, _model_key, clear_memo, shared, shared_method  # noqa: F401  (tests read _MEMO, _model_key)
from .null import form_null, generator, null_head_models, null_heads_packed, null_layer, pairing_null, random_readouts, readout_null
from .reference import Reference, resolve_heads, seed_component

KERNEL_WINDOWS = 16          #: windows of the shipped texts for the TV claim (as the report)
TOP = 50                     #: token lists compared for neuron claims
KERNEL_NULL_ROUNDS = 2     #: null draws of every layer-0 head for the kernel rows (24 on GPT-2 Small)
READOUT_NULL = 64          #: random neurons of the neuron rows' nulls (count, naive Bayes, topics)
DENOMINATOR_NULL_ROUNDS = 4  #: null layers of the denominator rows (a layer-0 pass each): 4 draws of every head
FIDELITY_STRIDE = 8          #: every 8th query position of the sample texts for the circuit-fidelity row
#: null draws of the circuit-fidelity row: the contextual heads of null layers "denominators:0", …, all packed
#: in one layer-0 view (Work.fidelity_null; draws 0–3 are those of Work.denominator_null)
FIDELITY_NULL_DRAWS = 32
AUTO_NULL_ROUNDS = 16        #: null layers (weights only) on which the automatic head choice is run


def held_out_text() -> str:
    """The shipped sample texts and sample_corpus.txt joined: text the calibration never saw."""
    return "\n\n".join([t.text for t in shipped.samples()] + [shipped.sample_corpus()[0][1]])


def denominator_texts() -> list[tuple[str, str]]:
    """The denominator rows' texts: the calibration text, the held-out samples joined, and the four
    genre texts (data/genres: recipe, manual, dialogue, report; written for headscope)."""
    return [("calibration", shipped.calibration_text().text), ("held-out", held_out_text()),
            *[(t.name, t.text) for t in shipped.genre_texts()]]


class Work:
    def __init__(self, model: Model, ref: Reference, heads=None, variant=None):
        self.model, self.ref = model, ref
        self.head = ref.semantic_head
        self.heads_spec = "published" if heads is None else heads
        self.variant = parse_variant(variant)
        self.__dict__.update(getattr(ref.found, "shared", None) or {})     # --find's measurements, reused

    def __setattr__(self, name, value):
        """A measurement set by hand (a stand-in, a test's edit) makes this Work's measurements its
        own: from then on none is kept for the process nor served from it."""
        if name not in _INPUTS:
            self.__dict__["_memo_off"] = True
        elif name == "model":
            self.__dict__.pop("_memo_model", None)
        super().__setattr__(name, value)

    @functools.cached_property
    def _memo_model(self):
        return _model_key(self.model)

    def memo(self, name, deps: tuple[str, ...], compute):
        """``compute()`` kept for the process as a :func:`shared` measurement named `name`
        (hashable) that reads the model and `deps` only (the details' figures)."""
        return _memo(self, name, deps, compute)

    def _check_head(self) -> tuple[int, int]:
        """The semantic head (layer, head); not applicable where it is GPT-2 Small's and the model lacks it,
        or where --find found no candidate at all (:meth:`_no_candidate`)."""
        self._no_candidate("semantic_head", "head")
        return seed_component(self.ref, self.model.cfg.check_head, *self.head)

    def _check_neuron(self, j: int) -> int:
        """MLP0 neuron j; not applicable where it is the seed's (704) and the model lacks it, or where it
        stands in for a dialect neuron --find found no candidate for."""
        if j == self.ref.neuron:
            self._no_candidate("dialect_neuron", "neurons")
        return seed_component(self.ref, self.model.cfg.check_neuron, j)

    def _no_candidate(self, kind: str, field: str) -> None:
        """--find (claims.find): a component with not even a best candidate (its search does not apply to
        this model, e.g. no QK form under OLMo 2's QK-norm) leaves the reference GPT-2 Small's index as a
        placeholder only; the rows on it have no verdict, with the search's reason (they used to be
        measured on that placeholder, or fail "head index 5 out of range")."""
        c = (getattr(self.ref.found, "components", None) or {}).get(kind)
        if c is not None and not c.found and not getattr(c, field):
            raise NotApplicable(f"{kind.replace('_', ' ')} {c.why}")

    @shared()
    def kernels(self):
        texts = [(t.name, t.text) for t in [shipped.calibration_text(), *shipped.samples()]]
        wins = windows(self.model, texts, max_windows=KERNEL_WINDOWS)
        return analyse_kernels(self.model, layer=0, query=SEED_QUERY, c="measured", windows=wins)

    @shared()
    def split_tv(self) -> dict:
        """Median TV(true, approx) per head over positions n ≥ 1 of the kernel windows, for the
        seed's split, for the crude split √(|W_pos[i]|² + c²) (row key_split_vs_crude) and for the
        split with its content term removed (the positional kernel alone: row tv_contextual's null);
        ``*_w``: the same medians per window ([window][head])."""
        from .. import layer0

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

    def _kernel_measures(self, view) -> list[dict]:
        """Per head of the layer-0 view `view`: category, translation_tv, query_tv and shape_tv (the TV
        of its kernel at n_ref from the uniform kernel: how much shape there is to carry over), with
        the query, c, n_ref and rule of :attr:`kernels`. Weights only."""
        from .. import layer0
        from ..layer0.kernels import kernel_categories, kernel_tvs

        rep = self.kernels
        kern = layer0.positional_kernel(view, rep.query_id, rep.n_ref, rep.c)                  # [h n+1]
        cats = kernel_categories(view, rep.query_id, rep.c, rep.n_ref, rep.rule["name"], kern=kern)
        trans, qtv = kernel_tvs(view, rep.query_id, rep.c, rep.n_ref, kern)
        shape = 0.5 * (kern - 1.0 / kern.shape[-1]).abs().sum(-1)                               # [h]
        return [{"category": cats.categories[k], "translation_tv": float(trans[k]), "query_tv": float(qtv[k]),
                 "shape_tv": float(shape[k])} for k in range(kern.shape[0])]

    @shared()
    def kernel_shape(self) -> list[dict]:
        """:meth:`_kernel_measures` of the model's own layer-0 heads."""
        from .. import layer0

        return self._kernel_measures(layer0.view(self.model))

    @shared()
    def kernel_null(self) -> list[dict]:
        """:meth:`_kernel_measures` of KERNEL_NULL_ROUNDS × n_heads null heads of layer 0
        (claims.null.null_layer), each with the head it stands for (``head``: draw r·n_heads + h is h's)."""
        from .. import layer0

        H = self.model.cfg.n_heads
        view = null_layer(layer0.view(self.model), 0, "kernels", KERNEL_NULL_ROUNDS)
        return [{"head": k % H, **m} for k, m in enumerate(self._kernel_measures(view))]

    @shared()
    def calibration(self):
        return calibrate(self.model, shipped.calibration_text().text, query=SEED_QUERY)

    @functools.cached_property
    def heads(self) -> list[int] | None:
        return resolve_heads(self.heads_spec, self.ref, self.model.cfg.n_heads)

    @shared("heads")
    def circuit(self):
        """(circuit, choice) over the heads the downstream rows use (the published ones by default),
        at the last calibrated position; NotApplicable when the calibration text gives fewer than
        calibration.MIN_SAMPLES samples of the denominators there."""
        circuit, choice = build_circuit(self.model, self.calibration, heads=self.heads)
        check_samples(self.calibration, choice.position)
        return circuit, choice

    @shared()
    def auto_choice(self):
        return build_circuit(self.model, self.calibration, heads=None)[1]

    @shared()
    def auto_null(self) -> list[list[int]]:
        """The automatic head choice (contextual.select_heads' thresholds, the calibration's query, c
        and position) on AUTO_NULL_ROUNDS null layers of layer 0 (claims.null.null_layer: every head h a
        Gaussian draw of head h's W_Q, W_K, W_V, W_O norms, its biases permuted), all packed in one
        view so the vocabulary's content factors are one pass; [] where a draw gives no group.
        Weights only."""
        from .. import layer0
        from ..layer0.contextual import SELECTION, group_heads, head_metrics

        H, cal, n = self.model.cfg.n_heads, self.calibration, self.auto_choice.position
        view = null_layer(layer0.view(self.model), 0, "contextual_heads_auto", AUTO_NULL_ROUNDS)
        width, cstd, tv = head_metrics(view, cal.query_id, n, cal.c, block=H)          # tv [R H H]
        out = []
        for r in range(AUTO_NULL_ROUNDS):
            groups = group_heads(width[r * H:(r + 1) * H], cstd[r * H:(r + 1) * H], tv[r], SELECTION)[1]
            out.append(groups[0] if groups else [])
        return out

    @shared("heads", "variant", "threshold")
    def scan(self):
        circuit, choice = self.circuit
        bar = getattr(self.ref.found, "neuron_threshold", None)            # --find: the model's own bar
        return scan_neurons(circuit, choice, self.model.tokenizer, threshold=DEFAULT_THRESHOLD if bar is None else bar,
                            top=TOP,
                            variant=self.variant if self.variant.name != "paper" else None)

    def neuron_tokens(self, j: int) -> dict:
        """Top and bottom `TOP` tokens of neuron j through the circuit (decoded strings)."""
        self._check_neuron(j)
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

    @shared()
    def survey(self):
        """headscope's survey (64 prompts × 16 words): the rate rows."""
        return survey(self.model, n_prompts=64, length=16, seed=0)

    def _categories(self):
        """The rank rows' categories: the reference's; NotApplicable where --find's head has no
        clusters of its own (claims.own_clusters.head_clusters)."""
        if self.ref.own_categories and not self.ref.survey_categories:
            from .own_clusters import OWN_SIZE

            raise NotApplicable(f"the semantic head's QK form has no Leiden cluster of {OWN_SIZE[0]}–{OWN_SIZE[1]} "
                                "words: no categories of its own to survey")
        return self.ref.survey_categories

    @shared("categories")
    def seed_survey(self):
        """The authors' prompt recipe (one prompt of 255 words): the rank rows."""
        return survey(self.model, seed=0, preset="seed", categories=self._categories())

    def survey_row(self, res=None):
        l, h = self._check_head()
        res = self.survey if res is None else res
        return next(r for r in res.rows if (r.layer, r.head) == (l, h))

    @shared("head")
    def position(self):
        l, h = self._check_head()
        return position_independence(self.model, l, h)

    @shared("head")
    def form(self):
        l, h = self._check_head()
        W = self.model.weights()
        return bilinear.bilinear_form(bilinear.qk_matrix(W, l, h), l, h)

    @shared("head")
    def semantic_null(self) -> list[Model]:
        """Models whose semantic-head layer holds null draws of the semantic head in every head slot
        (claims.null.null_head_models: HEAD_DRAWS draws in ⌈HEAD_DRAWS / n_heads⌉ models)."""
        l, h = self._check_head()
        return null_head_models(self.model, l, h, "semantic_head")

    @shared("head")
    def position_null(self) -> list[float]:
        """identity_fraction of the semantic head's null draws (one pass per null model and order)."""
        l, _ = self._check_head()
        draws = []
        for m in self.semantic_null:
            draws += [r.identity_fraction for r in position_independence_heads(m, [(l, k) for k in range(m.cfg.n_heads)])]
        return [d for d in draws if d is not None]

    @shared("head")
    def survey_null(self) -> list:
        """The survey's rows (headscope's 64 prompts × 16 words, as :attr:`survey`) of the null draws."""
        l, _ = self._check_head()
        return [r for m in self.semantic_null for r in survey(m, [l], n_prompts=64, length=16, seed=0).rows]

    @shared("head", "categories")
    def seed_survey_null(self) -> list:
        """The authors' survey recipe (as :attr:`seed_survey`) on the null draws; with --find's own
        categories, each draw on its own clusters (:attr:`own_null_categories`: the head chose its
        categories, so must every draw)."""
        l, _ = self._check_head()
        cats = self._categories()
        if not self.ref.own_categories:
            return [r for m in self.semantic_null for r in survey(m, [l], seed=0, preset="seed", categories=cats).rows]
        runs: dict = {}                                   # one survey per null model and set of categories
        out = []
        for m, k, own in self.own_null_categories:
            key = (id(m), json.dumps(own, sort_keys=True))
            if key not in runs:
                runs[key] = {r.head: r for r in survey(m, [l], seed=0, preset="seed", categories=own).rows}
            out.append(runs[key][k])
        return out

    @shared("head", "categories")
    def own_null_categories(self) -> list[tuple[Model, int, dict]]:
        """(model, head index, categories) of every null draw of :attr:`semantic_null`: the draw's own
        clusters (claims.own_clusters.head_clusters on the nodes of the semantic head's layer, which the null
        heads share), the semantic head's own where a draw has none."""
        from .own_clusters import ClusterNodes, head_clusters

        l, _ = self._check_head()
        nodes = ClusterNodes(self.model, l)
        return [(m, k, head_clusters(nodes, *bilinear.qk_factors(m.weights(), l, k)) or self.ref.survey_categories)
                for m in self.semantic_null for k in range(m.cfg.n_heads)]

    @shared("head")
    def negative_null(self) -> dict:
        """Top-64 negative count and negative eigen-mass of WEIGHT_DRAWS null forms of the semantic
        head (claims.null.form_null)."""
        l, h = self._check_head()
        W = self.model.weights()
        U, V = bilinear.qk_factors(W, l, h)
        return form_null(U, V, "negative_eigenvalues", centred=W.reads_centred)

    @shared("head")
    def sigma_null(self) -> list[float]:
        """σ₁(skew)/σ₁(sym) of WEIGHT_DRAWS null forms of the semantic head: its own W_Q, W_K with the
        pairing of their d_head coordinates scrambled (claims.null.pairing_null)."""
        l, h = self._check_head()
        U, V = bilinear.qk_factors(self.model.weights(), l, h)
        return pairing_null(U, V, "sym_vs_skew")

    def text_readout_null(self, j: int, texts: list[str]) -> tuple[float, list[float]]:
        """(difference of neuron j's mean true pre-activation between texts[0] and texts[1] over
        positions ≥ 1, the same difference for random readouts of W_in[:, j]'s norm: claims.null.readout_null)."""
        self._check_neuron(j)
        return self.memo(("text_readout_null", j, tuple(texts)), ("heads",), lambda: self._text_readout_null(j, texts))

    def _text_readout_null(self, j: int, texts: list[str]) -> tuple[float, list[float]]:
        circuit, _ = self.circuit
        Wc = circuit.weights
        xs = []
        for text in texts:
            tokens = windows(self.model, [text], n_ctx=circuit.calibration.n_positions)[0]
            cache = run_with_cache(Wc, tokens[None], names=["blocks.0.ln2.hook_normalized"], stop_at_layer=1)
            xs.append(cache["blocks.0.ln2.hook_normalized"][0, 1:].double().mean(0))     # [d]
        return readout_null(xs[0] - xs[1], Wc.blocks[0].W_in[:, j], f"readout:{j}", centred=Wc.reads_centred)

    @shared("heads")
    def sample_means(self) -> dict[str, torch.Tensor]:
        """Mean LN2-normalised residual of layer 0 ([d], float64) over positions ≥ 1 of each shipped
        sample text (one layer-0 pass each): a neuron's mean pre-activation there is this · W_in[:, j] + b_in[j]."""
        circuit, _ = self.circuit
        out = {}
        for t in shipped.samples():
            tokens = windows(self.model, [t.text], n_ctx=circuit.calibration.n_positions)[0]
            cache = run_with_cache(circuit.weights, tokens[None], names=["blocks.0.ln2.hook_normalized"], stop_at_layer=1)
            out[t.name] = cache["blocks.0.ln2.hook_normalized"][0, 1:].double().mean(0)        # [d]
        return out

    def sample_readout_null(self, j: int, name: str) -> tuple[float, list[float]]:
        """(neuron j's mean pre-activation on sample `name` minus its mean over the other samples, the
        same for READOUT_DRAWS random readouts of W_in[:, j]'s norm: claims.null.readout_null)."""
        self._check_neuron(j)
        means = self.sample_means
        dx = means[name] - torch.stack([v for k, v in means.items() if k != name]).mean(0)
        Wc = self.circuit[0].weights
        return readout_null(dx, Wc.blocks[0].W_in[:, j], f"transfer:{j}:{name}", centred=Wc.reads_centred)

    @shared_method("head")
    def steer(self, alpha: float):
        l, h = self._check_head()
        return steer(self.model, l, h, alpha, SteerOptions(select="negative")).result

    @shared("head")
    def authors_steer(self):
        l, h = self._check_head()
        return authors_steer(self.model, l, h)

    @shared("head")
    def steer_inputs(self) -> dict:
        """The semantic head's layer on the steering prompts (those of :func:`steer`: 32 seeded
        category prompts of 16 words): its LN1 output x̂ ([b p d], float64: the same for every head
        of the layer, so for its null draws too) and the head's own pattern ([b p p]); one pass."""
        from ..semantic.prompts import prompts_for

        l, h = self._check_head()
        o = SteerOptions().resolved()
        tokens = prompts_for(self.model, o.categories, n_prompts=32, length=16, seed=o.seed)[0].tokens
        names = [f"blocks.{l}.ln1.hook_normalized", f"blocks.{l}.attn.hook_pattern"]
        cache = run_with_cache(self.model.weights(), tokens, names=names, stop_at_layer=l + 1)
        return {"x": cache[names[0]].double(), "pattern": cache[names[1]][:, h].double()}

    @shared()
    def denominators(self):
        """S_h[n] over full-length windows (n up to n_ctx − 1, as the seed's traces run): disjoint
        windows of :func:`denominator_texts` (distinct texts of different genres: on GPT-2's n_ctx one
        window per text, none an offset of another)."""
        return self._denominators(self.model)

    @shared()
    def denominator_windows(self) -> list[torch.Tensor]:
        """Disjoint n_ctx windows of :func:`denominator_texts` (shorter tails are dropped by the measure)."""
        return windows(self.model, denominator_texts(), n_ctx=self.model.cfg.n_ctx)

    def _denominators(self, model: Model):
        win = model.cfg.n_ctx
        return denominator_stability(model, self.denominator_windows, window=win, n_min=min(16, win - 2),
                                     stride=max(1, win // 8))

    @shared()
    def denominator_null(self) -> list:
        """:attr:`denominators` of DENOMINATOR_NULL_ROUNDS models whose layer 0 is a null layer (every
        head h a Gaussian draw of head h's W_Q, W_K, W_V, W_O norms, its biases permuted:
        claims.null.null_layer), on the same windows: draw r of head h is ``[r].trend_slope[h]``."""
        W = self.model.weights()
        return [self._denominators(self.model.with_weights(null_layer(W, 0, f"denominators:{r}", 1)))
                for r in range(DENOMINATOR_NULL_ROUNDS)]

    @shared("heads")
    def fidelity(self):
        """Circuit fidelity on one held-out window: the shipped sample texts and sample_corpus.txt
        joined (none is the calibration text), every FIDELITY_STRIDE-th position and the last."""
        circuit, _ = self.circuit
        tokens = windows(self.model, [held_out_text()], n_ctx=circuit.calibration.n_positions)[0]
        p = len(tokens)
        positions = sorted(set(range(FIDELITY_STRIDE, p, FIDELITY_STRIDE)) | {p - 1})
        return circuit_fidelity(circuit, [tokens], positions=positions)

    @shared_method("heads")
    def fidelity_baseline(self, positions: tuple[int, ...]) -> dict:
        """The circuit against the content-free approximation (:meth:`Circuit.predict` with
        ``content=False``: the positional kernel alone, no content/S̄) at `positions` of the held-out
        window, on the model (``model``) and on null layer-0 draws (``null``: :meth:`fidelity_null`).
        Each: medians over the positions of r and FVU, of the circuit and of the content-free one."""
        circuit, _ = self.circuit
        tokens = windows(self.model, [held_out_text()], n_ctx=circuit.calibration.n_positions)[0]
        return {"model": _fit_pair(circuit, tokens, list(positions)), "null": self.fidelity_null(positions)}

    @shared_method("heads")
    def fidelity_null(self, positions: tuple[int, ...]) -> list[dict]:
        """:func:`_fit_pair` of FIDELITY_NULL_DRAWS null circuits at `positions` of the held-out window:
        draw r is the circuit's heads of the null layer ``null_layer(W, 0, "denominators:r", 1)`` (every
        head a Gaussian draw of its own W_Q, W_K, W_V, W_O norms, biases permuted; draws 0–3 are the
        layers of :attr:`denominator_null`), its S̄ the log mean S over the denominator windows (as
        denominator_stability measures it, query ' the') at `positions`. Every draw's heads are packed
        in one layer-0 view, evaluated at once (contextual.grouped_true_output, grouped_predict;
        denominators.log_mean_S_at: keys-side scores at `positions` only, no forward pass). A rotary
        model: the DENOMINATOR_NULL_ROUNDS layers of :attr:`denominator_null`, one circuit each."""
        from .. import layer0
        from ..layer0.contextual import grouped_predict, grouped_true_output
        from ..layer0.denominators import log_mean_S_at

        circuit, _ = self.circuit
        cal = circuit.calibration
        tokens = windows(self.model, [held_out_text()], n_ctx=cal.n_positions)[0]
        pos = list(positions)
        if circuit.weights.cfg.positional == "rotary":
            return self._fidelity_null_rotary(circuit, tokens, pos)
        view = layer0.view(self.model)
        s = len(circuit.heads)
        nb = null_heads_packed(self.model.weights(), 0, circuit.heads,
                               [f"denominators:{r}" for r in range(FIDELITY_NULL_DRAWS)]).blocks[0]
        w = view.with_blocks({0: dataclasses.replace(view.blocks[0], **{
            k: getattr(nb, k).to(view.dtype) for k in ("W_Q", "W_K", "W_V", "W_O", "b_Q", "b_K", "b_V")})})
        win = self.model.cfg.n_ctx
        wins = [x[:win] for x in self.denominator_windows if len(x) >= win]
        if len(wins) < 2 or max(pos) >= win:
            raise HeadscopeError(f"the fidelity null needs 2 denominator windows of {win} tokens covering the positions")
        log_S = torch.full((s * FIDELITY_NULL_DRAWS, max(pos) + 1), float("nan"), dtype=view.dtype)
        log_S[:, pos] = log_mean_S_at(w, wins, cal.query_id, pos, layer0.measure_c(view))   # query ' the', as the measure
        groups = [list(range(r * s, (r + 1) * s)) for r in range(FIDELITY_NULL_DRAWS)]
        true = grouped_true_output(w, cal.query_id, cal.c, groups, tokens, pos)                   # [n R d]
        pred, free = (grouped_predict(w, cal.query_id, cal.c, log_S, groups, tokens, pos, content=c) for c in (True, False))
        return [_fit_stats(true[:, r], pred[:, r], free[:, r]) for r in range(FIDELITY_NULL_DRAWS)]

    def _fidelity_null_rotary(self, circuit, tokens: torch.Tensor, pos: list[int]) -> list[dict]:
        from .. import layer0
        from ..layer0.contextual import Circuit

        W, cal = self.model.weights(), circuit.calibration
        out = []
        for r, d in enumerate(self.denominator_null):
            view = layer0.view(self.model.with_weights(null_layer(W, 0, f"denominators:{r}", 1)))
            log_S = cal.log_seed_denom.clone()
            got = torch.tensor(d.log_mean, dtype=log_S.dtype)                                    # [H n_ctx]
            m = min(got.shape[1], log_S.shape[1])
            log_S[:, :m] = got[:, :m]
            c = Circuit(weights=view, calibration=dataclasses.replace(cal, log_seed_denom=log_S), heads=circuit.heads)
            out.append(_fit_pair(c, tokens, pos))
        return out

    @shared_method("heads", "variant")
    def neuron_scores(self, j: int) -> torch.Tensor:
        """score[t, j] of every token t through the circuit ([d_vocab]; variant and position of the scan)."""
        from ..layer0.neurons import ln2_divisor, readout, token_values

        self._check_neuron(j)
        circuit, choice = self.circuit
        v = self.variant
        n = choice.position if v.position is None else v.position
        return token_values(circuit, n, torch.float64, position_part=v.position_part) @ \
            readout(circuit, torch.float64, ln2_scale=ln2_divisor(circuit, v))[:, j]       # [V]

    @shared("heads", "variant")
    def readout_null(self) -> torch.Tensor:
        """score[t, k] [d_vocab READOUT_NULL] of random neurons through the circuit: readouts m_k
        (residual → pre-activation) Gaussian with the norms of randomly chosen neurons' readouts
        (centred where the readers are), scored as :meth:`neuron_scores` (variant and position of the scan)."""
        from ..layer0.neurons import readout_vectors

        circuit, choice = self.circuit
        v = self.variant
        n = choice.position if v.position is None else v.position
        m = readout_vectors(circuit, ln2_scale=ln2_divisor(circuit, v)).double()                # [d M]
        g = generator("neuron readouts")
        norms = m.norm(dim=0)[torch.randint(0, m.shape[1], (READOUT_NULL,), generator=g)]        # [K]
        R = random_readouts(torch.ones(m.shape[0], dtype=torch.float64), READOUT_NULL, g, circuit.weights.reads_centred)
        R = R / R.norm(dim=0, keepdim=True) * norms                                              # [d K]
        W_O = circuit.weights.blocks[0].W_O[circuit.heads].double()                              # [H e d]
        return token_values(circuit, n, torch.float64, position_part=v.position_part) @ \
            (W_O.reshape(-1, W_O.shape[-1]) @ R)                                                  # [V he] @ [he K]

    @shared("heads", "variant")
    def readout_null_labels(self) -> list:
        """topics.label_neuron of every random neuron of :attr:`readout_null` (its top and bottom TOP
        tokens through the circuit): row neuron_topics' null."""
        from ..layer0.topics import label_neuron

        S = self.readout_null                                                                    # [V K]
        k = min(TOP, S.shape[0])
        top, bottom = S.topk(k, dim=0).indices.T.tolist(), S.topk(k, dim=0, largest=False).indices.T.tolist()
        dec = self.model.to_str_tokens
        return [label_neuron(j, dec(t), dec(b)) for j, (t, b) in enumerate(zip(top, bottom))]

    @shared()
    def vocab_index(self) -> dict[str, int]:
        """Decoded token string → its first id (every id decoded on its own, as to_str_tokens)."""
        out: dict[str, int] = {}
        for i, t in enumerate(self.model.to_str_tokens(list(range(self.model.cfg.vocab)))):
            out.setdefault(t, i)
        return out

    def token_ids(self, tokens: list[str]) -> tuple[list[int], list[str]]:
        """(ids of the token strings that are one token here, the strings that are not)."""
        idx = self.vocab_index
        return [idx[t] for t in tokens if t in idx], [t for t in tokens if t not in idx]

    @shared("heads", "variant", "threshold")
    def topic_labels(self) -> list:
        """topics.label_neuron for every neuron of the scan (its top and bottom TOP tokens)."""
        from ..layer0.topics import label_neuron

        return [label_neuron(n["neuron"], n["top_tokens"], n["bottom_tokens"]) for n in self.scan.neurons]

    @shared_method("heads")
    def true_activation(self, j: int, text: str) -> tuple[float, float, int]:
        """(mean true pre-activation of neuron j over positions ≥ 1, mean circuit prediction over
        every FIDELITY_STRIDE-th position, tokens)."""
        from ..layer0.neurons import readout_vectors

        self._check_neuron(j)
        circuit, _ = self.circuit
        tokens = windows(self.model, [text], n_ctx=circuit.calibration.n_positions)[0]
        cache = run_with_cache(circuit.weights, tokens[None], names=["blocks.0.mlp.hook_pre"], stop_at_layer=1)
        true = cache["blocks.0.mlp.hook_pre"][0, 1:, j]
        pos = list(range(1, len(tokens), FIDELITY_STRIDE))
        pred = circuit.predict(tokens, pos) @ readout_vectors(circuit, [j])[:, 0] + circuit.weights.blocks[0].b_in[j]
        return float(true.mean()), float(pred.mean()), len(tokens) - 1



def _fit_pair(circuit, tokens: torch.Tensor, positions: list[int]) -> dict:
    """Medians over `positions` of r and FVU between the heads' true summed output and the circuit
    (``r``, ``fvu``) and the content-free approximation (``r_free``, ``fvu_free``)."""
    true = circuit.true_output(tokens)[positions]                                             # [n d]
    return _fit_stats(true, circuit.predict(tokens, positions), circuit.predict(tokens, positions, content=False))


def _fit_stats(true: torch.Tensor, pred: torch.Tensor, free: torch.Tensor) -> dict:
    """Medians over positions (rows) of r and FVU of `pred` (``r``, ``fvu``) and `free` (``r_free``,
    ``fvu_free``) against `true` ([n d] each)."""
    out = {}
    for key, p in (("", pred), ("_free", free)):
        out["r" + key], out["fvu" + key] = median(correlation(p, true)), median(fraction_unexplained(true, p))
    return out
