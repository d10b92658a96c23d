"""Seed 000's claims on layer 0's neurons: the count of contextual neurons, neuron 704's lists and
texts, naive Bayes, topics and their transfer. One check per claim (:func:`claim`)."""

from __future__ import annotations

import math
import statistics

import torch

from .. import shipped
from .._errors import NotApplicable
from ..layer0.neurons import DEFAULT_THRESHOLD
from ..stats import binomial_quantiles, hypergeometric_quantiles, roc_auc, spearman
from .null import NullComparison, compare, share_null
from .reference import gpt2_only
from .table import claim, margin_of, share_of


def bayes_sums(score: torch.Tensor, texts: list[list[int]], k: int) -> torch.Tensor:
    """[3 T K]: per text (token ids) the sum over its tokens of each column's score [V K] for tokens
    among that column's top and bottom k (row 0), its top k only (1), its bottom k only (2)."""
    V, K = score.shape
    k = min(k, V)
    top = torch.zeros(V, K, dtype=torch.bool).scatter_(0, score.topk(k, dim=0).indices, True)
    bottom = torch.zeros(V, K, dtype=torch.bool).scatter_(0, score.topk(k, dim=0, largest=False).indices, True)
    C = torch.stack([torch.bincount(torch.tensor(ids, dtype=torch.long), minlength=V)[:V] for ids in texts]).double()
    s = score.double()
    return torch.stack([C @ (s * (top | bottom)), C @ (s * top), C @ (s * bottom)])                # [3 T K]


def bayes_gaps(sums: torch.Tensor, lengths: list[int], y: list[bool]) -> torch.Tensor:
    """[K]: min over top+bottom and bottom only of the mean per-token contribution (sum ÷ the text's
    tokens) on the Commonwealth texts minus that on the American texts; sums [3 T K] of :func:`bayes_sums`."""
    per = sums / torch.tensor(lengths, dtype=torch.float64)[None, :, None]                     # [3 T K]
    yes = torch.tensor(y)
    gap = per[:, yes].mean(1) - per[:, ~yes].mean(1)                                           # [3 K]
    return torch.minimum(gap[0], gap[2])


@claim("naive_bayes")
def _naive_bayes(c, ref, w):
    """Classify labelled texts by the sum of the neuron's token contributions over their tokens:
    top and bottom tokens together, top tokens only, bottom only, and the neuron's true mean
    activation. The AUCs saturate (a random direction whose extreme tokens are the spelling tokens
    classifies them too, up to its sign), so the null compares a gap in the neuron's own unit: the
    mean per-token contribution, Commonwealth minus American texts, of the top+bottom tokens and of
    the bottom tokens alone (the smaller), against random neurons (:attr:`Work.readout_null`: random
    readouts of neurons' norms through the same circuit, their own top and bottom tokens)."""
    k = c["k"]
    texts = shipped.spelling_texts()
    ids = [w.model.tokenizer.encode(text) for _, text in texts]
    y = [label == "commonwealth" for label, _ in texts]
    sums = bayes_sums(w.neuron_scores(ref.neuron)[:, None], ids, k)                            # [3 T 1]
    true = [w.true_activation(ref.neuron, text)[0] for _, text in texts]
    auc = [roc_auc(sums[i, :, 0].tolist(), y) for i in range(3)] + [roc_auc(true, y)]
    acc = sum((float(x) > 0) == t for x, t in zip(sums[0, :, 0], y)) / len(y)
    lengths = [max(len(i), 1) for i in ids]
    draws = bayes_gaps(bayes_sums(w.readout_null, ids, k), lengths, y).tolist()
    gap = float(bayes_gaps(sums, lengths, y)[0])
    null = compare(gap, draws, statistic="min(top+bottom, bottom-only) gap in mean per-token contribution, "
                   "Commonwealth − American texts", direction="above",
                   null="random neurons (Gaussian readouts of neurons' norms through the same circuit, their own "
                        f"top and bottom {k} tokens)", **margin_of(c["null"]), null_passes=share_of(draws, lambda x: x > 0))
    measured = (f"AUC {auc[0]:.3f} (top+bottom), {auc[1]:.3f} (top only), {auc[2]:.3f} (bottom only), "
                f"{auc[3]:.3f} (true activation); accuracy {acc:.2f}")
    note = (f"neuron {ref.neuron_label}; {len(y)} shipped texts (data/spelling_texts.json, written for headscope), "
            f"{k} top and {k} bottom tokens of the scan; accuracy of 'Commonwealth if the sum > 0'; "
            f"per-token gap {gap:.4g}")
    ok = auc[0] >= c["min_auc"] and acc >= c["min_accuracy"] and auc[2] >= c["min_auc"]
    return c["published_text"], measured, c["tolerance"], ok, note, null


#: a topic label → the shipped sample text of that topic (row neuron_transfer)
LABEL_TEXTS = {"sport": "sports_report", "cooking": "cooking", "language:fr": "french",
               "commonwealth_spelling": "british_news", "american_spelling": "american_news"}


@claim("neuron_topics")
def _neuron_topics(c, ref, w):
    labels = w.topic_labels
    if not labels:
        raise NotApplicable("no contextual neuron above the threshold to label")
    share = sum(x.labelled for x in labels) / len(labels)
    shown = "; ".join(f"{x.neuron}: {'/'.join(x.top) or '—'} vs {'/'.join(x.bottom) or '—'}" for x in labels[:12])
    note = f"{len(labels)} neurons (top vs bottom labels): {shown}" + ("; …" if len(labels) > 12 else "")
    if ref.planted:
        note += "; planted: the lexicons and the planted token sets share topic words by construction"
    null = _topics_null(c, w, labels)
    return c["published_text"], round(share, 4), c["tolerance"], share >= c["min_share"], note, null


def _topics_null(c, w, labels) -> NullComparison:
    """Topical lists alone are no evidence where a random direction's extreme tokens are topical too
    (a vocabulary whose topic tokens are outliers): a neuron counts when it is labelled AND its
    strongest contribution (max |score|, either side) reaches the 95th percentile of random
    neurons' (:attr:`Work.readout_null`); the null is the rate p̂ at which random neurons, labelled
    from their own top and bottom tokens (:attr:`Work.readout_null_labels`), do the same."""
    S = w.readout_null                                                                      # [V K]
    strength = torch.maximum(S.amax(0), -S.amin(0))                                         # [K]
    bar = float(torch.quantile(strength, 0.95))
    by = {n["neuron"]: max(n["max_contribution"], -n["min_contribution"]) for n in w.scan.neurons}
    count = sum(x.labelled and by.get(x.neuron, -math.inf) >= bar for x in labels)
    hits = sum(x.labelled and float(s) >= bar for x, s in zip(w.readout_null_labels, strength))
    return share_null(count / len(labels), len(labels), hits, len(strength),
                      statistic=f"share labelled with a contribution ≥ random neurons' p95 ({bar:.3g})",
                      null="random neurons (Gaussian readouts of neurons' norms through the same circuit) labelled "
                           "from their own top and bottom tokens", margin=float(c["null"]["margin"]))


@claim("neuron_transfer")
def _neuron_transfer(c, ref, w):
    """Neurons labelled with a topic that has a shipped sample text: true mean activation on that
    text above (top label) or below (bottom label) the mean over the other sample texts. The null:
    the same difference for random readouts of each neuron's norm (in the labelled direction, ÷ its
    own 95th percentile); the statistic is the median of that ratio over the tested neurons."""
    by = {t.name: t.text for t in shipped.samples()}
    tests = []
    for x in w.topic_labels:
        for side, sign in (("top", 1.0), ("bottom", -1.0)):
            for label in getattr(x, side):
                if LABEL_TEXTS.get(label) in by:
                    tests.append((x.neuron, label, LABEL_TEXTS[label], sign))
    if not tests:
        raise NotApplicable("no contextual neuron has a label with a shipped sample text (sport, cooking, "
                            "French, Commonwealth or American spelling)")
    results, ratios, null_rows = [], [], []
    for j, label, name, sign in tests:
        act = {n: w.true_activation(j, t)[0] for n, t in by.items()}
        others = statistics.mean(v for n, v in act.items() if n != name)
        results.append((j, label, act[name], others, sign * (act[name] - others) > 0))
        diff, draws = w.sample_readout_null(j, name)
        d = torch.tensor(draws, dtype=torch.float64) * sign
        p95 = float(torch.quantile(d, 0.95))
        ratios.append(sign * diff / p95 if p95 > 0 else math.inf)
        null_rows.append(d / p95 if p95 > 0 else torch.zeros_like(d))
    share = sum(r[4] for r in results) / len(results)
    stat = statistics.median(ratios)
    draws = torch.stack(null_rows).median(0).values.tolist() if len(null_rows) > 1 else null_rows[0].tolist()
    null = compare(stat, draws, statistic="median over the tested neurons of the labelled difference ÷ its random-readout p95",
                   null="random readouts of each neuron's norm (the same texts), in the labelled direction",
                   direction="above", **margin_of(c["null"]))
    note = "; ".join(f"{j} ({label}): {a:.3f} vs {o:.3f}" for j, label, a, o, _ in results[:10]) + \
        " (true mean activation on the topic's sample vs the other samples; calibrated on calibration.txt); " \
        "difference ÷ random readouts' p95: " + ", ".join(f"{x:.3g}" for x in ratios[:10])
    return c["published_text"], f"{sum(r[4] for r in results)}/{len(results)}", c["tolerance"], \
        share >= c["min_share"], note, null


def _scaled_count(w) -> str:
    """The count under variant ``scaled`` (the same scan ÷ σ̄₂), for the row's note."""
    if w.variant.ln2 != "none" or w.variant.max != "signed":
        return ""
    sigma = w.circuit[0].calibration.ln2_scale
    n = sum(x / sigma >= DEFAULT_THRESHOLD for x in w.scan.max_all)
    return f"seed unit (no LN2 scale); under 'scaled' (÷ σ̄₂ = {sigma:.3f}): {n} neurons"


@claim("n_contextual_neurons")
def _n_neurons(c, ref, w):
    scan = w.scan
    found = sorted(n["neuron"] for n in scan.neurons)
    null = _count_null(c, w, len(found))
    if ref.n_neurons is None:
        lo, hi = c["range"]
        return c["published_text"], len(found), c["tolerance"], lo <= len(found) <= hi, _scaled_count(w), null
    extra = sorted(set(found) - set(ref.neuron_indices))
    missing = sorted(set(ref.neuron_indices) - set(found))
    note = "; ".join(s for s in [f"missing {missing}" if missing else "", f"extra {extra}" if extra else "",
                                 _scaled_count(w)] if s)
    return ref.neuron_indices, found, "exactly the planted neurons", not extra and not missing, note, null


def _count_null(c, w, count: int) -> NullComparison:
    """The count above the threshold against d_mlp random neurons: Binomial(d_mlp, p̂), p̂ the share
    of random readouts (:attr:`Work.readout_null`) whose score passes the scan's threshold."""
    S = w.readout_null
    key = S.amax(0) if w.variant.max == "signed" else torch.maximum(S.amax(0), -S.amin(0))        # [K]
    hits, K, M = int((key >= DEFAULT_THRESHOLD).sum()), S.shape[1], w.model.cfg.d_mlp
    med, p95 = binomial_quantiles(M, hits / K)
    margin = float(c["null"]["margin"])
    return NullComparison(statistic=f"neurons scoring ≥ {DEFAULT_THRESHOLD:g}",
                          null=f"{M} random neurons: Binomial({M}, {hits}/{K}), {hits} of {K} random readouts "
                               "(neurons' norms) through the same circuit pass", measured=float(count), n_draws=K,
                          median=float(med), p95=float(p95), direction="above", margin=margin, margin_kind="diff",
                          bar=float(p95 + margin), clears=count >= p95 + margin, null_passes=round(hits / K, 4))


def list_agreement(want: list[str], got: list[str], k: int = 10) -> dict:
    """Overlap of the whole lists, of their top k, and Spearman's ρ of the shared tokens' ranks
    (kept for the details: the seed's lists are selections, not rankings — rows use :func:`set_agreement`)."""
    shared = [t for t in want if t in got]
    rho = spearman([want.index(t) for t in shared], [got.index(t) for t in shared])
    return {"overlap": len(set(want) & set(got)), "top_k": k, "overlap_top_k": len(set(want[:k]) & set(got[:k])),
            "n_shared": len(shared), "spearman": None if rho is None else round(rho, 4)}


def set_agreement(selected: torch.Tensor, scores: torch.Tensor, largest: bool = True) -> dict:
    """A published selection (token ids, any order) against a neuron's token scores [V], as sets.

    ``overlap`` / ``jaccard``: with headscope's selection of the same size (the |P| tokens of
    largest score, or smallest for the bottom list); ``threshold``: the score τ whose selection
    {t : s_t ≥ τ} (≤ τ for the bottom) reproduces the published one best (largest Jaccard), with
    that Jaccard and the selection's size. Order never enters: a list in token-id order (as the
    seed prints them) and one by score are the same selection."""
    P = torch.zeros(scores.numel(), dtype=torch.bool)
    P[selected] = True
    k = int(P.sum())
    order = torch.argsort(scores.double(), descending=largest, stable=True)
    hits = P[order].double().cumsum(0)                                         # |prefix_m ∩ P|, m = 1..V
    m = torch.arange(1, scores.numel() + 1, dtype=torch.float64)
    jac = hits / (m + k - hits)
    best = int(jac.argmax())
    overlap = int(hits[k - 1]) if k else 0
    return {"size": k, "overlap": overlap, "jaccard": round(overlap / (2 * k - overlap), 4) if k else None,
            "threshold": round(float(scores[order[best]]), 6), "threshold_jaccard": round(float(jac[best]), 4),
            "threshold_size": best + 1}


@claim("neuron_704_top", "neuron_704_bottom")
def _neuron_side(c, ref, w):
    """The published list as a set (seed 000 prints thresholded selections in ascending token-id
    order): its overlap and Jaccard with headscope's selection of the same size, and the threshold
    that reproduces it best; the null is the overlap of a random selection of that size."""
    side = c["side"]
    gpt2_only(ref, f"neuron 704's {side}-{len(ref.top_tokens if side == 'top' else ref.bottom_tokens)} token list")
    want = ref.top_tokens if side == "top" else ref.bottom_tokens
    scores = w.neuron_scores(ref.neuron)                                           # [V]
    ids, missing = w.token_ids(want)
    if not ids:
        raise NotApplicable(f"none of the published {side} tokens is one token of this vocabulary")
    a = set_agreement(torch.tensor(ids), scores, largest=side == "top")
    need = int(-(-c["min_fraction"] * a["size"] // 1))                             # ceil
    med, p95 = hypergeometric_quantiles(scores.numel(), a["size"])
    null = NullComparison(statistic=f"overlap with the {a['size']} of {'largest' if side == 'top' else 'smallest'} score",
                          null=f"a random selection of {a['size']} of {scores.numel()} tokens (hypergeometric)",
                          measured=float(a["overlap"]), n_draws=0, median=float(med), p95=float(p95), direction="above",
                          margin=float(c["null"]["margin"]), margin_kind="diff", bar=float(p95 + c["null"]["margin"]),
                          clears=a["overlap"] >= p95 + c["null"]["margin"])
    measured = (f"{a['overlap']}/{a['size']} in its {side} {a['size']} (Jaccard {a['jaccard']:.2f}); "
                f"τ {a['threshold']:.3g} selects {a['threshold_size']} (Jaccard {a['threshold_jaccard']:.2f})")
    note = (f"neuron {ref.neuron_label}; compared as sets (order ignored); headscope's "
            f"{'max' if side == 'top' else 'min'} contribution {float(scores.max() if side == 'top' else scores.min()):.3f}"
            + (f"; not one token here: {missing[:5]}" if missing else ""))
    published = f"{len(want)} tokens" + (" (planted)" if ref.planted else " (a selection)")
    tol = f"≥ {need} of {a['size']} in the selection of the same size"
    return published, measured, tol, a["overlap"] >= need, note, null


@claim("neuron_704_texts")
def _neuron_texts(c, ref, w):
    names = c["texts"]
    by = {t.name: t.text for t in shipped.samples()}
    uk, us = (w.true_activation(ref.neuron, by[n]) for n in names)
    diff, draws = w.text_readout_null(ref.neuron, [by[n] for n in names])
    null = compare(diff, draws, statistic="Commonwealth − American mean pre-activation", direction="above",
                   null=f"random readouts of W_in[:, {ref.neuron}]'s norm", **margin_of(c["null"]),
                   null_passes=share_of(draws, lambda x: x > 0))
    note = (f"neuron {ref.neuron_label}: true {uk[0]:.3f} ({names[0]}, {uk[2]} tokens) vs {us[0]:.3f} ({names[1]}, "
            f"{us[2]} tokens), difference {diff:.3f}; circuit prediction {uk[1]:.3f} vs {us[1]:.3f}")
    return c["published_text"], f"{uk[0]:.3f} vs {us[0]:.3f}", c["tolerance"], uk[0] > us[0], note, null

