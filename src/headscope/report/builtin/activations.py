"""Stage ``activations``: MLP0 pre-activations of a few neurons on the sample texts.

Runs :func:`headscope.activations.activation_profile` (definitions in its module
docstring). Unless neurons are given, the ones shown are the contextual neurons of the
``neurons`` stage (largest max token contribution first); if that stage found none,
the ``n_neurons`` with the largest standard deviation of their pre-activation.
"""

from __future__ import annotations

from ...maps.activations import activation_profile
from .. import figures as F
from .. import html as H
from ..stages import Context, PageSection, Rendered, Stage, register_stage
from ..paths import neuron_page


@register_stage
class ActivationsStage(Stage):
    name = "activations"
    title = "MLP0 neuron activations (sample texts)"
    version = 2
    inputs = ("samples",)
    requires = ("neurons",)
    tolerates_not_applicable = True     # no contextual neurons: the neurons of largest std are shown
    nullable = ("neurons[].values[][]",)   # BOS has no pre-activation shown

    def key_options(self, o) -> dict:
        return {"n_neurons": o.n_neurons, "neurons": None if o.neurons is None else list(o.neurons)}

    def compute(self, ctx: Context) -> dict:
        contextual = [n["neuron"] for n in ctx.results.get("neurons", {}).get("neurons", [])]   # [] if not applicable
        return activation_profile(ctx.model, ctx.inputs.samples, neurons=ctx.options.neurons, preferred=contextual,
                                  n_neurons=ctx.options.n_neurons,
                                  progress=ctx.progress.iter).to_dict()

    def render(self, data: dict, ctx) -> Rendered:
        ns = data["neurons"]
        rows = [(H.link(neuron_page(n["neuron"]), f"n{n['neuron']}"), n["mean"], n["std"], n["min"], n["max"],
                 H.token_repr(n["top"][0]["token"]) if n["top"] else "—") for n in ns]
        table = H.table(["neuron", "mean", "std", "min", "max", "top token"], rows, numeric=(1, 2, 3, 4),
                        caption=f"MLP0 pre-activations over {data['n_tokens']} non-BOS sample tokens; "
                                f"neurons shown: {data['selection']}.")
        fig_std = H.figure(
            F.histogram(edges=data["std_hist"]["edges"], counts=data["std_hist"]["counts"],
                        title="Spread of every MLP0 neuron", xlabel="std of pre-activation", ylabel="neurons"),
            "Histogram, over all MLP0 neurons, of the standard deviation of the pre-activation across "
            "the sample tokens (BOS excluded).")
        fig_bar = H.figure(
            F.bar_plot([n["max"] for n in ns], [f"n{n['neuron']}" for n in ns], title="Largest activation",
                       ylabel="max pre-activation"),
            "Maximum pre-activation on the sample tokens of each neuron shown.")
        pages = [PageSection(path=neuron_page(n["neuron"]), title=f"MLP0 neuron {n['neuron']}", group="MLP0 neurons",
                             order=(n["neuron"],), body=self._page(n, data),
                             summary=f"std {n['std']:.2f} · max {n['max']:.2f}") for n in ns]
        summary = [("MLP0 neurons with pages", len(ns))]
        return Rendered(index=[table, H.grid([fig_std, fig_bar])], summary=summary, pages=pages)

    def _page(self, n: dict, data: dict) -> H.Safe:
        j = n["neuron"]
        vmax = max(abs(n["min"]), abs(n["max"])) or 1.0
        parts = [H.kv_table([("mean", n["mean"]), ("std", n["std"]), ("min", n["min"]), ("max", n["max"])],
                            caption="Pre-activation statistics over the non-BOS sample tokens.")]
        parts.append(H.figure(
            F.histogram(edges=n["hist"]["edges"], counts=n["hist"]["counts"], title=f"n{j}: pre-activations",
                        xlabel="pre-activation", ylabel="tokens"),
            f"Histogram of neuron {j}'s MLP0 pre-activation over the {data['n_tokens']} non-BOS sample tokens."))

        def tok_rows(entries):
            return [(H.Safe(H.join([H.Safe('<span class="ctx">'), H.code("".join(e["context"])), H.Safe("</span>")])),
                     H.token_repr(e["token"]), data["samples"][e["sample"]]["name"], e["position"], e["value"])
                    for e in entries]

        hdr = ["left context", "token", "sample", "position", "pre-activation"]
        parts.append(H.Safe('<div class="grid"><div>') + H.table(hdr, tok_rows(n["top"]), numeric=(3, 4),
                                                                  caption="Top tokens (largest pre-activation).")
                     + H.Safe("</div><div>") + H.table(hdr, tok_rows(n["bottom"]), numeric=(3, 4),
                                                      caption="Bottom tokens (smallest pre-activation).")
                     + H.Safe("</div></div>"))
        heat = []
        for s, vals in zip(data["samples"], n["values"]):
            heat.append(H.Safe("<h3>") + H.h(f"Sample “{s['name']}”") + H.Safe("</h3>"))
            heat.append(F.token_heatmap(s["tokens"], vals, vmax=vmax, value_name=f"n{j} pre-activation"))
        parts.append(H.section("Token heatmaps", H.join(heat),
                               intro=f"Each token's background shows neuron {j}'s pre-activation there "
                                     f"(blue negative, red positive, common scale ±{vmax:.3g}); hover for the value."))
        return H.join(parts)
