"""Views of the semantic-head survey (:class:`headscope.semantic.survey.SurveyResult`), from its ``to_dict()``.

:func:`prompts_text` and :func:`text` are ``headscope survey``'s output; :func:`html` the report
stage's index section and the notebook's view.
"""

from __future__ import annotations

from .. import figures as F
from .. import html as H

SHOWN = 24  #: rows of the ranking shown in HTML (all are in the dict)


def prompts_text(d: dict) -> str:
    """How the prompts were made, one line."""
    p = d["prompts"]
    return (f"prompts: preset {p['preset']}, {p['n_prompts']} × {p['length']} words, {len(d['categories'])} categories, "
            f"BOS query {'in' if p['bos_query_in_loss'] else 'not in'} the loss"
            + (f", related (not counted wrong): {', '.join('/'.join(r) for r in p['related'])}" if p["related"] else ""))


def text(d: dict, top: int | None = None) -> str:
    """The ranking, one line per head (the best `top`; all when None)."""
    lines = [f"{'rank':>4}  {'head':>5}  {'loss':>7}  {'self':>6}  {'copy':>6}  {'same_cat':>8}  {'bos_fb':>6}"]

    def f(x, w):
        return f"{'—':>{w}}" if x is None else f"{x:{w}.3f}"
    for r in d["rows"][:top]:
        lines.append(f"{r['rank']:>4}  {r['layer']:>2}.{r['head']:<2}  {r['semantic_loss']:7.3f}  "
                     f"{r['self_attention']:6.3f}  {f(r['copy_attention'], 6)}  {f(r['same_category'], 8)}  "
                     f"{f(r['bos_fallback'], 6)}")
    return "\n".join(lines)


def html(d: dict, *, head_label=None) -> H.Safe:
    """The best heads' table, the loss of every head as a layer × head heatmap, and the 12 best heads'
    same-category attention. `head_label(layer, head)`: a head's label (default LxHy; the report links it)."""
    rows = d["rows"]
    label = head_label or (lambda layer, head: f"L{layer}H{head}")
    layers = sorted({r["layer"] for r in rows})
    nh = max(r["head"] for r in rows) + 1
    by = {(r["layer"], r["head"]): r for r in rows}
    table = H.table(["rank", "head", "semantic loss", "self", "copy", "same category", "BOS fallback"],
                    [(r["rank"], label(r["layer"], r["head"]), r["semantic_loss"], r["self_attention"],
                      r["copy_attention"], r["same_category"], r["bos_fallback"]) for r in rows[:SHOWN]],
                    numeric=(0, 2, 3, 4, 5, 6),
                    caption=f"The {min(SHOWN, len(rows))} best of {len(rows)} heads by semantic loss on "
                            f"{d['prompts'].get('n_prompts', '')} category prompts "
                            f"({len(d['categories'])} categories); all heads in data/survey.json.")
    heat = H.figure(F.heatmap([[by[(l, h)]["semantic_loss"] for h in range(nh)] for l in layers],
                              row_labels=[f"L{l}" for l in layers], col_labels=[f"H{h}" for h in range(nh)],
                              title="semantic loss", xlabel="head", annotate=True, cell=34, signed=False, vmin=0.0),
                    "Semantic loss of every head (rows: layer, columns: head); lower is more semantic.")
    top = rows[:12]
    bars = H.figure(F.bar_plot([r["same_category"] for r in top], [f"L{r['layer']}H{r['head']}" for r in top],
                               title="Same-category attention, best 12", ylabel="attention to partners"),
                    "Attention paid to earlier same-category words by the 12 best-ranked heads.")
    return H.join([table, H.grid([heat, bars])])


def summary(d: dict) -> list[tuple[str, object]]:
    best = d["rows"][0]
    return [("most semantic head", f"L{best['layer']}H{best['head']} (loss {best['semantic_loss']:.3g})")]
