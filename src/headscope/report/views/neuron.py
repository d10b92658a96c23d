"""Views of one MLP0 neuron traced on texts (:class:`headscope.layer0.neurons.NeuronTrace`), from its
``to_dict()`` with each text's ``name`` set.

:func:`text` is ``headscope neuron``'s output and :func:`page` its ``--out`` HTML page: every text
twice as tokens coloured by the true pre-activation and by the circuit's prediction.
"""

from __future__ import annotations

import math

from .. import figures as F
from .. import html as H


def _r(x: float | None) -> str:
    return "—" if x is None else f"{x:.3f}"


def text(d: dict) -> str:
    """The correlation over all texts, then per text its correlation and mean true pre-activation."""
    lines = [f"neuron {d['neuron']}: correlation {_r(d['correlation'])} (heads {d['heads']})"]
    lines += [f"  {t['name']}: r = {_r(t['correlation'])}, "
              f"mean true {sum(t['true'][1:]) / max(len(t['true']) - 1, 1):.3f}" for t in d["texts"]]
    return "\n".join(lines)


def page(d: dict) -> str:
    """A standalone page: true and predicted pre-activation of every text as token heatmaps."""
    vals = [abs(v) for t in d["texts"] for v in t["true"][1:] + t["predicted"][1:] if math.isfinite(v)]
    vmax = max(vals, default=1.0) or 1.0
    parts = [H.Safe("<p>") + H.h(f"Heads {', '.join(map(str, d['heads']))}, query {d['query']!r}; correlation "
                                 f"of the true pre-activation and the circuit's prediction {_r(d['correlation'])} "
                                 f"(BOS excluded). Blue negative, red positive, common scale ±{vmax:.3g}; hover for "
                                 f"the value.") + H.Safe("</p>")]
    for t in d["texts"]:
        for key, label in (("true", "true pre-activation"), ("predicted", "circuit prediction")):
            parts.append(H.Safe("<h2>") + H.h(f"{t['name']} (r = {_r(t['correlation'])}): {label}") + H.Safe("</h2>"))
            parts.append(F.token_heatmap(t["tokens"], [None] + t[key][1:], vmax=vmax,
                                         value_name=f"n{d['neuron']} {key}"))
    return H.page(f"MLP0 neuron {d['neuron']}", H.join(parts), path="neuron.html", output="neuron")
