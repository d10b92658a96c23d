"""Stage ``composition``: Q-, K- and V-composition scores between every pair of heads (weights only).

Runs :func:`headscope.composition.composition` (the Framework's definition after the default
processing, which equals TransformerLens's) and renders, on the index, one writer × reader
heatmap per mode and the strongest edges. Compute lives in the library; this only renders.
"""

from __future__ import annotations

from ..._errors import NotApplicable
from ...maps.composition import EDGES, MODES, composition, composition_cost
from .. import figures as F
from .. import html as H
from ..stages import Context, Rendered, Stage, register_stage
from .paths import head_page

#: multiply-adds the report spends on composition unless asked (``--stages composition``):
#: GPT-2 small and Pythia-160m fit (0.2·10¹², about 10 s on 2 cores); medium (0.9·10¹²: 92 s
#: and a 4.9 GB peak, measured 2026-12-04), large and XL (4 and 14·10¹²) are left to
#: ``headscope composition MODEL``
REPORT_BUDGET = 5e11

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


@register_stage
class CompositionStage(Stage):
    name = "composition"
    title = "Composition between heads (weights only)"
    version = 1

    def key_options(self, o) -> dict:
        return {"edges": EDGES, "asked": "composition" in (o.stages or ())}

    def compute(self, ctx: Context) -> dict:
        cost = composition_cost(ctx.model.cfg)
        if cost > REPORT_BUDGET and "composition" not in (ctx.options.stages or ()):
            raise NotApplicable(f"not run by default: composition of every pair of heads costs "
                                f"{cost / 1e12:.1f}·10¹² multiply-adds (the report's default budget is "
                                f"{REPORT_BUDGET / 1e12:g}·10¹²); `headscope composition MODEL` or "
                                f"`headscope report … --stages composition` computes it")
        return composition(ctx.model).to_dict()

    def render(self, data: dict, ctx) -> Rendered:
        view = CompositionView(data, links=True)
        return Rendered(index=[view.heatmaps(), view.edges()], summary=view.summary())
