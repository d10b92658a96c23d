"""Views of the composition scores between heads (:class:`headscope.maps.composition.Composition`),
from its ``to_dict()``.

:func:`text` is ``headscope composition``'s list of edges; :class:`CompositionView` the report
stage's index section (with links) and the notebook's view (:func:`html`, without links).
"""

from __future__ import annotations

from ...maps.composition import EDGES, MODES
from .. import figures as F
from .. import html as H
from ..paths import head_page

MEANING = {"Q": "the writer's output feeds the reader's query",
           "K": "the writer's output feeds the reader's key",
           "V": "the writer's output feeds the reader's value"}


def _label(l: int, h: int) -> str:
    return f"L{l}H{h}"


class CompositionView:
    """HTML of a composition result (report index and notebook)."""

    def __init__(self, data: dict, *, links: bool):
        self.d, self.links = data, links

    def heatmaps(self) -> H.Safe:
        """Per mode, layer × head maps of each head's strongest incoming and outgoing score."""
        d = self.d
        vmax = max([v for m in MODES for side in ("incoming", "outgoing") for r in d[side][m] for v in r] + [1e-12])
        heads = [f"H{h}" for h in range(d["n_heads"])]
        layers = [f"L{l}" for l in range(d["n_layers"])]
        figs = [F.heatmap(d[side][m], row_labels=layers, col_labels=heads, signed=False, vmin=0.0, vmax=vmax,
                          title=f"{m}-composition, strongest {'writer into' if side == 'incoming' else 'reader of'} "
                                f"each head", xlabel="head", ylabel="layer", max_width=360)
                for m in MODES for side in ("incoming", "outgoing")]
        return H.figure(F.panels(figs, cols=2), f"Composition scores ‖W_OV^writer · M^reader‖_F / (‖W_OV‖_F ‖M‖_F), "
                        f"M = W_QK (Q), W_QKᵀ (K), W_OV (V), between heads of different layers; each cell the "
                        f"head's largest score as reader (left) or writer (right). Unrelated heads score about "
                        f"1/√d_model = {d['baseline']:.3g}. Every pair: data/composition.json.")

    def edges(self) -> H.Safe:
        rows = []
        for m in MODES:
            for e in self.d["edges"][m]:
                src, dst = _label(*e["source"]), _label(*e["target"])
                if self.links:
                    src, dst = H.link(head_page(*e["source"]), src), H.link(head_page(*e["target"]), dst)
                rows.append((m, src, dst, e["score"], MEANING[m]))
        return H.table(["mode", "writer", "reader", "score", "meaning"], rows, numeric=(3,),
                       caption=f"The strongest edges of each mode (at most {EDGES}); headscope.composition.")

    def summary(self) -> list[tuple[str, object]]:
        out = []
        for m in MODES:
            if self.d["edges"][m]:
                e = self.d["edges"][m][0]
                out.append((f"strongest {m}-composition", f"{_label(*e['source'])} → {_label(*e['target'])} "
                                                          f"({e['score']:.3g})"))
        return out


def text(d: dict) -> str:
    """The random-pair baseline, then the strongest edges of each mode."""
    lines = [f"composition scores ({d['n_layers']} layers × {d['n_heads']} heads; "
             f"random-pair baseline ≈ {d['baseline']:.3f})"]
    for m in MODES:
        lines.append(f"{m}-composition, strongest edges:")
        lines += [f"  {_label(*e['source'])} → {_label(*e['target'])}  {e['score']:.4f}" for e in d["edges"][m]]
    return "\n".join(lines)


def html(d: dict) -> H.Safe:
    """The notebook's view: the heatmaps and the strongest edges (no links)."""
    view = CompositionView(d, links=False)
    return H.join([view.heatmaps(), view.edges()])
