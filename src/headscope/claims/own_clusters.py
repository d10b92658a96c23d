"""The semantic head's own categories for ``reproduce --find`` (:mod:`headscope.claims.find`):
the Leiden clusters of its QK form (:func:`head_clusters`), which the survey rows and
``three_rules_by_category`` judge it on, each null draw on its own clusters alike
(:attr:`headscope.claims.work.Work.own_null_categories`)."""

from __future__ import annotations

import torch

from ..core.model import Model
from ..core.tokenizer import word_ids

OWN_CATEGORIES = 8      #: the head's own clusters the survey rows read (the authors listed 8 categories)
OWN_SIZE = (3, 32)      #: a cluster of 3..32 words is a category (the authors' lists: 7–24 words)


class ClusterNodes:
    """The nodes of the semantic head's own clusters: BOS + the most frequent tokens (as row
    ``semantic_clusters``: wordfreq, :data:`~headscope.claims.seed002_clusters.N_NODES`) and their
    effective embeddings x̂_t of layer `layer` ([n d], variant full, the authors' attention means).
    Only layer `layer`'s heads change between a head and its null draws: one ClusterNodes serves both."""

    def __init__(self, model: Model, layer: int):
        from ..semantic import bilinear, clustering
        from .seed002_clusters import N_NODES

        W = model.weights()
        freq = clustering.wordfreq_tokens(model.tokenizer, N_NODES, bos_first=True)
        words = [s.strip() for s in model.to_str_tokens(freq)]
        # words a prompt can hold: w after a space is the one token t (core.tokenizer.word_ids: " w" in a
        # byte-level BPE, "▁w" in a SentencePiece-style vocabulary, whose decoded token has no space)
        keep = [i for i, (t, s) in enumerate(zip(freq, words))
                if len(s) > 1 and s.isalpha() and word_ids(model.tokenizer, s) == [t]]
        self.ids = [freq[i] for i in keep]
        self.words = [" " + words[i] for i in keep]
        self.X = bilinear.effective_embeddings(W, layer, torch.tensor(self.ids, dtype=torch.long), variant="full",
                                               attn_means=bilinear.attn_means_for(W, layer, "authors")).double() \
            if self.ids else torch.zeros(0, W.cfg.d_model, dtype=torch.float64)                     # [n d]
        self.layer = layer


def head_clusters(nodes: ClusterNodes, U: torch.Tensor, V: torch.Tensor, n: int = OWN_CATEGORIES) -> dict[str, list[str]]:
    """The head's own categories: the Leiden clusters of its QK form W_QK = U Vᵀ over `nodes` (the
    authors' top-4 key → query graph, as row ``semantic_clusters``) of OWN_SIZE words, the `n`
    tightest: by the mean over ordered pairs of distinct members of the query's score on the key,
    standardised over the query's scores on every node (scale-free). Name → words (leading space)."""
    from ..semantic import clustering
    from .seed002_clusters import K, MAX_COMM

    if len(nodes.ids) <= K:                            # too few words for the top-K graph: no clusters of its own
        return {}
    Q, Kk = nodes.X @ U.double(), nodes.X @ V.double()                                 # [n e]
    member = clustering.leiden_modularity(clustering.authors_graph(Kk, Q, K), max_comm_size=MAX_COMM, seed=0)
    groups = {}
    for i, m in enumerate(member.tolist()):
        groups.setdefault(m, []).append(i)
    groups = [g for _, g in sorted(groups.items()) if OWN_SIZE[0] <= len(g) <= OWN_SIZE[1]]
    if not groups:
        return {}
    rows = torch.tensor([i for g in groups for i in g])
    S = Q[rows] @ Kk.T                                                                 # [m n] query × key
    Z = (S - S.mean(1, keepdim=True)) / S.std(1, keepdim=True).clamp_min(1e-300)
    at = {int(i): r for r, i in enumerate(rows.tolist())}
    scored = []
    for g in groups:
        idx = torch.tensor(g)
        z = Z[[at[i] for i in g]][:, idx]
        tight = float((z.sum() - z.diagonal().sum()) / (len(idx) * (len(idx) - 1)))
        scored.append((-tight, int(idx[0]), idx.tolist()))
    out = {}
    for k, (_, _, idx) in enumerate(sorted(scored)[:n]):
        words = [nodes.words[i] for i in idx]
        out[f"cluster {k + 1} ({words[0].strip()}, {words[1].strip()}…)"] = words
    return out


def own_categories(model: Model, head: tuple[int, int]) -> dict[str, list[str]]:
    """:func:`head_clusters` of the model's head `head` (layer, index)."""
    from ..semantic import bilinear

    l, h = head
    return head_clusters(ClusterNodes(model, l), *bilinear.qk_factors(model.weights(), l, h))
