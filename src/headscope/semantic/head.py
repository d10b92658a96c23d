"""One head, analysed from its weights (seed 002): effective embeddings, the bilinear form and
its eigenvalues, neighbours, token clusters, position independence.

Compute (:func:`analyse_head`, :func:`head_clusters`) → typed results
(:class:`HeadAnalysis`, :class:`HeadClusters`, each with ``to_dict()``) → ``render()``.
The maths lives in :mod:`.bilinear` (effective embeddings, W_QK, eigen-split, top-k),
:mod:`.clustering` (graph, Leiden, spectral), :mod:`.prompts` (category prompts) and
:mod:`.survey` (position independence); this module puts them together for one head, with
its options as one value (:class:`~headscope.semantic.options.HeadOptions`).

Presets (:data:`PRESETS`, ``headscope head … --preset``): ``headscope`` (the default) —
5000 nodes by BPE merge order plus the category words, top-10 targets per query,
symmetrised attention-probability weights, Leiden (RB configuration, seeded) and a
spectral alternative, attention means from the category prompts; ``seed`` — the L1H5
authors' clustering (:mod:`.clustering`: ``<|endoftext|>`` + the 2 999 most frequent
tokens by ``wordfreq`` or a corpus, raw key×query scores, top 4 per key, directed,
Leiden modularity with communities of at most 512) over their effective embeddings
(attention means ``authors``, :mod:`.bilinear`). Every option can be set on its own
(:mod:`.options`: a field left None takes the preset's value).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np
import torch

from . import _leiden, bilinear, clustering
from .._json import plain
from .._html_repr import HtmlRepr, render_text
from .bilinear import BilinearForm
from .clustering import Clustering
from .options import PRESETS, ClusterOptions, HeadOptions  # noqa: F401  (PRESETS: re-exported)
from ..core.model import Model
from .prompts import prompts_for
from .survey import PositionIndependence, position_independence_steps
from ..core.forward import advance_together
from ..core.weights import Weights

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
        return plain(self)


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
        return plain(self)


@dataclasses.dataclass
class SelfScore:
    """Why a token avoids (or attends to) itself: its self score and its score to its top target, split."""

    token: str
    token_id: int
    self: dict                 # bilinear.explain_score of (t, t)
    top_target: str
    to_top_target: dict        # bilinear.explain_score of (t, its top target)

    def to_dict(self) -> dict:
        return plain(self)


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
        """The form, its eigenvalues and the Leiden clusters as text (headscope.report.views.head.text)."""
        return render_text(self)


AUTHORS_MAX_COMM_SIZE = 512


#: Flops that ``keys="auto"`` allows for the whole-vocabulary effective embeddings of one deep
#: dive (:func:`vocab_pass_flops`). 5·10¹¹ admits a head in layer 1 of a 768-wide GPT-2 or
#: Pythia (the seed's L1H5 of GPT-2 Small: 4.7·10¹¹, about 16 s at the 30 GFLOP/s float32
#: matmul rate measured on a 2-core machine on 2026-12-04); deeper heads rank their neighbours
#: over the graph's nodes unless ``keys="vocab"`` is asked for. (Until 2026-12-04 it was 10¹²,
#: which let a layer-2 head of those models take half a minute of the report.)
VOCAB_KEYS_BUDGET = 5e11


def vocab_pass_flops(cfg, layer: int, variant: str = "full") -> float:
    """Flops of the effective embeddings of the whole vocabulary for a head in `layer`: one MLP
    (2·2·d_model·d_mlp flops) per token and block below the head (block 0 alone for variant mlp)."""
    blocks = 1 if variant == "mlp" else layer
    return float(cfg.d_vocab) * blocks * 4 * cfg.d_model * cfg.d_mlp


def resolve_keys(cfg, layer: int, keys: str, variant: str = "full") -> str:
    """``"vocab"`` or ``"nodes"``: `keys` itself, or for ``"auto"`` the whole vocabulary when its
    effective embeddings cost at most :data:`VOCAB_KEYS_BUDGET` flops, else the graph's nodes.
    A function of the model's shape and the head's layer only, so results stay deterministic."""
    if keys != "auto":
        return keys
    return "vocab" if vocab_pass_flops(cfg, layer, variant) <= VOCAB_KEYS_BUDGET else "nodes"


def _embeddings_at(W: Weights, layers: list[int], token_ids: Tensor | None, variant: str,
                   attn_means: Sequence[Tensor]):
    """(l, x̂ of `token_ids` for the heads of layer l, or None when l is not in `layers`) for
    l = 0..max(layers): variant full in one pass up the residual stream (step l reads block l:
    passes walked together read each block once, whatever the layers)."""
    want = set(layers)
    if variant == "full":
        for l, x_hat in bilinear.effective_embeddings_by_layer(W, token_ids, attn_means=attn_means, upto=max(layers)):
            yield l, (x_hat if l in want else None)
    else:
        for l in range(max(layers) + 1):
            yield l, (bilinear.effective_embeddings(W, l, token_ids, variant=variant, attn_means=attn_means)
                      if l in want else None)


def _nodes(model: Model, n_tokens: int, corpus, cat_ids: dict[str, list[int]], frequency: str = "bpe",
           authors: bool = False) -> tuple[list[int], list[int], str]:
    """(the n_tokens most frequent tokens, the graph's nodes, the frequency source's name).

    headscope's graph: the frequent tokens plus the category words. The authors' graph:
    BOS first, then the n_tokens − 1 most frequent (their ``token_frequencies.csv`` puts
    ``<|endoftext|>`` first), no category words.
    """
    if corpus is not None:
        freq = clustering.frequent_tokens(model.tokenizer, n_tokens - (1 if authors else 0), corpus)
        freq = ([model.bos_id] if authors else []) + [t for t in freq if not authors or t != model.bos_id]
        name = "corpus"
    elif frequency == "wordfreq":
        freq, name = clustering.wordfreq_tokens(model.tokenizer, n_tokens, bos_first=authors), "wordfreq"
    else:
        freq, name = clustering.frequent_tokens(model.tokenizer, n_tokens), "bpe-merge-order"
    extra = [] if authors else [t for ids in cat_ids.values() for t in ids]
    return freq, list(dict.fromkeys(freq + extra)), name


@dataclasses.dataclass
class _HeadGraph:
    """A head's token graph with its Leiden partition under way (:func:`_head_graph`); :meth:`clusters`
    collects the partition and describes it."""

    spec: GraphSpec
    graph: object                          # igraph.Graph
    job: object                            # headscope.semantic._leiden.Job: the Leiden membership
    nodes: list[int]
    strs: list[str]
    cat_ids: dict[str, list[int]]
    with_spectral: bool
    embeddings: Tensor                     # [n d]
    values: Tensor                         # top-k logits [n k]
    targets: Tensor                        # top-k target node indices [n k]

    def clusters(self) -> HeadClusters:
        g, nodes, strs, seed = self.graph, self.nodes, self.strs, self.spec.seed
        membership = np.asarray(self.job.result())
        leiden = clustering.describe(g, membership, nodes, strs, "leiden", categories=self.cat_ids)
        spectral = None
        if self.with_spectral:
            spectral = clustering.describe(g, clustering.spectral(g, max(2, leiden.n_clusters), seed=seed), nodes,
                                           strs, "spectral", categories=self.cat_ids)
        return HeadClusters(spec=self.spec, leiden=leiden, spectral=spectral, nodes=nodes, embeddings=self.embeddings,
                            values=self.values, targets=self.targets)

    def cancel(self) -> None:
        """Stop the partition's child process, if it runs (the clusters will not be asked for)."""
        self.job.cancel()


def _head_graph(model: Model, W: Weights, layer: int, head: int, X: Tensor, nodes: list[int], n_freq: int,
                cat_ids, o: ClusterOptions, keys: str, frequency: str, strs: list[str] | None = None, *,
                child: bool = True) -> _HeadGraph:
    """The top-k graph of `nodes` (effective embeddings X) under head (layer, head) with its Leiden
    partition started (in a child process when `child` and the graph is not small:
    :func:`headscope.clustering.leiden_job`), under the resolved options `o`: headscope's graph
    (:func:`headscope.clustering.knn_edges`, Leiden RB) or, for a preset whose graph is ``authors``,
    theirs (:func:`headscope.clustering.authors_edges`, Leiden modularity with communities of at most
    :data:`AUTHORS_MAX_COMM_SIZE`). `keys` and `frequency`: what the graph's spec records (the resolved
    keys, the frequency source's name); `strs`: the nodes' strings when the caller has them (the heads
    of one analysis share them)."""
    authors, k, seed, n = o.authors, o.k, o.seed, len(nodes)
    strs = model.to_str_tokens(nodes) if strs is None else strs
    ready = _leiden.child_for(n) if child else None       # its python and leidenalg start while the graph is built
    try:
        if authors:
            b = W.blocks[layer]
            Qr, Kr = X @ b.W_Q[head], X @ b.W_K[head]                                     # raw, no biases [n e]
            edges, weights = clustering.authors_edges(Kr, Qr, k)
            job = clustering.leiden_job(n, edges, weights, method="modularity", directed=True, child=ready or child,
                                        max_comm_size=AUTHORS_MAX_COMM_SIZE, seed=seed)
        else:
            Q, K = bilinear.head_qk(W, layer, head, X)
            vals, idx, lse = bilinear.topk_targets(Q, K, k, self_index=torch.arange(n), return_lse=True)
            edges, weights = clustering.knn_edges(vals, idx, n, lse)
            job = clustering.leiden_job(n, edges, weights, child=ready or child, resolution=o.resolution, seed=seed)
    except BaseException:
        if ready is not None:
            ready.stop()
        raise
    try:
        if authors:
            vals, idx = torch.topk(Kr.double() @ Qr.double().T, min(k, n), dim=1)       # per key [n k]
        g = clustering.to_graph(n, edges, weights, directed=authors)
    except BaseException:
        job.cancel()
        raise
    spec = GraphSpec(n_nodes=n, n_frequent=n_freq, k=k, keys=keys, frequency=frequency,
                     resolution=o.resolution, seed=seed, preset=o.preset, graph="authors" if authors else "headscope",
                     attn_mean=o.attn_mean, max_comm_size=AUTHORS_MAX_COMM_SIZE if authors else None)
    return _HeadGraph(spec=spec, graph=g, job=job, nodes=nodes, strs=strs, cat_ids=cat_ids,
                      with_spectral=o.with_spectral, embeddings=X, values=vals, targets=idx)


def head_clusters(model: Model, layer: int, head: int, options: ClusterOptions = ClusterOptions(), *,
                  weights: Weights | None = None, attn_means: list[Tensor] | None = None) -> HeadClusters:
    """Cluster the tokens that head (layer, head) makes attend to each other.

    ``headscope`` preset: nodes are the `n_tokens` most frequent tokens
    (:func:`headscope.clustering.frequent_tokens`) plus the category words; each links to
    its top-k targets among the nodes by the head's score over effective embeddings
    (self excluded); Leiden (and a spectral alternative) on that graph
    (:func:`headscope.clustering.knn_graph`). ``seed`` preset: the authors' graph
    (:func:`headscope.clustering.authors_graph`, :func:`headscope.clustering.leiden_modularity`)
    over BOS + the most frequent tokens (no category words added). `options`:
    :class:`~headscope.semantic.options.ClusterOptions`; `weights` (already processed) and
    `attn_means`, when given, are used instead of computing them.
    """
    o = options.resolved()
    model.cfg.check_head(layer, head)
    W = model.weights() if weights is None else weights
    prompts, cat_ids = prompts_for(model, o.categories, n_prompts=32, length=16, seed=o.seed)
    if attn_means is None:
        attn_means = bilinear.attn_means_for(W, max(layer, 1 if o.variant == "mlp" else 0), o.attn_mean,
                                             prompts.tokens)
    freq, nodes, freq_name = _nodes(model, o.n_tokens, o.corpus, cat_ids, o.frequency, o.authors)
    X = bilinear.effective_embeddings(W, layer, torch.tensor(nodes), variant=o.variant, attn_means=attn_means)
    keys = resolve_keys(model.cfg, layer, o.keys, o.variant)
    return _head_graph(model, W, layer, head, X, nodes, len(freq), cat_ids, o, keys=keys, frequency=freq_name,
                       child=False).clusters()                              # nothing to overlap: Leiden here


def analyse_head(model: Model, layer: int, head: int, options: HeadOptions = HeadOptions()) -> HeadAnalysis:
    """Analyse head (layer, head) with `options` (:class:`~headscope.semantic.options.HeadOptions`;
    its preset's values where a field is None, :data:`PRESETS`). ``keys="vocab"`` ranks
    neighbours over the whole vocabulary, ``"nodes"`` over the graph's nodes, ``"auto"``
    chooses by cost (:func:`resolve_keys`)."""
    return analyse_heads(model, [(layer, head)], options)[0]


def analyse_heads(model: Model, heads: list[tuple[int, int]], options: HeadOptions = HeadOptions(), *,
                  progress=None) -> list[HeadAnalysis]:
    """:func:`analyse_head` of several heads (results in the order given), sharing their common work.

    What the heads share is computed once: the category prompts and the mean attention
    outputs (up to the deepest head), the graph's nodes and their effective embeddings (one
    pass up the residual stream, every block read once, yielding each head's layer), the
    whole-vocabulary pass of the heads whose neighbours are ranked over the vocabulary (up to
    the deepest of them; only each head's [d_vocab d_head] keys and its examples' queries are
    kept), and one forward pass per prompt order for position independence. Each head's Leiden
    partition runs in a child process (:mod:`._leiden`) from the moment its graph is built, while
    the rest is computed here, and is collected after the walk. Each result is
    what :func:`analyse_head` of that head alone returns. ``progress(done, total, what)``, if
    given, is called after each step.

    With the authors' graph (``preset="seed"``) the examples need not be nodes and the
    graph's edges run key → query, so each example's neighbours and the partner of its
    self-score explanation are its own top-k keys (over the vocabulary, or over the nodes
    for ``keys="nodes"``), not the graph's targets.
    """
    o = options.resolved()
    heads = [(int(l), int(h)) for l, h in heads]
    for l, h in heads:
        model.cfg.check_head(l, h)
    if not heads:
        return []
    W = model.weights()
    head_keys = {hd: resolve_keys(model.cfg, hd[0], o.keys, o.variant) for hd in heads}
    walked = ["mean attention outputs", "effective embeddings of the nodes"] + (
        ["effective embeddings of the vocabulary"] if "vocab" in head_keys.values() else [])
    steps = _Steps(len(walked) + len(heads) + 1, progress)
    shared = _shared_work(model, W, heads, head_keys, o)
    position, positions = position_independence_steps(model, heads, categories=o.categories, seed=o.seed)
    graphs, parts = {}, {}

    def by_layer():                                   # step l: every head of layer l (reads block l)
        nodes, vocab = _embedding_passes(W, heads, shared, o)
        for l, X_n in nodes:
            here = list(dict.fromkeys(hd for hd in heads if hd[0] == l))
            for hd in here:                           # the graphs first: their partitions run while the rest does
                graphs[hd] = _head_graph(model, W, *hd, X_n, shared.nodes, shared.n_freq, shared.cat_ids, o,
                                         keys=shared.head_keys[hd], frequency=shared.frequency, strs=shared.node_strs)
            _, X_v = next(vocab, (l, None))           # the vocabulary's pass, step l
            if X_v is not None:
                shared.vocab_targets.update(_vocab_targets(W, l, X_v, heads, shared, o))
            del X_n, X_v
            for hd in here:
                parts[hd] = _one_head(model, W, *hd, o, shared, graphs[hd])
                steps(f"head {hd[0]}.{hd[1]}")
            yield

    # one walk up the blocks: the mean attention outputs, the nodes' and the vocabulary's effective
    # embeddings, each head at its layer and the prompt orders' forward passes read block l in turn;
    # each head's Leiden partition runs (in a child process, :mod:`._leiden`) from the moment its graph
    # is built, and is collected after the walk
    try:
        advance_together([by_layer(), *position])
        del shared                                      # the node and vocabulary embeddings
        clusters = {hd: hg.clusters() for hd, hg in graphs.items()}
    finally:
        for hg in graphs.values():                      # after a failure: no child process left running
            hg.cancel()
    for what in walked + ["position independence"]:
        steps(what)
    return [HeadAnalysis(layer=l, head=h, fingerprint=model.fingerprint, processing=W.processing.to_dict(),
                         embedding_variant=o.variant, form=form, clusters=clusters[(l, h)], neighbours=neighbours,
                         self_scores=self_scores, position=pos)
            for (l, h), pos in zip(heads, positions())
            for form, neighbours, self_scores in [parts[(l, h)]]]


class _Steps:
    """``progress(done, total, what)`` after each step of :func:`analyse_heads`, if given."""

    def __init__(self, total: int, progress=None):
        self.total, self.done, self.progress = total, 0, progress

    def __call__(self, what: str) -> None:
        self.done += 1
        if self.progress is not None:
            self.progress(self.done, self.total, what)


@dataclasses.dataclass
class _Shared:
    """What the heads of one :func:`analyse_heads` call share (computed once)."""

    cat_ids: dict[str, list[int]]          # category → its words' token ids
    n_freq: int                            # how many of the nodes are the frequent tokens
    nodes: list[int]                       # the graph's nodes (token ids)
    node_strs: list[str]                   # their strings
    node_index: dict[int, int]             # token id → its row among the nodes
    frequency: str                         # the frequency source's name
    examples: list[int]                    # example tokens: the first word of each category
    head_keys: dict[tuple[int, int], str]  # head → "vocab" or "nodes"
    vocab_targets: dict[tuple[int, int], tuple[Tensor, ...]]   # vocabulary-keyed heads' top keys
    attn_means: Sequence[Tensor]           # mean attention outputs (bilinear.AttnMeans: computed when read)


def _shared_work(model: Model, W: Weights, heads: list[tuple[int, int]], head_keys: dict, o: HeadOptions) -> _Shared:
    """The category prompts and mean attention outputs (up to the deepest head; each computed when
    the walk up the blocks first reads it) and the graph's nodes; the vocabulary-keyed heads'
    targets are filled in by the walk (:func:`analyse_heads`)."""
    layers = sorted({l for l, _ in heads})
    prompts, cat_ids = prompts_for(model, o.categories, n_prompts=32, length=16, seed=o.seed)
    attn_means = bilinear.attn_means_as_needed(W, max(max(layers), 1 if o.variant == "mlp" else 0), o.attn_mean,
                                               prompts.tokens)
    freq, nodes, freq_name = _nodes(model, o.n_tokens, o.corpus, cat_ids, o.frequency, o.authors)
    examples = [ids[0] for ids in cat_ids.values()][:o.n_examples]
    return _Shared(cat_ids=cat_ids, n_freq=len(freq), nodes=nodes, node_strs=model.to_str_tokens(nodes),
                   node_index={t: i for i, t in enumerate(nodes)}, frequency=freq_name,
                   examples=examples, head_keys=head_keys, vocab_targets={}, attn_means=attn_means)


def _embedding_passes(W: Weights, heads, s: _Shared, o: HeadOptions):
    """The two passes up the residual stream, which the caller advances together (step l of each reads
    block l): (l, the nodes' x̂ or None) for l = 0..the deepest head, and (l, the whole vocabulary's x̂ or
    None) up to the deepest of the vocabulary-keyed heads (none without them)."""
    layers = sorted({l for l, _ in heads})
    vocab_layers = sorted({l for (l, _), kk in s.head_keys.items() if kk == "vocab"})
    nodes = _embeddings_at(W, layers, torch.tensor(s.nodes), o.variant, s.attn_means)
    vocab = (_embeddings_at(W, vocab_layers, None, o.variant, s.attn_means)    # every token (no padding rows)
             if vocab_layers else iter(()))
    return nodes, vocab


def _one_head(model: Model, W: Weights, l: int, h: int, o: HeadOptions, s: _Shared, hg: _HeadGraph) -> tuple:
    """(QK form, example neighbours, self-score explanations) of head (l, h) from the shared work and
    its token graph `hg` (:func:`_head_graph`, whose partition may still be running): the authors'
    branch ranks each example's own top keys, headscope's reads the graph's targets (the docstring of
    :func:`analyse_heads`)."""
    keys = s.head_keys[(l, h)]
    fold = W.reads_centred
    form = bilinear.bilinear_form(bilinear.qk_matrix(W, l, h, centred=fold), l, h,
                                  factors=bilinear.qk_factors(W, l, h, centred=fold))
    if o.authors:
        neighbours, self_scores = _authors_examples(model, W, l, h, form, hg.embeddings, s.nodes, s.node_index,
                                                    s.examples, o.k, keys, s.vocab_targets.get((l, h)))
    else:
        neighbours, self_scores = _graph_examples(model, form, hg.values, hg.targets, hg.embeddings, s.nodes,
                                                  s.node_strs, s.examples, model.cfg.attn_scale(l),
                                                  s.vocab_targets.get((l, h)) if keys == "vocab" else None)
    return form, neighbours, self_scores


def _vocab_targets(W, l: int, X_all: Tensor, heads, s: _Shared, o: HeadOptions
                   ) -> dict[tuple[int, int], tuple[Tensor, ...]]:
    """The top-k keys of the examples over the whole vocabulary (effective embeddings `X_all`
    [n_tokens d] of layer l) for each vocabulary-keyed head of layer l (only [d_vocab d_head] keys
    per head live at a time); with the authors' graph, also the examples' and their top keys'
    embeddings (self-score partners)."""
    out: dict[tuple[int, int], tuple[Tensor, ...]] = {}
    examples = s.examples
    for hd in heads:
        if hd[0] == l and s.head_keys[hd] == "vocab" and hd not in out:
            Qa, Ka = bilinear.head_qk(W, l, hd[1], X_all)
            ev, key_ids = bilinear.topk_targets(Qa[examples], Ka, o.k, self_index=torch.tensor(examples))
            ex_x = (X_all[examples].clone(), X_all[key_ids[:, 0]].clone()) if o.authors else ()
            out[hd] = (ev, key_ids, *ex_x)
            del Qa, Ka
    return out


def _authors_examples(model, W, l, h, form, X_n, nodes, node_index, examples, k, keys, vocab):
    """(neighbours, self scores) of the examples with the authors' graph: each example's own top
    keys (over the vocabulary when `keys` is "vocab", from `vocab`; else over the nodes)."""
    scale = model.cfg.attn_scale(l)
    if keys == "vocab":
        ex, (ev, key_ids, x_ex, x_top) = examples, vocab
    else:
        ex = [t for t in examples if t in node_index]
        pos = torch.tensor([node_index[t] for t in ex], dtype=torch.long)
        Qn, Kn = bilinear.head_qk(W, l, h, X_n)
        ev, idx = bilinear.topk_targets(Qn[pos], Kn, k, self_index=pos)
        key_ids, x_ex, x_top = torch.tensor(nodes)[idx], X_n[pos], X_n[idx[:, 0]]
    ex_strs = model.to_str_tokens(ex)
    neighbours = [Neighbours(token=s, token_id=t, targets=model.to_str_tokens(key_ids[i].tolist()),
                             target_ids=key_ids[i].tolist(), logits=ev[i].tolist())
                  for i, (t, s) in enumerate(zip(ex, ex_strs))]
    self_scores = [SelfScore(token=ex_strs[i], token_id=t,
                             self=bilinear.explain_score(form, x_ex[i], x_ex[i], divisor=scale),
                             top_target=model.to_str_tokens([int(key_ids[i, 0])])[0],
                             to_top_target=bilinear.explain_score(form, x_ex[i], x_top[i], divisor=scale))
                   for i, t in enumerate(ex)]
    return neighbours, self_scores


def _graph_examples(model, form, values, targets, X_n, nodes, strs, examples, scale, vocab):
    """(neighbours, self scores) of the examples with headscope's graph (top-k logits `values` [n k]
    and target node indices `targets` [n k]): neighbours over the vocabulary (`vocab`, when given)
    or the graph's targets; the self score explained against the example's first graph target."""
    ex_pos = torch.tensor([nodes.index(t) for t in examples])
    if vocab is not None:
        ev, key_ids = vocab
    else:
        ev, key_ids = values[ex_pos], torch.tensor(nodes)[targets[ex_pos]]
    neighbours = [Neighbours(token=s, token_id=t, targets=model.to_str_tokens(key_ids[i].tolist()),
                             target_ids=key_ids[i].tolist(), logits=ev[i].tolist())
                  for i, (t, s) in enumerate(zip(examples, model.to_str_tokens(examples)))]
    self_scores = []
    for i, t in enumerate(examples):
        x = X_n[ex_pos[i]]
        partner = int(targets[ex_pos[i], 0])
        self_scores.append(SelfScore(
            token=strs[ex_pos[i]], token_id=t, self=bilinear.explain_score(form, x, x, divisor=scale),
            top_target=strs[partner],
            to_top_target=bilinear.explain_score(form, x, X_n[partner], divisor=scale)))
    return neighbours, self_scores
