"""One head, analysed from its weights (seed 002 items 4–6): effective embeddings, the
bilinear form and its eigenvalues, neighbours, clusters, position independence.

Compute (:func:`analyse_head`) → :class:`HeadAnalysis` (``to_dict()``) → ``render()``.
"""

from __future__ import annotations

import dataclasses

import torch

from . import bilinear, clustering
from ._errors import HeadscopeError
from .semantic import position_independence, prompts_for
from .weights import Processing


@dataclasses.dataclass
class HeadAnalysis:
    layer: int
    head: int
    fingerprint: str
    processing: dict
    embedding_variant: str
    form: dict                  # BilinearForm.to_dict()
    clusters: list[dict]        # Leiden clusters (size ≥ 2)
    leiden: dict                # quality of the Leiden partition
    spectral: dict | None
    neighbours: list[dict]      # top-k attention targets of example tokens
    self_scores: list[dict]     # why example tokens avoid / attend to themselves
    position: dict
    graph: dict                 # how the kNN graph was built

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        form = d.pop("form")
        d.update(form)          # eigenvalues, n_negative_top64, sigma_sym, sigma_skew, … at top level
        return d

    def render(self) -> str:
        from .tokenizer import escape_token as esc

        f = self.form
        top = f"n_negative_top{bilinear_top(f)}"
        lines = [
            f"head {self.layer}.{self.head}  ({self.embedding_variant} effective embeddings; processing "
            + ",".join(k for k, v in self.processing.items() if v) + ")",
            f"eigenvalues (top 8 by |λ|): " + " ".join(f"{x:+.3g}" for x in f["eigenvalues"][:8]),
            f"negative eigenvalues: {f[top]} of the top {bilinear_top(f)}, {f['n_negative']} overall; "
            f"positive: {f['n_positive']}",
            f"σ_sym {f['sigma_sym'][0]:.4g}   σ_skew {f['sigma_skew'][0]:.4g}",
            f"token-identity share of score variance: {self.position['identity_fraction']:.3f}",
            f"Leiden: {self.leiden['n_clusters']} clusters, modularity {self.leiden['modularity']:.3f}"
            + (f", ARI vs categories {self.leiden['ari']:.3f}" if self.leiden["ari"] is not None else ""),
        ]
        for c in self.clusters[:12]:
            lines.append(f"  [{c['size']:>3}] " + " ".join(esc(t) for t in c["tokens"][:12]))
        return "\n".join(lines)


def bilinear_top(form: dict) -> int:
    return int(next(k for k in form if k.startswith("n_negative_top"))[len("n_negative_top"):])


def analyse_head(model, layer: int, head: int, *, variant: str = "full", n_tokens: int = 5000, k: int = 10,
                 keys: str = "vocab", categories=None, corpus=None, resolution: float = 1.0,
                 seed: int = 0, with_spectral: bool = True, n_examples: int = 10,
                 processing: Processing | None = None) -> HeadAnalysis:
    """Analyse head (layer, head); ``keys="vocab"`` ranks neighbours over the whole vocabulary."""
    cfg = model.cfg
    if not 0 <= layer < cfg.n_layers:
        raise HeadscopeError(f"layer {layer} out of range (the model has layers 0..{cfg.n_layers - 1})")
    if not 0 <= head < cfg.n_heads:
        raise HeadscopeError(f"head index {head} out of range (the model has {cfg.n_heads} heads per layer)")
    if keys not in ("vocab", "nodes"):
        raise HeadscopeError(f"keys: expected 'vocab' or 'nodes', got {keys!r}")
    if k < 1:
        raise HeadscopeError(f"k: expected ≥ 1, got {k}")
    W = model.weights(processing)
    prompts, cat_ids = prompts_for(model, categories, n_prompts=32, length=16, seed=seed)
    attn_means = bilinear.mean_attn_outputs(W, prompts.tokens, max(layer, 1 if variant == "mlp" else 0))
    form = bilinear.bilinear_form(bilinear.qk_matrix(W, layer, head, centred=W.processing.fold_ln), layer, head)

    # nodes: frequent tokens ∪ category words
    freq = clustering.frequent_tokens(model.tokenizer, n_tokens, corpus)
    cat_all = [t for ids in cat_ids.values() for t in ids]
    nodes = list(dict.fromkeys(freq + cat_all))
    node_t = torch.tensor(nodes)
    X_nodes = bilinear.effective_embeddings(W, layer, node_t, variant=variant, attn_means=attn_means)
    Qn, Kn = bilinear.head_qk(W, layer, head, X_nodes)
    vals, idx, lse = bilinear.topk_targets(Qn, Kn, k, self_index=torch.arange(len(nodes)), return_lse=True)
    g = clustering.knn_graph(vals, idx, len(nodes), lse)
    strs = model.to_str_tokens(nodes)
    lab = clustering.leiden(g, resolution=resolution, seed=seed)
    leiden_res = clustering.describe(g, lab, nodes, strs, "leiden", categories=cat_ids)
    spectral_res = None
    if with_spectral:
        n_c = max(2, leiden_res.n_clusters)
        spectral_res = clustering.describe(g, clustering.spectral(g, n_c, seed=seed), nodes, strs, "spectral",
                                           categories=cat_ids).to_dict()

    # neighbours and self-score explanations of example tokens (first word of each category)
    examples = [ids[0] for ids in cat_ids.values()][:n_examples]
    ex_pos = torch.tensor([nodes.index(t) for t in examples])
    if keys == "vocab":
        X_all = bilinear.effective_embeddings(W, layer, None, variant=variant, attn_means=attn_means)
        Qa, Ka = bilinear.head_qk(W, layer, head, X_all)
        ev, ei = bilinear.topk_targets(Qa[examples], Ka, k, self_index=torch.tensor(examples))
        key_ids = ei
    else:
        ev, ei = vals[ex_pos], idx[ex_pos]
        key_ids = node_t[ei]
    neighbours = [{"token": s, "token_id": t, "targets": model.to_str_tokens(key_ids[i].tolist()),
                   "target_ids": key_ids[i].tolist(), "logits": ev[i].tolist()}
                  for i, (t, s) in enumerate(zip(examples, model.to_str_tokens(examples)))]
    div = bilinear.score_divisor(cfg, layer)
    self_scores = []
    for i, t in enumerate(examples):
        x = X_nodes[ex_pos[i]]
        partner = int(idx[ex_pos[i], 0])
        self_scores.append({"token": strs[ex_pos[i]], "token_id": t,
                            "self": bilinear.explain_score(form, x, x, divisor=div),
                            "top_target": strs[partner],
                            "to_top_target": bilinear.explain_score(form, x, X_nodes[partner], divisor=div)})
    pos = position_independence(model, layer, head, categories=categories, seed=seed, processing=processing)
    return HeadAnalysis(
        layer=layer, head=head, fingerprint=model.fingerprint, processing=W.processing.to_dict(),
        embedding_variant=variant, form=form.to_dict(),
        clusters=[c.to_dict() for c in leiden_res.clusters],
        leiden={k_: v for k_, v in leiden_res.to_dict().items() if k_ != "clusters"},
        spectral=spectral_res, neighbours=neighbours, self_scores=self_scores, position=pos.to_dict(),
        graph={"n_nodes": len(nodes), "n_frequent": len(freq), "k": k, "keys": keys,
               "frequency": "corpus" if corpus else "bpe-merge-order", "resolution": resolution, "seed": seed},
    )
