"""The analyses a sweep runs per (model, revision): their options, how to run them, and how to tabulate them.

Each :class:`Kind` names its options with their defaults (those of the command of the same
name; an option not given takes its default, an unknown one is refused in one line), runs on a
loaded model, and turns the result's JSON into

- ``tidy(doc)``: long-format rows ``(metric, component, value)`` — per head ``L<l>H<h>`` for the
  atlas, survey and kernels, per neuron ``N<i>`` for neurons, per writer→reader pair for
  composition, per claim for reproduce (``component`` empty);
- ``summarise(doc)``: per metric the max and min over components and which attain them
  (:func:`headscope.maps.revisions.summarise_atlas` for the atlas, the claims for reproduce).

Pass-through: every other keyword argument of the analysis's function (``Kind.function``, e.g.
:func:`headscope.reproduce.reproduce`) whose default is a bool, int, float or str — or whose
annotation is made of those and None — is an option too, under its own name, passed to the
function as given (``--set reproduce.find=true`` → ``reproduce(model, …, find=True)`` once
that argument exists). Such an option enters the task's options (and key) only when given, so
adding one to a function leaves earlier tasks reusable.
"""

from __future__ import annotations

import dataclasses
import inspect
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
    function: Callable[[], Callable] | None = None  #: the analysis's function (imported when asked)
    sets: tuple[str, ...] = ()                      #: its keyword arguments that are no option (`run` sets them)

    def passthrough(self) -> dict[str, tuple]:
        """name → (default, accepted types): the function's other plain keyword arguments (module docstring)."""
        if self.function is None:
            return {}
        out = {}
        params = list(inspect.signature(self.function()).parameters.values())[1:]      # after the model
        for prm in params:
            if prm.name in self.sets or prm.name in self.defaults or prm.default is inspect.Parameter.empty or \
                    prm.kind not in (prm.KEYWORD_ONLY, prm.POSITIONAL_OR_KEYWORD):
                continue
            types = _plain_types(prm.annotation, prm.default)
            if types:
                out[prm.name] = (prm.default, types)
        return out

    def options(self, given: dict | None) -> dict:
        """`given` over the defaults; unknown names and values of the wrong type are one line."""
        given = dict(given or {})
        extra = self.passthrough() if set(given) - set(self.defaults) else {}
        unknown = sorted(set(given) - set(self.defaults) - set(extra))
        if unknown:
            raise HeadscopeError(f"{self.name}: unknown option(s) {', '.join(unknown)}; expected some of "
                                 f"{', '.join(sorted([*self.defaults, *self.passthrough()]))}")
        out = dict(self.defaults)
        for k in sorted(set(given) & set(extra)):                 # only when given: earlier keys unchanged
            v, (d, types) = given.pop(k), extra[k]
            if not _is(v, types):
                raise HeadscopeError(f"{self.name}.{k}: expected {' or '.join(_name(t) for t in types)} "
                                     f"(default {d!r}), got {v!r}")
            out[k] = v
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

    def execute(self, model, options: dict):
        """Run on `model` with checked `options` (:meth:`options`): the pass-through ones as keyword arguments."""
        extra = {k: options[k] for k in self.passthrough() if k in options}
        return self.run(model, {k: v for k, v in options.items() if k not in extra}, **extra)

    def summary(self, doc: dict) -> dict:
        return self.summarise(doc) if self.summarise is not None else summarise_rows(self.tidy(doc))


_PLAIN = {"bool": bool, "int": int, "float": float, "str": str, "None": type(None)}


def _plain_types(annotation, default) -> tuple:
    """The JSON types an argument takes: from its annotation when it names only bool/int/float/str/None,
    else from a plain default; () when neither (an object, a callable, a tensor: not an option)."""
    if isinstance(annotation, type) and annotation.__name__ in _PLAIN:
        annotation = annotation.__name__
    if isinstance(annotation, str):
        names = [a.strip() for a in annotation.strip("'\"").replace("Optional[", "").rstrip("]").split("|")]
        if all(n in _PLAIN for n in names):
            return tuple(_PLAIN[n] for n in names)
        return ()
    if annotation is inspect.Parameter.empty and type(default) in (bool, int, float, str):
        return (type(default),)
    return ()


def _name(t: type) -> str:
    return "None" if t is type(None) else t.__name__


def _is(v, types: tuple) -> bool:
    if isinstance(v, bool):
        return bool in types
    if isinstance(v, int):
        return int in types or float in types
    if isinstance(v, float):
        return float in types and math.isfinite(v)
    return isinstance(v, tuple(t for t in types if t not in (int, float, bool)))


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


def _atlas_run(model, o: dict, **extra):
    from ..maps.atlas import atlas

    layers = None if o["layers"] is None else [model.cfg.check_layer(l) for l in o["layers"]]
    return atlas(model, layers, n_tokens=o["tokens"], corpus=o["corpus"], kernels=o["kernels"],
                 survey=o["survey"], logit_diff=None if o["logit_diff"] is None else tuple(o["logit_diff"]), **extra)


def _atlas_tidy(doc: dict) -> list:
    keys = list(summarise_atlas(doc))
    return [(k, _head(r), r.get(k)) for k in keys for r in doc["rows"]]


# -- reproduce ----------------------------------------------------------------------------------


def _reproduce_run(model, o: dict, **extra):
    from ..layer0.neurons import parse_variant
    from ..reproduce import reproduce

    variant = parse_variant(o["variant"]) if o["variant"] is not None else None
    return reproduce(model, details=o["details"], heads=o["heads"], variant=variant, **extra)


def _reproduce_tidy(doc: dict) -> list:
    rows = []
    for r in doc["rows"]:
        m = r.get("measured")
        rows.append((r["id"], "", m if _num(m) else None))
        rows.append((r["id"] + ".passed", "", None if r.get("passed") is None else int(bool(r["passed"]))))
    return rows


# -- kernels ------------------------------------------------------------------------------------

_KERNEL_METRICS = ("width", "spread", "decay_rate", "translation_tv", "query_tv", "content_std", "content_boost")


def _kernels_run(model, o: dict, **extra):
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


def _neurons_run(model, o: dict, **extra):
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
                        variant=variant, **extra)


def _neurons_tidy(doc: dict) -> list:
    rows = [("n_listed", "", len(doc["neurons"]))]
    for n in doc["neurons"]:
        rows += [("max_contribution", f"N{n['neuron']}", n["max_contribution"]),
                 ("min_contribution", f"N{n['neuron']}", n["min_contribution"])]
    return rows


# -- survey -------------------------------------------------------------------------------------

_SURVEY_METRICS = ("semantic_loss", "self_attention", "copy_attention", "same_category", "bos_fallback")


def _survey_run(model, o: dict, **extra):
    from ..semantic.survey import survey

    layers = None if o["layer"] is None else [model.cfg.check_layer(o["layer"])]
    bos = None if o["bos_query"] is None else o["bos_query"] == "include"
    return survey(model, layers, n_prompts=o["prompts"], length=o["length"], seed=o["seed"], preset=o["preset"],
                  include_bos_query=bos, **extra)


def _survey_tidy(doc: dict) -> list:
    return [(k, _head(r), r.get(k)) for k in _SURVEY_METRICS for r in doc["rows"]]


# -- composition --------------------------------------------------------------------------------


def _composition_run(model, o: dict, **extra):
    from ..maps.composition import composition

    return composition(model, k=o["edges"], **extra)


def _composition_tidy(doc: dict) -> list:
    """Per mode, each head's strongest incoming composition score (component: the reader head)."""
    rows = []
    for mode in ("Q", "K", "V"):
        for l, per_head in enumerate(doc["incoming"][mode]):
            if l == 0:
                continue                           # nothing writes into layer 0
            rows += [(f"{mode}_composition_in", f"L{l}H{h}", v) for h, v in enumerate(per_head)]
    return rows


def _function(module: str, name: str) -> Callable[[], Callable]:
    """The analysis function `module`.`name`, looked up when asked (a patched or newer one is what runs)."""
    def get():
        import importlib

        return getattr(importlib.import_module(module, __package__), name)
    return get


def _kinds() -> dict[str, Kind]:
    from ..layer0.kernels import DEFAULT_RULE
    from ..layer0.split import SEED_QUERY
    from ..maps.atlas import DEFAULT_TOKENS
    from ..maps.composition import EDGES

    return {k.name: k for k in (
        Kind("atlas", {"layers": None, "tokens": DEFAULT_TOKENS, "corpus": None, "survey": False, "kernels": True,
                       "logit_diff": None}, _atlas_run, _atlas_tidy, ("rows", "metrics", "spec"), summarise_atlas,
             _function("..maps.atlas", "atlas"), ("layers", "n_tokens", "corpus", "kernels", "survey", "logit_diff",
                                                  "progress")),
        Kind("reproduce", {"details": True, "heads": "published", "variant": None}, _reproduce_run, _reproduce_tidy,
             ("rows", "ok", "n_pass", "n_fail"), summarise_reproduce, _function("..reproduce", "reproduce"),
             ("details", "heads", "variant", "reference")),
        Kind("kernels", {"layer": 0, "query": SEED_QUERY, "c": "measured", "n_ref": None, "rule": DEFAULT_RULE},
             _kernels_run, _kernels_tidy, ()),
        Kind("neurons", {"threshold": 5.0, "top": 50, "heads": "auto", "variant": None, "query": SEED_QUERY,
                         "window": None, "position": None}, _neurons_run, _neurons_tidy, ("neurons",), None,
             _function("..layer0.neurons", "scan_neurons"), ("tokenizer", "threshold", "top", "position", "variant",
                                                             "dtype")),
        Kind("survey", {"layer": None, "preset": "headscope", "prompts": None, "length": None, "bos_query": None,
                        "seed": 0}, _survey_run, _survey_tidy, ("rows",), None, _function("..semantic.survey", "survey"),
             ("layers", "n_prompts", "length", "seed", "preset", "include_bos_query", "categories")),
        Kind("composition", {"edges": EDGES}, _composition_run, _composition_tidy, ("incoming", "edges"), None,
             _function("..maps.composition", "composition"), ("k",)),
    )}


#: analysis name → :class:`Kind` (the order of ``--analyses`` help)
KINDS = _kinds()
NAMES = tuple(KINDS)


def kind(name: str) -> Kind:
    if name not in KINDS:
        raise HeadscopeError(f"--analyses: expected some of {', '.join(NAMES)}, got {name!r}")
    return KINDS[name]
