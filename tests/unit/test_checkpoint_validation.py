"""What a checkpoint may hold, what is refused (one line each), the untied unembedding kept
everywhere, and weights built on demand (tiny all-distinct shapes: 2 layers, 3 heads,
d_head 8, d_model 24, d_mlp 40, n_ctx 36)."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file
from transformers import GPT2LMHeadModel

import headscope
from headscope import HeadscopeError, Processing
from headscope.core.config import Config
from headscope.core.families import gpt2, read_config
from headscope.core.checkpoint import from_hf_state_dict
from headscope.core.writing import to_hf_state_dict
from headscope.testing.hub import write_hub_checkpoint
from headscope.core.weights import process

TINY = dict(n_layer=2, n_embd=24, n_head=3, n_ctx=36, n_inner=40)
CFG = Config(n_layers=2, d_model=24, n_heads=3, d_mlp=40, d_vocab=50257, n_ctx=36)
TOKENS = torch.tensor([[50256, 464, 3290, 286, 262, 3641, 318, 4171, 13]])


@pytest.fixture(scope="module")
def hub_dir(tmp_path_factory):
    return write_hub_checkpoint(tmp_path_factory.mktemp("v") / "c", **TINY, masked_bias=True)


@pytest.fixture(scope="module")
def untied_dir(tmp_path_factory):
    return write_hub_checkpoint(tmp_path_factory.mktemp("u") / "c", **TINY, untied_lm_head=True, seed=2)


@pytest.fixture()
def state(hub_dir):
    return dict(load_file(str(hub_dir / "model.safetensors")))


def refused(state, match):
    with pytest.raises(HeadscopeError, match=match) as e:
        from_hf_state_dict(state, CFG)
    assert "\n" not in str(e.value)


# -- what is accepted ---------------------------------------------------------------------


def test_mask_buffers_of_any_dtype_are_expected_not_orphans(state):
    state["h.0.attn.bias"] = state["h.0.attn.bias"].bool()            # old transformers stored bool masks
    state["h.1.attn.masked_bias"] = torch.tensor(-1e4, dtype=torch.float64)
    w = from_hf_state_dict(state, CFG)
    assert torch.equal(w.blocks[1].W_in, state["h.1.mlp.c_fc.weight"])


def test_prefixed_and_unprefixed_keys_give_the_same_weights(state):
    prefixed = {("transformer." + k): v for k, v in state.items()}
    a, b = from_hf_state_dict(state, CFG), from_hf_state_dict(prefixed, CFG)
    assert all(torch.equal(x, y) for (_, x), (_, y) in zip(a.named_tensors(), b.named_tensors()))


def test_float64_state_dict_stays_float64_half_becomes_float32(state):
    w = from_hf_state_dict({k: v.double() for k, v in state.items()}, CFG)
    assert w.W_E.dtype == torch.float64 and torch.equal(w.W_E, state["wte.weight"].double())
    w = from_hf_state_dict({k: v.half() for k, v in state.items()}, CFG)
    assert w.W_E.dtype == torch.float32 and torch.equal(w.W_E, state["wte.weight"].half().float())


# -- what is refused, one line each ---------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.uint8, torch.bool, torch.int8])
def test_integer_and_bool_weights_are_never_cast(state, dtype):
    state["h.1.ln_2.bias"] = (state["h.1.ln_2.bias"] * 10).to(dtype)
    refused(state, rf"'h\.1\.ln_2\.bias' has dtype {str(dtype)[6:]}; headscope reads floating-point weights only")


def test_both_prefixed_and_unprefixed_copies_are_refused(state):
    state["transformer.wpe.weight"] = state["wpe.weight"] + 1
    refused(state, r"holds both 'transformer\.wpe\.weight' and 'wpe\.weight'")


@pytest.mark.parametrize("key", ["h.2.mlp.c_fc.bias", "h.2.attn.bias", "transformer.h.7.ln_1.weight"])
def test_tensors_beyond_n_layer_are_refused(state, key):
    state[key] = torch.zeros(3)
    refused(state, rf"holds '{key}' for layer \d, but config\.json has n_layer 2 \(layers 0\.\.1\)")


@pytest.mark.parametrize("key", ["score.weight", "transformer.lm_head.weight", "h.0.attn.c_attn.extra", "h.01.ln_1.weight",
                                 "multiple_choice_head.summary.weight"])
def test_unknown_tensors_are_refused(state, key):
    state[key] = torch.zeros(3)
    refused(state, rf"unexpected tensor '{key}'")


def test_missing_and_misshapen_tensors(state):
    bad = dict(state)
    del bad["h.1.mlp.c_proj.bias"]
    refused(bad, r"missing tensor 'h\.1\.mlp\.c_proj\.bias'")
    state["lm_head.weight"] = torch.zeros(50257, 23)
    refused(state, r"shape of lm_head\.weight: expected \[50257, 24\], got \[50257, 23\]")


def test_tie_false_without_lm_head_is_refused(tmp_path):
    out = write_hub_checkpoint(tmp_path / "c", **TINY, config_overrides={"tie_word_embeddings": False})
    with pytest.raises(HeadscopeError, match="config.json sets tie_word_embeddings false but there is no lm_head.weight"):
        headscope.load(out)


def test_bad_dtype_argument(hub_dir):
    with pytest.raises(HeadscopeError, match="dtype: expected one of float16, bfloat16, float32, float64"):
        headscope.load(hub_dir, dtype=torch.int32)


# -- the untied unembedding is kept everywhere ----------------------------------------------


def test_untied_lm_head_is_the_unembedding(untied_dir):
    model = headscope.load(untied_dir)
    lm_head = load_file(str(untied_dir / "model.safetensors"))["lm_head.weight"]
    raw = model.raw
    assert model.checkpoint.untied and not raw.tied
    assert torch.equal(raw.W_U, lm_head.T)
    assert model.n_parameters == raw.n_parameters == sum(
        v.numel() for k, v in load_file(str(untied_dir / "model.safetensors")).items() if not k.endswith(".attn.bias"))
    # processing starts from lm_head, block by block or all at once
    p = model.weights()
    ref = process(raw)
    assert all(torch.equal(a, b) for (_, a), (_, b) in zip(p.named_tensors(), ref.named_tensors()))
    hf = GPT2LMHeadModel.from_pretrained(untied_dir, attn_implementation="eager").eval()
    with torch.no_grad():
        logits = hf(TOKENS).logits
    torch.testing.assert_close(headscope.run_with_cache(raw, TOKENS, names=["logits"]).logits, logits,
                               atol=1e-4, rtol=1e-5)


def test_untied_checkpoint_saves_and_steers_untied(untied_dir, tmp_path):
    model = headscope.load(untied_dir)
    lm_head = load_file(str(untied_dir / "model.safetensors"))["lm_head.weight"]
    block = model.raw_block(1)
    block.W_Q[2] *= 0.5
    out = model.save(tmp_path / "saved", blocks={1: block})
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["tie_word_embeddings"] is False
    saved = load_file(str(out / "model.safetensors"))
    assert torch.equal(saved["lm_head.weight"], lm_head)
    again = headscope.load(out)
    assert again.checkpoint.untied and torch.equal(again.raw.W_U, lm_head.T)
    assert torch.equal(again.raw.blocks[1].W_Q, block.W_Q) and torch.equal(again.raw.blocks[0].W_Q, model.raw.blocks[0].W_Q)
    hf = GPT2LMHeadModel.from_pretrained(out, attn_implementation="eager").eval()
    assert hf.lm_head.weight.data_ptr() != hf.transformer.wte.weight.data_ptr()
    with torch.no_grad():
        logits = hf(TOKENS).logits
    torch.testing.assert_close(headscope.run_with_cache(again.raw, TOKENS, names=["logits"]).logits, logits,
                               atol=1e-4, rtol=1e-5)
    # steering keeps it too
    from headscope.semantic.steering import save_steered, steer

    res = save_steered(model, steer(model, 1, 2, 0.0), tmp_path / "steered")
    st = load_file(str(tmp_path / "steered" / "model.safetensors"))
    assert torch.equal(st["lm_head.weight"], lm_head)
    assert json.loads((tmp_path / "steered" / "config.json").read_text())["tie_word_embeddings"] is False
    assert res.steered_fingerprint != model.fingerprint


def test_lm_head_equal_to_wte_is_a_tie(tmp_path, hub_dir):
    out = tmp_path / "c"
    import shutil

    shutil.copytree(hub_dir, out)
    state = dict(load_file(str(out / "model.safetensors")))
    state["lm_head.weight"] = state["wte.weight"].clone()
    save_file(state, str(out / "model.safetensors"), metadata={"format": "pt"})
    model = headscope.load(out)
    assert not model.checkpoint.untied and model.raw.tied
    assert model.n_parameters == headscope.load(hub_dir).n_parameters
    saved = model.save(tmp_path / "s")
    with safe_open(str(saved / "model.safetensors"), "pt") as f:
        assert "lm_head.weight" not in f.keys()


def test_to_hf_state_dict_untied_and_refusals(untied_dir, hub_dir):
    raw = headscope.load(untied_dir).raw
    sd = to_hf_state_dict(raw)
    assert torch.equal(sd["lm_head.weight"], raw.W_U.T) and "transformer.wte.weight" in sd
    assert "lm_head.weight" not in to_hf_state_dict(headscope.load(hub_dir).raw)
    with pytest.raises(HeadscopeError, match="only raw weights"):
        to_hf_state_dict(headscope.load(hub_dir).weights())
    bumped = raw.map(lambda t: t.clone())
    bumped.b_U[3] = 1.0
    with pytest.raises(HeadscopeError, match="no b_U"):
        to_hf_state_dict(bumped)


# -- streaming writes, weights on demand -----------------------------------------------------


def test_streamed_save_equals_save_file(hub_dir, tmp_path):
    model = headscope.load(hub_dir)
    out = model.save(tmp_path / "s")
    save_file(to_hf_state_dict(model.raw), str(tmp_path / "ref.safetensors"), metadata={"format": "pt"})
    assert (out / "model.safetensors").read_bytes() == (tmp_path / "ref.safetensors").read_bytes()
    out2 = headscope.save_checkpoint(model.raw, tmp_path / "s2")
    assert (out2 / "model.safetensors").read_bytes() == (tmp_path / "ref.safetensors").read_bytes()
    assert json.loads((out / "config.json").read_text()) == json.loads((out2 / "config.json").read_text())


def test_weights_are_built_on_demand_and_raw_is_one_copy(hub_dir):
    model = headscope.load(hub_dir)
    assert model._processed == {}                                        # load keeps no weights
    w = model.weights()
    assert Processing.none() not in model._processed                     # processing did not need raw
    assert model.weights() is w
    raw = model.raw
    assert raw.W_U.data_ptr() == raw.W_E.data_ptr() and raw.tied          # tied W_U is W_E.T, one copy
    moved = raw.to(dtype=torch.float64)
    assert moved.W_U.data_ptr() == moved.W_E.data_ptr()                   # and stays a view through map()
    block = model.raw_block(0)
    block.W_Q.zero_()                                                      # a copy: the model is unchanged
    assert not torch.equal(model.raw_block(0).W_Q, block.W_Q)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64])
def test_dtype_processing_in_float32_then_cast(hub_dir, dtype):
    """Half-precision models are processed in float32 and cast once; float64 ones in float64."""
    m32, m = headscope.load(hub_dir), headscope.load(hub_dir, dtype=dtype)
    w32, w = m32.weights(), m.weights()
    assert w.dtype == dtype and w.blocks[1].W_in.dtype == dtype
    if dtype == torch.float64:
        # the load processes on one torch thread (core.checkpoint: memory-bound work), so its bits do not
        # depend on the caller's thread count; the eager reference is taken there too (b_U's centring, a
        # reduction over the vocabulary, is summed in another order on two threads)
        from headscope._threads import one_thread

        with one_thread():
            ref = process(m32.raw.to(dtype=torch.float64))
        assert all(torch.equal(a, b) for (_, a), (_, b) in zip(w.named_tensors(), ref.named_tensors()))
    else:
        assert all(torch.equal(a, b.to(dtype)) for (_, a), (_, b) in zip(w.named_tensors(), w32.named_tensors()))
    assert m.raw.dtype == dtype and torch.equal(m.raw.W_E, m32.raw.W_E.to(dtype))


def test_config_round_trips_with_attention_options():
    import dataclasses

    for options in ({}, {"scale_attn_by_inverse_layer_idx": True}, {"reorder_and_upcast_attn": True}):
        cfg = dataclasses.replace(CFG, **options)
        assert read_config(gpt2.hf_config(cfg)) == (gpt2.FAMILY, cfg)
