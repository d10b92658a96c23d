"""Seed 002's claims that the semantic head's weights explain: the token clusters its QK form makes
(Leiden, as the authors ran it) and the attention scores its bilinear form predicts. One check
per claim (:func:`claim`), each against null heads of the semantic head (Gaussian W_Q, W_K, W_V,
W_O of its norms: :attr:`Work.semantic_null`).

Clusters (row ``semantic_clusters``; seed 002: "We cluster tokens semantically"; the recipe is
the authors' ``clustering.py``): nodes ``<|endoftext|>`` + the 2 999 most frequent tokens
(wordfreq, :func:`headscope.semantic.clustering.wordfreq_tokens`) plus the category words not
among them (so the clusters can be scored); the effective embeddings x̂_t of layer l (variant
``full``, the authors' attention means); the authors' directed top-4 graph of raw key × query
scores and Leiden modularity with communities of at most 512
(:func:`~headscope.semantic.clustering.authors_graph`, :func:`~headscope.semantic.clustering.leiden_modularity`).
The statistic: the adjusted Rand index of the clusters against the categories on the category
words (the clusters are *semantic*); the graph's modularity and its null beside it in the note.
The null heads share the nodes and their embeddings (only layer l's head changes).

Explained scores (row ``explain_score``; seed 002: "interpret the weights to explain the attention
scores"): on the category prompts, the head's own pre-softmax scores
(``blocks.l.attn.hook_attn_scores``) against the bilinear form's prediction from token identity
alone, x̂_{t_q} W_QK x̂_{t_k}ᵀ / attn_scale (x̂ as above; the sum of
:func:`headscope.semantic.bilinear.explain_score`'s eigen-terms and skew term, computed as
(x̂ U)(x̂ V)ᵀ with W_QK = U Vᵀ). Both are centred per query over its keys 1..q (BOS and the
query-only terms drop out: softmax does not see them); the statistic is Pearson r pooled over
the queries q ≥ 2 of every prompt.
"""

from __future__ import annotations

import torch

from .._errors import NotApplicable
from ..core.forward import run_with_cache
from ..semantic import bilinear, clustering
from .null import compare
from .table import claim, margin_of, share_of

N_NODES = 3000            #: the authors' LIM (clustering.py): BOS + the 2 999 most frequent tokens
K = 4                     #: the authors' top-4 graph (THRESH_Q = 1 − 4 / LIM)
MAX_COMM = 512            #: the authors' max_comm_size (at 6c45e47; docs/fidelity.md)
CLUSTER_DRAWS = 8         #: null heads of the cluster row (a Leiden run of 3000 nodes each, ~0.5 s CPU)
NULL = "null heads of the semantic head (Gaussian W_Q, W_K, W_V, W_O of its norms)"


class _Inputs:
    """What both rows read, computed once per Work: the category prompts and ids, the authors'
    attention means of the blocks below the head."""

    def __init__(self, w):
        from ..semantic.prompts import prompts_for

        l, _ = w._check_head()
        self.layer = l
        W = w.model.weights()
        # the shipped categories under --find: the head's own clusters would score its clusters against themselves
        cats = w.ref.survey_categories if isinstance(w.ref.survey_categories, dict) and not w.ref.own_categories \
            else None
        self.prompts, self.cat_ids = prompts_for(w.model, cats, n_prompts=32, length=16, seed=0)
        self.attn_means = bilinear.attn_means_for(W, l, "authors")
        self.W = W


def inputs(w) -> _Inputs:
    got = w.__dict__.get("_claims_semantic_inputs")
    if got is None:
        got = w.__dict__["_claims_semantic_inputs"] = _Inputs(w)
    return got


def embeddings(inp: _Inputs, ids: list[int]) -> torch.Tensor:
    """x̂_t [n d] of layer inp.layer for token ids (variant full, the authors' attention means)."""
    return bilinear.effective_embeddings(inp.W, inp.layer, torch.tensor(ids), variant="full",
                                         attn_means=inp.attn_means)


# -- clusters ---------------------------------------------------------------------------------------


def cluster_quality(X: torch.Tensor, U: torch.Tensor, V: torch.Tensor, nodes: list[int], cat_ids: dict) -> dict:
    """Leiden clusters of the authors' top-K graph over nodes with embeddings X [n d] under the
    form W_QK = U Vᵀ ([d e] each; rows of the score matrix are keys): ARI against the categories,
    modularity, the number of clusters."""
    Q, Kk = X.double() @ U.double(), X.double() @ V.double()                                # [n e]
    g = clustering.authors_graph(Kk, Q, K)
    membership = clustering.leiden_modularity(g, max_comm_size=MAX_COMM, seed=0)
    c = clustering.describe(g, membership, nodes, [""] * len(nodes), "leiden", categories=cat_ids)
    return {"ari": c.ari if c.ari is not None else 0.0, "modularity": c.modularity if c.modularity is not None else 0.0,
            "n_clusters": c.n_clusters}


@claim("semantic_clusters")
def _semantic_clusters(c, ref, w):
    """The semantic head's Leiden clusters agree with the categories (module docstring)."""
    l, h = w._check_head()
    inp = inputs(w)
    freq = clustering.wordfreq_tokens(w.model.tokenizer, N_NODES, bos_first=True)
    have = set(freq)
    extra = list(dict.fromkeys(t for ids in inp.cat_ids.values() for t in ids if t not in have))
    nodes = freq + extra
    labelled = {k: v for k, v in inp.cat_ids.items() if len(v) >= 2}
    if len(labelled) < 2:
        raise NotApplicable("fewer than two categories with two single-token words here")

    def measure():
        X = embeddings(inp, nodes)                                                         # [n d]
        mine = cluster_quality(X, *bilinear.qk_factors(inp.W, l, h), nodes, labelled)
        draws = []
        for m in w.semantic_null:
            Wn = m.weights()
            for k in range(m.cfg.n_heads):
                if len(draws) < CLUSTER_DRAWS:
                    draws.append(cluster_quality(X, *bilinear.qk_factors(Wn, l, k), nodes, labelled))
        return mine, draws

    mine, draws = w.memo("semantic_clusters", ("head", "categories"), measure)        # the same model and head: once per process
    null = compare(mine["ari"], [d["ari"] for d in draws], statistic="ARI of the Leiden clusters vs the categories",
                   null=NULL, direction="above", **margin_of(c["null"]),
                   null_passes=share_of(draws, lambda d: d["ari"] >= c["min_ari"]))
    mods = torch.tensor([d["modularity"] for d in draws], dtype=torch.float64)
    note = (f"{len(nodes)} nodes (BOS + {len(freq) - 1} most frequent by wordfreq + {len(extra)} category words), "
            f"top-{K} key → query graph, Leiden modularity (communities ≤ {MAX_COMM}): {mine['n_clusters']} clusters, "
            f"modularity {mine['modularity']:.3f} (null median {float(mods.median()):.3f}, max {float(mods.max()):.3f}); "
            f"ARI on {sum(len(v) for v in labelled.values())} words of {len(labelled)} categories")
    return c["published_text"], round(mine["ari"], 4), c["tolerance"], mine["ari"] >= c["min_ari"], note, null


# -- explained scores -------------------------------------------------------------------------------


def explained_r(scores: torch.Tensor, pred: torch.Tensor, hidden: torch.Tensor | None = None) -> float:
    """Pearson r between true scores and predictions [b q k] after centring each query's row over
    its keys 1..q, pooled over the queries q ≥ 2 (module docstring). ``hidden`` [q k]: the keys the
    layer hides (:meth:`Config.hidden_keys`; a local layer's window): left out with the causal ones
    (their scores are −inf; counted, they made r NaN, reported as 0)."""
    b, p, _ = scores.shape
    q = torch.arange(p)
    keep = (q[None, :] <= q[:, None]) & (q[None, :] >= 1) & (q[:, None] >= 2)              # [q k]
    if hidden is not None:
        keep = keep & ~hidden
    m = keep.double()
    n = m.sum(-1).clamp_min(1)                                                             # [q]

    def centred(x):
        x = torch.where(keep, x.double(), torch.zeros((), dtype=torch.float64))
        return (x - (x.sum(-1) / n)[..., None]) * m

    s, t = centred(scores), centred(pred)
    den = float(s.norm() * t.norm())
    return float((s * t).sum()) / den if den > 0 else 0.0


def predicted_scores(X: torch.Tensor, U: torch.Tensor, V: torch.Tensor, scale: float) -> torch.Tensor:
    """[b q k] x̂_{t_q} U Vᵀ x̂_{t_k}ᵀ / scale (X [b p d]: the x̂ of each prompt's tokens)."""
    return (X @ U.double()) @ (X @ V.double()).mT / scale


@claim("explain_score")
def _explain_score(c, ref, w):
    """The bilinear form over token identity predicts the head's scores (module docstring)."""
    l, h = w._check_head()
    inp = inputs(w)
    tokens = inp.prompts.tokens                                                            # [b p]
    ids = tokens.unique()
    Xu = embeddings(inp, ids.tolist()).double()                                            # [u d]
    X = Xu[torch.searchsorted(ids, tokens)]                                                # [b p d]
    scale = w.model.cfg.attn_scale(l)
    name = f"blocks.{l}.attn.hook_attn_scores"

    pos = torch.arange(tokens.shape[1])
    hidden = w.model.cfg.hidden_keys(l, pos[:, None], pos[None, :])                      # [q k] causal, window

    def rs(W, heads):
        S = run_with_cache(W, tokens, names=[name], stop_at_layer=l + 1)[name]             # [b H q k]
        return [explained_r(S[:, k], predicted_scores(X, *bilinear.qk_factors(W, l, k), scale), hidden)
                for k in heads]

    r, draws = w.memo("explain_score", ("head", "categories"), lambda: (
        rs(inp.W, [h])[0], [x for m in w.semantic_null for x in rs(m.weights(), range(m.cfg.n_heads))]))
    null = compare(r, draws, statistic="Pearson r of the form's prediction with the head's scores", null=NULL,
                   direction="above", **margin_of(c["null"]), null_passes=share_of(draws, lambda x: x >= c["min_r"]))
    note = (f"{tokens.shape[0]} category prompts of {tokens.shape[1]} tokens; scores centred per query over keys "
            f"1..q; prediction x̂_q W_QK x̂_kᵀ / {scale:.4g} from token identity alone (x̂: effective embeddings, "
            f"variant full, the authors' attention means)")
    return c["published_text"], round(r, 4), c["tolerance"], r >= c["min_r"], note, null
