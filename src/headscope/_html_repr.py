"""Jupyter rendering of result objects, in one place.

Result types inherit :class:`HtmlRepr`; Jupyter calls ``_repr_html_``, which hands the
object to :func:`headscope.report.notebook.render_html` — the report's own figures and
tables for that type. The import is deferred so that library modules import no report
code when they are imported.
"""

from __future__ import annotations


class HtmlRepr:
    """Mixin: ``_repr_html_`` renders the result with the report's figures."""

    def _repr_html_(self) -> str:
        from .report.notebook import render_html

        return render_html(self)
