"""Stage ``neurons``: contextual MLP0 neurons found through the calibrated contextual circuit.

From the ``calibration`` stage's calibration: :func:`headscope.contextual.build_circuit`
(heads chosen automatically), :func:`headscope.neurons.scan_neurons` over the whole
vocabulary (max token contribution of every neuron, threshold 5.0), and for the
``n_neurons`` neurons of largest max contribution their true MLP0 pre-activation on the
sample texts beside the circuit's prediction (:func:`headscope.neurons.neuron_traces`).
"""

from __future__ import annotations

from ...layer0.calibration import Calibration
from ...layer0.contextual import build_circuit
from ...layer0.neurons import DEFAULT_THRESHOLD, neuron_traces, scan_neurons
from ..stages import Context, PageSection, Rendered, Stage, register_stage
from ..views import neurons as V
from ..paths import neuron_page

TOP = 20  #: top / bottom tokens kept per neuron


@register_stage
class NeuronsStage(Stage):
    name = "neurons"
    title = "Contextual MLP0 neurons"
    version = 2     # 2: rotary models (layer0.rotary_split)
    nullable = ("neurons[].correlation", "neurons[].true[][]", "neurons[].predicted[][]")   # constant side; BOS
    inputs = ("samples",)
    requires = ("calibration",)
    long = True               # one of the longest lane stages: started first (report.lanes)

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
        d["max_hist"] = V.max_hist(scan.max_all)
        d["samples"] = [{"name": t.name, "tokens": traces[0].texts[i]["tokens"] if traces    # decoded once
                         else model.to_str_tokens(x.tolist())} for i, (t, x) in enumerate(zip(ctx.inputs.samples, toks))]
        return d

    def render(self, data: dict, ctx) -> Rendered:
        pages = [PageSection(path=neuron_page(n["neuron"]), title=f"MLP0 neuron {n['neuron']}", group="MLP0 neurons",
                             order=(n["neuron"],), body=V.neuron_section(n, data), summary=V.glance(n))
                 for n in data["neurons"]]
        return Rendered(index=[V.html(data)], summary=V.summary(data), pages=pages)
