"""Stage ``attention``: attention patterns of every head of layers 0 and 1 on the sample texts.

Runs :func:`headscope.patterns.attention_summary` (definitions in its module docstring):
mean pattern, BOS / self / previous-token / distance / entropy rates and the offset
profile of every head, and its pattern on the first sample.
"""

from __future__ import annotations

from ...maps.patterns import attention_summary
from .. import figures as F
from .. import html as H
from ..stages import Context, PageSection, Rendered, Stage, register_stage
from ..paths import head_page


@register_stage
class AttentionStage(Stage):
    name = "attention"
    title = "Attention patterns (sample texts)"
    version = 2
    inputs = ("samples",)

    def key_options(self, o) -> dict:
        return {"layers": list(o.attention_layers), "max_positions": o.max_positions}

    def compute(self, ctx: Context) -> dict:
        return attention_summary(ctx.model, ctx.inputs.samples, ctx.options.attention_layers,
                                 max_positions=ctx.options.max_positions,
                                 progress=ctx.progress.iter).to_dict()

    def render(self, data: dict, ctx) -> Rendered:
        layers, nh = data["layers"], data["n_heads"]
        by = {(d["layer"], d["head"]): d for d in data["heads"]}
        figs = []
        metrics = [("bos", "attention to BOS"), ("self", "attention to self"),
                   ("prev", "attention to previous token"), ("distance", "mean distance q − k (tokens)")]
        for key, label in metrics:
            m = [[by[(l, h)][key] for h in range(nh)] for l in layers]
            figs.append(H.figure(
                F.heatmap(m, row_labels=[f"L{l}" for l in layers], col_labels=[f"H{h}" for h in range(nh)],
                          title=label, xlabel="head", annotate=True, cell=34, signed=False,
                          vmin=None if key == "distance" else 0.0),
                f"Mean {label} per head (rows: layer, columns: head), averaged over all {data['n_queries']} "
                f"queries q ≥ 1 of the {len(data['samples'])} sample texts."))
        rows = []
        for d in data["heads"]:
            rows.append((H.link(head_page(d["layer"], d["head"]), f"L{d['layer']}H{d['head']}"),
                         d["bos"], d["self"], d["prev"], d["distance"], d["entropy"]))
        table = H.table(["head", "BOS", "self", "previous", "mean distance", "entropy (nats)"], rows,
                        numeric=(1, 2, 3, 4, 5), caption="Mean attention rates per head over the sample texts.")
        pages = []
        for d in data["heads"]:
            pages.append(PageSection(
                path=head_page(d["layer"], d["head"]), title=f"Head {d['layer']}.{d['head']}", group="Attention heads",
                order=(d["layer"], d["head"]), body=self._head_body(d, data),
                summary=f"BOS {d['bos']:.2f} · self {d['self']:.2f} · distance {d['distance']:.1f}"))
        loc = max(data["heads"], key=lambda d: d["prev"])
        summary = [("heads with pages", len(data["heads"])),
                   ("most previous-token head", f"L{loc['layer']}H{loc['head']} (attention {loc['prev']:.2f})")]
        return Rendered(index=[H.grid(figs), table], summary=summary, pages=pages)

    def _head_body(self, d: dict, data: dict) -> H.Safe:
        name = f"L{d['layer']}H{d['head']}"
        P = data["positions"]
        stats = H.kv_table([("attention to BOS", d["bos"]), ("attention to self", d["self"]),
                            ("attention to previous token", d["prev"]), ("mean distance q − k", d["distance"]),
                            ("entropy (nats)", d["entropy"])],
                           caption=f"Means over {data['n_queries']} queries q ≥ 1 of the sample texts.")
        mean_fig = H.figure(
            F.heatmap(d["mean_pattern"], title=f"{name}: mean attention pattern", xlabel="key position k",
                      ylabel="query position q", signed=False, vmin=0.0, max_width=560),
            f"Attention probability A[q, k] averaged over the {len(data['samples'])} sample texts, "
            f"positions 0–{P - 1} (blank: k > q, masked).")
        prof = d["offset_profile"]
        x = list(range(len(prof["mean"])))
        prof_fig = H.figure(
            F.line_plot([F.Series(x, prof["mean"], "mean over queries")],
                        bands=[F.Band(x, prof["p10"], prof["p90"], "10–90 % of queries")],
                        title=f"{name}: attention by offset", xlabel="offset d = q − k", ylabel="A[q, q − d]"),
            "Attention paid to the key d tokens back, against d: mean over all queries of the sample "
            "texts (line) and the 10–90 % range across queries (band).")
        toks = data["example"]["tokens"]
        ex_fig = H.figure(
            F.heatmap(d["example_pattern"], row_labels=toks, col_labels=toks, signed=False, vmin=0.0,
                      title=f"{name}: pattern on “{data['example']['sample']}”", max_width=760),
            f"Attention pattern on the first {len(toks)} tokens of the sample text "
            f"“{data['example']['sample']}” (rows: query token, columns: key token).")
        return H.join([H.section("Attention on the sample texts", H.join([stats, H.grid([mean_fig, prof_fig]), ex_fig]))])
