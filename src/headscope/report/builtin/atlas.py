"""Stage ``atlas``: every head of every layer from its weights alone, on one page.

Runs :func:`headscope.atlas.atlas` (definitions of every metric in its module docstring):
per head the QK symmetry, the share of negative eigenvalues of sym(W_QK), the mean
standardised self score (negative: self-suppression), the OV copying score (negative:
copy suppression) and the positional share of the score variance. Rendered as
``atlas.html`` — a layer × head grid per metric (colour-blind-safe scales; hovering a
cell shows every figure of that head, clicking opens its page), a sortable table of
all heads and a search box for tokens, neurons and heads — plus a section on every
head's page (``heads/L{l}H{h}.html``). The layer-0 kernel categories and the survey's
semantic loss are shown from the kernels and survey stages when those ran.
"""

from __future__ import annotations

import dataclasses
import math

import torch

from ...maps.atlas import COLUMN, COLUMNS, EIGEN_SHOWN, METRICS, SEED, TOP, WINDOW, HeadRow, atlas
from ...stats import quantile
from .. import figures as F
from .. import html as H
from ..stages import Context, PageSection, Rendered, Stage, register_stage
from .paths import head_page, neuron_page

ATLAS_PAGE = "atlas.html"
NOT_APPLICABLE = "#bdbdbd"            #: grey: the metric does not apply to this head
CATEGORY_COLOURS = {"local": F.OKABE_ITO[1], "slowly_decaying": F.OKABE_ITO[2], "uniform": F.OKABE_ITO[5],
                    "increasing": F.OKABE_ITO[6]}
INDEX_GRIDS = ("qk_self", "ov_copying_effective")   #: grids repeated on index.html


@register_stage
class AtlasStage(Stage):
    name = "atlas"
    title = "Atlas of every head (weights only)"
    version = 2
    #: every figure typed ``… | None`` in HeadRow (None: not applicable to the head, stated in the page)
    nullable = tuple(f"rows[].{f.name}" for f in dataclasses.fields(HeadRow) if str(f.type).endswith("| None"))

    def key_options(self, o) -> dict:
        return {"n_tokens": o.atlas_tokens, "window": WINDOW, "seed": SEED, "top": TOP, "eigen_shown": EIGEN_SHOWN}

    def compute(self, ctx: Context) -> dict:
        return atlas(ctx.model, n_tokens=ctx.options.atlas_tokens, kernels=False, survey=False, progress=ctx.progress).to_dict()

    def render(self, data: dict, ctx) -> Rendered:
        rows = merged_rows(data, ctx.results)
        view = AtlasView(data, rows, links=True)
        page = PageSection(path=ATLAS_PAGE, title="Atlas of every head", group="Atlas", order=(0,),
                           body=H.join([view.intro(), H.search_box(search_entries(rows, ctx.results)),
                                        view.grids(METRICS), view.table(), view.notes(), view.tip_data()]),
                           summary=f"{len(rows)} heads · {len(METRICS)} metrics")
        pages = [page] + [PageSection(path=head_page(r["layer"], r["head"]), title=f"Head {r['layer']}.{r['head']}",
                                      group="Attention heads", order=(r["layer"], r["head"]), body=view.head_section(r),
                                      summary=view.glance(r)) for r in rows]
        index = [H.Safe("<p>") + H.link(ATLAS_PAGE, "Open the atlas") + H.Safe(
                     f" — every metric of all {len(rows)} heads as layer × head grids: hover a cell for every "
                     "figure of that head, click it for the head's page.</p>"),
                 H.search_box(search_entries(rows, ctx.results)), view.grids(INDEX_GRIDS, categories=False), view.tip_data()]
        return Rendered(index=index, summary=view.summary(), pages=pages)


def merged_rows(data: dict, results: dict) -> list[dict]:
    """The atlas rows with the kernels stage's categories and the survey's losses filled in (display only)."""
    cats = {h["head"]: h["category"] for h in (results.get("kernels") or {}).get("heads", [])}
    losses = {(r["layer"], r["head"]): r["semantic_loss"] for r in (results.get("survey") or {}).get("rows", [])}
    out = []
    for r in data["rows"]:
        r = dict(r)
        if r["layer"] == 0 and r.get("kernel_category") is None:
            r["kernel_category"] = cats.get(r["head"])
        if r.get("semantic_loss") is None:
            r["semantic_loss"] = losses.get((r["layer"], r["head"]))
        out.append(r)
    return out


def _name(r: dict) -> str:
    return f"L{r['layer']}H{r['head']}"


def _num(v, digits: int = 4) -> str:
    return "n/a" if v is None else f"{v:.{digits}g}"


class AtlasView:
    """HTML of an atlas (report page, index section, head sections, notebook): one place for all of it."""

    def __init__(self, data: dict, rows: list[dict], *, links: bool):
        self.data, self.rows, self.links = data, rows, links
        self.layers = list(data["layers"])
        self.n_heads = data["config"]["n_heads"]
        self.by = {(r["layer"], r["head"]): r for r in rows}

    # -- per-head text -----------------------------------------------------------------

    def tip(self, r: dict) -> str:
        """Every figure of one head, one per line (the grid's tooltip)."""
        lines = [f"{_name(r)} (layer {r['layer']}, head {r['head']})",
                 f"self score z: {_num(r['qk_self'])} over {r['n_self_rows']} tokens",
                 f"OV copying: {_num(r['ov_copying_effective'])} (effective), "
                 f"{_num(r.get('ov_copying_framework'))} (Framework)",
                 f"QK symmetry: {_num(r['qk_symmetry'])} (rms sym {_num(r['qk_sym_rms'], 3)}, "
                 f"skew {_num(r['qk_skew_rms'], 3)})",
                 f"negative λ: {r['n_negative_top']} of top {r['n_eigen_top']} ({_num(r['qk_negative_fraction'], 3)})",
                 f"negative λ mass: {_num(r.get('qk_negative_mass'))}",
                 f"positional share: {_num(r['positional_share'])}"]
        if r.get("kernel_category"):
            lines.append(f"kernel: {r['kernel_category'].replace('_', ' ')}")
        if r.get("semantic_loss") is not None:
            lines.append(f"semantic loss: {_num(r['semantic_loss'])}")
        return "\n".join(lines)

    def glance(self, r: dict) -> str:
        return f"self z {_num(r['qk_self'], 3)} · copying {_num(r['ov_copying_effective'], 3)}"

    def tip_data(self) -> H.Safe:
        """The tooltips of every grid cell, for the report's script (one JSON block per page)."""
        return H.data_script("hs-atlas-data", {_name(r): self.tip(r) for r in self.rows})

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
        tips = [[self.tip(self.by[(l, h)]) for h in range(self.n_heads)] for l in layers]
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
            name = H.link(head_page(r["layer"], r["head"]), _name(r)) if self.links else _name(r)
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
            out.append(("most negative self score (atlas)", f"{_name(low)} ({low['qk_self']:.3g})"))
        cop = [r for r in self.rows if r["ov_copying_effective"] is not None]
        if cop:
            hi, lo = max(cop, key=lambda r: r["ov_copying_effective"]), min(cop, key=lambda r: r["ov_copying_effective"])
            out.append(("largest / most negative OV copying", f"{_name(hi)} ({hi['ov_copying_effective']:.3g}) / "
                                                              f"{_name(lo)} ({lo['ov_copying_effective']:.3g})"))
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
                                                height=260, title=f"{_name(r)}: singular values", ylabel="σ"),
                                "Singular values of the head's OV and QK matrices (largest first)."))
        return out

    def head_section(self, r: dict) -> H.Safe:
        name = _name(r)
        kv = H.kv_table([
            ("self score z (mean over tokens)", f"{_num(r['qk_self'])} over {r['n_self_rows']} tokens"),
            ("OV copying Σλ/Σ|λ| over effective embeddings", r["ov_copying_effective"]),
            ("OV copying Σλ/Σ|λ| of W_E W_OV W_U (Framework)", r.get("ov_copying_framework")),
            ("negative λ mass of sym(W_QK) over centred effective embeddings", r.get("qk_negative_mass")),
            ("QK symmetry ‖sym‖/(‖sym‖+‖skew‖)", r["qk_symmetry"]),
            ("rms logit of sym / skew part", f"{_num(r['qk_sym_rms'], 3)} / {_num(r['qk_skew_rms'], 3)}"),
            (f"negative eigenvalues among the top {r['n_eigen_top']} of sym(W_QK)",
             f"{r['n_negative_top']} ({_num(r['qk_negative_fraction'], 3)})"),
            ("positional share of score variance", r["positional_share"]),
            ("layer-0 kernel category", (r.get("kernel_category") or "").replace("_", " ") or None),
            ("semantic loss (survey)", r.get("semantic_loss")),
        ], caption="From the weights alone (headscope.atlas); — or n/a: not applicable or not computed.")
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
                                                      f"#grid-qk_self", "← the atlas") + H.Safe("</p>") \
            if self.links else H.Safe("")
        return H.section("Atlas: the head from its weights", H.join([kv, H.grid(figs), *self.directions(r), back]))


def _toks(ts: list[str]) -> str:
    return " ".join(repr(t) for t in ts)


def search_entries(rows: list[dict], results: dict) -> list[tuple[str, str, str]]:
    """(label, note, href) for the search box: heads, MLP0 neurons with pages, and their tokens."""
    out = [(_name(r), f"head page · self z {_num(r['qk_self'], 3)} · copying {_num(r['ov_copying_effective'], 3)}",
            head_page(r["layer"], r["head"])) for r in rows]
    seen = set()
    for n in (results.get("neurons") or {}).get("neurons", []):
        j, page = n["neuron"], neuron_page(n["neuron"])
        seen.add(j)
        out.append((f"n{j}", f"contextual MLP0 neuron · max contribution {n['max_contribution']:.3g}", page))
        for side in ("top", "bottom"):
            for t, v in zip(n.get(f"{side}_tokens", []), n.get(f"{side}_values", [])):
                out.append((repr(t), f"{side} token of neuron {j} ({v:+.3g})", page))
    for n in (results.get("activations") or {}).get("neurons", []):
        if n["neuron"] not in seen:
            seen.add(n["neuron"])
            out.append((f"n{n['neuron']}", "MLP0 neuron page", neuron_page(n["neuron"])))
    for d in (results.get("semantic") or {}).get("heads", []):
        name, page = f"L{d['layer']}H{d['head']}", head_page(d["layer"], d["head"])
        for k, c in enumerate(d.get("clusters", [])):
            cat = f", mostly {c['category']}" if c.get("category") else ""
            for t in c["tokens"]:
                out.append((repr(t), f"{name} Leiden cluster {k + 1} ({c['size']} tokens{cat})", page))
    return out
