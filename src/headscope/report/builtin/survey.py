"""Stage ``survey``: every head ranked by the semantic-head metrics on category prompts.

Runs :func:`headscope.survey.survey` (maths in :mod:`headscope.survey`): seeded
prompts ``BOS w_1 … w_n`` of category words (the shipped word lists), and per head the
seed's loss L = mean_q −log Σ_k (M ⊙ A)[q, k] (attention to earlier same-category,
different-token words, or BOS when there is none), self / copy / same-category
attention and BOS fallback. Lower loss = more semantic.
"""

from __future__ import annotations

from ...semantic.survey import survey
from .. import html as H
from ..stages import Context, Rendered, Stage, register_stage
from ..views import survey as V
from ..paths import head_page


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
    exclusive = True          # large products that use every thread well (report.lanes)
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
        return Rendered(index=[V.html(data, head_label=lambda l, h: head_label(ctx, l, h))], summary=V.summary(data))
