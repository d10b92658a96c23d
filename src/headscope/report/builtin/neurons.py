"""Stage ``neurons``: contextual MLP0 neurons found through the calibrated contextual circuit.

From the ``calibration`` stage's calibration: :func:`headscope.contextual.build_circuit`
(heads chosen automatically), :func:`headscope.neurons.scan_neurons` over the whole
vocabulary (max token contribution of every neuron, threshold 5.0), and for the
``n_neurons`` neurons of largest max contribution their true MLP0 pre-activation on the
sample texts beside the circuit's prediction (:func:`headscope.neurons.neuron_traces`).
"""

from __future__ import annotations

import math

from ...layer0.calibration import Calibration
from ...layer0.contextual import build_circuit
from ...layer0.neurons import DEFAULT_THRESHOLD, neuron_traces, scan_neurons
from ...stats import bin_values
from .. import figures as F
from .. import html as H
from ..stages import Context, PageSection, Rendered, Stage, register_stage
from .paths import neuron_page

TOP = 20  #: top / bottom tokens kept per neuron


@register_stage
class NeuronsStage(Stage):
    name = "neurons"
    title = "Contextual MLP0 neurons"
    version = 1
    nullable = ("neurons[].correlation", "neurons[].true[][]", "neurons[].predicted[][]")   # constant side; BOS
    inputs = ("samples",)
    requires = ("calibration",)

    def key_options(self, o) -> dict:
        return {"threshold": DEFAULT_THRESHOLD, "top": TOP, "n_neurons": o.n_neurons}

    def compute(self, ctx: Context) -> dict:
        model = ctx.model
        p = ctx.progress
        p.set_total(2)
        cal = Calibration.from_dict(ctx.results["calibration"], source="the calibration stage")
        circuit, choice = build_circuit(model, cal)
        scan = scan_neurons(circuit, choice, model.tokenizer, threshold=DEFAULT_THRESHOLD, top=TOP)
        p.update()
        shown = scan.neurons[: ctx.options.n_neurons]
        toks = [model.to_tokens(t.text)[: cal.n_positions] for t in ctx.inputs.samples]
        traces = neuron_traces(circuit, [nr["neuron"] for nr in shown], model.tokenizer, toks)
        p.update()
        d = scan.to_dict()
        d["n_contextual"] = len(scan.neurons)
        d["contextual"] = [nr["neuron"] for nr in scan.neurons]
        d["neurons"] = [{**nr, "correlation": tr.correlation,
                         "true": [[None] + row["true"][1:] for row in tr.texts],
                         "predicted": [[None] + row["predicted"][1:] for row in tr.texts]}
                        for nr, tr in zip(shown, traces)]
        edges, counts = bin_values(scan.max_all, bins=40)
        d["max_hist"] = {"edges": edges, "counts": counts}
        d["samples"] = [{"name": t.name, "tokens": model.to_str_tokens(x.tolist())}
                        for t, x in zip(ctx.inputs.samples, toks)]
        return d

    def render(self, data: dict, ctx) -> Rendered:
        ns = data["neurons"]
        rows = [(H.link(neuron_page(n["neuron"]), f"n{n['neuron']}"), n["max_contribution"], n["min_contribution"],
                 n["correlation"], _tokens(n["top_tokens"][:6]), _tokens(n["bottom_tokens"][:6])) for n in ns]
        table = H.table(["neuron", "max contribution", "min contribution", "corr(true, circuit)", "top tokens",
                         "bottom tokens"], rows, numeric=(1, 2, 3),
                        caption=f"{data['n_contextual']} of {data['n_neurons']} MLP0 neurons reach the threshold "
                                f"{data['threshold']:g}; the {len(ns)} largest are shown. Circuit heads "
                                f"{', '.join(map(str, data['heads']))} ({data['head_choice']['reason']}); "
                                f"correlation over the sample tokens (BOS excluded).")
        hist = H.figure(F.histogram(edges=data["max_hist"]["edges"], counts=data["max_hist"]["counts"],
                                    title="Max token contribution of every neuron", xlabel="max_t score[t, j]",
                                    ylabel="neurons", markers=[(data["threshold"], "threshold")]),
                        "Histogram over all MLP0 neurons of the largest pre-activation change a context of one "
                        "token type can cause through the contextual circuit; dashed: the threshold.")
        bars = H.figure(F.bar_plot([n["correlation"] or 0.0 for n in ns], [f"n{n['neuron']}" for n in ns],
                                   title="Circuit vs true pre-activation", ylabel="correlation"),
                        "Pearson correlation, over the sample tokens, of each shown neuron's true pre-activation "
                        "and the circuit's prediction.")
        pages = [PageSection(path=neuron_page(n["neuron"]), title=f"MLP0 neuron {n['neuron']}", group="MLP0 neurons",
                             order=(n["neuron"],), body=self._page(n, data),
                             summary=f"contextual · max contribution {n['max_contribution']:.1f}") for n in ns]
        summary = [("contextual MLP0 neurons", f"{data['n_contextual']} of {data['n_neurons']}"),
                   ("contextual circuit heads", ", ".join(map(str, data["heads"])))]
        return Rendered(index=[table, H.grid([hist, bars])], summary=summary, pages=pages)

    def _page(self, n: dict, data: dict) -> H.Safe:
        j = n["neuron"]
        kv = H.kv_table([("max token contribution", n["max_contribution"]),
                         ("min token contribution", n["min_contribution"]),
                         ("correlation true vs circuit", n["correlation"]),
                         ("circuit heads", ", ".join(map(str, data["heads"]))), ("query position n", data["position"])],
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
        for s, tr, pr in zip(data["samples"], n["true"], n["predicted"]):
            heat.append(H.Safe("<h3>") + H.h(f"Sample “{s['name']}”: true pre-activation") + H.Safe("</h3>"))
            heat.append(F.token_heatmap(s["tokens"], tr, vmax=vmax, value_name=f"n{j} true"))
            heat.append(H.Safe("<h3>") + H.h(f"Sample “{s['name']}”: circuit prediction") + H.Safe("</h3>"))
            heat.append(F.token_heatmap(s["tokens"], pr, vmax=vmax, value_name=f"n{j} predicted"))
        return H.section("Contextual neuron", H.join([
            kv, tabs, H.section("True and predicted pre-activation on the sample texts", H.join(heat),
                                intro=f"Blue negative, red positive, common scale ±{vmax:.3g}. The prediction uses the "
                                      f"fixed query {data['query']!r} at every position, the truth the text's own tokens.")]))


def _tokens(toks) -> H.Safe:
    return H.join([H.token_repr(t) + H.Safe(" ") for t in toks])
