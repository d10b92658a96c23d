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
from ..stages import Context, PageSection, Rendered, Stage, register_stage
from ..views import head as V
from ..paths import head_page


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
    long = True               # one of the longest lane stages: started first (report.lanes)

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
        pages = [PageSection(path=head_page(d["layer"], d["head"]), title=f"Head {d['layer']}.{d['head']}",
                             group="Attention heads", order=(d["layer"], d["head"]), body=V.head_section(d),
                             summary=V.glance(d)) for d in data["heads"]]
        return Rendered(index=[V.heads_html(data["heads"])], summary=V.heads_summary(data["heads"]), pages=pages)
