"""The HTML report: ``headscope report MODEL --out DIR``.

A report is a list of *stages* (:mod:`.stages`), run in order or, where torch has two
threads, two at a time (:mod:`.lanes`: a stage starts once the stages it requires have
finished; the ``exclusive`` ones run alone on every thread). Each stage computes a
JSON-ready dict, saved to ``DIR/data/<name>.json`` together with a cache key (model
fingerprint, dtype, device, processing, the stage's options, sha256 of the input texts it
reads, keys of the stages it requires), and renders HTML from that dict: sections of
``index.html``, rows of the index summary table, and sections of per-item pages. A
rerun — or the resumption of an interrupted run — reuses every stage whose key matches,
so it recomputes nothing finished and writes byte-identical JSON.

Modules: :mod:`.figures` (inline SVG: line plots with bands, histograms, heatmaps,
bars, spectra, token heatmaps), :mod:`.html` (escaping, tables, page template),
:mod:`.stages` (Stage, registry, cache key), :mod:`.build` (``build_report``), :mod:`.lanes`
(stages side by side),
:mod:`.inputs` (shipped default texts), :mod:`.builtin` (the built-in stages).

Adding a stage
--------------
Write one class in ``headscope/report/builtin/<name>.py`` and import that module in
``headscope/report/builtin/__init__.py`` (import order = run order)::

    from headscope.report import figures as F, html as H
    from headscope.report.stages import PageSection, Rendered, Stage, register_stage
    from headscope.layer0 import SEED_QUERY
    from headscope.report.paths import head_page

    @register_stage
    class KernelsStage(Stage):
        name = "kernels"                      # → DIR/data/kernels.json
        title = "Layer-0 positional kernels"  # index section heading
        version = 1                           # bump when compute changes
        inputs = ("calibration",)             # texts read: "calibration", "samples"
        requires = ()                         # earlier stages read via ctx.results[name] (only these)

        def key_options(self, options):       # options that change the numbers
            return {"query": SEED_QUERY}

        def compute(self, ctx):               # ctx.model, ctx.weights(), ctx.inputs, ctx.progress
            from headscope.layer0.kernels import analyse_kernels    # the analysis (its own module)
            return analyse_kernels(ctx.model, ...).to_dict()        # typed result → JSON-ready dict

        def render(self, data, ctx):          # data: the saved dict (after the JSON round trip)
            pages = [PageSection(path=head_page(0, h["head"]), title=f"Head 0.{h['head']}",
                                 group="Attention heads", order=(0, h["head"]),
                                 body=H.figure(F.line_plot([F.Series(h["i"], h["kernel"], "pos")],
                                                           xlabel="key position i", ylabel="pos[n, i]"),
                                               "Positional kernel of head 0.h at query position n."))
                     for h in data["heads"]]
            return Rendered(index=[H.table(["head", "category"], [(h["head"], h["category"]) for h in data["heads"]])],
                            summary=[("local heads", sum(h["category"] == "local" for h in data["heads"]))],
                            pages=pages)

A stage that cannot apply to a model raises :class:`headscope.NotApplicable` in compute
(e.g. no layer-0 head qualifies for the contextual circuit): the report saves
``{"not_applicable": reason}``, shows the reason in the stage's section and summary row,
and goes on; fields that may legitimately be ``null`` are listed in ``nullable``
(see :mod:`headscope._json` for the policy: never NaN, inf, or an undeclared null).

Sections for the same page path from different stages are merged into one page, so
a kernels stage adds to the attention stage's ``heads/L0H3.html`` and a contextual-neuron
stage to ``neurons/n123.html`` (:func:`.paths.head_page`,
:func:`.paths.neuron_page`). Pass plain ``str`` for any text (escaped
automatically); only markup built by :mod:`.html`/:mod:`.figures` is :class:`.html.Safe`.
Use ``ctx.progress.iter(items)`` (or ``set_total``/``update``) for the stage's progress bar.
Stages can also be passed directly: ``build_report(model, out, stages=[MyStage()])``.
"""

from . import notebook  # noqa: F401  (registers the notebook views of result objects)
from .build import MARKER, ReportOptions, ReportResult, StageRun, build_report
from .builtin import default_stages
from .stages import REGISTRY, Context, PageSection, Rendered, RenderContext, Stage, register_stage

__all__ = [
    "MARKER", "REGISTRY", "Context", "PageSection", "RenderContext", "Rendered", "ReportOptions", "ReportResult",
    "Stage", "StageRun", "build_report", "default_stages", "register_stage",
]
