"""Result objects rendered as HTML in Jupyter, with the report's own figures and tables.

Result types inherit :class:`headscope._html_repr.HtmlRepr`, whose ``_repr_html_`` calls
:func:`render_html` here (registered with :func:`headscope._html_repr.set_renderer` on import) — the one place that knows how each type looks:

- :class:`~headscope.atlas.Atlas`: the atlas page's grids and table
  (:class:`~headscope.report.builtin.atlas.AtlasView`, without links; each cell's
  ``title`` holds every figure of its head, since notebooks run no report script);
- :class:`~headscope.composition.Composition`: the composition stage's heatmaps and edge table;
- :class:`~headscope.survey.SurveyResult`: the survey stage's table and figures;
- :class:`~headscope.head.HeadAnalysis`: the semantic stage's deep-dive section;
- :class:`~headscope.kernels.KernelReport`, :class:`~headscope.neurons.NeuronScan`,
  :class:`~headscope.neurons.NeuronRanking` (its table and a histogram of the robust score),
  :class:`~headscope.steering.SteerResult`, :class:`~headscope.reproduce.ReproduceResult`:
  the same tables and figure functions as their report stages, from the result alone.

Every fragment is wrapped in ``<div class="headscope">`` with a small stylesheet scoped
to it (the report's page CSS would restyle the notebook). Everything is escaped as in
the report (:mod:`headscope.report.html`).
"""

from __future__ import annotations

from .._html_repr import set_renderer
from . import figures as F
from . import html as H
from .stages import RenderContext

STYLE = """<style>
.headscope { font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; font-size: 13.5px; }
.headscope table.data th, .headscope table.data td { border-bottom: 1px solid #e3e3e3; padding: 3px 9px;
  text-align: left; vertical-align: top; }
.headscope td.num, .headscope th.num { text-align: right; font-variant-numeric: tabular-nums; }
.headscope caption { caption-side: bottom; text-align: left; color: #5f6368; font-size: 12px; }
.headscope table.kv td { padding: 2px 12px 2px 0; }
.headscope table.kv thead { display: none; }
.headscope figure { display: inline-block; vertical-align: top; margin: 6px 14px 12px 0; }
.headscope figcaption { font-size: 12px; color: #5f6368; max-width: 520px; }
.headscope .grid { display: flex; flex-wrap: wrap; gap: 0 18px; align-items: flex-start; }
.headscope code, .headscope .tokstr { font-family: ui-monospace, Menlo, Consolas, monospace; white-space: pre;
  background: #f1f1ef; padding: 0 3px; border-radius: 3px; }
.headscope .crumbs, .headscope .intro { color: #5f6368; font-size: 12.5px; }
.headscope table.hgrid { border-collapse: separate; border-spacing: 1px; font-size: 11px; }
.headscope table.hgrid th { font-weight: 500; color: #5f6368; padding: 0 3px; }
.headscope table.hgrid td { padding: 0; }
.headscope table.hgrid .cell { display: block; width: 16px; height: 16px; border-radius: 2px; }
.headscope .gridfig { display: inline-block; vertical-align: top; margin: 4px 22px 12px 0; }
.headscope .tok-scale span { display: inline-block; padding: 0 6px; margin-right: 2px; border-radius: 2px; }
</style>"""


def _atlas(obj) -> H.Safe:
    from ..maps.atlas import METRICS
    from .builtin.atlas import AtlasView

    d = obj.to_dict()
    view = AtlasView(d, d["rows"], links=False)
    return H.join([view.intro(), view.grids(METRICS), view.table(), view.notes()])


def _composition(obj) -> H.Safe:
    from .builtin.composition import CompositionView

    view = CompositionView(obj.to_dict(), links=False)
    return H.join([view.heatmaps(), view.edges()])


def _survey(obj) -> H.Safe:
    from .builtin.survey import SurveyStage

    return H.join(SurveyStage().render(obj.to_dict(), RenderContext(results={}, options=None)).index)


def _head(obj) -> H.Safe:
    from .builtin.semantic import SemanticStage

    return SemanticStage()._page({**obj.to_dict(), "rank": None, "semantic_loss": None})


def _kernels(obj) -> H.Safe:
    from ..layer0.kernels import CATEGORIES

    d = obj.to_dict()
    heads = d["heads"]
    label = lambda c: c.replace("_", " ")  # noqa: E731
    rows = [(f"L{d['layer']}H{h['head']}", label(h["category"]), h["width"], h["decay_rate"], h["content_boost"],
             h["tv_median"], h["tv_p90"]) for h in heads]
    table = H.table(["head", "category", "width (tokens)", "decay rate κ̂", "content boost", "TV median", "TV p90"],
                    rows, numeric=(2, 3, 4, 5, 6),
                    caption=f"Query {d['query']!r} at n = {d['n_ref']}; c = {d['c']:.3g} ({d['c_source']}). "
                            f"Rule: {d['rule']['text']}." + ("" if d["corpus"] else " TV: no corpus given."))
    curves = []
    for c in CATEGORIES:
        hs = [h for h in heads if h["category"] == c]
        if not hs:
            continue
        series = [F.Series(list(range(len(h["kernel"]))), h["kernel"], f"L{d['layer']}H{h['head']}") for h in hs[:8]]
        curves.append(H.figure(F.line_plot(series, log_y=True, title=f"{label(c)} heads", xlabel="distance δ = n − i",
                                           ylabel="pos[n, n − δ]", width=420, height=280),
                               f"Positional kernels of the {label(c)} heads for query {d['query']!r} at "
                               f"n = {d['n_ref']}, against the distance δ (log scale)."))
    return H.join([table, H.grid(curves)])


def _neurons(obj) -> H.Safe:
    d = obj.to_dict()
    toks = lambda ts: H.join([H.token_repr(t) + H.Safe(" ") for t in ts])  # noqa: E731
    rows = [(f"n{n['neuron']}", n["max_contribution"], n["min_contribution"], toks(n["top_tokens"][:6]),
             toks(n["bottom_tokens"][:6])) for n in d["neurons"]]
    table = H.table(["neuron", "max contribution", "min contribution", "top tokens", "bottom tokens"], rows,
                    numeric=(1, 2), caption=f"{len(d['neurons'])} of {d['n_neurons']} MLP0 neurons reach the "
                                            f"threshold {d['threshold']:g}; circuit heads "
                                            f"{', '.join(map(str, d['heads']))}.")
    hist = H.figure(F.histogram(obj.max_all, bins=40, title="Max token contribution of every neuron",
                                xlabel="max_t score[t, j]", ylabel="neurons", markers=[(d["threshold"], "threshold")]),
                    "Histogram over all MLP0 neurons of the largest pre-activation change a context of one token "
                    "type can cause through the contextual circuit; dashed: the threshold.")
    return H.join([table, hist])


def _ranking(obj, shown: int = 20) -> H.Safe:
    d = obj.to_dict(top=shown)
    rows = [(f"n{n['neuron']}", n["robust"], n["kth"], n["null_kth"], n["max"], obj.order_max.index(n["neuron"]) + 1)
            for n in d["neurons"]]
    table = H.table(["neuron", "robust score", f"k-th largest (k = {d['k']})", "null's k-th", "max", "rank by max"], rows,
                    numeric=(1, 2, 3, 4, 5),
                    caption=f"The {len(rows)} MLP0 neurons with the highest robust score: the k-th largest "
                            f"token score over the median k-th largest of {d['n_random']} random readouts of "
                            f"the same norm (1: no better than chance). Circuit heads "
                            f"{', '.join(map(str, d['heads']))}, position {d['position']}.")
    hist = H.figure(F.histogram(obj.robust, bins=40, title="Robust score of every neuron",
                                xlabel="k-th largest / null's k-th largest", ylabel="neurons"),
                    "Histogram over all MLP0 neurons of the null-calibrated robust score.")
    return H.join([table, hist])


def _steer(obj) -> H.Safe:
    d = obj.to_dict()
    kv = H.kv_table([("head", f"L{d['layer']}H{d['head']}"),
                     ("eigenvalues scaled", f"{d['n_selected']} ({d['select']}), by α = {d['alpha']:g}"),
                     ("self-attention before → after", f"{d['self_attention_before']:.4f} → "
                                                      f"{d['self_attention_after']:.4f}"),
                     ("mean rank of self before → after", f"{d['self_rank_before']:.2f} → {d['self_rank_after']:.2f}"),
                     ("rebuilt rank / rebuild error", f"{d['rank']} / {d['rebuild_error']:.2e}"),
                     ("written to", d["out"])])
    bars = H.figure(F.bar_plot([d["self_attention_before"], d["self_attention_after"]], ["before", f"α = {d['alpha']:g}"],
                               title="Self-attention probability", ylabel="mean A[q, q]", width=300),
                    "Mean self-attention probability A[q, q] on seeded category prompts, before and after steering.")
    return H.grid([kv, bars])


def _reproduce(obj) -> H.Safe:
    d = obj.to_dict()
    verdict = {True: "PASS", False: "FAIL", None: "n/a"}
    rows = [(r["id"], r["claim"], _short(r["published"]), _short(r["measured"]), r["tolerance"], verdict[r["passed"]])
            for r in d["rows"]]
    table = H.table(["claim", "what", "published", "measured", "tolerance", "result"], rows,
                    caption=f"{d['source']} (sha256 {d['fingerprint'][:12]}…), published column: {d['reference']}; "
                            f"{d['n_pass']} pass, {d['n_fail']} fail.")
    return H.join([table] + [H.Safe('<p class="crumbs">') + f"note: {n}" + H.Safe("</p>") for n in d["notes"]])


def _short(x, width: int = 60) -> str:
    from ..reproduce import _short as short

    return short(x, width)


def _revisions(r) -> H.Safe:
    """``--revisions``: the figure of each metric against the step, then the text table."""
    from .revisions_figure import revisions_figure

    return H.join([revisions_figure(r.to_dict()), H.tag("pre", r.render())])


def _renderers():
    from ..maps.atlas import Atlas
    from ..maps.composition import Composition
    from ..semantic.head import HeadAnalysis
    from ..layer0.kernels import KernelReport
    from ..layer0.neurons import NeuronRanking, NeuronScan
    from ..reproduce import ReproduceResult
    from ..semantic.steering import SteerResult
    from ..semantic.survey import SurveyResult
    from ..maps.revisions import RevisionsResult

    return [(RevisionsResult, _revisions), (Atlas, _atlas), (Composition, _composition), (SurveyResult, _survey), (HeadAnalysis, _head), (KernelReport, _kernels),
            (NeuronScan, _neurons), (NeuronRanking, _ranking), (SteerResult, _steer), (ReproduceResult, _reproduce)]


def render_html(obj) -> str:
    """HTML of a headscope result (see the module docstring); other objects as escaped text."""
    for cls, fn in _renderers():
        if isinstance(obj, cls):
            body = fn(obj)
            break
    else:
        text = obj.render() if callable(getattr(obj, "render", None)) else repr(obj)
        body = H.tag("pre", text)
    return STYLE + f'<div class="headscope">{H.h(body)}</div>'


set_renderer(render_html)
