"""One head, analysed from its weights (seed 002): effective embeddings, the bilinear form and
its eigenvalues, neighbours, token clusters, position independence.

Compute (:func:`analyse_head`, :func:`head_clusters`) → typed results
(:class:`HeadAnalysis`, :class:`HeadClusters`, each with ``to_dict()``) → ``render()``.
The maths lives in :mod:`.bilinear` (effective embeddings, W_QK, eigen-split, top-k),
:mod:`.clustering` (graph, Leiden, spectral) and :mod:`.survey` (prompts, position
independence); this module puts them together for one head.

Presets (:data:`PRESETS`, ``headscope head … --preset``): ``headscope`` (the default) —
5000 nodes by BPE merge order plus the category words, top-10 targets per query,
symmetrised attention-probability weights, Leiden (RB configuration, seeded) and a
spectral alternative, attention means from the category prompts; ``seed`` — the L1H5
authors' clustering (:mod:`.clustering`: ``<|endoftext|>`` + the 2 999 most frequent
tokens by ``wordfreq`` or a corpus, raw key×query scores, top 4 per key, directed,
Leiden modularity with communities of at most 512) over their effective embeddings
(attention means ``authors``, :mod:`.bilinear`). Every option can be set on its own.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import torch

from . import bilinear, clustering
from ._errors import HeadscopeError
from ._html_repr import HtmlRepr
from .bilinear import BilinearForm
from .clustering import Clustering
from .loading import Model
from .survey import PositionIndependence, position_independence, prompts_for
from .tokenizer import escape_token
from .weights import Processing, Weights

Tensor = torch.Tensor


@dataclasses.dataclass
class GraphSpec:
    """How the token graph of a head was built."""

    n_nodes: int
    n_frequent: int
    k: int
    keys: str
    frequency: str          # "corpus", "bpe-merge-order" or "wordfreq"
    resolution: float
    seed: int
    preset: str = "headscope"
    graph: str = "headscope"        # "headscope": query → top-k keys, symmetrised; "authors": key → top-k queries
    attn_mean: str = "prompts"      # bilinear.ATTN_MEANS
    max_comm_size: int | None = None

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclasses.dataclass
class HeadClusters:
    """A head's top-k token graph over the nodes and its partitions."""

    spec: GraphSpec
    leiden: Clustering
    spectral: Clustering | None
    nodes: list[int] = dataclasses.field(repr=False)         # token ids of the graph's nodes
    embeddings: Tensor = dataclasses.field(repr=False)       # effective embeddings of the nodes [n d]
    values: Tensor = dataclasses.field(repr=False)           # top-k logits [n k]
    targets: Tensor = dataclasses.field(repr=False)          # top-k target node indices [n k]

    def to_dict(self) -> dict:
        return {"graph": self.spec.to_dict(), "leiden": self.leiden.to_dict(),
                "spectral": None if self.spectral is None else self.spectral.to_dict()}


@dataclasses.dataclass
class Neighbours:
    """The top-k attention targets of one token."""

    token: str
    token_id: int
    targets: list[str]
    target_ids: list[int]
    logits: list[float]

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclasses.dataclass
class SelfScore:
    """Why a token avoids (or attends to) itself: its self score and its score to its top target, split."""

    token: str
    token_id: int
    self: dict                 # bilinear.explain_score of (t, t)
    top_target: str
    to_top_target: dict        # bilinear.explain_score of (t, its top target)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclasses.dataclass
class HeadAnalysis(HtmlRepr):
    layer: int
    head: int
    fingerprint: str
    processing: dict
    embedding_variant: str
    form: BilinearForm
    clusters: HeadClusters
    neighbours: list[Neighbours]
    self_scores: list[SelfScore]
    position: PositionIndependence

    def to_dict(self) -> dict:
        leiden = self.clusters.leiden.to_dict()
        return {
            "layer": self.layer, "head": self.head, "fingerprint": self.fingerprint,
            "processing": self.processing, "embedding_variant": self.embedding_variant,
            "clusters": leiden.pop("clusters"), "leiden": leiden,
            "spectral": None if self.clusters.spectral is None else self.clusters.spectral.to_dict(),
            "neighbours": [n.to_dict() for n in self.neighbours],
            "self_scores": [s.to_dict() for s in self.self_scores],
            "position": self.position.to_dict(), "graph": self.clusters.spec.to_dict(),
            **self.form.to_dict(),   # eigenvalues, n_negative_top64, sigma_sym, sigma_skew, … at top level
        }

    def render(self) -> str:
        f, lei = self.form, self.clusters.leiden
        lines = [
            f"head {self.layer}.{self.head}  ({self.embedding_variant} effective embeddings; processing "
            + ",".join(k for k, v in self.processing.items() if v) + ")",
            "eigenvalues (top 8 by |λ|): " + " ".join(f"{x:+.3g}" for x in f.eigenvalues[:8].tolist()),
            f"negative eigenvalues: {f.n_negative_top} of the top {f.top}, {f.n_negative} overall; "
            f"positive: {f.n_positive}",
            f"σ_sym {float(f.sigma_sym[0]):.4g}   σ_skew {float(f.sigma_skew[0]):.4g}",
            f"token-identity share of score variance: {_fmt(self.position.identity_fraction)}",
            f"Leiden: {lei.n_clusters} clusters, modularity {_fmt(lei.modularity)}"
            + (f", ARI vs categories {lei.ari:.3f}" if lei.ari is not None else ""),
        ]
        for c in lei.clusters[:12]:
            lines.append(f"  [{c.size:>3}] " + " ".join(escape_token(t) for t in c.tokens[:12]))
        return "\n".join(lines)


#: clustering presets (module docstring); explicit arguments override them
PRESETS = {
    "headscope": {"n_tokens": 5000, "k": 10, "frequency": "bpe", "graph": "headscope", "attn_mean": "prompts"},
    "seed": {"n_tokens": 3000, "k": 4, "frequency": "wordfreq", "graph": "authors", "attn_mean": "authors"},
}
FREQUENCIES = ("bpe", "wordfreq")
AUTHORS_MAX_COMM_SIZE = 512


def _preset(preset: str, **given) -> dict:
    if preset not in PRESETS:
        raise HeadscopeError(f"preset: expected one of {', '.join(PRESETS)}, got {preset!r}")
    out = {k: (PRESETS[preset][k] if v is None else v) for k, v in given.items()}
    if out.get("frequency") not in (None, *FREQUENCIES):
        raise HeadscopeError(f"frequency: expected one of {', '.join(FREQUENCIES)}, got {out['frequency']!r}")
    if out.get("attn_mean") not in (None, *bilinear.ATTN_MEANS):
        raise HeadscopeError(f"attention means: expected one of {', '.join(bilinear.ATTN_MEANS)}, "
                             f"got {out['attn_mean']!r}")
    return out


def _fmt(x: float | None) -> str:
    return "— (undefined)" if x is None else f"{x:.3f}"


def _check_head_options(model: Model, layer: int, head: int, keys: str, k: int) -> None:
    model.cfg.check_head(layer, head)
    if keys not in ("vocab", "nodes"):
        raise HeadscopeError(f"keys: expected 'vocab' or 'nodes', got {keys!r}")
    if k < 1:
        raise HeadscopeError(f"k: expected ≥ 1, got {k}")


def head_clusters(model: Model, layer: int, head: int, *, variant: str = "full", n_tokens: int | None = None,
                  k: int | None = None, categories=None, corpus: str | Path | None = None, resolution: float = 1.0,
                  seed: int = 0, with_spectral: bool = True, keys: str = "vocab",
                  processing: Processing | None = None, weights: Weights | None = None,
                  attn_means: list[Tensor] | None = None, preset: str = "headscope", frequency: str | None = None,
                  attn_mean: str | None = None) -> HeadClusters:
    """Cluster the tokens that head (layer, head) makes attend to each other.

    ``headscope`` preset: nodes are the `n_tokens` most frequent tokens
    (:func:`headscope.clustering.frequent_tokens`) plus the category words; each links to
    its top-k targets among the nodes by the head's score over effective embeddings
    (self excluded); Leiden (and a spectral alternative) on that graph
    (:func:`headscope.clustering.knn_graph`). ``seed`` preset: the authors' graph
    (:func:`headscope.clustering.authors_graph`, :func:`headscope.clustering.leiden_modularity`)
    over BOS + the most frequent tokens (no category words added).
    """
    o = _preset(preset, n_tokens=n_tokens, k=k, frequency=frequency, attn_mean=attn_mean)
    n_tokens, k = o["n_tokens"], o["k"]
    authors = PRESETS[preset]["graph"] == "authors"
    _check_head_options(model, layer, head, keys, k)
    W = model.weights(processing) if weights is None else weights
    prompts, cat_ids = prompts_for(model, categories, n_prompts=32, length=16, seed=seed)
    if attn_means is None:
        attn_means = bilinear.attn_means_for(W, max(layer, 1 if variant == "mlp" else 0), o["attn_mean"],
                                             prompts.tokens)
    if corpus is not None:
        freq = clustering.frequent_tokens(model.tokenizer, n_tokens - (1 if authors else 0), corpus)
        freq = ([model.bos_id] if authors else []) + [t for t in freq if t != model.bos_id]
        freq_name = "corpus"
    elif o["frequency"] == "wordfreq":
        freq, freq_name = clustering.wordfreq_tokens(model.tokenizer, n_tokens, bos_first=authors), "wordfreq"
    else:
        freq, freq_name = clustering.frequent_tokens(model.tokenizer, n_tokens), "bpe-merge-order"
    extra = [] if authors else [t for ids in cat_ids.values() for t in ids]
    nodes = list(dict.fromkeys(freq + extra))
    X = bilinear.effective_embeddings(W, layer, torch.tensor(nodes), variant=variant, attn_means=attn_means)
    strs = model.to_str_tokens(nodes)
    if authors:
        b = W.blocks[layer]
        Qr, Kr = X @ b.W_Q[head], X @ b.W_K[head]                                         # raw, no biases [n e]
        g = clustering.authors_graph(Kr, Qr, k)
        vals, idx = torch.topk(Kr.double() @ Qr.double().T, min(k, len(nodes)), dim=1)    # per key [n k]
        membership = clustering.leiden_modularity(g, max_comm_size=AUTHORS_MAX_COMM_SIZE, seed=seed)
    else:
        Q, K = bilinear.head_qk(W, layer, head, X)
        vals, idx, lse = bilinear.topk_targets(Q, K, k, self_index=torch.arange(len(nodes)), return_lse=True)
        g = clustering.knn_graph(vals, idx, len(nodes), lse)
        membership = clustering.leiden(g, resolution=resolution, seed=seed)
    leiden = clustering.describe(g, membership, nodes, strs, "leiden", categories=cat_ids)
    spectral = None
    if with_spectral:
        spectral = clustering.describe(g, clustering.spectral(g, max(2, leiden.n_clusters), seed=seed), nodes, strs,
                                       "spectral", categories=cat_ids)
    spec = GraphSpec(n_nodes=len(nodes), n_frequent=len(freq), k=k, keys=keys, frequency=freq_name,
                     resolution=resolution, seed=seed, preset=preset, graph="authors" if authors else "headscope",
                     attn_mean=o["attn_mean"], max_comm_size=AUTHORS_MAX_COMM_SIZE if authors else None)
    return HeadClusters(spec=spec, leiden=leiden, spectral=spectral, nodes=nodes, embeddings=X, values=vals,
                        targets=idx)


def _examples_over_vocab(model, W, layer, head, examples, k, variant, attn_means, form, scale):
    """Neighbours (top-k keys over the whole vocabulary) and self-score splits of `examples`,
    whether or not they are nodes of the graph (the authors' graph adds no category words)."""
    X_all = bilinear.effective_embeddings(W, layer, None, variant=variant, attn_means=attn_means)
    Qa, Ka = bilinear.head_qk(W, layer, head, X_all)
    ev, key_ids = bilinear.topk_targets(Qa[examples], Ka, k, self_index=torch.tensor(examples))
    strs = model.to_str_tokens(examples)
    neighbours = [Neighbours(token=s, token_id=t, targets=model.to_str_tokens(key_ids[i].tolist()),
                             target_ids=key_ids[i].tolist(), logits=ev[i].tolist())
                  for i, (t, s) in enumerate(zip(examples, strs))]
    self_scores = []
    for i, t in enumerate(examples):
        x, p = X_all[t], int(key_ids[i, 0])
        self_scores.append(SelfScore(token=strs[i], token_id=t, self=bilinear.explain_score(form, x, x, divisor=scale),
                                     top_target=model.to_str_tokens([p])[0],
                                     to_top_target=bilinear.explain_score(form, x, X_all[p], divisor=scale)))
    return neighbours, self_scores


def analyse_head(model: Model, layer: int, head: int, *, variant: str = "full", n_tokens: int | None = None,
                 k: int | None = None, keys: str = "vocab", categories=None, corpus=None, resolution: float = 1.0,
                 seed: int = 0, with_spectral: bool = True, n_examples: int = 10,
                 processing: Processing | None = None, preset: str = "headscope", frequency: str | None = None,
                 attn_mean: str | None = None) -> HeadAnalysis:
    """Analyse head (layer, head); ``keys="vocab"`` ranks neighbours over the whole vocabulary.

    ``preset`` / ``frequency`` / ``attn_mean``: see :data:`PRESETS` (explicit values win).
    """
    o = _preset(preset, n_tokens=n_tokens, k=k, frequency=frequency, attn_mean=attn_mean)
    k = o["k"]
    _check_head_options(model, layer, head, keys, k)
    W = model.weights(processing)
    prompts, cat_ids = prompts_for(model, categories, n_prompts=32, length=16, seed=seed)
    attn_means = bilinear.attn_means_for(W, max(layer, 1 if variant == "mlp" else 0), o["attn_mean"], prompts.tokens)
    form = bilinear.bilinear_form(bilinear.qk_matrix(W, layer, head, centred=W.processing.fold_ln), layer, head)
    hc = head_clusters(model, layer, head, variant=variant, n_tokens=o["n_tokens"], k=k, categories=categories,
                       corpus=corpus, resolution=resolution, seed=seed, with_spectral=with_spectral, keys=keys,
                       weights=W, attn_means=attn_means, preset=preset, frequency=o["frequency"],
                       attn_mean=o["attn_mean"])
    nodes, X_nodes = hc.nodes, hc.embeddings
    strs = model.to_str_tokens(nodes)

    # neighbours and self-score explanations of example tokens (first word of each category)
    examples = [ids[0] for ids in cat_ids.values()][:n_examples]
    scale = model.cfg.attn_scale(layer)
    if hc.spec.graph == "authors":
        neighbours, self_scores = _examples_over_vocab(model, W, layer, head, examples, k, variant, attn_means,
                                                       form, scale)
    else:
        ex_pos = torch.tensor([nodes.index(t) for t in examples])
        if keys == "vocab":
            X_all = bilinear.effective_embeddings(W, layer, None, variant=variant, attn_means=attn_means)
            Qa, Ka = bilinear.head_qk(W, layer, head, X_all)
            ev, key_ids = bilinear.topk_targets(Qa[examples], Ka, k, self_index=torch.tensor(examples))
        else:
            ev, key_ids = hc.values[ex_pos], torch.tensor(nodes)[hc.targets[ex_pos]]
        neighbours = [Neighbours(token=s, token_id=t, targets=model.to_str_tokens(key_ids[i].tolist()),
                                 target_ids=key_ids[i].tolist(), logits=ev[i].tolist())
                      for i, (t, s) in enumerate(zip(examples, model.to_str_tokens(examples)))]
        self_scores = []
        for i, t in enumerate(examples):
            x = X_nodes[ex_pos[i]]
            partner = int(hc.targets[ex_pos[i], 0])
            self_scores.append(SelfScore(
                token=strs[ex_pos[i]], token_id=t, self=bilinear.explain_score(form, x, x, divisor=scale),
                top_target=strs[partner], to_top_target=bilinear.explain_score(form, x, X_nodes[partner],
                                                                               divisor=scale)))
    pos = position_independence(model, layer, head, categories=categories, seed=seed, processing=processing)
    return HeadAnalysis(layer=layer, head=head, fingerprint=model.fingerprint, processing=W.processing.to_dict(),
                        embedding_variant=variant, form=form, clusters=hc, neighbours=neighbours,
                        self_scores=self_scores, position=pos)
