"""The analyses a sweep runs per (model, revision): their options, how to run them, and how to tabulate them.

Each :class:`Kind` names its options with their defaults (those of the command of the same
name; an option not given takes its default, an unknown one is refused in one line), runs on a
loaded model, and turns the result's JSON into

- ``tidy(doc)``: long-format rows ``(metric, component, value)`` — per head ``L<l>H<h>`` for the
  atlas, survey and kernels, per neuron ``N<i>`` for neurons, per writer→reader pair for
  composition, per claim for reproduce (``component`` empty);
- ``summarise(doc)``: per metric the max and min over components and which attain them
  (:func:`headscope.maps.revisions.summarise_atlas` for the atlas, the claims for reproduce).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Callable

from .._errors import HeadscopeError
from ..maps.revisions import summarise_atlas, summarise_reproduce


@dataclasses.dataclass(frozen=True)
class Kind:
    name: str
    defaults: dict                                  #: option → default (JSON-able)
    run: Callable[[object, dict], object]           #: (Model, options) → result with to_dict()
    tidy: Callable[[dict], list]                    #: the result's dict → [(metric, component, value)]
    required: tuple[str, ...]                       #: keys a complete JSON of it holds
    summarise: Callable[[dict], dict] | None = None

    def options(self, given: dict | None) -> dict:
        """`given` over the defaults; unknown names and values of the wrong type are one line."""
        given = dict(given or {})
        unknown = sorted(set(given) - set(self.defaults))
        if unknown:
            raise HeadscopeError(f"{self.name}: unknown option(s) {', '.join(unknown)}; expected some of "
                                 f"{', '.join(sorted(self.defaults))}")
        out = dict(self.defaults)
        for k, v in given.items():
            d = self.defaults[k]
            ok = (v is None or isinstance(v, (str, int, float, bool, list))) and not (
                isinstance(d, bool) and not isinstance(v, bool)) and not (
                isinstance(d, int) and not isinstance(d, bool) and (isinstance(v, bool) or not isinstance(v, int)))
            if isinstance(v, float) and not math.isfinite(v):
                ok = False
            if not ok:
                raise HeadscopeError(f"{self.name}.{k}: expected a value like {d!r}, got {v!r}")
            out[k] = v
        return out

    def summary(self, doc: dict) -> dict:
        return self.summarise(doc) if self.summarise is not None else summarise_rows(self.tidy(doc))


def _num(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def summarise_rows(rows: list) -> dict:
    """Per metric: max, argmax, min, argmin over its components (first wins ties; non-numbers skipped)."""
    out: dict[str, dict] = {}
    for metric, comp, value in rows:
        s = out.setdefault(metric, {"max": None, "argmax": None, "min": None, "argmin": None})
        if not _num(value):
            continue
        if s["max"] is None or value > s["max"]:
            s["max"], s["argmax"] = value, comp
        if s["min"] is None or value < s["min"]:
            s["min"], s["argmin"] = value, comp
    return out


def _head(r: dict) -> str:
    return f"L{r['layer']}H{r['head']}"


# -- atlas --------------------------------------------------------------------------------------


def _atlas_run(model, o: dict):
    from ..maps.atlas import atlas

    layers = None if o["layers"] is None else [model.cfg.check_layer(l) for l in o["layers"]]
    return atlas(model, layers, n_tokens=o["tokens"], corpus=o["corpus"], kernels=o["kernels"],
                 survey=o["survey"], logit_diff=None if o["logit_diff"] is None else tuple(o["logit_diff"]))


def _atlas_tidy(doc: dict) -> list:
    keys = list(summarise_atlas(doc))
    return [(k, _head(r), r.get(k)) for k in keys for r in doc["rows"]]


# -- reproduce ----------------------------------------------------------------------------------


def _reproduce_run(model, o: dict):
    from ..layer0.neurons import parse_variant
    from ..reproduce import reproduce

    variant = parse_variant(o["variant"]) if o["variant"] is not None else None
    return reproduce(model, details=o["details"], heads=o["heads"], variant=variant)


def _reproduce_tidy(doc: dict) -> list:
    rows = []
    for r in doc["rows"]:
        m = r.get("measured")
        rows.append((r["id"], "", m if _num(m) else None))
        rows.append((r["id"] + ".passed", "", None if r.get("passed") is None else int(bool(r["passed"]))))
    return rows


# -- kernels ------------------------------------------------------------------------------------

_KERNEL_METRICS = ("width", "spread", "decay_rate", "translation_tv", "query_tv", "content_std", "content_boost")


def _kernels_run(model, o: dict):
    from ..layer0.kernels import analyse_kernels

    model.cfg.check_layer(o["layer"])
    if model.cfg.positional == "rotary":
        from ..layer0 import relative

        if o["layer"] != 0:
            raise HeadscopeError(f"kernels.layer: the relative kernel reads layer 0; expected 0, got {o['layer']}")
        return relative.relative_kernels(model.weights())
    return analyse_kernels(model, layer=o["layer"], query=o["query"], c=o["c"], windows=None, n_ref=o["n_ref"],
                           rule_name=o["rule"])


def _kernels_tidy(doc: dict) -> list:
    layer = doc.get("layer", 0)
    rows = []
    for h in doc.get("heads", []):
        if not isinstance(h, dict):
            continue
        comp = f"L{layer}H{h['head']}"
        rows += [(k, comp, h[k]) for k in _KERNEL_METRICS if k in h and (h[k] is None or _num(h[k]))]
    return rows


# -- neurons ------------------------------------------------------------------------------------


def _neurons_run(model, o: dict):
    from .. import shipped
    from ..layer0.calibration import calibrate
    from ..layer0.contextual import HEAD_SETS, build_circuit
    from ..layer0.neurons import parse_variant, scan_neurons

    heads = o["heads"]
    if isinstance(heads, str):
        heads = None if heads == "auto" else HEAD_SETS.get(heads)
        if heads is None and o["heads"] != "auto":
            raise HeadscopeError(f"neurons.heads: expected auto, {', '.join(HEAD_SETS)} or a list of indices, "
                                 f"got {o['heads']!r}")
    variant = parse_variant(o["variant"]) if o["variant"] is not None else None
    cal = calibrate(model, shipped.calibration_text().text, query=o["query"], window=o["window"])
    circuit, choice = build_circuit(model, cal, heads=None if heads is None else list(heads), position=o["position"])
    return scan_neurons(circuit, choice, model.tokenizer, threshold=float(o["threshold"]), top=o["top"],
                        variant=variant)


def _neurons_tidy(doc: dict) -> list:
    rows = [("n_listed", "", len(doc["neurons"]))]
    for n in doc["neurons"]:
        rows += [("max_contribution", f"N{n['neuron']}", n["max_contribution"]),
                 ("min_contribution", f"N{n['neuron']}", n["min_contribution"])]
    return rows


# -- survey -------------------------------------------------------------------------------------

_SURVEY_METRICS = ("semantic_loss", "self_attention", "copy_attention", "same_category", "bos_fallback")


def _survey_run(model, o: dict):
    from ..semantic.survey import survey

    layers = None if o["layer"] is None else [model.cfg.check_layer(o["layer"])]
    bos = None if o["bos_query"] is None else o["bos_query"] == "include"
    return survey(model, layers, n_prompts=o["prompts"], length=o["length"], seed=o["seed"], preset=o["preset"],
                  include_bos_query=bos)


def _survey_tidy(doc: dict) -> list:
    return [(k, _head(r), r.get(k)) for k in _SURVEY_METRICS for r in doc["rows"]]


# -- composition --------------------------------------------------------------------------------


def _composition_run(model, o: dict):
    from ..maps.composition import composition

    return composition(model, k=o["edges"])


def _composition_tidy(doc: dict) -> list:
    """Per mode, each head's strongest incoming composition score (component: the reader head)."""
    rows = []
    for mode in ("Q", "K", "V"):
        for l, per_head in enumerate(doc["incoming"][mode]):
            if l == 0:
                continue                           # nothing writes into layer 0
            rows += [(f"{mode}_composition_in", f"L{l}H{h}", v) for h, v in enumerate(per_head)]
    return rows


def _kinds() -> dict[str, Kind]:
    from ..layer0.kernels import DEFAULT_RULE
    from ..layer0.split import SEED_QUERY
    from ..maps.atlas import DEFAULT_TOKENS
    from ..maps.composition import EDGES

    return {k.name: k for k in (
        Kind("atlas", {"layers": None, "tokens": DEFAULT_TOKENS, "corpus": None, "survey": False, "kernels": True,
                       "logit_diff": None}, _atlas_run, _atlas_tidy, ("rows", "metrics", "spec"), summarise_atlas),
        Kind("reproduce", {"details": True, "heads": "published", "variant": None}, _reproduce_run, _reproduce_tidy,
             ("rows", "ok", "n_pass", "n_fail"), summarise_reproduce),
        Kind("kernels", {"layer": 0, "query": SEED_QUERY, "c": "measured", "n_ref": None, "rule": DEFAULT_RULE},
             _kernels_run, _kernels_tidy, ()),
        Kind("neurons", {"threshold": 5.0, "top": 50, "heads": "auto", "variant": None, "query": SEED_QUERY,
                         "window": None, "position": None}, _neurons_run, _neurons_tidy, ("neurons",)),
        Kind("survey", {"layer": None, "preset": "headscope", "prompts": None, "length": None, "bos_query": None,
                        "seed": 0}, _survey_run, _survey_tidy, ("rows",)),
        Kind("composition", {"edges": EDGES}, _composition_run, _composition_tidy, ("incoming", "edges")),
    )}


#: analysis name → :class:`Kind` (the order of ``--analyses`` help)
KINDS = _kinds()
NAMES = tuple(KINDS)


def kind(name: str) -> Kind:
    if name not in KINDS:
        raise HeadscopeError(f"--analyses: expected some of {', '.join(NAMES)}, got {name!r}")
    return KINDS[name]
