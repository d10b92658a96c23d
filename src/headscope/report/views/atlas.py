"""Views of the atlas of every head (:class:`headscope.maps.atlas.Atlas`), from its ``to_dict()``.

:func:`text` is ``headscope atlas``'s table; :class:`AtlasView` draws the HTML — the report's
atlas page, index section and head sections (with links) and the notebook's view (:func:`html`,
without links; each cell's ``title`` holds every figure of its head, since notebooks run no
report script). The report's atlas stage merges in the kernels stage's categories and the
survey's losses before drawing (:func:`headscope.report.builtin.atlas.merged_rows`).
"""

from __future__ import annotations

import functools
import math

import torch

from ...maps.atlas import COLUMN, COLUMNS, EIGEN_SHOWN, METRICS, OPTIONAL_COLUMNS
from ...stats import quantile
from .. import figures as F
from .. import html as H
from ..paths import ATLAS_PAGE, head_page

NOT_APPLICABLE = "#bdbdbd"            #: grey: the metric does not apply to this head
CATEGORY_COLOURS = {"local": F.OKABE_ITO[1], "slowly_decaying": F.OKABE_ITO[2], "uniform": F.OKABE_ITO[5],
                    "increasing": F.OKABE_ITO[6]}


def head_name(r: dict) -> str:
    """LxHy of an atlas row."""
    return f"L{r['layer']}H{r['head']}"


def num(v, digits: int = 4) -> str:
    """A figure in `digits` significant digits, n/a when not applicable."""
    return "n/a" if v is None else f"{v:.{digits}g}"


class AtlasView:
    """HTML of an atlas (report page, index section, head sections, notebook): one place for all of it."""

    def __init__(self, data: dict, rows: list[dict], *, links: bool):
        self.data, self.rows, self.links = data, rows, links
        self.layers = list(data["layers"])
        self.n_heads = data["config"]["n_heads"]
        self.by = {(r["layer"], r["head"]): r for r in rows}
        self._tips: dict[str, str] = {}      # head name → its tooltip (every grid and the JSON block show it)
        self._figures: dict[str, list[str]] = {}    # head name → its figures (tooltip and head page)

    # -- per-head text -----------------------------------------------------------------

    @functools.cached_property
    def columns(self) -> tuple:
        """The atlas's columns (:data:`headscope.maps.atlas.COLUMNS`), and the optional ones computed."""
        return COLUMNS + tuple(c for c in OPTIONAL_COLUMNS if any(r.get(c.key) is not None for r in self.rows))

    @staticmethod
    def figure(c, r: dict, fields: dict | None = None) -> str:
        """Column `c` of row `r` as the tooltip and head page show it: value, then its detail (`fields`:
        the row's figures as details show them, :meth:`detail_fields`, when already worked out)."""
        v = r.get(c.key)
        value = num(v) if c.metric else (v or "n/a").replace("_", " ")
        if not c.detail or v is None:
            return value
        return f"{value} ({c.detail.format_map(AtlasView.detail_fields(r) if fields is None else fields)})"

    @staticmethod
    def detail_fields(r: dict) -> dict:
        """Row `r`'s fields as a column's detail shows them (floats in 3 significant digits)."""
        return {k: num(x, 3) if isinstance(x, float) else x for k, x in r.items()}

    def figures(self, r: dict) -> list[str]:
        """Every column's :meth:`figure` of one head, worked out once (its tooltip and its page show them)."""
        name = head_name(r)
        if name not in self._figures:
            fields = self.detail_fields(r)
            self._figures[name] = [self.figure(c, r, fields) for c in self.columns]
        return self._figures[name]

    def tip(self, r: dict) -> str:
        """Every figure of one head, one per line (the grid's tooltip), from the column spec."""
        name = head_name(r)
        if name not in self._tips:
            self._tips[name] = "\n".join([f"{name} (layer {r['layer']}, head {r['head']})",
                                          *(f"{c.label}: {f}" for c, f in zip(self.columns, self.figures(r)))])
        return self._tips[name]

    @functools.cached_property
    def _column_texts(self) -> list[tuple[H.Safe, H.Safe]]:
        """Each column's label and meaning as a head page's table shows them (escaped once, not per head)."""
        return [(H.Safe(H.h(c.label)), H.Safe(H.h(c.meaning))) for c in self.columns]

    def glance(self, r: dict) -> str:
        return f"self z {num(r['qk_self'], 3)} · copying {num(r['ov_copying_effective'], 3)}"

    def tip_data(self) -> H.Safe:
        """The tooltips of every grid cell, for the report's script (one JSON block per page)."""
        return H.data_script("hs-atlas-data", {head_name(r): self.tip(r) for r in self.rows})

    # -- grids -------------------------------------------------------------------------

    def colour(self, metric: str):
        vals = [r[metric] for r in self.rows if isinstance(r.get(metric), (int, float))]
        scale = COLUMN[metric].scale
        if scale == "category":
            return (lambda v: CATEGORY_COLOURS.get(v, NOT_APPLICABLE)), F.colour_scale(
                "categorical", categories=[(c.replace("_", " "), col) for c, col in CATEGORY_COLOURS.items()],
                label="layer-0 kernel category; grey: not applicable")
        if metric in ("ov_copying_effective", "ov_copying_framework"):
            vmax = 1.0
        elif scale == "signed":   # no natural bound: the 95th percentile of |value|, larger values saturate
            vmax = quantile(torch.tensor([abs(v) for v in vals] or [1.0]), 0.95) or 1.0
        if scale == "signed":
            return ((lambda v: NOT_APPLICABLE if v is None else F.diverging(v, vmax)),
                    F.colour_scale("diverging", vmax=vmax, label=f"(blue negative, red positive; beyond ±{F.fmt(vmax)}: "
                                                                 "full colour; grey: not applicable)"))
        if scale == "unit":
            return ((lambda v: NOT_APPLICABLE if v is None else F.sequential(v, 0.0, 1.0)),
                    F.colour_scale("sequential", vmin=0.0, vmax=1.0, label="(grey: not applicable)"))
        # semantic loss (> 0, spread over decades): log scale, dark = low loss
        lo, hi = (min(vals), max(vals)) if vals else (1.0, 10.0)
        llo, lhi = math.log10(max(lo, 1e-12)), math.log10(max(hi, 1e-12))
        return ((lambda v: NOT_APPLICABLE if v is None else F.sequential(llo + lhi - math.log10(max(v, 1e-12)), llo, lhi)),
                F.colour_scale("sequential-reversed", vmin=lo, vmax=hi,
                               label="(log scale; darker: lower loss, more semantic)"))

    def grid(self, metric: str) -> H.Safe:
        label, meaning = COLUMN[metric].label, COLUMN[metric].meaning
        layers = [0] if metric == "kernel_category" else self.layers
        values = [[self.by[(l, h)].get(metric) for h in range(self.n_heads)] for l in layers]
        tips = None if self.links else [[self.tip(self.by[(l, h)]) for h in range(self.n_heads)] for l in layers]
        colour, legend = self.colour(metric)
        href = (lambda l, h: head_page(l, h)) if self.links else None
        grid = F.head_grid(values, layers=layers, colour=colour, href=href, tips=tips, titles=not self.links)
        return H.join([H.Safe(f'<div class="gridfig" id="grid-{metric}"><h3>'), label, H.Safe('</h3><p class="crumbs">'),
                       meaning, H.Safe("</p>"), grid, legend, H.Safe("</div>")])

    def grids(self, metrics, *, categories: bool = True) -> H.Safe:
        """A grid per metric that some head has (and the layer-0 kernel categories, when known)."""
        metrics = [m for m in metrics if any(r.get(m) is not None for r in self.rows)]
        if categories and any(r.get("kernel_category") for r in self.rows):
            metrics.append("kernel_category")
        return H.Safe('<div class="grid">') + H.join(self.grid(m) for m in metrics) + H.Safe("</div>")

    # -- table, notes, summary -------------------------------------------------------------

    def table(self) -> H.Safe:
        rows = []
        for r in self.rows:
            name = H.link(head_page(r["layer"], r["head"]), head_name(r)) if self.links else head_name(r)
            rows.append((name, *(r.get(c.key) if c.metric else (r.get(c.key) or "").replace("_", " ") or None
                                 for c in COLUMNS)))
        spec = self.data["spec"]
        return H.table(["head", *(c.label for c in COLUMNS)], rows,
                       numeric=tuple(i for i, c in enumerate(COLUMNS, 1) if c.metric),
                       caption=f"Every head{' (click a column to sort)' if self.links else ''}. Over the effective "
                               f"embeddings of the {spec['n_tokens']} most frequent tokens ({spec['frequency']}); "
                               f"eigenvalues of sym(W_QK) among the top {spec['top']}; positional share on a window "
                               f"of {spec['window']} tokens. Definitions: headscope.atlas"
                               + ("; numbers: data/atlas.json." if self.links else "."))

    def intro(self) -> H.Safe:
        spec = self.data["spec"]
        return H.Safe('<p class="intro">') + (
            f"Every head of layers {self.layers[0]}–{self.layers[-1]} from its weights alone (metrics in float64 over "
            f"the effective embeddings of the {spec['n_tokens']} most frequent tokens). Hover a cell for every figure "
            f"of that head{'; click it for the head’s page' if self.links else ''}. Colour scales are colour-blind "
            "safe (RdBu, blues).") + H.Safe(
            "</p>")

    def notes(self) -> H.Safe:
        notes = self.data.get("notes") or []
        return H.join([H.Safe('<p class="crumbs">'), "Notes: " + "; ".join(notes), H.Safe("</p>")]) if notes else H.Safe("")

    def summary(self) -> list[tuple[str, object]]:
        out = []
        selfs = [r for r in self.rows if r["qk_self"] is not None]
        if selfs:
            low = min(selfs, key=lambda r: r["qk_self"])
            out.append(("most negative self score (atlas)", f"{head_name(low)} ({low['qk_self']:.3g})"))
        cop = [r for r in self.rows if r["ov_copying_effective"] is not None]
        if cop:
            hi, lo = max(cop, key=lambda r: r["ov_copying_effective"]), min(cop, key=lambda r: r["ov_copying_effective"])
            out.append(("largest / most negative OV copying", f"{head_name(hi)} ({hi['ov_copying_effective']:.3g}) / "
                                                              f"{head_name(lo)} ({lo['ov_copying_effective']:.3g})"))
        n_sym = sum(r["qk_symmetry"] is not None and r["qk_symmetry"] >= 1 - 1e-6 for r in self.rows)
        out.append(("heads with a symmetric QK form (symmetry ≥ 0.999999)", n_sym))
        return out

    # -- a head's own section ------------------------------------------------------------------

    def directions(self, r: dict) -> list:
        """The head's top singular directions of W_OV and W_QK, read through the vocabulary (tables)."""
        d = r.get("directions") or {}
        out = []
        if d.get("ov_directions"):
            rows = [(f"{i + 1}", x["sigma"], _toks(x["reads"]), _toks(x["writes"]), _toks(x["reads_neg"]),
                     _toks(x["writes_neg"])) for i, x in enumerate(d["ov_directions"])]
            out.append(H.table(["", "σ", "reads (+)", "writes (+)", "reads (−)", "writes (−)"], rows, numeric=(1,),
                               caption="W_OV = W_V W_O = Σ σ u vᵀ: frequent tokens whose embedding has the largest "
                                       "(+) or most negative (−) u component, and the tokens whose unembedding "
                                       "the head then raises (headscope.composition.head_directions)."))
        if d.get("qk_directions"):
            rows = [(f"{i + 1}", x["sigma"], _toks(x["queries"]), _toks(x["keys"]), _toks(x["queries_neg"]),
                     _toks(x["keys_neg"])) for i, x in enumerate(d["qk_directions"])]
            out.append(H.table(["", "σ", "queries (+)", "keys (+)", "queries (−)", "keys (−)"], rows, numeric=(1,),
                               caption="W_QK = W_Q W_Kᵀ = Σ σ u vᵀ: queries along u score keys along v highly "
                                       "(both read through the token embeddings of the frequent tokens)."))
        if d.get("ov_singular_values"):
            out.append(H.figure(F.spectrum_plot({"σ of W_OV": d["ov_singular_values"][:EIGEN_SHOWN],
                                                 "σ of W_QK": d["qk_singular_values"][:EIGEN_SHOWN]}, width=420,
                                                height=260, title=f"{head_name(r)}: singular values", ylabel="σ"),
                                "Singular values of the head's OV and QK matrices (largest first)."))
        return out

    def head_section(self, r: dict) -> H.Safe:
        name = head_name(r)
        kv = H.table(["figure", "value", "what it is"], [(label, f, meaning) for (label, meaning), f in
                                                         zip(self._column_texts, self.figures(r))],
                     caption="From the weights alone (headscope.atlas); n/a: not applicable or not computed.")
        figs = []
        if r["qk_eigenvalues"]:
            figs.append(H.figure(F.spectrum_plot({"λ of sym(W_QK)": r["qk_eigenvalues"]}, width=420, height=260,
                                                 title=f"{name}: QK eigenvalues (by |λ|)", ylabel="λ (logit units)"),
                                 f"The {len(r['qk_eigenvalues'])} eigenvalues of largest |λ| of the symmetric part of "
                                 "W_QK, divided by the score scale; negative ones make a token avoid itself."))
        if r["ov_eigenvalues"]:
            re_ = [z[0] for z in r["ov_eigenvalues"]]
            mod = [(z[0] ** 2 + z[1] ** 2) ** 0.5 for z in r["ov_eigenvalues"]]
            figs.append(H.figure(F.spectrum_plot({"Re λ": re_, "|λ|": mod}, width=420, height=260,
                                                 title=f"{name}: OV eigenvalues (by |λ|)", ylabel="eigenvalue"),
                                 "Eigenvalues of the OV circuit over the frequent tokens, largest modulus first: "
                                 "real part near +|λ| copies, near −|λ| suppresses copying."))
        back = H.Safe('<p class="crumbs">') + H.link(H.rel(head_page(r["layer"], r["head"]), ATLAS_PAGE) +
                                                      "#grid-qk_self", "← the atlas") + H.Safe("</p>") \
            if self.links else H.Safe("")
        return H.section("Atlas: the head from its weights", H.join([kv, H.grid(figs), *self.directions(r), back]))


def _toks(ts: list[str]) -> str:
    return " ".join(repr(t) for t in ts)


def text(d: dict) -> str:
    """One line per head (every column of :data:`headscope.maps.atlas.COLUMNS`), then per layer the most
    negative self score, the extremes of OV copying, and the notes."""
    rows = d["rows"]

    def f(x, w=8, p=3):
        return f"{'n/a':>{w}}" if x is None else f"{x:>{w}.{p}f}"

    def cell(c, r: dict) -> str:
        v = r[c.key]
        return f"{(v or '—'):<15}" if not c.metric else f(v)

    columns = COLUMNS + (OPTIONAL_COLUMNS if d["spec"].get("logit_diff") else ())
    lines = [f"{'head':>6}  " + "  ".join(f"{c.short:>8}" if c.metric else f"{c.short:<15}" for c in columns)]
    for r in rows:
        lines.append(f"{r['layer']:>3}.{r['head']:<2}  " + "  ".join(cell(c, r) for c in columns))
    for l in d["layers"]:
        selfs = [r for r in rows if r["layer"] == l and r["qk_self"] is not None]
        if selfs:
            low = min(selfs, key=lambda r: r["qk_self"])
            lines.append(f"layer {l}: most negative self score {head_name(low)} ({low['qk_self']:.3f})")
    for col in ("ov_copying_effective", "ov_copying_framework"):
        cop = [r for r in rows if r[col] is not None]
        if cop:
            hi, lo = max(cop, key=lambda r: r[col]), min(cop, key=lambda r: r[col])
            lines.append(f"{col}: largest {head_name(hi)} ({hi[col]:.3f}); most negative {head_name(lo)} ({lo[col]:.3f})")
    lines += [f"note: {n}" for n in d["notes"]]
    return "\n".join(lines)


def html(d: dict) -> H.Safe:
    """The notebook's view: the intro, a grid per metric, the table of every head and the notes (no links)."""
    view = AtlasView(d, d["rows"], links=False)
    return H.join([view.intro(), view.grids(METRICS), view.table(), view.notes()])
