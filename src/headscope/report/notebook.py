"""Result objects rendered as HTML in Jupyter: the report's own views, looked up by type.

Result types inherit :class:`headscope._html_repr.HtmlRepr`, whose ``_repr_html_`` calls
:func:`render_html` here (registered with :func:`headscope._html_repr.set_renderer` on import).
It draws nothing itself: :data:`headscope.report.views.REGISTRY` maps each result class to the
HTML view of its module in :mod:`headscope.report.views` — the same functions the report's
stages draw with, given the result's ``to_dict()`` and no links (notebooks have no report pages;
the atlas's cells carry every figure of their head in ``title``, since notebooks run no report
script). Parts of a report section that need data only the report computes (the kernel
heatmaps, the neurons' traces on the sample texts, the steered head's patterns) are left out.

Every fragment is wrapped in ``<div class="headscope">`` with a small stylesheet scoped
to it (the report's page CSS would restyle the notebook). Everything is escaped as in
the report (:mod:`headscope.report.html`); an object without a view is shown as escaped text.
"""

from __future__ import annotations

from .._html_repr import set_renderer
from . import html as H
from .views import views_of

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


def render_html(obj) -> str:
    """HTML of a headscope result (see the module docstring); other objects as escaped text."""
    views = views_of(obj)
    if views is not None and views[0] is not None:
        body = views[0](obj)
    else:
        text = obj.render() if callable(getattr(obj, "render", None)) else repr(obj)
        body = H.tag("pre", text)
    return STYLE + f'<div class="headscope">{H.h(body)}</div>'


set_renderer(render_html)
