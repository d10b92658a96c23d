"""Stage ``survey``: every head ranked by the semantic-head metrics on category prompts.

Runs :func:`headscope.survey.survey` (maths in :mod:`headscope.survey`): seeded
prompts ``BOS w_1 … w_n`` of category words (the shipped word lists), and per head the
seed's loss L = mean_q −log Σ_k (M ⊙ A)[q, k] (attention to earlier same-category,
different-token words, or BOS when there is none), self / copy / same-category
attention and BOS fallback. Lower loss = more semantic.
"""

from __future__ import annotations

from ...semantic.survey import survey
from .. import figures as F
from .. import html as H
from ..stages import Context, Rendered, Stage, register_stage
from .paths import head_page

SHOWN = 24  #: rows of the ranking shown on the index (all are in data/survey.json)


def page_exists(ctx, layer: int, head: int) -> bool:
    """Whether the report has a page for head L.H (attention pages, a semantic deep dive, or the atlas)."""
    att = ctx.results.get("attention")
    sem = ctx.results.get("semantic")
    atl = ctx.results.get("atlas")
    return bool((att and layer in att.get("layers", ())) or      # .get: a stage that did not apply has none
                (sem and any(d["layer"] == layer and d["head"] == head for d in sem.get("heads", ()))) or
                (atl and layer in atl.get("layers", ())))


def head_label(ctx, layer: int, head: int):
    name = f"L{layer}H{head}"
    return H.link(head_page(layer, head), name) if page_exists(ctx, layer, head) else name


@register_stage
class SurveyStage(Stage):
    name = "survey"
    title = "Semantic-head survey (category prompts)"
    version = 2
    nullable = ("rows[].copy_attention", "rows[].same_category", "rows[].bos_fallback")   # no query applies

    def key_options(self, o) -> dict:
        return {"categories": "shipped", "n_prompts": 64, "length": 16, "seed": 0}

    def compute(self, ctx: Context) -> dict:
        ctx.progress.set_total(1)
        r = survey(ctx.model, n_prompts=64, length=16, seed=0)
        ctx.progress.update()
        return r.to_dict()

    def render(self, data: dict, ctx) -> Rendered:
        rows = data["rows"]
        layers = sorted({r["layer"] for r in rows})
        nh = max(r["head"] for r in rows) + 1
        by = {(r["layer"], r["head"]): r for r in rows}
        table = H.table(["rank", "head", "semantic loss", "self", "copy", "same category", "BOS fallback"],
                        [(r["rank"], head_label(ctx, r["layer"], r["head"]), r["semantic_loss"], r["self_attention"],
                          r["copy_attention"], r["same_category"], r["bos_fallback"]) for r in rows[:SHOWN]],
                        numeric=(0, 2, 3, 4, 5, 6),
                        caption=f"The {min(SHOWN, len(rows))} best of {len(rows)} heads by semantic loss on "
                                f"{data['prompts'].get('n_prompts', '')} category prompts "
                                f"({len(data['categories'])} categories); all heads in data/survey.json.")
        heat = H.figure(F.heatmap([[by[(l, h)]["semantic_loss"] for h in range(nh)] for l in layers],
                                  row_labels=[f"L{l}" for l in layers], col_labels=[f"H{h}" for h in range(nh)],
                                  title="semantic loss", xlabel="head", annotate=True, cell=34, signed=False, vmin=0.0),
                        "Semantic loss of every head (rows: layer, columns: head); lower is more semantic.")
        top = rows[:12]
        bars = H.figure(F.bar_plot([r["same_category"] for r in top], [f"L{r['layer']}H{r['head']}" for r in top],
                                   title="Same-category attention, best 12", ylabel="attention to partners"),
                        "Attention paid to earlier same-category words by the 12 best-ranked heads.")
        best = rows[0]
        summary = [("most semantic head", f"L{best['layer']}H{best['head']} (loss {best['semantic_loss']:.3g})")]
        return Rendered(index=[table, H.grid([heat, bars])], summary=summary)
