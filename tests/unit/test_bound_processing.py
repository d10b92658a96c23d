"""A model is bound to one processing; analyses read it from the model (issue 21, item 3).

``Model.bound(p)`` is the same checkpoint under `p`: it shares the files, the tokenizer and the
caches (processed weights, derived views, the fingerprint) with the model it came from, and
every analysis reads ``model.weights()`` — no ``processing=`` argument threads through them.
"""

from __future__ import annotations

import torch

from headscope import Processing
from headscope import layer0
from headscope.maps.composition import composition
from headscope.semantic.survey import survey


def test_bound_model_reads_its_processing_and_shares_caches(tiny):
    raw = tiny.bound(Processing.none())
    assert tiny.bound(None) is tiny                                  # binding to what it has: no copy
    assert raw.checkpoint is tiny.checkpoint and raw.tokenizer is tiny.tokenizer
    assert raw.weights() is tiny.raw                                 # Processing.none(): the raw weights
    assert tiny.weights() is tiny.weights(Processing.default())      # unbound: the seed studies' default
    uncentred = tiny.bound(Processing.default_uncentred())
    assert uncentred.weights() is tiny.weights(Processing.default_uncentred())   # one cache for all copies
    assert uncentred.weights() is not tiny.weights()
    assert not torch.equal(uncentred.weights().blocks[0].W_Q, tiny.weights().blocks[0].W_Q)


def test_layer0_view_is_kept_once_per_processing(tiny):
    fold = tiny.bound(Processing(fold_ln=True))
    v_default, v_fold = layer0.view(tiny), layer0.view(fold)
    assert layer0.view(tiny) is v_default and layer0.view(tiny.bound(Processing(fold_ln=True))) is v_fold
    assert v_default.processing == Processing.default() and v_fold.processing == Processing(fold_ln=True)
    assert v_default.W_E.dtype == torch.float64
    assert not torch.equal(v_default.blocks[0].W_K, v_fold.blocks[0].W_K)


def test_fingerprint_is_hashed_once_for_every_copy(tiny, monkeypatch):
    ckpt = tiny.checkpoint
    calls = []
    real = type(ckpt)._hash_files
    monkeypatch.setattr(type(ckpt), "_hash_files", lambda self: calls.append(1) or real(self))
    copies = [tiny.bound(p) for p in (Processing.none(), Processing(fold_ln=True))]
    assert {c.fingerprint for c in copies + [tiny]} == {tiny.fingerprint}
    assert len(calls) <= 1


def test_analyses_record_the_bound_processing(tiny):
    fold = Processing(fold_ln=True)
    assert survey(tiny.bound(fold), [0], n_prompts=2, length=6).processing == fold.to_dict()
    assert survey(tiny, [0], n_prompts=2, length=6).processing == Processing.default().to_dict()
    raw, processed = composition(tiny.bound(Processing.none())), composition(tiny)
    assert raw.processing == Processing.none().to_dict() and processed.processing == Processing.default().to_dict()
    assert raw.scores != processed.scores
