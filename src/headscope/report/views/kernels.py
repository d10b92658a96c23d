"""Views of a layer-0 kernel report (:class:`headscope.layer0.kernels.KernelReport`) and of a rotary
model's relative kernels (:class:`headscope.layer0.relative.RelativeKernels`), from their ``to_dict()``.

:func:`text` is ``headscope kernels``'s table; :func:`figures` its ``--out`` SVG files; :func:`html`
the report stage's index section and the notebook's view; :func:`head_section` a head's page
section. The report's kernels stage adds ``tv_bins``, ``heatmap`` and the corpus's names to the
dict; without them the kernel heatmaps are left out (a notebook's result has none).
"""

from __future__ import annotations

from ...layer0.kernels import CATEGORIES, TV_BINS
from .. import figures as F
from .. import html as H
from ..paths import head_page


def _cat(c: str) -> str:
    return c.replace("_", " ")


def _name(d: dict, head: int) -> str:
    return f"L{d['layer']}H{head}"


def _bins(d: dict) -> list[float]:
    return d.get("tv_bins", TV_BINS)


# -- text and the command's files --------------------------------------------------------------


def text(d: dict) -> str:
    """One line per head: category, width, decay rate, the split's dependences and TV."""
    lines = [f"layer {d['layer']}  query {d['query']!r}  n_ref {d['n_ref']}  "
             f"c {d['c']:.4g} ({d['c_source']})  processing {','.join(k for k, v in d['processing'].items() if v)}  "
             f"categories by the {d['rule'].get('name', 'width')} rule",
             f"{'head':>4} {'category':<16} {'width':>8} {'decay':>7} {'transl':>7} {'query':>7} "
             f"{'c_std':>6} {'boost':>6} {'tv_med':>7} {'tv_p90':>7}"]
    for h in d["heads"]:
        tv = (f"{h['tv_median']:7.4f} {h['tv_p90']:7.4f}" if h["tv_median"] is not None else f"{'-':>7} {'-':>7}")
        lines.append(f"{h['head']:>4} {h['category']:<16} {h['width']:8.2f} {h['decay_rate']:7.3f} "
                     f"{h['translation_tv']:7.4f} {h['query_tv']:7.4f} {h['content_std']:6.3f} "
                     f"{h['content_boost']:6.2f} {tv}")
    if d["corpus"]:
        lines.append(f"corpus: {d['corpus']['n_windows']} windows, {d['corpus']['n_queries']} query positions")
    return "\n".join(lines)


def figures(d: dict) -> list[tuple[str, H.Safe]]:
    """(file name, SVG) of ``headscope kernels --out``: kernels.svg and, with a corpus, tv_hist.svg and
    tv_position.svg, one panel per head."""
    heads = d["heads"]
    kern = [F.line_plot([F.Series(list(range(len(h["kernel"]))), h["kernel"], "")], log_y=True, width=300, height=210,
                        title=f"head {h['head']}: {h['category']}", xlabel="distance d = n − i", ylabel="pos")
            for h in heads]
    out = [("kernels.svg", F.panels(kern, cols=4, title=f"positional kernels pos(n={d['n_ref']}, n−d), "
                                                         f"query {d['query']!r}"))]
    if d["corpus"]:
        hist = [F.histogram(edges=_bins(d), counts=h["tv_hist"], width=300, height=210, xlabel="TV(true, approx)",
                            title=f"head {h['head']}: median {h['tv_median']:.3f}", ylabel="query positions")
                for h in heads]
        out.append(("tv_hist.svg", F.panels(hist, cols=4, title="TV(true, approx) per query position")))
        per_pos = [F.line_plot([F.Series(list(range(len(h["tv_by_position"]))), h["tv_by_position"], "")], width=300,
                               height=210, title=f"head {h['head']}", xlabel="query position n", ylabel="mean TV")
                   for h in heads]
        out.append(("tv_position.svg", F.panels(per_pos, cols=4, title="mean TV by query position")))
    return out


# -- HTML ----------------------------------------------------------------------------------------


def html(d: dict, *, links: bool = True, texts: str = "the corpus") -> H.Safe:
    """The table of every head, kernel curves per category, one heatmap per category (when the dict
    has ``heatmap``) and TV histograms per category (with a corpus). `texts` names the corpus."""
    heads = d["heads"]
    cats = [c for c in CATEGORIES if any(h["category"] == c for h in heads)]
    corpus = d["corpus"]
    rows = [(H.link(head_page(d["layer"], h["head"]), _name(d, h["head"])) if links else _name(d, h["head"]),
             _cat(h["category"]), h["width"], h["decay_rate"], h["content_boost"], h["tv_median"], h["tv_p90"])
            for h in heads]
    tv = (f"TV over {corpus['n_queries']} query positions of {corpus['n_windows']} windows of {texts}. "
          if corpus else "TV: no corpus given. ")
    table = H.table(["head", "category", "width (tokens)", "decay rate κ̂", "content boost", "TV median",
                     "TV p90"], rows, numeric=(2, 3, 4, 5, 6),
                    caption=f"Query {d['query']!r} at n = {d['n_ref']}; c = {d['c']:.3g} "
                            f"({d['c_source']}). {tv}Rule: {d['rule']['text']}.")
    curves, hists = [], []
    for c in cats:
        hs = [h for h in heads if h["category"] == c]
        series = [F.Series(list(range(len(h["kernel"]))), h["kernel"], _name(d, h["head"])) for h in hs[:8]]
        curves.append(H.figure(
            F.line_plot(series, log_y=True, title=f"{_cat(c)} heads", xlabel="distance δ = n − i",
                        ylabel="pos[n, n − δ]", width=420, height=280),
            f"Positional kernels of the {_cat(c)} heads ({len(hs)}{'; first 8 shown' if len(hs) > 8 else ''}) "
            f"for query {d['query']!r} at n = {d['n_ref']}, against the distance δ (log scale)."))
        if corpus:
            counts = [sum(h["tv_hist"][b] for h in hs) for b in range(len(_bins(d)) - 1)]
            med = sorted(h["tv_median"] for h in hs)[len(hs) // 2]
            hists.append(H.figure(
                F.histogram(edges=_bins(d), counts=counts, title=f"TV, {_cat(c)} heads",
                            xlabel="TV(true, approx)", ylabel="query positions", width=420, height=260,
                            markers=[(med, "median head's median")]),
                f"Total-variation distance between the true attention and the content × position "
                f"approximation, pooled over the {len(hs)} {_cat(c)} heads and every query position n ≥ 1."))
    out = [table, H.grid(curves)]
    if "heatmap" in d:
        firsts = [next(h for h in heads if h["category"] == c) for c in cats]      # one head of each category
        out.append(H.grid([heatmap(d, h["head"], f"{_name(d, h['head'])} ({_cat(h['category'])})", 330)
                           for h in firsts]))
    if hists:
        out.append(H.grid(hists))
    return H.join(out)


def summary(d: dict) -> list[tuple[str, object]]:
    """The report's summary rows: the heads of each category, and the largest median TV."""
    heads = d["heads"]
    cats = [c for c in CATEGORIES if any(h["category"] == c for h in heads)]
    out = [(f"{_cat(c)} layer-{d['layer']} heads", ", ".join(f"{h['head']}" for h in heads if h["category"] == c))
           for c in cats]
    worst = max(heads, key=lambda h: h["tv_median"])
    out.append(("largest median TV of the key split", f"{worst['tv_median']:.3g} ({_name(d, worst['head'])})"))
    return out


def glance(h: dict) -> str:
    """A head's one-line summary (the report's page list)."""
    return f"{_cat(h['category'])} · width {h['width']:.1f}"


def heatmap(d: dict, head: int, name: str, width: int) -> H.Safe:
    """The kernel heatmap pos[n, i] of one head (the report stage's ``heatmap``)."""
    P = d["heatmap"]["positions"]
    return H.figure(
        F.heatmap(d["heatmap"]["heads"][head], title=f"{name}: kernel", xlabel="key position i",
                  ylabel="query position n", signed=False, vmin=0.0, max_width=width),
        f"pos[n, i] for query {d['query']!r} placed at every position n = 0–{P - 1} "
        f"(rows: n, columns: i ≤ n; blank: masked).")


def head_section(h: dict, d: dict) -> H.Safe:
    """A head's page section: its measures, kernel curve and heatmap, TV histogram and TV by position."""
    name = _name(d, h["head"])
    stats = H.kv_table([
        ("category", _cat(h["category"])), ("effective width 1/Σ pos²", h["width"]),
        ("decay rate κ̂", h["decay_rate"]), ("translation TV", h["translation_tv"]),
        ("query dependence (TV)", h["query_tv"]), ("content std (log)", h["content_std"]),
        ("content boost (log)", h["content_boost"]), ("TV median", h["tv_median"]), ("TV p90", h["tv_p90"]),
        ("TV mean", h["tv_mean"]),
    ], caption=f"Kernel measures for query {d['query']!r} at n = {d['n_ref']} (see headscope.kernels).")
    k = h["kernel"]
    curve = H.figure(F.line_plot([F.Series(list(range(len(k))), k, "pos[n, n − δ]")], log_y=True,
                                 title=f"{name}: positional kernel", xlabel="distance δ = n − i", ylabel="pos"),
                     f"Positional kernel at n = {d['n_ref']} against the distance δ (log scale).")
    tvp = h["tv_by_position"]
    hist = H.figure(F.histogram(edges=_bins(d), counts=h["tv_hist"], title=f"{name}: TV of the split",
                                xlabel="TV(true, approx)", ylabel="query positions",
                                markers=[(h["tv_median"], "median"), (h["tv_p90"], "90th percentile")]),
                    "TV between true and approximate attention at every query position n ≥ 1 of the corpus.")
    pos = H.figure(F.line_plot([F.Series(list(range(len(tvp))), tvp, "mean TV")], title=f"{name}: TV by position",
                               xlabel="query position n", ylabel="mean TV", ylim=(0.0, max(max(tvp), 1e-3) * 1.05)),
                   "Mean TV over the corpus windows at each query position n.")
    return H.section("Positional kernel and key split",
                     H.join([stats, H.grid([curve, heatmap(d, h["head"], name, 420)]), H.grid([hist, pos])]))


# -- a rotary model's relative kernels ------------------------------------------------------------


def relative_text(d: dict) -> str:
    """One line per layer-0 head: peak offset, width and category (of ``d["rule"]``, default shape)."""
    rule = d.get("rule", "shape")
    lines = [f"layer-0 relative kernels (rotary; n = {d['n_ref']}): head, peak offset Δ, width, category ({rule} rule)"]
    lines += [f"  L0H{h}  Δ={d['peak_offset'][h]}  width {d['widths'][h]:.2f}  {d[rule][h]}"
              for h in range(len(d["shape"]))]
    if d.get("caveat"):
        lines.append(f"caveat: {d['caveat']}")
    return "\n".join(lines)


def relative_figures(d: dict) -> list[tuple[str, H.Safe]]:
    """(file name, SVG) of ``headscope kernels --out`` on a rotary model: kernels.svg, κ_h(Δ) per head."""
    rule = d.get("rule", "shape")
    kern = [F.line_plot([F.Series(list(range(len(k))), k, "")], width=300, height=210,
                        title=f"head {h}: {d[rule][h]}", xlabel="offset Δ", ylabel="κ(Δ) (logits)")
            for h, k in enumerate(d["kappa"])]
    return [("kernels.svg", F.panels(kern, cols=4, title="relative kernels κ_h(Δ) = rot(q̄, Δ)·k̄/s"))]


def relative_html(d: dict, *, links: bool = True) -> H.Safe:
    """The table of the relative kernels' categories and the curves κ_h(Δ) of the first 8 heads."""
    n = len(d["kappa"])
    tv = d.get("tv")
    rows = [(H.link(head_page(0, h), f"L0H{h}") if links else f"L0H{h}", _cat(d["shape"][h]), _cat(d["width"][h]),
             d["widths"][h], d["peak_offset"][h], *((tv["median"][h], tv["p90"][h]) if tv else ()))
            for h in range(n)]
    table = H.table(["head", "category (shape)", "category (width)", "width (tokens)", "peak offset Δ",
                     *(("TV median", "TV p90") if tv else ())], rows,
                    numeric=(3, 4, 5, 6), caption="Rotary model (no W_pos): the relative kernel κ_h(Δ) = rot(q̄_h, Δ)·k̄_h/s "
                    "of the mean query and key over the vocabulary; width and categories of softmax_{i≤n} κ(n − i) "
                    f"at n = {d['n_ref']} (see headscope.layer0.relative)."
                    + (f" TV(true, approx) of the rotary split (kernel of the query's own κ × content factor, "
                       f"docs/rotary-layer0.md) over {tv['n_queries']} query positions of {tv['n_windows']} windows "
                       f"of ≤ {tv['window']} tokens." if tv else "")
                    + (f" The rotary split's TV is not computed: {d['tv_not_applicable']}" if d.get("tv_not_applicable") else "")
                    + (f" Caveat: {d['caveat']}" if d.get("caveat") else ""))
    series = [F.Series(list(range(len(k))), k, f"L0H{h}") for h, k in enumerate(d["kappa"][:8])]
    fig = H.figure(F.line_plot(series, title="relative kernels", xlabel="offset Δ = i − j", ylabel="κ(Δ) (logits)"),
                   f"κ_h(Δ) of the layer-0 heads{' (first 8)' if n > 8 else ''} against the offset Δ.")
    return H.join([table, H.grid([fig])])


def relative_summary(d: dict) -> list[tuple[str, object]]:
    return [("layer-0 relative kernels (peak Δ)", ", ".join(f"{h}: {p}" for h, p in enumerate(d["peak_offset"])))]


def relative_glance(d: dict, h: int) -> str:
    return f"{_cat(d['shape'][h])} · peak Δ {d['peak_offset'][h]}"


def relative_head_section(d: dict, h: int) -> H.Safe:
    """A head's page section: its relative kernel's category, peak offset and width."""
    tv = d.get("tv")
    return H.kv_table([("relative kernel category", _cat(d["shape"][h])), ("peak offset Δ", d["peak_offset"][h]),
                       ("effective width", d["widths"][h]),
                       *([("TV(true, approx) of the rotary split, median / p90",
                           f"{tv['median'][h]:.3g} / {tv['p90'][h]:.3g}")] if tv else [])])
