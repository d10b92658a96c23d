"""headscope's forward equals HF transformers' GPT2LMHeadModel (eager attention)."""

import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel

import headscope
from headscope import Processing


def hf_model(directory):
    return GPT2LMHeadModel.from_pretrained(directory, attn_implementation="eager").eval()


def compare(model, hf, tokens, processing):
    with torch.no_grad():
        out = hf(tokens, output_attentions=True)
    cache = headscope.run_with_cache(model.weights(processing), tokens,
                                     names=["logits", "blocks.*.attn.hook_pattern"])
    if processing == Processing.none():
        torch.testing.assert_close(cache.logits, out.logits)
    else:  # center_unembed shifts every logit of a position by the same constant
        torch.testing.assert_close(cache.logits.log_softmax(-1), out.logits.log_softmax(-1), atol=1e-4, rtol=1e-4)
    for l, att in enumerate(out.attentions):
        torch.testing.assert_close(cache[f"blocks.{l}.attn.hook_pattern"], att)


@pytest.mark.parametrize("processing", [Processing.none(), Processing.default()], ids=["raw", "processed"])
def test_tiny_all_distinct_dims(tiny_hf_dir, processing):
    model = headscope.load(tiny_hf_dir)
    tokens = torch.randint(0, 50257, (3, 40), generator=torch.Generator().manual_seed(0))
    compare(model, hf_model(tiny_hf_dir), tokens, processing)


@pytest.fixture(scope="module")
def small_dir(tmp_path_factory):
    """A GPT-2-small-shaped random checkpoint written by save_pretrained."""
    import shutil

    from headscope.core.tokenizer import gpt2_bpe_files

    torch.manual_seed(0)
    cfg = GPT2Config(n_layer=2)  # GPT-2 small widths; 2 layers keep the test fast
    m = GPT2LMHeadModel(cfg)
    out = tmp_path_factory.mktemp("small") / "gpt2-small-shaped"
    m.save_pretrained(out)
    for src, name in zip(gpt2_bpe_files(), ("vocab.json", "merges.txt")):
        shutil.copyfile(src, out / name)
    return out


@pytest.mark.slow
@pytest.mark.parametrize("processing", [Processing.none(), Processing.default()], ids=["raw", "processed"])
def test_gpt2_small_shaped_checkpoint(small_dir, processing):
    model = headscope.load(small_dir)
    assert (model.cfg.d_model, model.cfg.n_heads, model.cfg.d_mlp, model.cfg.n_ctx) == (768, 12, 3072, 1024)
    tokens = torch.randint(0, 50257, (2, 64), generator=torch.Generator().manual_seed(1))
    compare(model, hf_model(small_dir), tokens, processing)


def test_denominators_reproduce_patterns(tiny_hf_dir):
    model = headscope.load(tiny_hf_dir)
    tokens = torch.randint(0, 50257, (2, 25), generator=torch.Generator().manual_seed(5))
    c = headscope.run_with_cache(model.weights(), tokens, names=["blocks.*.attn.hook_attn_scores",
                                                                  "blocks.*.attn.hook_denom",
                                                                  "blocks.*.attn.hook_pattern"])
    for l in range(2):
        s, d, p = (c[f"blocks.{l}.attn.{n}"] for n in ("hook_attn_scores", "hook_denom", "hook_pattern"))
        torch.testing.assert_close(torch.exp(s - d[..., None]), p)
        assert torch.all(p.triu(1) == 0)


def test_cache_pieces_are_consistent(tiny_hf_dir):
    """Per-head results sum to attn_out; chunked batches equal one batch; names filter."""
    model = headscope.load(tiny_hf_dir)
    w = model.weights()
    tokens = torch.randint(0, 50257, (4, 11), generator=torch.Generator().manual_seed(6))
    c = headscope.run_with_cache(w, tokens)
    torch.testing.assert_close(c["blocks.1.attn.hook_result"].sum(2) + w.blocks[1].b_O, c["blocks.1.hook_attn_out"])
    torch.testing.assert_close(c["blocks.0.hook_resid_post"], c["blocks.1.hook_resid_pre"])
    chunked = headscope.run_with_cache(w, tokens, names=["logits", "blocks.0.mlp.hook_pre"], batch_size=3)
    assert set(chunked) == {"logits", "blocks.0.mlp.hook_pre"}
    torch.testing.assert_close(chunked.logits, c.logits)
    early = headscope.run_with_cache(w, tokens, names=["blocks.0.*"], stop_at_layer=1)
    torch.testing.assert_close(early["blocks.0.mlp.hook_post"], c["blocks.0.mlp.hook_post"])
    assert "logits" not in early


def test_float64_forward_matches(tiny_hf_dir):
    model = headscope.load(tiny_hf_dir, dtype=torch.float64)
    tokens = torch.randint(0, 50257, (1, 30), generator=torch.Generator().manual_seed(7))
    hf = hf_model(tiny_hf_dir).double()
    with torch.no_grad():
        ref = hf(tokens).logits
    got = headscope.run_with_cache(model.raw, tokens, names=["logits"]).logits
    torch.testing.assert_close(got, ref, rtol=1e-10, atol=1e-10)
