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

from ...maps.atlas import EIGEN_SHOWN, METRICS, SEED, TOP, WINDOW, HeadRow, atlas
from .. import html as H
from ..stages import Context, PageSection, Rendered, Stage, register_stage
from ..views.atlas import AtlasView, head_name, num
from ..paths import ATLAS_PAGE, head_page, neuron_page

INDEX_GRIDS = ("qk_self", "ov_copying_effective")   #: grids repeated on index.html


@register_stage
class AtlasStage(Stage):
    name = "atlas"
    title = "Atlas of every head (weights only)"
    exclusive = True          # vocabulary-sized products on every thread (report.lanes)
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
        search, tips = H.search_box(search_entries(rows, ctx.results)), view.tip_data()   # on both pages
        page = PageSection(path=ATLAS_PAGE, title="Atlas of every head", group="Atlas", order=(0,),
                           body=H.join([view.intro(), search, view.grids(METRICS), view.table(), view.notes(), tips]),
                           summary=f"{len(rows)} heads · {len(METRICS)} metrics")
        pages = [page] + [PageSection(path=head_page(r["layer"], r["head"]), title=f"Head {r['layer']}.{r['head']}",
                                      group="Attention heads", order=(r["layer"], r["head"]), body=view.head_section(r),
                                      summary=view.glance(r)) for r in rows]
        index = [H.Safe("<p>") + H.link(ATLAS_PAGE, "Open the atlas") + H.Safe(
                     f" — every metric of all {len(rows)} heads as layer × head grids: hover a cell for every "
                     "figure of that head, click it for the head's page.</p>"),
                 search, view.grids(INDEX_GRIDS, categories=False), tips]
        return Rendered(index=index, summary=view.summary(), pages=pages)


def merged_rows(data: dict, results: dict) -> list[dict]:
    """The atlas rows with the kernels stage's categories and the survey's losses filled in (display only)."""
    kern = results.get("kernels") or {}
    cats = ({h: c for h, c in enumerate(kern["shape"])} if kern.get("relative")     # rotary: the relative kernel's
            else {h["head"]: h["category"] for h in kern.get("heads", [])})
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


def search_entries(rows: list[dict], results: dict) -> list[tuple[str, str, str]]:
    """(label, note, href) for the search box: heads, MLP0 neurons with pages, and their tokens."""
    out = [(head_name(r), f"head page · self z {num(r['qk_self'], 3)} · copying {num(r['ov_copying_effective'], 3)}",
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
