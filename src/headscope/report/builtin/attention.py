"""Stage ``attention``: attention patterns of every head of layers 0 and 1 on the sample texts.

For head h of layer l and sample text s with pattern A_s[q, k] (softmax over k ≤ q):

* mean pattern  Ā[q, k] = mean_s A_s[q, k] for q, k < P (P = min(max_positions, shortest text));
  exact on the truncated texts, since A[q, ·] only depends on tokens 0..q;
* per-head rates over all queries q ≥ 1 of all texts: BOS = A[q, 0], self = A[q, q],
  previous = A[q, q-1], mean distance Σ_k (q - k) A[q, k], entropy −Σ_k A log A (nats);
* offset profile: A[q, q - d] against the offset d, mean and 10–90 % range over queries.
"""

from __future__ import annotations

import torch

from ...forward import run_with_cache
from .. import figures as F
from .. import html as H
from ..stages import Context, PageSection, Rendered, Stage, register_stage
from ._pages import head_page  # noqa: F401  (re-exported)


def _lower(m: torch.Tensor) -> list[list[float]]:
    """Rows of the lower triangle of a square matrix (row q has q + 1 entries)."""
    return [m[q, : q + 1].tolist() for q in range(m.shape[0])]


def _square(rows: list[list[float]]) -> list[list[float | None]]:
    n = len(rows)
    return [r + [None] * (n - len(r)) for r in rows]


@register_stage
class AttentionStage(Stage):
    name = "attention"
    title = "Attention patterns (sample texts)"
    version = 1
    inputs = ("samples",)

    def key_options(self, o) -> dict:
        return {"layers": list(o.attention_layers), "max_positions": o.max_positions}

    def compute(self, ctx: Context) -> dict:
        model, cfg = ctx.model, ctx.model.cfg
        layers = [l for l in ctx.options.attention_layers if 0 <= l < cfg.n_layers]
        W = ctx.weights()
        texts = ctx.inputs.samples
        toks = [model.to_tokens(t.text)[: cfg.n_ctx] for t in texts]
        P = min(ctx.options.max_positions, min(len(t) for t in toks))
        D = ctx.options.max_positions  # offsets shown in the profile
        H_ = cfg.n_heads
        mean = torch.zeros(len(layers), H_, P, P, dtype=torch.float64)
        rate = {k: torch.zeros(len(layers), H_, dtype=torch.float64) for k in ("bos", "self", "prev", "distance", "entropy")}
        offs: list[list[list[torch.Tensor]]] = [[[] for _ in range(H_)] for _ in layers]  # [l][h] → [q, D] rows
        n_q = 0
        example = None
        for s, t in enumerate(ctx.progress.iter(toks)):
            names = [f"blocks.{l}.attn.hook_pattern" for l in layers]
            cache = run_with_cache(W, t[None], names, stop_at_layer=max(layers) + 1)
            n = len(t)
            q = torch.arange(n)
            for i, l in enumerate(layers):
                A = cache[f"blocks.{l}.attn.hook_pattern"][0].double()  # [h q k]
                mean[i] += A[:, :P, :P]
                Aq = A[:, 1:]                                             # queries q ≥ 1: [h q-1 k]
                rate["bos"][i] += Aq[:, :, 0].sum(-1)
                rate["self"][i] += A.diagonal(dim1=1, dim2=2)[:, 1:].sum(-1)
                rate["prev"][i] += A.diagonal(offset=-1, dim1=1, dim2=2).sum(-1)
                dist = (q[:, None] - q[None, :]).clamp(min=0).double()     # [q k]
                rate["distance"][i] += (A * dist).sum(-1)[:, 1:].sum(-1)
                rate["entropy"][i] += -(A * A.clamp_min(1e-30).log()).sum(-1)[:, 1:].sum(-1)
                # offset profile: row q → A[q, q - d] for d < D (NaN where q - d < 0)
                idx = q[:, None] - torch.arange(D)[None, :]                # [q d]
                valid = idx >= 0
                g = A.gather(2, idx.clamp(min=0)[None].expand(H_, n, D))   # [h q d]
                g = torch.where(valid[None], g, torch.nan)
                for h in range(H_):
                    offs[i][h].append(g[h, 1:])
                if s == 0:
                    if example is None:
                        example = {}
                    m = min(n, ctx.options.max_positions)
                    example[l] = A[:, :m, :m]
            n_q += len(t) - 1
        mean /= len(toks)
        heads = []
        for i, l in enumerate(layers):
            for h in range(H_):
                o = torch.cat(offs[i][h])                                   # [all queries, D]
                prof = torch.nanmean(o, 0)
                lo = torch.nanquantile(o, 0.1, dim=0)
                hi = torch.nanquantile(o, 0.9, dim=0)
                heads.append({
                    "layer": l, "head": h,
                    **{k: (rate[k][i, h] / n_q).item() for k in rate},
                    "mean_pattern": _lower(mean[i, h]),
                    "offset_profile": {"mean": prof.tolist(), "p10": lo.tolist(), "p90": hi.tolist()},
                    "example_pattern": _lower(example[l][h]),
                })
        m = min(len(toks[0]), ctx.options.max_positions)
        return {
            "layers": layers, "n_heads": H_, "positions": P, "offsets": D, "n_queries": n_q,
            "samples": [t.name for t in texts],
            "example": {"sample": texts[0].name, "tokens": model.to_str_tokens(toks[0][:m].tolist())},
            "heads": heads,
        }

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
            F.heatmap(_square(d["mean_pattern"]), title=f"{name}: mean attention pattern", xlabel="key position k",
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
            F.heatmap(_square(d["example_pattern"]), row_labels=toks, col_labels=toks, signed=False, vmin=0.0,
                      title=f"{name}: pattern on “{data['example']['sample']}”", max_width=760),
            f"Attention pattern on the first {len(toks)} tokens of the sample text "
            f"“{data['example']['sample']}” (rows: query token, columns: key token).")
        return H.join([H.section("Attention on the sample texts", H.join([stats, H.grid([mean_fig, prof_fig]), ex_fig]))])
