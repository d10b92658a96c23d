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

from ...layer0 import kernels as K
from ...corpus import windows
from ...layer0.split import SEED_QUERY
from .. import figures as F
from .. import html as H
from ..stages import Context, PageSection, Rendered, Stage, register_stage
from .paths import head_page

HEATMAP_POSITIONS = 48   #: query positions n = 0..47 in the kernel heatmaps


def _cat(c: str) -> str:
    return c.replace("_", " ")


@register_stage
class KernelsStage(Stage):
    name = "kernels"
    title = "Layer-0 positional kernels"
    version = 3
    inputs = ("calibration", "samples")

    def key_options(self, o) -> dict:
        return {"query": SEED_QUERY, "c": "measured", "heatmap_positions": HEATMAP_POSITIONS,
                "max_windows": o.kernel_windows}

    def compute(self, ctx: Context) -> dict:
        model = ctx.model
        if model.cfg.positional == "rotary":                 # no W_pos: the relative-position analogue
            from ...layer0 import relative
            return relative.relative_kernels(ctx.weights()).to_dict() | {"relative": True}
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
        if data.get("relative"):
            return self._render_relative(data)
        heads = data["heads"]
        cats = [c for c in K.CATEGORIES if any(h["category"] == c for h in heads)]
        rows = [(H.link(head_page(0, h["head"]), f"L0H{h['head']}"), _cat(h["category"]), h["width"],
                 h["decay_rate"], h["content_boost"], h["tv_median"], h["tv_p90"]) for h in heads]
        corpus = data["corpus"]
        table = H.table(["head", "category", "width (tokens)", "decay rate κ̂", "content boost", "TV median",
                         "TV p90"], rows, numeric=(2, 3, 4, 5, 6),
                        caption=f"Query {data['query']!r} at n = {data['n_ref']}; c = {data['c']:.3g} "
                                f"({data['c_source']}). TV over {corpus['n_queries']} query positions of "
                                f"{corpus['n_windows']} windows of the calibration and sample texts. "
                                f"Rule: {data['rule']['text']}.")
        curves, hists = [], []
        for c in cats:
            hs = [h for h in heads if h["category"] == c]
            series = [F.Series(list(range(len(h["kernel"]))), h["kernel"], f"L0H{h['head']}") for h in hs[:8]]
            curves.append(H.figure(
                F.line_plot(series, log_y=True, title=f"{_cat(c)} heads", xlabel="distance δ = n − i",
                            ylabel=f"pos[n, n − δ]", width=420, height=280),
                f"Positional kernels of the {_cat(c)} heads ({len(hs)}{'; first 8 shown' if len(hs) > 8 else ''}) "
                f"for query {data['query']!r} at n = {data['n_ref']}, against the distance δ (log scale)."))
            counts = [sum(h["tv_hist"][b] for h in hs) for b in range(len(data["tv_bins"]) - 1)]
            med = sorted(h["tv_median"] for h in hs)[len(hs) // 2]
            hists.append(H.figure(
                F.histogram(edges=data["tv_bins"], counts=counts, title=f"TV, {_cat(c)} heads",
                            xlabel="TV(true, approx)", ylabel="query positions", width=420, height=260,
                            markers=[(med, "median head's median")]),
                f"Total-variation distance between the true attention and the content × position "
                f"approximation, pooled over the {len(hs)} {_cat(c)} heads and every query position n ≥ 1."))
        heat = []
        for c in cats:  # one head of each category
            h = next(h for h in heads if h["category"] == c)
            heat.append(self._heatmap(data, h["head"], f"L0H{h['head']} ({_cat(c)})", 330))
        summary = [(f"{_cat(c)} layer-0 heads", ", ".join(f"{h['head']}" for h in heads if h["category"] == c))
                   for c in cats]
        worst = max(heads, key=lambda h: h["tv_median"])
        summary.append(("largest median TV of the key split", f"{worst['tv_median']:.3g} (L0H{worst['head']})"))
        pages = [PageSection(path=head_page(0, h["head"]), title=f"Head 0.{h['head']}", group="Attention heads",
                             order=(0, h["head"]), body=self._page(h, data),
                             summary=f"{_cat(h['category'])} · width {h['width']:.1f}") for h in heads]
        return Rendered(index=[table, H.grid(curves), H.grid(heat), H.grid(hists)], summary=summary, pages=pages)

    def _render_relative(self, data: dict) -> Rendered:
        """A rotary model's relative kernels κ_h(Δ) (headscope.layer0.relative)."""
        n = len(data["kappa"])
        rows = [(H.link(head_page(0, h), f"L0H{h}"), _cat(data["shape"][h]), _cat(data["width"][h]),
                 data["widths"][h], data["peak_offset"][h]) for h in range(n)]
        table = H.table(["head", "category (shape)", "category (width)", "width (tokens)", "peak offset Δ"], rows,
                        numeric=(3, 4), caption="Rotary model (no W_pos): the relative kernel κ_h(Δ) = rot(q̄_h, Δ)·k̄_h/s "
                        "of the mean query and key over the vocabulary; width and categories of softmax_{i≤n} κ(n − i) "
                        f"at n = {data['n_ref']} (see headscope.layer0.relative).")
        series = [F.Series(list(range(len(k))), k, f"L0H{h}") for h, k in enumerate(data["kappa"][:8])]
        fig = H.figure(F.line_plot(series, title="relative kernels", xlabel="offset Δ = i − j", ylabel="κ(Δ) (logits)"),
                       f"κ_h(Δ) of the layer-0 heads{' (first 8)' if n > 8 else ''} against the offset Δ.")
        summary = [("layer-0 relative kernels (peak Δ)", ", ".join(f"{h}: {d}" for h, d in enumerate(data["peak_offset"])))]
        pages = [PageSection(path=head_page(0, h), title=f"Head 0.{h}", group="Attention heads", order=(0, h),
                             body=H.kv_table([("relative kernel category", _cat(data["shape"][h])),
                                              ("peak offset Δ", data["peak_offset"][h]),
                                              ("effective width", data["widths"][h])]),
                             summary=f"{_cat(data['shape'][h])} · peak Δ {data['peak_offset'][h]}") for h in range(n)]
        return Rendered(index=[table, H.grid([fig])], summary=summary, pages=pages)

    def _heatmap(self, data, head: int, name: str, width: int) -> H.Safe:
        P = data["heatmap"]["positions"]
        return H.figure(
            F.heatmap(data["heatmap"]["heads"][head], title=f"{name}: kernel", xlabel="key position i",
                      ylabel="query position n", signed=False, vmin=0.0, max_width=width),
            f"pos[n, i] for query {data['query']!r} placed at every position n = 0–{P - 1} "
            f"(rows: n, columns: i ≤ n; blank: masked).")

    def _page(self, h: dict, data: dict) -> H.Safe:
        name = f"L0H{h['head']}"
        stats = H.kv_table([
            ("category", _cat(h["category"])), ("effective width 1/Σ pos²", h["width"]),
            ("decay rate κ̂", h["decay_rate"]), ("translation TV", h["translation_tv"]),
            ("query dependence (TV)", h["query_tv"]), ("content std (log)", h["content_std"]),
            ("content boost (log)", h["content_boost"]), ("TV median", h["tv_median"]), ("TV p90", h["tv_p90"]),
            ("TV mean", h["tv_mean"]),
        ], caption=f"Kernel measures for query {data['query']!r} at n = {data['n_ref']} (see headscope.kernels).")
        k = h["kernel"]
        curve = H.figure(F.line_plot([F.Series(list(range(len(k))), k, "pos[n, n − δ]")], log_y=True,
                                     title=f"{name}: positional kernel", xlabel="distance δ = n − i", ylabel="pos"),
                         f"Positional kernel at n = {data['n_ref']} against the distance δ (log scale).")
        tvp = h["tv_by_position"]
        hist = H.figure(F.histogram(edges=data["tv_bins"], counts=h["tv_hist"], title=f"{name}: TV of the split",
                                    xlabel="TV(true, approx)", ylabel="query positions",
                                    markers=[(h["tv_median"], "median"), (h["tv_p90"], "90th percentile")]),
                        "TV between true and approximate attention at every query position n ≥ 1 of the corpus.")
        pos = H.figure(F.line_plot([F.Series(list(range(len(tvp))), tvp, "mean TV")], title=f"{name}: TV by position",
                                   xlabel="query position n", ylabel="mean TV", ylim=(0.0, max(max(tvp), 1e-3) * 1.05)),
                       "Mean TV over the corpus windows at each query position n.")
        return H.section("Positional kernel and key split",
                         H.join([stats, H.grid([curve, self._heatmap(data, h["head"], name, 420)]),
                                 H.grid([hist, pos])]))
