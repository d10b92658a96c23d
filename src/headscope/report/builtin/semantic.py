"""Stage ``semantic``: deep dives into the best-ranked heads of the survey.

For each of the ``deep_dives`` heads of lowest semantic loss, runs
:func:`headscope.head.analyse_heads` (maths in :mod:`headscope.bilinear` and
:mod:`headscope.clustering`): the QK bilinear form W_QK = S + A over effective token
embeddings, the eigenvalues of the symmetric part S (by |λ|), the top singular values
of S and of the skew part A, the number of negative eigenvalues among the top 64,
token-identity share of the score variance, and Leiden clusters of the token graph.

The heads share one pass up the residual stream for the effective embeddings. Example
tokens' neighbours are ranked over the whole vocabulary when that costs at most
:data:`headscope.head.VOCAB_KEYS_BUDGET` flops (``neighbour_keys="auto"``, the default:
heads in layers 0–1 of GPT-2 Small and Pythia-160m, layer 0 of the larger models), otherwise over the
graph's nodes; each head's ``graph.keys`` says which, and ``neighbour_keys`` in the
stage's data states the rule.
"""

from __future__ import annotations

from ...semantic.head import VOCAB_KEYS_BUDGET, analyse_heads
from ...semantic.options import HeadOptions
from .. import figures as F
from .. import html as H
from ..stages import Context, PageSection, Rendered, Stage, register_stage
from .paths import head_page


@register_stage
class SemanticStage(Stage):
    name = "semantic"
    title = "Semantic heads: QK bilinear form and clusters"
    version = 3
    nullable = ("heads[].spectral", "heads[].leiden.ari", "heads[].leiden.modularity", "heads[].clusters[].category",
                "heads[].clusters[].purity", "heads[].position.identity_fraction", "heads[].position.position_fraction",
                "heads[].skew_to_sym_ratio",   # undefined: see headscope.head / clustering / survey / bilinear
                "heads[].graph.max_comm_size")  # no community size cap (headscope's graph; the seed preset's: 512)
    requires = ("survey",)

    def key_options(self, o) -> dict:
        return {"deep_dives": o.deep_dives, "n_tokens": o.semantic_tokens, "variant": "full", "seed": 0, "spectral": False,
                "keys": o.neighbour_keys}

    def compute(self, ctx: Context) -> dict:
        rows = ctx.results["survey"]["rows"][: ctx.options.deep_dives]
        keys = ctx.options.neighbour_keys
        options = HeadOptions(n_tokens=ctx.options.semantic_tokens, keys=keys, seed=0, with_spectral=False)
        analyses = analyse_heads(ctx.model, [(r["layer"], r["head"]) for r in rows], options,
                                 progress=ctx.progress.step if ctx.progress else None)
        heads = []
        for r, a in zip(rows, analyses):
            d = a.to_dict()
            d["rank"] = r["rank"]
            d["semantic_loss"] = r["semantic_loss"]
            heads.append(d)
        del analyses
        rule = {"vocab": "the whole vocabulary", "nodes": "the graph's nodes",
                "auto": f"the whole vocabulary when its effective embeddings cost ≤ {VOCAB_KEYS_BUDGET:.0e} flops "
                        "(d_vocab · layer · 4 · d_model · d_mlp), else the graph's nodes"}[keys]
        return {"heads": heads, "neighbour_keys": {"option": keys, "budget_flops": VOCAB_KEYS_BUDGET, "rule": rule}}

    def render(self, data: dict, ctx) -> Rendered:
        rows, figs, pages = [], [], []
        for d in data["heads"]:
            name = f"L{d['layer']}H{d['head']}"
            top = bilinear_top(d)
            rows.append((H.link(head_page(d["layer"], d["head"]), name), d["rank"], d["semantic_loss"],
                         d[f"n_negative_top{top}"], d["sigma_sym"][0], d["sigma_skew"][0],
                         d["position"]["identity_fraction"], d["leiden"]["n_clusters"], d["leiden"]["ari"]))
            figs.append(self._spectrum(d, 420, 280))
            pages.append(PageSection(path=head_page(d["layer"], d["head"]), title=f"Head {d['layer']}.{d['head']}",
                                     group="Attention heads", order=(d["layer"], d["head"]), body=self._page(d),
                                     summary=f"semantic rank {d['rank']} · {d[f'n_negative_top{top}']} negative λ"))
        table = H.table(["head", "survey rank", "semantic loss", "negative λ in top 64", "σ_sym (top)",
                         "σ_skew (top)", "token-identity share", "Leiden clusters", "ARI vs categories"], rows,
                        numeric=(1, 2, 3, 4, 5, 6, 7, 8),
                        caption="Deep dives of the best-ranked survey heads (full effective embeddings).")
        summary = []
        if data["heads"]:
            d = data["heads"][0]
            summary.append(("negative eigenvalues of the top head's S (top 64)",
                            f"{d[f'n_negative_top{bilinear_top(d)}']} (L{d['layer']}H{d['head']})"))
        return Rendered(index=[table, H.grid(figs)], summary=summary, pages=pages)

    def _spectrum(self, d, width=520, height=300) -> H.Safe:
        name = f"L{d['layer']}H{d['head']}"
        return H.figure(F.spectrum_plot({"eigenvalue λ of S": d["eigenvalues"]}, top=64, width=width, height=height,
                                        title=f"{name}: eigenvalues of S (by |λ|)", ylabel="λ"),
                        f"Eigenvalues of the symmetric part S of {name}'s QK form, largest |λ| first; negative "
                        "eigenvalues make a token avoid itself.")

    def _page(self, d) -> H.Safe:
        name = f"L{d['layer']}H{d['head']}"
        top = bilinear_top(d)
        kv = H.kv_table([("survey rank", d["rank"]), ("semantic loss", d["semantic_loss"]),
                         (f"negative eigenvalues among the top {top}", d[f"n_negative_top{top}"]),
                         ("negative / positive eigenvalues (all)", f"{d['n_negative']} / {d['n_positive']}"),
                         ("top σ of S / of A", f"{d['sigma_sym'][0]:.4g} / {d['sigma_skew'][0]:.4g}"),
                         ("skew / symmetric ratio", d["skew_to_sym_ratio"]),
                         ("token-identity share of score variance", d["position"]["identity_fraction"]),
                         ("Leiden modularity", d["leiden"]["modularity"]), ("ARI vs categories", d["leiden"]["ari"])],
                        caption=f"Bilinear form over {d['embedding_variant']} effective embeddings.")
        sig = H.figure(F.spectrum_plot({"σ(S), symmetric": d["sigma_sym"], "σ(A), skew": d["sigma_skew"]},
                                       title=f"{name}: singular values, sym vs skew", ylabel="σ"),
                       "Top singular values of the symmetric part S and the skew part A of W_QK.")
        clusters = H.table(["size", "majority category", "purity", "tokens"],
                           [(c["size"], c["category"], c["purity"], _tokens(c["tokens"][:24])) for c in d["clusters"][:20]],
                           numeric=(0, 2), caption=f"Leiden clusters of the token graph ({d['leiden']['n_clusters']} "
                                                   f"clusters; first 20, first 24 tokens each).")
        neigh = H.table(["token", "top attention targets"],
                        [(H.token_repr(n.get("token", "")), _tokens(n.get("targets", [])[:10])) for n in d["neighbours"][:10]],
                        caption="Where example tokens attend ("
                                + ("whole vocabulary" if d["graph"]["keys"] == "vocab" else "the graph's nodes")
                                + " as keys).")
        return H.section("Semantic deep dive", H.join([kv, H.grid([self._spectrum(d), sig]), clusters, neigh]))


def bilinear_top(d: dict) -> int:
    """The `top` of a saved bilinear form: the NN of its ``n_negative_topNN`` key."""
    return int(next(k for k in d if k.startswith("n_negative_top"))[len("n_negative_top"):])


def _tokens(toks) -> H.Safe:
    return H.join([H.token_repr(t) + H.Safe(" ") for t in toks])
