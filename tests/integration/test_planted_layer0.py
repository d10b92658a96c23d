"""Planted layer 0 is real in an HF transformers forward pass (not only headscope's).

Checks: every head's attention follows its planted kernel exp(−κ(n−i)) (× e^{b_kw} on
keywords for keyword heads); the kernel categories separate; each planted MLP0 neuron's
pre-activation (HF c_fc output) is higher on text rich in its positive tokens than on
text rich in its negative tokens; same seed → identical bytes.
"""

from __future__ import annotations

import hashlib

import pytest
import torch

pytestmark = pytest.mark.slow

# Texts written for these tests. Keys: planted neuron names → (positive text, negative text).
TEXTS = {
    "commonwealth_spelling": (
        "The council said the colour of the new centre would honour the local labour movement. "
        "Its behaviour towards the organisation was a matter of defence, and the favourite "
        "programme at the theatre was about a neighbour whose licence was revoked. Whilst "
        "travelling, we realise that humour and flavour matter; the harbour was grey.",
        "The council said the color of the new center would honor the local labor movement. "
        "Its behavior toward the organization was a matter of defense, and the favorite "
        "program at the theater was about a neighbor whose license was revoked. While "
        "traveling, we realize that humor and flavor matter; the harbor was gray.",
    ),
    "sport_vs_cooking": (
        "The team won the match after the striker scored a late goal. The coach praised the "
        "players and the fans in the stadium, and the league title race goes on this season. "
        "The referee gave a penalty, the goalkeeper saved it, and the championship continues.",
        "Preheat the oven, mix the flour with butter and sugar, then bake the dough. For the "
        "sauce, fry garlic and onion, add salt and pepper, simmer the soup, and roast the "
        "chicken with vegetables. A teaspoon of cheese finishes the pasta in the kitchen.",
    ),
    "french_vs_english": (
        "Je pense que le chat est sur la table et que il ne veut pas partir. Les enfants "
        "sont au jardin pour jouer, et la maison est sans bruit. Il dit que tu es du village, "
        "et je ne sais pas qui est le maire de la ville.",
        "I think that the cat is on the table and that it does not want to leave. The "
        "children are in the garden to play, and the house is quiet. He says that you are "
        "from the village, and I do not know who is the mayor of the town.",
    ),
    "positive_vs_negative_sentiment": (
        "What a wonderful day: the weather was beautiful, the food was excellent and the "
        "music was brilliant. We were happy and delighted, full of joy and hope, and it was "
        "the best and most perfect holiday; we love it and enjoy every lovely moment.",
        "What a terrible day: the weather was awful, the food was bad and the music was "
        "horrible. We were sad and angry, full of fear and grief, and it was the worst and "
        "most miserable holiday; we hate it, a cruel and tragic disaster of pain and failure.",
    ),
}


@pytest.fixture(scope="module")
def layer0(planted_manifest):
    return planted_manifest["layer0"]


def _hf_attn0(planted_hf, tokens):
    with torch.no_grad():
        out = planted_hf(tokens[None], output_attentions=True)
    return out.attentions[0][0].double()  # [head q k]


def _ideal_kernel(n, kappa, bonus=None):
    i = torch.arange(n + 1, dtype=torch.float64)
    logit = -kappa * (n - i)
    if bonus is not None:
        logit = logit + bonus
    return torch.softmax(logit, 0)


def _tv(a, b):
    return 0.5 * (a - b).abs().sum().item()


def test_manifest_covers_every_head_and_category(layer0, planted_model):
    heads = layer0["heads"]
    assert [h["head"] for h in heads] == list(range(planted_model.cfg.n_heads))
    cats = {h["category"] for h in heads}
    assert cats == {"local", "slowly_decaying", "uniform"}
    assert len(layer0["contextual_heads"]) == 6
    ctx_kappas = {h["kappa"] for h in heads if h["contextual"]}
    assert ctx_kappas == {layer0["contextual_kappa"]}
    assert set(layer0["keyword_heads"]) <= set(layer0["contextual_heads"]) and layer0["keyword_heads"]


def test_manifest_tokens_are_single_gpt2_tokens(layer0, planted_model):
    tok = planted_model.tokenizer
    names = {n["name"] for n in layer0["neurons"]}
    assert set(TEXTS) <= names
    for n in layer0["neurons"]:
        assert len(n["positive"]) >= 15 and len(n["negative"]) >= 15
        assert not set(n["positive_ids"]) & set(n["negative_ids"])
        for s, i in zip(n["positive"] + n["negative"], n["positive_ids"] + n["negative_ids"]):
            assert tok.encode(s) == [i]
    cw = next(n for n in layer0["neurons"] if n["name"] == "commonwealth_spelling")
    for brit, amer in [(" colour", " color"), (" centre", " center"), (" favour", " favor"),
                       (" behaviour", " behavior"), (" defence", " defense"), (" labour", " labor")]:
        assert brit in cw["positive"] and amer in cw["negative"]


def test_attention_follows_planted_kernels(planted_hf, planted_model, layer0):
    """Per head, every attention row is close (TV) to the planted kernel, and far from the others."""
    text = " ".join(TEXTS[k][j] for k in TEXTS for j in (0, 1))
    tokens = planted_model.to_tokens(text)[:300]
    A = _hf_attn0(planted_hf, tokens)
    kw = torch.tensor([int(t) in set(layer0["keyword_ids"]) for t in tokens], dtype=torch.float64)
    assert kw.sum() > 20  # the text does contain keywords
    cat_of = {h["kappa"]: h["category"] for h in layer0["heads"]}
    for hd in layer0["heads"]:
        h, kappa = hd["head"], hd["kappa"]
        bonus = layer0["keyword_bonus"] * kw if hd["keyword"] else None
        # the kernels of the *other* categories (κ within one category may be close)
        tv_other = {k: [] for k, c in cat_of.items() if c != hd["category"]}
        tv_own = []
        for n in range(20, len(tokens)):
            b = None if bonus is None else bonus[: n + 1]
            tv_own.append(_tv(A[h, n, : n + 1], _ideal_kernel(n, kappa, b)))
            for k in tv_other:
                tv_other[k].append(_tv(A[h, n, : n + 1], _ideal_kernel(n, k, b)))
        med = torch.tensor(tv_own).median().item()
        assert med < 0.05, (h, kappa, med)
        for k, v in tv_other.items():  # categories separate cleanly
            assert torch.tensor(v).median().item() > 3 * med + 0.05, (h, kappa, k)


def test_keyword_heads_prefer_keywords(planted_hf, planted_model, layer0):
    tokens = planted_model.to_tokens(TEXTS["sport_vs_cooking"][0])
    A = _hf_attn0(planted_hf, tokens)
    kw = torch.tensor([int(t) in set(layer0["keyword_ids"]) for t in tokens])
    n = len(tokens) - 1
    for hd in layer0["heads"]:
        if not hd["contextual"]:
            continue
        mass = A[hd["head"], n, : n + 1][kw].sum().item()
        base = _ideal_kernel(n, hd["kappa"])[kw].sum().item()
        if hd["keyword"]:
            assert mass > 1.5 * base, (hd["head"], mass, base)
        else:
            assert abs(mass - base) < 0.1 * base + 0.02, (hd["head"], mass, base)


def _mlp0_pre(planted_hf, planted_model, text):
    tokens = planted_model.to_tokens(text)
    got = {}
    handle = planted_hf.transformer.h[0].mlp.c_fc.register_forward_hook(lambda m, i, o: got.update(pre=o))
    try:
        with torch.no_grad():
            planted_hf(tokens[None])
    finally:
        handle.remove()
    return got["pre"][0]  # [pos d_mlp]


def test_planted_neurons_separate_their_texts(planted_hf, planted_model, layer0):
    """HF's c_fc output (MLP0 pre-activation) is higher on positive-rich text, by a margin."""
    margins = {}
    for n in layer0["neurons"]:
        pos_text, neg_text = TEXTS[n["name"]]
        j = n["index"]
        pre_pos = _mlp0_pre(planted_hf, planted_model, pos_text)[10:, j].mean().item()
        pre_neg = _mlp0_pre(planted_hf, planted_model, neg_text)[10:, j].mean().item()
        margins[n["name"]] = pre_pos - pre_neg
        assert pre_pos > pre_neg + 1.0, (n["name"], pre_pos, pre_neg)
    # unplanted neurons: no systematic preference on the same texts (the effect is planted)
    planted = {n["index"] for n in layer0["neurons"]}
    pos_text, neg_text = TEXTS["commonwealth_spelling"]
    diff = (_mlp0_pre(planted_hf, planted_model, pos_text)[10:].mean(0)
            - _mlp0_pre(planted_hf, planted_model, neg_text)[10:].mean(0))
    others = torch.tensor([j for j in range(diff.shape[0]) if j not in planted])
    assert diff[others].abs().max().item() < 0.5 * margins["commonwealth_spelling"]


def test_headscope_forward_agrees_on_planted_neurons(planted_model, planted_hf, layer0):
    import headscope

    text = TEXTS["french_vs_english"][0]
    cache = headscope.run_with_cache(planted_model.weights(), planted_model.to_tokens(text)[None],
                                     names=["blocks.0.mlp.hook_pre"], stop_at_layer=1)
    idx = [n["index"] for n in layer0["neurons"]]
    torch.testing.assert_close(cache["blocks.0.mlp.hook_pre"][0][:, idx],
                               _mlp0_pre(planted_hf, planted_model, text)[:, idx], atol=2e-4, rtol=1e-4)


def test_same_seed_same_bytes(tmp_path):
    from headscope.planted import build

    digests = []
    for k in range(2):
        out = build(tmp_path / f"b{k}", seed=3)
        digests.append(hashlib.sha256((out / "model.safetensors").read_bytes()).hexdigest()
                       + hashlib.sha256((out / "planted.json").read_bytes()).hexdigest())
    assert digests[0] == digests[1]
