"""Views of steering a head (:class:`headscope.semantic.steering.SteerResult`) and of the authors'
steering (:class:`headscope.semantic.steering.AuthorsSteer`), from their ``to_dict()``.

:func:`text` and :func:`authors_text` are ``headscope steer``'s output; :func:`html` the report
stage's index section and the notebook's view. The report's steering stage adds the head's
attention pattern on one prompt before and after (``prompt``, ``pattern_before``,
``pattern_after``); without them those heatmaps are left out.
"""

from __future__ import annotations

from .. import figures as F
from .. import html as H


def text(d: dict) -> str:
    """The head, the eigenvalues scaled, the rebuild's errors, self-attention and rank of self before → after."""
    return "\n".join([
        f"head {d['layer']}.{d['head']}: {d['n_selected']} eigenvalues ({d['select']}) scaled by α = {d['alpha']:g}",
        f"rebuilt rank {d['rank']}, rebuild error {d['rebuild_error']:.2e}, key-bias error {d['key_bias_error']:.2e}",
        f"self-attention  {d['self_attention_before']:.4f} → {d['self_attention_after']:.4f}",
        f"rank of self    {d['self_rank_before']:.2f} → {d['self_rank_after']:.2f}",
        f"wrote {d['out']}" if d["out"] else "(no checkpoint written)",
    ])


def authors_text(d: dict) -> str:
    """Per α: the raw bilinear scores' self, same-group and other-group means and the rank of self."""
    lines = [f"the authors' steering of head {d['layer']}.{d['head']}: top {d['top']} eigenpairs by |λ| "
             f"({d['n_negative_top']} negative), skew part added back, raw scores of {len(d['tokens'])} tokens "
             f"(truncation error at α = 1: {d['truncation_error']:.2e})",
             f"{'α':>9}  {'self':>9}  {'same group':>10}  {'other':>9}  {'rank of self':>12}"]
    for r in d["summary"]:
        lines.append(f"{r['alpha']:>9}  {r['self_mean']:9.3f}  {r['same_group_mean']:10.3f}  "
                     f"{r['other_group_mean']:9.3f}  {r['self_rank_mean']:12.2f}")
    return "\n".join(lines)


def _selected(d: dict) -> str:
    sel = d["select"]
    return f"{d['n_selected']} {sel}" if isinstance(sel, str) else f"{d['n_selected']} (indices {sel})"


def html(d: dict, *, head=None) -> H.Safe:
    """The measurements as a table, self-attention before and after as bars and, when the dict has the
    prompt's patterns, the head's pattern before and after. `head`: the head's label (default LxHy)."""
    name = f"L{d['layer']}H{d['head']}"
    bars = H.figure(F.bar_plot([d["self_attention_before"], d["self_attention_after"]],
                               ["before", f"α = {d['alpha']:g}"], title="Self-attention probability",
                               ylabel="mean A[q, q]", width=300),
                    "Mean self-attention probability A[q, q] over the queries of 32 seeded category prompts.")
    kv = H.kv_table([("head", name if head is None else head),
                     ("eigenvalues scaled", f"{_selected(d)}, by α = {d['alpha']:g}"),
                     ("self-attention before → after", f"{d['self_attention_before']:.4f} → "
                                                      f"{d['self_attention_after']:.4f}"),
                     ("mean rank of self before → after", f"{d['self_rank_before']:.2f} → "
                                                         f"{d['self_rank_after']:.2f}"),
                     ("rebuilt rank / rebuild error", f"{d['rank']} / {d['rebuild_error']:.2e}"),
                     *([("written to", d["out"])] if d.get("out") else [])],
                    caption="headscope steer MODEL --head L.H --alpha 0 writes this head as a checkpoint.")
    out = [H.grid([kv, bars])]
    if "prompt" in d:
        toks = d["prompt"]["tokens"]
        out.append(H.grid([H.figure(F.heatmap(d[f"pattern_{k}"], row_labels=toks, col_labels=toks, signed=False,
                                              vmin=0.0, vmax=1.0, title=f"{name} {label}", max_width=470),
                                    f"Attention pattern of {name} on a category prompt {label} "
                                    f"(rows: query, columns: key; blank: masked).")
                           for k, label in (("before", "before steering"), ("after", f"after α = {d['alpha']:g}"))]))
    return H.join(out)


def summary(d: dict) -> list[tuple[str, object]]:
    return [(f"self-attention of L{d['layer']}H{d['head']}, before → α = {d['alpha']:g}",
             f"{d['self_attention_before']:.3f} → {d['self_attention_after']:.3f}")]
