"""headscope.load(model) for a transformers GPT-2 model object already in memory."""

from __future__ import annotations

import dataclasses
import hashlib

import pytest
import torch

import headscope
from headscope import HeadscopeError
from headscope.core.in_memory import state_sha256


def test_in_memory_model_equals_the_checkpoint_on_disk(planted_hf, planted_model):
    m = headscope.load(planted_hf)
    assert m.cfg == planted_model.cfg
    for f in dataclasses.fields(m.raw):
        a, b = getattr(m.raw, f.name), getattr(planted_model.raw, f.name)
        if isinstance(a, torch.Tensor):
            assert torch.equal(a, b), f.name
    for l, (a, b) in enumerate(zip(m.raw.blocks, planted_model.raw.blocks)):
        for k in a.shapes(m.cfg):
            assert torch.equal(getattr(a, k), getattr(b, k)), f"block {l} {k}"
    toks = planted_model.to_tokens("The colour of the centre is red, blue and green.")
    with torch.no_grad():
        hf_logits = planted_hf(toks[None]).logits[0]
    ours = headscope.run_with_cache(m.weights(headscope.Processing.none()), toks[None], names=["logits"]).logits[0]
    torch.testing.assert_close(ours, hf_logits)
    assert m.source == "memory:GPT2LMHeadModel" and m.directory is None and m.describe()["directory"] is None
    assert m.to_str_tokens(toks.tolist()) == planted_model.to_str_tokens(toks.tolist())   # bundled GPT-2 BPE


def test_fingerprint_is_the_documented_hash_of_the_tensors(planted_hf, planted_model):
    m = headscope.load(planted_hf)
    # recomputed here from the definition: sorted stripped keys, tied lm_head skipped
    h = hashlib.sha256()
    sd = planted_hf.state_dict()
    keys = sorted(k[len("transformer."):] for k in sd if k.startswith("transformer.") and not k.endswith(".attn.bias"))
    for k in keys:
        t = sd["transformer." + k].detach().contiguous()
        h.update(f"{k}\0{str(t.dtype).replace('torch.', '')}\0{list(t.shape)}\0".encode())
        h.update(t.numpy().tobytes())
    assert m.fingerprint == h.hexdigest()
    assert m.fingerprint != planted_model.fingerprint                 # not the file hash (documented)
    assert headscope.load(planted_hf.transformer).fingerprint == m.fingerprint   # GPT2Model: same weights, same hash
    # one changed weight changes it
    sd2 = {k: v.clone() for k, v in sd.items()}
    sd2["transformer.h.1.attn.c_attn.weight"][0, 0] += 1e-3
    assert state_sha256(sd2) != m.fingerprint


def test_weights_are_shared_not_copied(tiny_hf_dir):
    from transformers import GPT2LMHeadModel

    hf = GPT2LMHeadModel.from_pretrained(tiny_hf_dir)
    m = headscope.load(hf)
    assert m.raw.W_E.data_ptr() == hf.transformer.wte.weight.data_ptr()
    assert not m.raw.W_E.requires_grad
    # float64 on request is a copy
    m64 = headscope.load(hf, dtype=torch.float64)
    assert m64.raw.W_E.dtype == torch.float64 and m64.fingerprint == m.fingerprint


def test_analyses_run_on_an_in_memory_model(tiny_hf_dir, tiny):
    from transformers import GPT2LMHeadModel

    from headscope.maps.atlas import atlas

    m = headscope.load(GPT2LMHeadModel.from_pretrained(tiny_hf_dir))
    a, b = atlas(m, n_tokens=200), atlas(tiny, n_tokens=200)
    assert a.fingerprint == m.fingerprint != b.fingerprint
    assert [r.to_dict() for r in a.rows] == [r.to_dict() for r in b.rows]


def test_tokenizer_rules(tiny_hf_dir):
    from transformers import GPT2Config, GPT2LMHeadModel

    small_vocab = GPT2LMHeadModel(GPT2Config(vocab_size=311, n_positions=17, n_embd=12, n_layer=1, n_head=3, n_inner=20))
    with pytest.raises(HeadscopeError, match="not GPT-2's 50257.*tokenizer="):
        headscope.load(small_vocab)
    gpt2_tok = headscope.bundled_gpt2_tokenizer()
    with pytest.raises(HeadscopeError, match="tokenizer vocabulary size"):
        headscope.load(small_vocab, tokenizer=gpt2_tok)
    hf = GPT2LMHeadModel.from_pretrained(tiny_hf_dir)
    assert headscope.load(hf, tokenizer=gpt2_tok).tokenizer is gpt2_tok
    with pytest.raises(HeadscopeError, match="tokenizer= is for a model in memory"):
        headscope.load(tiny_hf_dir, tokenizer=gpt2_tok)


def test_other_objects_are_refused():
    with pytest.raises(HeadscopeError, match="expected a hub id, a checkpoint directory or a transformers GPT-2 model"):
        headscope.load(42)

    class Bert:
        class config:
            @staticmethod
            def to_dict():
                return {"model_type": "bert"}

        def state_dict(self):
            return {}

    with pytest.raises(HeadscopeError, match="unsupported architecture: model_type 'bert'"):
        headscope.load(Bert())
