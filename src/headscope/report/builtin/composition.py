"""Stage ``composition``: Q-, K- and V-composition scores between every pair of heads (weights only).

Runs :func:`headscope.composition.composition` (the Framework's definition after the default
processing, which equals TransformerLens's) and renders, on the index, one writer × reader
heatmap per mode and the strongest edges. Compute lives in the library; this only renders.
"""

from __future__ import annotations

from ..._errors import NotApplicable
from ...maps.composition import EDGES, composition, composition_cost
from ..stages import Context, Rendered, Stage, register_stage
from ..views.composition import CompositionView

#: multiply-adds the report spends on composition unless asked (``--stages composition``), as
#: :func:`~headscope.maps.composition.composition_cost` counts them on the path that runs: GPT-2
#: small and Pythia-160m (Gram path, 0.02·10¹²: 3.1 CPU s, 7 s wall on 2 busy cores) and medium
#: (Gram path, 0.18·10¹²: 16 CPU s, 1 GB held; the cores path's 0.9·10¹² took 47 CPU s, measured
#: 2026-12-05) fit; large and XL (cores path, 4 and 14·10¹²) are left to ``headscope composition MODEL``
REPORT_BUDGET = 5e11


@register_stage
class CompositionStage(Stage):
    name = "composition"
    title = "Composition between heads (weights only)"
    version = 1
    long = True               # one of the longest lane stages: started first (report.lanes)

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
