"""Each result type draws itself here: one module per type holds its text, HTML and figure views.

Every view is a plain function of the result's ``to_dict()`` data (the report renders from its
saved dicts, the commands and notebooks from a fresh result), so the text a command prints, the
figures it writes, the report's sections and the notebook's HTML of one type live side by side:

- :mod:`.kernels` (``KernelReport``, ``RelativeKernels``), :mod:`.denominators`, :mod:`.neurons`
  (``NeuronScan``, ``NeuronRanking``), :mod:`.neuron` (``NeuronTrace``): the layer-0 analyses;
- :mod:`.survey`, :mod:`.head` (``HeadAnalysis``), :mod:`.steering` (``SteerResult``,
  ``AuthorsSteer``): the semantic heads;
- :mod:`.atlas`, :mod:`.composition`, :mod:`.revisions`: the maps of every head;
- :mod:`.reproduce`: the claims table.

The commands (:mod:`headscope.commands`) print a view's ``text`` and write its figures, the
report stages (:mod:`headscope.report.builtin`) compute and save, then draw with the same
module's HTML functions. :data:`REGISTRY` maps each result class to its HTML and text views of
the object: :mod:`headscope.report.notebook` shows the HTML in Jupyter, and a result's
``render()`` returns the text (registered here with :func:`headscope._html_repr.set_text_renderer`,
since the analyses may not import the report).
"""

from __future__ import annotations

from typing import Callable

from ..._html_repr import set_text_renderer
from ...layer0.denominators import DenominatorStability
from ...layer0.kernels import KernelReport
from ...layer0.neurons import NeuronRanking, NeuronScan
from ...maps.atlas import Atlas
from ...maps.composition import Composition
from ...maps.revisions import RevisionsResult
from ...reproduce import ReproduceResult
from ...semantic.head import HeadAnalysis
from ...semantic.steering import AuthorsSteer, SteerResult
from ...semantic.survey import SurveyResult
from . import atlas, composition, denominators, head, kernels, neurons, reproduce, revisions, steering, survey


def _status(r) -> dict[str, bool]:
    """revision → computed in this run (True) or reused (False), which a revisions dict does not hold."""
    return {row.revision: row.computed for row in r.rows}


def _scan_html(scan):
    return neurons.html({**scan.to_dict(), "max_hist": neurons.max_hist(scan.max_all)}, links=False)


#: (result class, HTML of an object or None, text of an object), most specific first
REGISTRY: list[tuple[type, Callable | None, Callable]] = [
    (Atlas, lambda o: atlas.html(o.to_dict()), lambda o: atlas.text(o.to_dict())),
    (Composition, lambda o: composition.html(o.to_dict()), lambda o: composition.text(o.to_dict())),
    (RevisionsResult, lambda o: revisions.html(o.to_dict(), _status(o)),
     lambda o: revisions.text(o.to_dict(), _status(o))),
    (SurveyResult, lambda o: survey.html(o.to_dict()), lambda o, top=None: survey.text(o.to_dict(), top)),
    (HeadAnalysis, lambda o: head.html(o.to_dict()), lambda o: head.text(o.to_dict())),
    (KernelReport, lambda o: kernels.html(o.to_dict(), links=False), lambda o: kernels.text(o.to_dict())),
    (DenominatorStability, lambda o: denominators.html(o.to_dict(), links=False),
     lambda o: denominators.text(o.to_dict())),
    (NeuronScan, _scan_html, lambda o: neurons.text(o.to_dict())),
    (NeuronRanking, lambda o: neurons.ranking_html(o.to_dict()), lambda o: neurons.ranking_text(o.to_dict())),
    (SteerResult, lambda o: steering.html(o.to_dict()), lambda o: steering.text(o.to_dict())),
    (AuthorsSteer, None, lambda o: steering.authors_text(o.to_dict())),
    (ReproduceResult, lambda o: reproduce.html(o.to_dict()), lambda o: reproduce.text(o.to_dict())),
]


def views_of(obj) -> tuple[Callable | None, Callable] | None:
    """(HTML view, text view) of a result object's type, or None for another object."""
    for cls, html, text in REGISTRY:
        if isinstance(obj, cls):
            return html, text
    return None


def render_text(obj, *args, **kwargs) -> str:
    """The text view of a result object (its ``render()``)."""
    views = views_of(obj)
    if views is None or views[1] is None:
        raise TypeError(f"no text view of {type(obj).__name__}")
    return views[1](obj, *args, **kwargs)


set_text_renderer(render_text)
