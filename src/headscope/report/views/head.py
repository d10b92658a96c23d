"""Views of one head's deep dive (:class:`headscope.semantic.head.HeadAnalysis`), from its ``to_dict()``.

:func:`text` is ``headscope head``'s output; :func:`html` the notebook's view and
:func:`head_section` the report's head page section (the same, with the head's survey rank and
loss, which the report's semantic stage adds as ``rank`` and ``semantic_loss``);
:func:`heads_html` the semantic stage's index section over its deep dives.
"""

from __future__ import annotations

from ...core.tokenizer import escape_token
from .. import figures as F
from .. import html as H
from ..paths import head_page


def bilinear_top(d: dict) -> int:
    """The `top` of a saved bilinear form: the NN of its ``n_negative_topNN`` key."""
    return int(next(k for k in d if k.startswith("n_negative_top"))[len("n_negative_top"):])


def _fmt(x: float | None) -> str:
    return "— (undefined)" if x is None else f"{x:.3f}"


def _name(d: dict) -> str:
    return f"L{d['layer']}H{d['head']}"


def _tokens(toks) -> H.Safe:
    return H.join([H.token_repr(t) + H.Safe(" ") for t in toks])


def text(d: dict) -> str:
    """The form's eigenvalues and singular values, the token-identity share and the Leiden clusters."""
    lei, top = d["leiden"], bilinear_top(d)
    lines = [
        f"head {d['layer']}.{d['head']}  ({d['embedding_variant']} effective embeddings; processing "
        + ",".join(k for k, v in d["processing"].items() if v) + ")",
        "eigenvalues (top 8 by |λ|): " + " ".join(f"{x:+.3g}" for x in d["eigenvalues"][:8]),
        f"negative eigenvalues: {d[f'n_negative_top{top}']} of the top {top}, {d['n_negative']} overall; "
        f"positive: {d['n_positive']}",
        f"σ_sym {d['sigma_sym'][0]:.4g}   σ_skew {d['sigma_skew'][0]:.4g}",
        f"token-identity share of score variance: {_fmt(d['position']['identity_fraction'])}",
        f"Leiden: {lei['n_clusters']} clusters, modularity {_fmt(lei['modularity'])}"
        + (f", ARI vs categories {lei['ari']:.3f}" if lei["ari"] is not None else ""),
    ]
    for c in d["clusters"][:12]:
        lines.append(f"  [{c['size']:>3}] " + " ".join(escape_token(t) for t in c["tokens"][:12]))
    return "\n".join(lines)


def spectrum(d: dict, width: int = 520, height: int = 300) -> H.Safe:
    """The eigenvalues of the symmetric part S, largest |λ| first."""
    name = _name(d)
    return H.figure(F.spectrum_plot({"eigenvalue λ of S": d["eigenvalues"]}, top=64, width=width, height=height,
                                    title=f"{name}: eigenvalues of S (by |λ|)", ylabel="λ"),
                    f"Eigenvalues of the symmetric part S of {name}'s QK form, largest |λ| first; negative "
                    "eigenvalues make a token avoid itself.")


def head_section(d: dict) -> H.Safe:
    """The deep dive: the form's figures, its spectra, the Leiden clusters and where example tokens attend."""
    name = _name(d)
    top = bilinear_top(d)
    kv = H.kv_table([("survey rank", d.get("rank")), ("semantic loss", d.get("semantic_loss")),
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
    return H.section("Semantic deep dive", H.join([kv, H.grid([spectrum(d), sig]), clusters, neigh]))


def html(d: dict) -> H.Safe:
    """The notebook's view: the deep dive (no survey rank or loss unless the dict has them)."""
    return head_section(d)


def glance(d: dict) -> str:
    """A head's one-line summary (the report's page list)."""
    return f"semantic rank {d['rank']} · {d[f'n_negative_top{bilinear_top(d)}']} negative λ"


def heads_html(heads: list[dict]) -> H.Safe:
    """The report's index section: a row per deep-dived head (linked to its page) and their spectra."""
    rows = []
    for d in heads:
        top = bilinear_top(d)
        rows.append((H.link(head_page(d["layer"], d["head"]), _name(d)), d["rank"], d["semantic_loss"],
                     d[f"n_negative_top{top}"], d["sigma_sym"][0], d["sigma_skew"][0],
                     d["position"]["identity_fraction"], d["leiden"]["n_clusters"], d["leiden"]["ari"]))
    table = H.table(["head", "survey rank", "semantic loss", "negative λ in top 64", "σ_sym (top)",
                     "σ_skew (top)", "token-identity share", "Leiden clusters", "ARI vs categories"], rows,
                    numeric=(1, 2, 3, 4, 5, 6, 7, 8),
                    caption="Deep dives of the best-ranked survey heads (full effective embeddings).")
    return H.join([table, H.grid([spectrum(d, 420, 280) for d in heads])])


def heads_summary(heads: list[dict]) -> list[tuple[str, object]]:
    if not heads:
        return []
    d = heads[0]
    return [("negative eigenvalues of the top head's S (top 64)",
             f"{d[f'n_negative_top{bilinear_top(d)}']} (L{d['layer']}H{d['head']})")]
