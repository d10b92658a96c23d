"""Clusters of tokens that a head makes attend to each other (seed 002).

Nodes: the N most frequent tokens, plus the category words (so that recovered
categories can be scored). Token frequency comes from a corpus (``corpus=`` a text
file, tokenised and counted) or, offline, from a shipped proxy: **BPE merge order**.
GPT-2's vocab.json numbers tokens 256… in the order their merges were learnt, and BPE
merges the most frequent pair first, so a low id is a frequent token of GPT-2's
training data (ids 0–255 are the raw bytes and are skipped, as is ``<|endoftext|>``).

Graph: each node links to its top-k attention targets among the nodes (self
excluded), with weight = the attention it would pay that target with all nodes in
context, ``exp(logit − logsumexp_row)``; edges below ``min_weight`` (1e-3) are dropped
(a query with no preference spreads 1/N over all nodes and keeps no edge) and the two
directions summed.

Partitions: Leiden (leidenalg, RB-configuration quality, seeded, iterated until an iteration
gains at most 1 % of the quality: :func:`leiden`; :func:`leiden_job` runs it in a child process
beside the caller's other work, :mod:`._leiden`) and a spectral
alternative (top eigenvectors of D^-½ W D^-½, rows normalised, seeded k-means; k
defaults to the number of Leiden clusters). Quality: weighted modularity, and the
adjusted Rand index against known categories when given.

The authors' graph (preset ``seed``; Mamiglia et al., ``clustering.py`` and
``token_freq.py`` at 6c45e47, docs/fidelity.md):

- nodes: ``<|endoftext|>`` first, then the 2 999 most frequent tokens. The authors
  counted GPT-2 tokens of WikiText-103 (train), which is not available offline;
  :func:`wordfreq_tokens` uses the English word frequencies of the ``wordfreq``
  package instead, mapped to tokens as described there (or a corpus, ``corpus=``);
- scores: raw ``attn[a, b] = k_a · q_b`` over effective embeddings (no 1/√d, no
  biases): rows are **keys**, columns queries;
- the authors' row "normalisation" ``attn − min_r / (max_r − min_r)`` (operator
  precedence makes it a per-row shift, kept as they ran it);
- each row (key) keeps its **top 4** columns; edges key → query, directed, weight the
  shifted score, only where it is > 0 (:func:`authors_graph`);
- Leiden with modularity quality (γ = 1), ``max_comm_size = 512`` (:func:`leiden_modularity`);
  headscope seeds it (the authors did not), so reruns are identical.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from pathlib import Path

import numpy as np
import torch

from . import _leiden
from .._json import plain
from .._errors import HeadscopeError
from .._input import read_text_file
from ..core.tokenizer import unknown_id, word_ids


# -- frequency ------------------------------------------------------------------------------


def frequent_tokens(tokenizer, n: int, corpus: str | Path | None = None) -> list[int]:
    """The `n` most frequent token ids (corpus counts, or the BPE merge-order proxy)."""
    if n < 1:
        raise HeadscopeError(f"number of tokens: expected ≥ 1, got {n}")
    V = len(tokenizer)
    bos = tokenizer.bos_token_id
    if corpus is not None:
        text = read_text_file(corpus)   # UTF-8 text only: binary or undecodable files are refused
        counts = Counter(tokenizer.encode(text))
        counts.pop(bos, None)
        if not counts:
            raise HeadscopeError(f"corpus {corpus} holds no tokens")
        return [t for t, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:n]]
    out = [t for t in range(256, V) if t != bos][:n]
    if len(out) < 2:
        raise HeadscopeError(f"frequent tokens: without a corpus they are the ids from 256 up (a byte-level BPE's "
                             f"merges after its 256 bytes, in merge order, standing in for frequency); expected at "
                             f"least 2, got {len(out)} in this vocabulary of {V} tokens — give a corpus (--corpus FILE) "
                             f"to count the tokens of a text instead")
    return out


#: the longest wordfreq list :func:`wordfreq_tokens` grows to (frequency ≈ 8e-7 at rank 32 768; its first
#: list, max(4n, 2000) words, is always read whole)
MAX_WORDS = 1 << 15


def wordfreq_tokens(tokenizer, n: int, *, lang: str = "en", bos_first: bool = True) -> list[int]:
    """The `n` most frequent tokens by ``wordfreq``'s word frequencies (BOS first by default).

    wordfreq gives frequencies of case-folded words, not of GPT-2 tokens. Each word w
    contributes its frequency to one token: " w" when that is a single token (" the",
    " colour"); else " W" (w capitalised) when *that* is a single token (" Monday",
    " France": words GPT-2 mostly saw capitalised); else the word-initial piece, the first
    token of " w" (" pract" from " practitioner"). Frequencies of words mapped to the same
    token add up. Punctuation, mid-word pieces and the other case of a word get no count
    (wordfreq has no punctuation and folds case), unlike a token count of a corpus (the
    authors': WikiText-103, ``token_freq.py``). The authors' list also starts with
    ``<|endoftext|>`` (hand-added, ``bos_first``).

    The word list starts at max(4n, 2000) words and doubles until it reaches `n` tokens, up to
    :data:`MAX_WORDS` words (or the first list, if longer): a vocabulary with fewer word-initial
    tokens than `n` (a 1 000-token tokenizer) gets the tokens those words reach, rather than
    encoding wordfreq's whole list (about 320 k words, frequencies down to 1e-8: minutes of
    tokenizer calls, each time the nodes are built). Each word is encoded once however often
    the list doubles (the longer list extends the shorter one: same counts, same order).
    """
    if n < 1:
        raise HeadscopeError(f"number of tokens: expected ≥ 1, got {n}")
    try:
        import wordfreq
    except ImportError:  # pragma: no cover - a declared dependency
        raise HeadscopeError("the wordfreq package is needed for word frequencies (pip install wordfreq)") from None
    bos = tokenizer.bos_token_id
    unk = unknown_id(tokenizer)
    want = n - (1 if bos_first and bos is not None else 0)
    size = max(4 * n, 2000)
    limit = max(size, MAX_WORDS)
    counts: dict[int, float] = {}
    done: list[str] = []                                            # the words counted so far (a prefix)
    while True:
        words = wordfreq.top_n_list(lang, size)
        if words[:len(done)] != done:                              # not an extension: count afresh
            counts, done = {}, []
        for word in words[len(done):]:
            ids = word_ids(tokenizer, word)
            if len(ids) > 1:
                cap = word_ids(tokenizer, word[:1].upper() + word[1:])
                ids = cap if len(cap) == 1 else ids
            if ids and ids[0] != bos and ids[0] != unk:            # a word outside the vocabulary counts for none
                counts[ids[0]] = counts.get(ids[0], 0.0) + wordfreq.word_frequency(word, lang)
        done = words
        if len(counts) >= want or len(words) < size or size >= limit:
            break
        size = min(2 * size, limit)
    order = [t for t, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))][:want]
    return ([bos] if bos_first and bos is not None else []) + order


# -- graph and partitions -----------------------------------------------------------------------


def authors_edges(K: torch.Tensor, Q: torch.Tensor, k: int = 4) -> tuple[np.ndarray, np.ndarray]:
    """The edges [E 2] (int64, key → query) and weights [E] (float64) of the authors' directed top-k
    graph over nodes with keys K [n e] and queries Q [n e] (module docstring).

    ``attn = K Qᵀ`` (row a = key a), shifted per row by ``min_a / (max_a − min_a)``; row a
    keeps its k largest entries (self included, as theirs); edge a → b of weight
    ``attn[a, b]`` where that is > 0, row by row.
    """
    A = K.double() @ Q.double().T                                                       # [n n] keys × queries
    n = A.shape[0]
    lo, hi = A.min(1).values, A.max(1).values
    A = A - lo / torch.where(hi > lo, hi - lo, torch.ones_like(hi))                     # [n n] per-row shift
    v, i = torch.topk(A, min(k, n), dim=1)                                              # [n k]
    src = torch.arange(n)[:, None].expand_as(i)
    keep = v > 0
    return torch.stack([src[keep], i[keep]], 1).numpy(), v[keep].numpy()                # [E 2], [E]


def authors_graph(K: torch.Tensor, Q: torch.Tensor, k: int = 4):
    """The authors' directed top-k graph (:func:`authors_edges`) as an igraph.Graph."""
    return to_graph(K.shape[0], *authors_edges(K, Q, k), directed=True)


def to_graph(n: int, edges: np.ndarray, weights: np.ndarray, *, directed: bool = False):
    """igraph.Graph over nodes 0..n-1 with `edges` [E 2] in order and float64 `weights` [E] (attribute
    ``weight``): the graph a Leiden child builds from the same arrays (:func:`leiden_job`)."""
    return _leiden.graph(n, np.asarray(edges, dtype=np.int64).ravel().tolist(),
                         np.asarray(weights, dtype=np.float64).tolist(), directed)


#: Leiden stops when an iteration gains at most this share of the partition's quality (:func:`leiden`)
LEIDEN_TOL = _leiden.LEIDEN_TOL


def leiden_modularity(graph, *, max_comm_size: int = 512, seed: int = 0, n_iterations: int = 2) -> np.ndarray:
    """Leiden with modularity quality and communities of at most `max_comm_size` nodes
    (:func:`headscope.semantic._leiden.leiden_modularity`, whose docstring says why the cap is enforced)."""
    return np.asarray(_leiden.leiden_modularity(graph, max_comm_size=max_comm_size, seed=seed,
                                                n_iterations=n_iterations))


def knn_edges(values: torch.Tensor, targets: torch.Tensor, n_nodes: int, lse: torch.Tensor | None = None, *,
              min_weight: float = 1e-3) -> tuple[np.ndarray, np.ndarray]:
    """The undirected edges [E 2] (int64, lo < hi, sorted) and weights [E] (float64) over nodes
    0..n_nodes-1 from top-k logits [n k] and target node indices [n k].

    Edge weight: the attention the query pays the key with all nodes in context,
    ``exp(logit − lse)`` (``lse`` [n] the row logsumexp); without ``lse``, the softmax
    over the row's top-k. Pairs below `min_weight` and self pairs are dropped, the two
    directions of a pair summed (in row-major order).
    """
    if lse is None:
        w = torch.softmax(values.double(), dim=1)                                      # [n k]
    else:
        w = (values.double() - lse.double()[:, None]).exp()
    src = torch.arange(values.shape[0])[:, None].expand_as(targets)
    keep = ((w >= min_weight) & (targets != src)).numpy()                              # [n k]
    a, b, ww = src.numpy()[keep], targets.numpy()[keep], w.numpy()[keep]                 # row-major, as torch's
    lo, hi = np.minimum(a, b), np.maximum(a, b)
    key = lo.astype(np.int64) * n_nodes + hi
    uniq, inv = np.unique(key, return_inverse=True)
    weight = np.bincount(inv, weights=ww)
    return np.stack([uniq // n_nodes, uniq % n_nodes], 1), weight                       # [E 2], [E]


def knn_graph(values: torch.Tensor, targets: torch.Tensor, n_nodes: int, lse: torch.Tensor | None = None, *,
              min_weight: float = 1e-3):
    """igraph.Graph over nodes 0..n_nodes-1 from top-k logits [n k] and target node indices [n k]
    (:func:`knn_edges`)."""
    return to_graph(n_nodes, *knn_edges(values, targets, n_nodes, lse, min_weight=min_weight))


def leiden(graph, *, resolution: float = 1.0, seed: int = 0, tol: float = LEIDEN_TOL) -> np.ndarray:
    """Leiden (RB configuration, seeded) iterated until an iteration's gain in quality is at most
    `tol` · |quality| (:func:`headscope.semantic._leiden.leiden_rb`, whose docstring gives the
    measurements behind the rule)."""
    return np.asarray(_leiden.leiden_rb(graph, resolution=resolution, seed=seed, tol=tol))


def leiden_job(n: int, edges: np.ndarray, weights: np.ndarray, *, method: str = "rb", directed: bool = False,
               child: bool | _leiden.Child = True, **params) -> _leiden.Job:
    """Start the Leiden partition of the graph :func:`to_graph` builds from the same arguments —
    method ``"rb"`` (:func:`leiden`, `params` its keywords) or ``"modularity"``
    (:func:`leiden_modularity`) — in a child process when `child` (or in the child given, started
    ahead: :func:`headscope.semantic._leiden.child_for`) and the graph is not small
    (:mod:`headscope.semantic._leiden`); ``.result()`` is its membership, the one those functions
    return on that graph, whichever process computed it."""
    return _leiden.start(method, params, n, np.ascontiguousarray(edges, dtype=np.int64).tobytes(),
                         np.ascontiguousarray(weights, dtype=np.float64).tobytes(), directed=directed, child=child)


def spectral(graph, n_clusters: int, *, seed: int = 0) -> np.ndarray:
    """Normalised spectral clustering of a weighted graph into `n_clusters` groups."""
    import scipy.sparse as sp
    from scipy.cluster.vq import kmeans2
    from scipy.sparse.linalg import eigsh

    n = graph.vcount()
    if graph.ecount() == 0:          # no edge to cut (ARPACK fails on a zero matrix): one cluster
        return np.zeros(n, dtype=np.int64)
    k = max(1, min(n_clusters, n - 2))
    e = np.asarray(graph.get_edgelist(), dtype=np.int64).reshape(-1, 2)
    w = np.asarray(graph.es["weight"] if graph.ecount() else [], dtype=np.float64)
    Wm = sp.coo_matrix((np.r_[w, w], (np.r_[e[:, 0], e[:, 1]], np.r_[e[:, 1], e[:, 0]])), shape=(n, n)).tocsr()
    deg = np.asarray(Wm.sum(1)).ravel() + 1e-12
    Dm = sp.diags(1 / np.sqrt(deg))
    M = Dm @ Wm @ Dm
    v0 = np.random.default_rng(seed).standard_normal(n)
    _, vecs = eigsh(M, k=k, which="LA", v0=v0)                                         # [n k]
    vecs = vecs / (np.linalg.norm(vecs, axis=1, keepdims=True) + 1e-12)
    _, labels = kmeans2(vecs, k, minit="++", seed=seed)
    return np.asarray(labels)


def modularity(graph, membership) -> float | None:
    """Weighted modularity; None for a graph without edge weight (0/0: no edge kept, e.g. a head
    whose queries spread their attention evenly over the nodes)."""
    if graph.ecount() == 0 or not sum(graph.es["weight"]) > 0:
        return None
    return float(graph.modularity(list(map(int, membership)), weights="weight"))


def adjusted_rand_index(a, b) -> float:
    """ARI of two labelings (Hubert & Arabie 1985)."""
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape or a.size == 0:
        raise HeadscopeError(f"ARI: labelings must have the same non-zero length, got {a.size} and {b.size}")
    _, ai = np.unique(a, return_inverse=True)
    _, bi = np.unique(b, return_inverse=True)
    table = np.zeros((ai.max() + 1, bi.max() + 1), dtype=np.int64)
    np.add.at(table, (ai, bi), 1)
    comb = lambda x: x * (x - 1) / 2  # noqa: E731
    index = comb(table).sum()
    sa, sb = comb(table.sum(1)).sum(), comb(table.sum(0)).sum()
    if a.size < 2:                   # no pair to compare: the labelings trivially agree (sklearn's convention)
        return 1.0
    expected = sa * sb / comb(a.size)
    top = (sa + sb) / 2
    return 1.0 if top == expected else float((index - expected) / (top - expected))


# -- results -------------------------------------------------------------------------------------


@dataclasses.dataclass
class Cluster:
    size: int
    tokens: list[str]
    token_ids: list[int]
    internal_weight: float        # share of its members' edge weight that stays inside
    category: str | None = None   # majority known category, if any
    purity: float | None = None

    def to_dict(self) -> dict:
        return plain(self)


@dataclasses.dataclass
class Clustering:
    method: str
    clusters: list[Cluster]       # size ≥ min_size, largest first
    n_clusters: int
    modularity: float | None      # None: the graph has no edges
    ari: float | None             # vs known categories, on their members
    n_nodes: int

    def to_dict(self) -> dict:
        return {"method": self.method, "clusters": [c.to_dict() for c in self.clusters],
                "n_clusters": self.n_clusters, "modularity": self.modularity, "ari": self.ari,
                "n_nodes": self.n_nodes}


def describe(graph, membership, node_ids: list[int], str_tokens: list[str], method: str, *,
             categories: dict[str, list[int]] | None = None, min_size: int = 2,
             max_listed: int = 100) -> Clustering:
    membership = np.asarray(membership)
    cat_of = {t: c for c, ids in (categories or {}).items() for t in ids}
    strength = np.asarray(graph.strength(weights="weight"))
    internal = np.zeros(membership.max() + 1)
    if graph.ecount():               # each edge inside a cluster adds 2w to it, in edge order (np.add.at: unbuffered)
        e = np.asarray(graph.get_edgelist(), dtype=np.int64).reshape(-1, 2)
        w = np.asarray(graph.es["weight"], dtype=np.float64)
        inside = membership[e[:, 0]] == membership[e[:, 1]]
        np.add.at(internal, membership[e[inside, 0]], 2 * w[inside])
    clusters = []
    for c in np.unique(membership):
        members = np.nonzero(membership == c)[0]
        if len(members) < min_size:
            continue
        tot = strength[members].sum()
        cats = Counter(cat_of[node_ids[i]] for i in members if node_ids[i] in cat_of)
        top = cats.most_common(1)[0] if cats else None
        clusters.append(Cluster(
            size=len(members), tokens=[str_tokens[i] for i in members[:max_listed]],
            token_ids=[node_ids[i] for i in members[:max_listed]],
            internal_weight=float(internal[c] / tot) if tot > 0 else 0.0,
            category=top[0] if top else None, purity=float(top[1] / len(members)) if top else None,
        ))
    clusters.sort(key=lambda c: (-c.size, c.token_ids[0]))
    ari = None
    if cat_of:
        pos = [i for i, t in enumerate(node_ids) if t in cat_of]
        if pos:
            ari = adjusted_rand_index([cat_of[node_ids[i]] for i in pos], membership[pos])
    return Clustering(method=method, clusters=clusters, n_clusters=len(clusters),
                      modularity=modularity(graph, membership), ari=ari, n_nodes=len(node_ids))
