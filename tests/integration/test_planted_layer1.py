"""The planted semantic head (layer 1) behaves as planted, in HF transformers' forward pass."""

from __future__ import annotations

import numpy as np
import pytest
import torch


@pytest.fixture(scope="module")
def layer1(planted_manifest):
    return planted_manifest["layer1"]


def _pattern(planted_hf, ids, layer, head):
    with torch.no_grad():
        out = planted_hf(torch.tensor([ids]), output_attentions=True)
    return out.attentions[layer][0, head]                     # [q k]


def _unplanted(planted_model, layer1, words):
    planted = {i for c in layer1["categories"].values() for i in c["ids"]}
    ids = [planted_model.tokenizer.encode(w)[0] for w in words]
    assert all(i not in planted for i in ids)
    return ids


FILLER = [" the", " of", " table", " and", " quickly", " window", " was", " about"]


def test_manifest_describes_the_head(layer1, planted_model):
    head = layer1["semantic_head"]
    assert (head["layer"], head["head"]) == (1, 5)
    tok = planted_model.tokenizer
    for name, cat in layer1["categories"].items():
        assert len(cat["ids"]) >= 5, name
        for s, i in zip(cat["tokens"], cat["ids"]):
            assert s.startswith(" ") and tok.encode(s) == [i]
    # the planted eigenvalue signs are those of the symmetric W_Q W_K^T of the head
    b = planted_model.raw.blocks[1]
    W = (b.W_Q[5].double() @ b.W_K[5].double().T).numpy()
    torch.testing.assert_close(torch.from_numpy(W), torch.from_numpy(W.T), atol=1e-9, rtol=0)
    lam = np.linalg.eigvalsh(W)
    tol = 1e-6 * np.abs(lam).max()
    form = layer1["bilinear_form"]
    assert int((lam < -tol).sum()) == form["n_negative"] == form["eigenvalue_signs"].count("-")
    assert int((lam > tol).sum()) == form["n_positive"] == form["eigenvalue_signs"].count("+")


def test_attends_to_same_category_not_self(planted_hf, layer1, planted_model):
    bos = layer1["bos"]["token_id"]
    fill = _unplanted(planted_model, layer1, FILLER)
    rng = np.random.default_rng(0)
    for name, cat in layer1["categories"].items():
        a, b = rng.choice(cat["ids"], size=2, replace=False)
        ids = [bos, fill[0], int(a), fill[1], fill[2], int(b), fill[3]]
        A = _pattern(planted_hf, ids, 1, 5)
        assert A[5, 2] > 0.8, (name, A[5].tolist())            # b → its partner a
        assert A[5, 5] < 0.02                                   # not itself
        assert A[2, 0] > 0.8                                    # a has no earlier partner → BOS


def test_avoids_copies_and_falls_back_to_bos(planted_hf, layer1, planted_model):
    bos = layer1["bos"]["token_id"]
    fill = _unplanted(planted_model, layer1, FILLER)
    cats = list(layer1["categories"].values())
    one_each = [c["ids"][0] for c in cats[:6]]                 # six categories, one word each
    w = one_each[0]
    ids = [bos, w, fill[0]] + one_each[1:] + [fill[1], w, fill[2], w]
    A = _pattern(planted_hf, ids, 1, 5)
    copies = [q for q, t in enumerate(ids) if t == w]
    for q in copies:
        assert A[q, copies].sum() < 0.02, A[q].tolist()        # neither itself nor its copies
        assert A[q, 0] > 0.8                                   # no partner: BOS
    for q in range(1, len(ids)):
        assert A[q, 0] > 0.8                                   # nothing in this prompt has a partner


def test_partner_wins_over_copies(planted_hf, layer1):
    bos = layer1["bos"]["token_id"]
    days = layer1["categories"]["days"]["ids"]
    colours = layer1["categories"]["colours"]["ids"]
    ids = [bos, days[0], colours[0], days[0], colours[1], days[2], days[0]]
    A = _pattern(planted_hf, ids, 1, 5)
    q = len(ids) - 1                                           # the third copy of days[0]
    assert A[q, 5] > 0.8                                       # the only other day
    assert A[q, [1, 3, 6]].sum() < 0.02
    assert A[4, 2] > 0.8                                       # colour → colour


def test_other_heads_are_not_semantic(planted_hf, layer1):
    bos = layer1["bos"]["token_id"]
    days = layer1["categories"]["days"]["ids"]
    ids = [bos, days[0], 262, 286, 3084, days[1]]
    A = _pattern(planted_hf, ids, 1, 4)
    assert A[5, 1] < 0.5                                       # the unremarkable neighbour head
