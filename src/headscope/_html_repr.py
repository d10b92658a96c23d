"""Jupyter rendering of result objects, in one place.

Result types inherit :class:`HtmlRepr`; Jupyter calls ``_repr_html_``, which hands the
object to the renderer that :mod:`headscope.report.notebook` registers when it is imported
(``import headscope`` imports it) — the report's own figures and tables for that type.
The dependency points down: library modules import nothing of the report, and the report
plugs its views in here.
"""

from __future__ import annotations

from typing import Callable

_renderer: Callable[[object], str] | None = None


def set_renderer(render: Callable[[object], str]) -> None:
    """Install the notebook renderer (called once by :mod:`headscope.report.notebook`)."""
    global _renderer
    _renderer = render


class HtmlRepr:
    """Mixin: ``_repr_html_`` renders the result with the report's figures."""

    def _repr_html_(self) -> str | None:
        return None if _renderer is None else _renderer(self)
