"""How result objects draw themselves — Jupyter HTML and ``render()`` text — in one place.

Result types inherit :class:`HtmlRepr`; Jupyter calls ``_repr_html_``, which hands the
object to the HTML renderer that :mod:`headscope.report.notebook` registers when it is
imported (``import headscope`` imports it). A result's text ``render()`` calls
:func:`render_text`, which hands it to the text renderer that :mod:`headscope.report.views`
registers. Both look the type up in :data:`headscope.report.views.REGISTRY`, whose modules
hold each result type's text, HTML and figures. The dependency points down: library
modules import nothing of the report, and the report plugs its views in here.
"""

from __future__ import annotations

from typing import Callable

_renderer: Callable[[object], str] | None = None
_text_renderer: Callable[..., str] | None = None


def set_renderer(render: Callable[[object], str]) -> None:
    """Install the notebook renderer (called once by :mod:`headscope.report.notebook`)."""
    global _renderer
    _renderer = render


def set_text_renderer(render: Callable[..., str]) -> None:
    """Install the text renderer (called once by :mod:`headscope.report.views`)."""
    global _text_renderer
    _text_renderer = render


def render_text(obj, *args, **kwargs) -> str:
    """The text view of a result (its ``render()``), drawn by :mod:`headscope.report.views`."""
    if _text_renderer is None:         # only while ``import headscope`` is still running
        return repr(obj)
    return _text_renderer(obj, *args, **kwargs)


class HtmlRepr:
    """Mixin: ``_repr_html_`` renders the result with the report's figures."""

    def _repr_html_(self) -> str | None:
        return None if _renderer is None else _renderer(self)
