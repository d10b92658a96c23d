"""Canonical weights: HF ↔ headscope conversion, shapes, processing invariants (tiny dims)."""

import pytest
import torch

import headscope
from headscope import HeadscopeError, Processing
from headscope.core.checkpoint import from_hf_state_dict
from headscope.core.writing import to_hf_state_dict
from headscope.testing import read_safetensors


def test_shapes_follow_transformerlens(tiny):
    w, c = tiny.raw, tiny.cfg
    assert (c.n_heads, c.d_head, c.d_model, c.d_mlp) == (3, 4, 12, 20)
    b = w.blocks[0]
    assert w.W_E.shape == (50257, 12) and w.W_pos.shape == (40, 12)
    assert b.W_Q.shape == (3, 12, 4) and b.W_O.shape == (3, 4, 12)
    assert b.b_Q.shape == (3, 4) and b.W_in.shape == (12, 20) and b.W_out.shape == (20, 12)
    assert w.W_U.shape == (12, 50257)


def test_c_attn_split_matches_hf_conv1d(tiny, tiny_hf_dir):
    """q computed from HF's fused c_attn equals headscope's per-head W_Q."""
    state = read_safetensors(tiny_hf_dir)
    W = state["transformer.h.1.attn.c_attn.weight"]           # [d 3d], Conv1D: x @ W
    x = torch.randn(5, 12)
    q_hf = (x @ W)[:, :12].reshape(5, 3, 4)                   # [pos d] → [pos head d_head]
    v_hf = (x @ W)[:, 24:].reshape(5, 3, 4)
    torch.testing.assert_close(torch.einsum("pd,hde->phe", x, tiny.raw.blocks[1].W_Q), q_hf)
    torch.testing.assert_close(torch.einsum("pd,hde->phe", x, tiny.raw.blocks[1].W_V), v_hf)


def test_round_trip_hf_state_dict(tiny):
    state = to_hf_state_dict(tiny.raw)
    back = from_hf_state_dict(state, tiny.cfg)
    for (name, a), (_, b) in zip(tiny.raw.named_tensors(), back.named_tensors()):
        torch.testing.assert_close(a, b, rtol=0, atol=0, msg=name)


def test_wrong_shape_names_expected_and_got(tiny, tiny_hf_dir):
    state = read_safetensors(tiny_hf_dir)
    state["transformer.h.0.mlp.c_fc.weight"] = state["transformer.h.0.mlp.c_fc.weight"][:, :19]
    with pytest.raises(HeadscopeError, match=r"h\.0\.mlp\.c_fc\.weight: expected \[12, 20\], got \[12, 19\]"):
        from_hf_state_dict(state, tiny.cfg)


def test_processing_is_recorded_and_raw_kept(tiny):
    p = tiny.weights()
    assert p.processing == Processing.default()
    assert tiny.raw.processing == Processing.none()
    assert not torch.equal(p.blocks[0].W_Q, tiny.raw.blocks[0].W_Q)   # LN1 folded in
    torch.testing.assert_close(p.blocks[0].ln1_w, torch.ones(12))
    torch.testing.assert_close(p.W_E.mean(-1), torch.zeros(50257), atol=1e-6, rtol=0)
    torch.testing.assert_close(p.W_U.mean(-1), torch.zeros(12), atol=1e-6, rtol=0)
    assert p.blocks[1].b_V.abs().max() == 0
    with pytest.raises(HeadscopeError, match="already processed"):
        headscope.process(p)


@pytest.mark.parametrize("option", ["fold_ln", "center_writing_weights", "center_unembed", "fold_value_biases"])
def test_each_processing_option_alone_keeps_log_probs(tiny, option):
    tokens = torch.randint(0, 50257, (2, 9), generator=torch.Generator().manual_seed(3))
    ref = headscope.run_with_cache(tiny.raw, tokens, names=["logits"]).logits.log_softmax(-1)
    proc = Processing(**{option: True})
    got = headscope.run_with_cache(tiny.weights(proc), tokens, names=["logits"]).logits.log_softmax(-1)
    torch.testing.assert_close(got, ref, atol=2e-5, rtol=1e-5)


def test_nan_weights_refused(tiny):
    bad = tiny.raw.map(lambda t: t.clone())
    bad.blocks[1].W_in[3, 4] = float("nan")
    with pytest.raises(HeadscopeError, match=r"blocks\.1\.W_in contains NaN or Inf"):
        bad.validate()


def test_default_centres_the_readers_as_transformer_lens(tiny):
    """TransformerLens's fold_ln (center_weights=True): W_Q, W_K, W_V, W_in, W_U lose their d_model mean
    after folding; everything else is the uncentred processing's, and the outputs do not move."""
    c, u = tiny.weights(Processing.default()), tiny.weights(Processing.default_uncentred())
    for bc, bu in zip(c.blocks, u.blocks):
        for name, dim in (("W_Q", 1), ("W_K", 1), ("W_V", 1), ("W_in", 0)):
            got, ref = getattr(bc, name), getattr(bu, name)
            torch.testing.assert_close(got, ref - ref.mean(dim, keepdim=True))
            assert float((got - ref).abs().max()) > 1e-4 * float(ref.abs().max()), name   # it did centre
        for name in ("b_Q", "b_K", "b_V", "b_in", "W_O", "b_O", "W_out", "b_out"):
            assert torch.equal(getattr(bc, name), getattr(bu, name)), name
    ref = u.W_U - u.W_U.mean(0, keepdim=True)
    torch.testing.assert_close(c.W_U, ref - ref.mean(1, keepdim=True))
    tokens = torch.randint(0, 50257, (2, 9), generator=torch.Generator().manual_seed(4))
    lc = headscope.run_with_cache(c, tokens, names=["logits"]).logits.log_softmax(-1)
    lu = headscope.run_with_cache(u, tokens, names=["logits"]).logits.log_softmax(-1)
    torch.testing.assert_close(lc, lu, atol=2e-5, rtol=1e-5)
    with pytest.raises(HeadscopeError, match="needs fold_ln"):
        headscope.process(tiny.raw, Processing(center_reading_weights=True))


def test_processed_blocks_are_built_when_first_read(tiny_hf_dir, monkeypatch):
    """A pass that stops after layer 0 processes block 0 only; every block, once read, is the one
    the eager processing of the raw weights gives, and the same object on every access."""
    import pickle

    import headscope.core.checkpoint as C
    from headscope.core.weights import process

    built = []
    real = C.process_block
    monkeypatch.setattr(C, "process_block", lambda b, p, **kw: built.append(1) or real(b, p, **kw))
    model = headscope.load(tiny_hf_dir)
    W = model.weights()
    headscope.run_with_cache(W, torch.tensor([[50256, 464, 3290]]), names=["blocks.0.mlp.hook_pre"], stop_at_layer=1)
    assert len(built) == 1
    assert W.blocks[0] is W.blocks[-2] and len(W.blocks) == 2 and len(built) == 1
    eager = process(model.raw, W.processing)
    for got, ref in zip(W.blocks, eager.blocks):
        for k in ref.shapes(model.cfg):
            assert torch.equal(getattr(got, k), getattr(ref, k)), k
    assert len(built) == 2 and W.blocks[:1] == [W.blocks[0]]
    assert [b.W_Q.shape for b in pickle.loads(pickle.dumps(W)).blocks] == [b.W_Q.shape for b in W.blocks]


def test_a_block_read_after_its_files_changed_is_refused(tiny_hf_dir, tmp_path):
    """Blocks built when first read never mix two versions of a checkpoint: a file replaced (or
    removed) after the weights were first read makes the next unread block refuse, in one line."""
    import shutil

    d = tmp_path / "c"
    shutil.copytree(tiny_hf_dir, d)
    model = headscope.load(d)
    W = model.weights()
    W.blocks[0]
    f = d / "model.safetensors"
    f.write_bytes(f.read_bytes())                      # the same bytes rewritten: a new modification time
    with pytest.raises(HeadscopeError, match="changed or went away after the model's weights were first read"):
        W.blocks[1]
    assert W.blocks[0] is W.blocks[0]                  # what was read stays


def _odd_block(seed: int = 0):
    """A raw block (h 3, d 12, e 4, m 20) with every storage case process_block meets: contiguous
    matrices of their own, W_K and W_V slices of one fused tensor, a transposed (non-contiguous)
    W_in, a gated MLP, and biases far from zero."""
    from headscope.core.weights import Block

    g = torch.Generator().manual_seed(seed)
    r = lambda *s: torch.randn(*s, generator=g) + 0.3   # noqa: E731
    kv = r(2, 3, 12, 4)
    return Block(ln1_w=r(12), ln1_b=r(12), W_Q=r(3, 12, 4), W_K=kv[0], W_V=kv[1], b_Q=r(3, 4), b_K=r(3, 4),
                 b_V=r(3, 4), W_O=r(3, 4, 12), b_O=r(12), ln2_w=r(12), ln2_b=r(12), W_in=r(20, 12).T, b_in=r(20),
                 W_out=r(20, 12), b_out=r(12), W_gate=r(12, 20), b_gate=r(20))


@pytest.mark.parametrize("processing", [Processing.default(), Processing(fold_ln=True, center_writing_weights=False,
                                                                          center_unembed=False, fold_value_biases=False),
                                        Processing.none()])
def test_process_block_in_place_gives_the_same_bits(processing):
    """inplace=True rewrites the block's own contiguous matrices (no new allocation) and leaves fused
    slices and transposed views alone, with every output bit equal to the out-of-place processing."""
    from headscope.core.weights import process_block

    ref = process_block(_odd_block(), processing)
    raw = _odd_block()
    ptrs = {k: getattr(raw, k).data_ptr() for k in ("W_Q", "W_O", "W_out", "W_gate", "W_K", "W_in")}
    kept = {k: getattr(raw, k).clone() for k in ("W_K", "W_V", "W_in")}
    out = process_block(raw, processing, inplace=True)
    for k in ref.__dataclass_fields__:
        a, b = getattr(ref, k), getattr(out, k)
        assert (a is None and b is None) or (a.dtype == b.dtype and torch.equal(a, b)), k
    if processing.fold_ln or processing.center_writing_weights:
        written = (["W_Q", "W_gate"] if processing.fold_ln else []) + (["W_O", "W_out"]
                                                                       if processing.center_writing_weights else [])
        assert all(getattr(out, k).data_ptr() == ptrs[k] for k in written)
    for k, t in kept.items():               # shared or non-contiguous: never written through
        assert torch.equal(getattr(raw, k), t), k
