"""Views of contextual MLP0 neurons: a scan (:class:`headscope.layer0.neurons.NeuronScan`) and the
robust ranking (:class:`headscope.layer0.neurons.NeuronRanking`), from their ``to_dict()``.

:func:`text` and :func:`ranking_text` are ``headscope neurons``'s output; :func:`html` the report
stage's index section and the notebook's view of a scan; :func:`neuron_section` a neuron's page
section; :func:`ranking_html` the notebook's view of a ranking. The report's neurons stage adds
each shown neuron's true and predicted pre-activation on the sample texts (``samples``,
``correlation``, ``true``, ``predicted``); without them those columns and figures are left out.
"""

from __future__ import annotations

import math

from ...stats import bin_values
from .. import figures as F
from .. import html as H
from ..paths import neuron_page

HIST_BINS = 40   #: bins of the histogram of every neuron's max token contribution


def max_hist(max_all) -> dict:
    """{"edges", "counts"}: the histogram of every neuron's max token contribution (``max_hist``)."""
    edges, counts = bin_values(max_all, bins=HIST_BINS)
    return {"edges": edges, "counts": counts}


def _tokens(toks) -> H.Safe:
    return H.join([H.token_repr(t) + H.Safe(" ") for t in toks])


# -- text -------------------------------------------------------------------------------------------


def text(d: dict, shown: int = 10) -> str:
    """The heads, the threshold and every neuron above it with its first `shown` top and bottom tokens."""
    lines = [f"heads {d['heads']} ({d['head_choice']['reason']})",
             f"position {d['position']}  query {d['query']!r}  threshold {d['threshold']:g}: "
             f"{len(d['neurons'])} of {d['n_neurons']} neurons"]
    for nr in d["neurons"]:
        lines.append(f"{nr['neuron']:>6} {nr.get('score', nr['max_contribution']):8.2f}  top {nr['top_tokens'][:shown]!r}")
        lines.append(f"{'':>15}  bottom {nr['bottom_tokens'][:shown]!r}")
    return "\n".join(lines)


def ranking_text(d: dict, shown: int = 20) -> str:
    """The `shown` neurons of highest robust score (of a ranking's dict with at least that many)."""
    lines = [f"robust ranking ({d['k']}-th largest token score over the null of {d['n_random']} "
             f"random readouts of the same norm):"]
    for n in d["neurons"][:shown]:
        lines.append(f"{n['neuron']:>6}  robust {n['robust']:7.2f}  max {n['max']:8.2f}  "
                     f"{d['k']}-th {n['kth']:8.2f}")
    return "\n".join(lines)


# -- HTML -------------------------------------------------------------------------------------------


def html(d: dict, *, links: bool = True) -> H.Safe:
    """The table of the neurons above the threshold, the histogram of every neuron's max contribution
    (``max_hist``) and, with the sample texts' traces, how well the circuit predicts each neuron."""
    ns = d["neurons"]
    traced = "samples" in d
    rows = [(H.link(neuron_page(n["neuron"]), f"n{n['neuron']}") if links else f"n{n['neuron']}",
             n["max_contribution"], n["min_contribution"], *([n["correlation"]] if traced else []),
             _tokens(n["top_tokens"][:6]), _tokens(n["bottom_tokens"][:6])) for n in ns]
    table = H.table(["neuron", "max contribution", "min contribution", *(["corr(true, circuit)"] if traced else []),
                     "top tokens", "bottom tokens"], rows, numeric=(1, 2, 3) if traced else (1, 2),
                    caption=f"{d.get('n_contextual', len(ns))} of {d['n_neurons']} MLP0 neurons reach the threshold "
                            f"{d['threshold']:g}; the {len(ns)} largest are shown. Circuit heads "
                            f"{', '.join(map(str, d['heads']))} ({d['head_choice']['reason']})"
                            + ("; correlation over the sample tokens (BOS excluded)." if traced else "."))
    hist = H.figure(F.histogram(edges=d["max_hist"]["edges"], counts=d["max_hist"]["counts"],
                                title="Max token contribution of every neuron", xlabel="max_t score[t, j]",
                                ylabel="neurons", markers=[(d["threshold"], "threshold")]),
                    "Histogram over all MLP0 neurons of the largest pre-activation change a context of one "
                    "token type can cause through the contextual circuit; dashed: the threshold.")
    if not traced:
        return H.join([table, H.grid([hist])])
    bars = H.figure(F.bar_plot([n["correlation"] or 0.0 for n in ns], [f"n{n['neuron']}" for n in ns],
                               title="Circuit vs true pre-activation", ylabel="correlation"),
                    "Pearson correlation, over the sample tokens, of each shown neuron's true pre-activation "
                    "and the circuit's prediction.")
    return H.join([table, H.grid([hist, bars])])


def summary(d: dict) -> list[tuple[str, object]]:
    return [("contextual MLP0 neurons", f"{d['n_contextual']} of {d['n_neurons']}"),
            ("contextual circuit heads", ", ".join(map(str, d["heads"])))]


def glance(n: dict) -> str:
    """A neuron's one-line summary (the report's page list)."""
    return f"contextual · max contribution {n['max_contribution']:.1f}"


def neuron_section(n: dict, d: dict) -> H.Safe:
    """A traced neuron's page section: its contributions, top and bottom tokens, and its true and
    predicted pre-activation on the sample texts as token heatmaps."""
    j = n["neuron"]
    kv = H.kv_table([("max token contribution", n["max_contribution"]),
                     ("min token contribution", n["min_contribution"]),
                     ("correlation true vs circuit", n["correlation"]),
                     ("circuit heads", ", ".join(map(str, d["heads"]))), ("query position n", d["position"])],
                    caption="Contributions: pre-activation change from a context made of one token type.")
    hdr = ["token", "contribution"]
    tabs = H.grid([
        H.table(hdr, [(H.token_repr(t), v) for t, v in zip(n["top_tokens"], n["top_values"])], numeric=(1,),
                caption="Top tokens (largest contribution)."),
        H.table(hdr, [(H.token_repr(t), v) for t, v in zip(n["bottom_tokens"], n["bottom_values"])], numeric=(1,),
                caption="Bottom tokens (smallest contribution)."),
    ])
    vals = [abs(v) for rows in n["true"] + n["predicted"] for v in rows if v is not None and math.isfinite(v)]
    vmax = max(vals, default=1.0) or 1.0
    heat = []
    for s, tr, pr in zip(d["samples"], n["true"], n["predicted"]):
        heat.append(H.Safe("<h3>") + H.h(f"Sample “{s['name']}”: true pre-activation") + H.Safe("</h3>"))
        heat.append(F.token_heatmap(s["tokens"], tr, vmax=vmax, value_name=f"n{j} true"))
        heat.append(H.Safe("<h3>") + H.h(f"Sample “{s['name']}”: circuit prediction") + H.Safe("</h3>"))
        heat.append(F.token_heatmap(s["tokens"], pr, vmax=vmax, value_name=f"n{j} predicted"))
    return H.section("Contextual neuron", H.join([
        kv, tabs, H.section("True and predicted pre-activation on the sample texts", H.join(heat),
                            intro=f"Blue negative, red positive, common scale ±{vmax:.3g}. The prediction uses the "
                                  f"fixed query {d['query']!r} at every position, the truth the text's own tokens.")]))


def ranking_html(d: dict, shown: int = 20) -> H.Safe:
    """The `shown` neurons of highest robust score and the histogram of every neuron's robust score
    (of a ranking's whole dict: ``to_dict()`` without ``top``)."""
    rows = [(f"n{n['neuron']}", n["robust"], n["kth"], n["null_kth"], n["max"], d["order_max"].index(n["neuron"]) + 1)
            for n in d["neurons"][:shown]]
    table = H.table(["neuron", "robust score", f"k-th largest (k = {d['k']})", "null's k-th", "max", "rank by max"],
                    rows, numeric=(1, 2, 3, 4, 5),
                    caption=f"The {len(rows)} MLP0 neurons with the highest robust score: the k-th largest "
                            f"token score over the median k-th largest of {d['n_random']} random readouts of "
                            f"the same norm (1: no better than chance). Circuit heads "
                            f"{', '.join(map(str, d['heads']))}, position {d['position']}.")
    hist = H.figure(F.histogram([n["robust"] for n in d["neurons"]], bins=HIST_BINS, title="Robust score of every neuron",
                                xlabel="k-th largest / null's k-th largest", ylabel="neurons"),
                    "Histogram over all MLP0 neurons of the null-calibrated robust score.")
    return H.join([table, hist])
