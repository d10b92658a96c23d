"""Stage ``kernels``: layer-0 positional kernels, categories and TV of the key split.

Runs :func:`headscope.kernels.analyse_kernels` (see its module docstring for the maths)
with the report's calibration and sample texts as the corpus (windows ``[BOS] + tokens``
of at most n_ctx tokens), so per head: category, effective width 1/Σ pos², decay
rate κ̂, content boost, and TV(true, approx) median / 90th percentile over every query
position n ≥ 1 of the corpus. Added for the figures: the kernel heatmap

    K_h[n, i] = pos_{n, i, q}     for n, i < ``kernel_positions``, i ≤ n,

with the query token q (default ' the') placed at every query position n.
"""

from __future__ import annotations

from ..._errors import NotApplicable
from ...layer0 import kernels as K
from ...corpus import windows
from ...layer0.split import SEED_QUERY
from ..stages import Context, PageSection, Rendered, Stage, register_stage
from ..views import kernels as V
from ..paths import head_page

HEATMAP_POSITIONS = 48   #: query positions n = 0..47 in the kernel heatmaps
TV_WINDOW = 128          #: tokens per window of a rotary model's split TV (its cost grows as window²)
TV_MAX_WINDOWS = 4       #: at most this many windows for it


@register_stage
class KernelsStage(Stage):
    name = "kernels"
    title = "Layer-0 positional kernels"
    version = 6     # 4: rotary models' split TV (layer0.rotary_split); 5: the relative kernel without it; 6: its soft-cap caveat
    inputs = ("calibration", "samples")

    def key_options(self, o) -> dict:
        return {"query": SEED_QUERY, "c": "measured", "heatmap_positions": HEATMAP_POSITIONS,
                "max_windows": o.kernel_windows}

    def compute(self, ctx: Context) -> dict:
        model = ctx.model
        if model.cfg.positional == "rotary":                 # no W_pos: the relative-position analogue
            from ...layer0 import relative, rotary_split
            d = relative.relative_kernels(ctx.weights()).to_dict() | {"relative": True}
            try:
                view = rotary_split.view(model)
            except NotApplicable as e:    # Gemma 2's soft-capped scores: no split TV, the relative kernel stands
                d["tv_not_applicable"] = str(e)
                return d
            texts = [(ctx.inputs.calibration.name, ctx.inputs.calibration.text)]
            texts += [(t.name, t.text) for t in ctx.inputs.samples]
            win = min(TV_WINDOW, model.cfg.n_ctx)
            wins = windows(model, texts, n_ctx=win, max_windows=min(ctx.options.kernel_windows, TV_MAX_WINDOWS))
            tv = rotary_split.split_tv(view, wins)                              # [h N]
            d["tv"] = {"median": tv.median(1).values.tolist(), "p90": tv.quantile(0.9, dim=1).tolist(),
                       "n_windows": len(wins), "window": win, "n_queries": int(tv.shape[1])}
            return d
        p = ctx.progress
        p.set_total(2)
        texts = [(ctx.inputs.calibration.name, ctx.inputs.calibration.text)]
        texts += [(t.name, t.text) for t in ctx.inputs.samples]
        wins = windows(model, texts, max_windows=ctx.options.kernel_windows)
        report = K.analyse_kernels(model, layer=0, query=SEED_QUERY, c="measured", windows=wins)
        p.update()
        heat = K.kernel_heatmap(model, SEED_QUERY, "measured", HEATMAP_POSITIONS)  # = report.c
        p.update()
        d = report.to_dict()
        d["corpus"]["names"] = [name for name, _ in texts]
        d["tv_bins"] = K.TV_BINS
        d["heatmap"] = {"positions": len(heat[0]), "heads": heat}
        return d

    def render(self, data: dict, ctx) -> Rendered:
        if data.get("relative"):                             # views: headscope.report.views.kernels
            pages = [PageSection(path=head_page(0, h), title=f"Head 0.{h}", group="Attention heads", order=(0, h),
                                 body=V.relative_head_section(data, h), summary=V.relative_glance(data, h))
                     for h in range(len(data["kappa"]))]
            return Rendered(index=[V.relative_html(data)], summary=V.relative_summary(data), pages=pages)
        pages = [PageSection(path=head_page(0, h["head"]), title=f"Head 0.{h['head']}", group="Attention heads",
                             order=(0, h["head"]), body=V.head_section(h, data), summary=V.glance(h))
                 for h in data["heads"]]
        return Rendered(index=[V.html(data, texts="the calibration and sample texts")], summary=V.summary(data),
                        pages=pages)
