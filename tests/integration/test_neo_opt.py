"""GPT-Neo and OPT: headscope's forward equals transformers' (eager attention), loaded offline from an HF cache.

Random-weight checkpoints built by transformers from GPTNeoConfig / OPTConfig with all-distinct
dimensions (d_model 24, 3 heads of 8, d_mlp 40, vocab 97, n_ctx 32), a GPT-Neo local layer whose
window (5) is shorter than the test sequence (20), written with ``save_pretrained``, laid out as a
hub cache revision and loaded by repo id with the hub offline.
"""

import json

import huggingface_hub.constants as hf_constants
import pytest
import torch
from transformers import GPTNeoConfig, GPTNeoForCausalLM, OPTConfig, OPTForCausalLM

import headscope
from headscope import Processing
from headscope._errors import HeadscopeError
from headscope.core.families import read_config
from headscope.testing.hub import cache_directory
from headscope.core.forward import run_with_cache

D, H, M, V, N_CTX, WINDOW, P = 24, 3, 40, 97, 32, 5, 20


def _tokenizer_json(path):
    """A word-level tokenizer.json of exactly V tokens (``<|endoftext|>`` is id 0)."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {"<|endoftext|>": 0, **{f"w{i}": i for i in range(1, V)}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<|endoftext|>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.save(str(path / "tokenizer.json"))


def _neo():
    # layers: global, local, global (one local layer, window 5 < P)
    cfg = GPTNeoConfig(vocab_size=V, max_position_embeddings=N_CTX, hidden_size=D, num_layers=3, num_heads=H,
                       intermediate_size=M, attention_types=[[["global", "local"], 1], [["global"], 1]],
                       window_size=WINDOW, bos_token_id=0, eos_token_id=0)
    return GPTNeoForCausalLM(cfg)


def _opt(**kw):
    cfg = OPTConfig(**{"vocab_size": V, "max_position_embeddings": N_CTX, "hidden_size": D, "word_embed_proj_dim": D,
                       "num_hidden_layers": 2, "num_attention_heads": H, "ffn_dim": M, "pad_token_id": 1,
                       "bos_token_id": 0, "eos_token_id": 0, **kw})
    return OPTForCausalLM(cfg)


BUILD = {"gpt_neo": (_neo, GPTNeoForCausalLM), "opt": (_opt, OPTForCausalLM)}


def _randomise(m):
    """Non-trivial LayerNorm weights/biases and biases (init leaves them 1/0), so a wrong fold shows."""
    g = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for name, p in m.named_parameters():
            if name.endswith("bias") or "norm" in name or "ln_" in name:
                p.copy_(p + 0.2 * torch.randn(p.shape, generator=g))
    return m.eval()


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    """{family: (repo_id, cache dir, saved directory)} with the hub offline (monkeypatched per test)."""
    root = tmp_path_factory.mktemp("neo-opt")
    cache = root / "hub"
    out = {}
    for i, (family, (build, _)) in enumerate(BUILD.items()):
        torch.manual_seed(10 + i)
        d = root / family
        _randomise(build()).save_pretrained(d)
        _tokenizer_json(d)
        repo = f"tiny/{family}"
        cache_directory(cache, repo, d)
        out[family] = (repo, cache, d)
    return out


@pytest.fixture
def offline(monkeypatch, hub):
    monkeypatch.setattr(hf_constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(hf_constants, "HF_HUB_CACHE", str(next(iter(hub.values()))[1]))
    return hub


def _hf(family, directory):
    return BUILD[family][1].from_pretrained(directory, attn_implementation="eager").eval()


def _tokens(seed=0):
    return torch.randint(0, V, (2, P), generator=torch.Generator().manual_seed(seed))


def _compare(weights, hf, tokens, raw):
    with torch.no_grad():
        out = hf(tokens, output_attentions=True)
    cache = headscope.run_with_cache(weights, tokens, names=["logits", "blocks.*.attn.hook_pattern"])
    if raw:
        torch.testing.assert_close(cache.logits, out.logits)
    else:  # default processing keeps the log-probs (centring the unembedding shifts each position's logits)
        torch.testing.assert_close(cache.logits.log_softmax(-1), out.logits.log_softmax(-1), atol=1e-4, rtol=1e-4)
    assert len(out.attentions) == weights.cfg.n_layers
    for l, att in enumerate(out.attentions):
        torch.testing.assert_close(cache[f"blocks.{l}.attn.hook_pattern"], att)
    return cache


@pytest.mark.parametrize("raw", [True, False], ids=["raw", "processed"])
@pytest.mark.parametrize("family", list(BUILD))
def test_exact_against_transformers(offline, family, raw):
    repo, _, d = offline[family]
    model = headscope.load(repo)
    assert model.cfg.family == family
    assert (model.cfg.d_model, model.cfg.n_heads, model.cfg.d_head, model.cfg.d_mlp, model.cfg.d_vocab,
            model.cfg.n_ctx) == (D, H, 8, M, V, N_CTX)
    w = model.weights(Processing.none() if raw else Processing.default())
    assert w.W_pos.shape == (N_CTX, D)
    _compare(w, _hf(family, d), _tokens(), raw)


def test_gpt_neo_local_window(offline):
    """Layer 1 is local: each query sees exactly its last WINDOW keys (itself included); layers 0, 2 are global."""
    model = headscope.load(offline["gpt_neo"][0])
    assert model.cfg.attn_windows == (0, WINDOW, 0) and model.cfg.attn_scale(1) == 1.0   # unscaled scores
    c = headscope.run_with_cache(model.weights(), _tokens(1), names=["blocks.*.attn.hook_pattern"])
    q, k = torch.arange(P)[:, None], torch.arange(P)[None, :]
    visible = (k <= q) & (k > q - WINDOW)
    local = c["blocks.1.attn.hook_pattern"]
    assert torch.all(local[..., ~visible] == 0) and torch.all(local[..., visible] > 0)
    assert torch.all(c["blocks.0.attn.hook_pattern"][..., (k <= q) & ~visible] > 0)
    torch.testing.assert_close(local.sum(-1), torch.ones(2, H, P))


def test_opt_position_offset(offline):
    """W_pos is embed_positions rows 2: (position p reads row p + 2)."""
    repo, _, d = offline["opt"]
    model = headscope.load(repo)
    stored = _hf("opt", d).model.decoder.embed_positions.weight.detach()
    assert stored.shape == (N_CTX + 2, D)
    torch.testing.assert_close(model.weights(Processing.none()).W_pos, stored[2:], rtol=0, atol=0)


@pytest.mark.parametrize("family", list(BUILD))
def test_save_round_trip_loads_in_transformers(offline, family, tmp_path):
    """Model.save writes a checkpoint the family's transformers class loads, with the same logits."""
    repo, _, d = offline[family]
    model = headscope.load(repo)
    out = model.save(tmp_path / "saved")
    hf = json.loads((out / "config.json").read_text())
    assert hf["model_type"] == family
    tokens = _tokens(2)
    with torch.no_grad():
        want = _hf(family, d)(tokens).logits
        got = _hf(family, out)(tokens).logits
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    again = headscope.load(out)
    assert again.cfg == model.cfg
    _compare(again.weights(Processing.none()), _hf(family, out), tokens, raw=True)


def test_save_writes_edited_blocks(offline, tmp_path):
    """A replaced block goes through hf_from_block: transformers sees the edit (GPT-Neo and OPT)."""
    for family in BUILD:
        repo, _, d = offline[family]
        model = headscope.load(repo)
        b = model.raw_block(0)
        b.W_O = torch.zeros_like(b.W_O)
        out = model.save(tmp_path / family, blocks={0: b})
        attn = _hf(family, out).get_submodule(
            "transformer.h.0.attn.attention" if family == "gpt_neo" else "model.decoder.layers.0.self_attn")
        assert torch.all(attn.out_proj.weight == 0)
        again = headscope.load(out).raw_block(0)
        for name in ("W_Q", "W_K", "W_V", "b_O", "W_in", "W_out"):
            torch.testing.assert_close(getattr(again, name), getattr(model.raw_block(0), name), rtol=0, atol=0)


def test_opt_hub_keys_without_model_prefix(hub, tmp_path):
    """The hub's OPT files store ``decoder.…`` keys (OPTModel); they load the same as ``model.decoder.…``."""
    import shutil

    from safetensors.torch import load_file, save_file

    _, _, d = hub["opt"]
    plain = tmp_path / "plain"
    shutil.copytree(d, plain)
    state = load_file(str(d / "model.safetensors"))
    assert any(k.startswith("model.decoder.") for k in state)
    save_file({k.removeprefix("model."): v.contiguous() for k, v in state.items()}, str(plain / "model.safetensors"),
              metadata={"format": "pt"})
    a = headscope.load(d).weights(Processing.none())
    b = headscope.load(plain).weights(Processing.none())
    torch.testing.assert_close(a.W_pos, b.W_pos, rtol=0, atol=0)
    torch.testing.assert_close(a.blocks[1].W_Q, b.blocks[1].W_Q, rtol=0, atol=0)


def _opt_json(**kw):
    m = _opt(**kw)
    return {**m.config.to_dict(), "model_type": "opt"}


@pytest.mark.parametrize("change, words", [
    ({"enable_bias": False}, "enable_bias false"),
    ({"layer_norm_elementwise_affine": False}, "layer_norm_elementwise_affine false"),
    ({"_remove_final_layer_norm": True}, "_remove_final_layer_norm true"),
])
def test_opt_unsupported_configs_refused_in_one_line(change, words):
    hf = {**_opt_json(), **change}
    with pytest.raises(HeadscopeError) as e:
        read_config(hf)
    assert words in str(e.value) and "\n" not in str(e.value)


def test_opt_post_ln_checkpoint_loads_exactly(tmp_path):
    """An OPT-350m-style (post-LN) checkpoint, refused before, loads and matches transformers
    (project_in/project_out: tests/integration/test_families.py, case opt_350m)."""
    torch.manual_seed(0)
    hf = _opt(do_layer_norm_before=False).eval()
    hf.save_pretrained(tmp_path / "post")
    _tokenizer_json(tmp_path / "post")
    model = headscope.load(tmp_path / "post")
    assert model.cfg.post_ln and not model.cfg.pre_norms and not model.cfg.final_ln
    tokens = torch.arange(5, 25)[None]
    with torch.no_grad():
        torch.testing.assert_close(run_with_cache(model.weights(Processing.none()), tokens, names=["logits"])["logits"], hf(tokens).logits,
                                   rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("change, words", [
    ({"attention_types": [[["global", "sparse"], 1], [["global"], 1]], "attention_layers": None}, "'global' or 'local'"),
    ({"attention_types": [[["global"], 2]], "attention_layers": None}, "each of the 3 layers"),
    ({"attention_layers": ["global", "global", "global"]}, "disagrees"),
    ({"window_size": 0}, "window_size"),
])
def test_gpt_neo_bad_configs_refused_in_one_line(change, words):
    hf = {**_neo().config.to_dict(), "model_type": "gpt_neo", **change}
    with pytest.raises(HeadscopeError) as e:
        read_config(hf)
    assert words in str(e.value) and "\n" not in str(e.value)


def test_gpt_neo_config_round_trip():
    """hf_config ∘ config_from_hf is the identity on the Config (windows, unscaled attention)."""
    from headscope.core.families import gpt_neo

    family, cfg = read_config({**_neo().config.to_dict(), "model_type": "gpt_neo"})
    assert family is gpt_neo.FAMILY and cfg.scale_attn_weights is False
    assert read_config(family.hf_config(cfg, False))[1] == cfg


@pytest.mark.parametrize("family", list(BUILD))
def test_in_memory_model_loads(family, tmp_path):
    """headscope.load(a GPTNeoForCausalLM / OPTForCausalLM object) reads it through the same family."""
    from transformers import GPT2TokenizerFast

    torch.manual_seed(5)
    m = _randomise(BUILD[family][0]())
    m.set_attn_implementation("eager")                                  # so that it returns attention patterns
    _tokenizer_json(tmp_path)
    model = headscope.load(m, tokenizer=GPT2TokenizerFast(tokenizer_file=str(tmp_path / "tokenizer.json")))
    assert model.cfg.family == family
    _compare(model.weights(Processing.none()), m, _tokens(4), raw=True)


@pytest.mark.parametrize("family", list(BUILD))
def test_save_checkpoint_from_weights(offline, family, tmp_path):
    """save_checkpoint(raw Weights) writes the family's layout (OPT: W_pos with its 2 leading rows back)."""
    from headscope.core.writing import save_checkpoint

    repo, _, d = offline[family]
    model = headscope.load(repo)
    out = save_checkpoint(model.weights(Processing.none()), tmp_path / "w", tokenizer_from=model.directory)
    tokens = _tokens(3)
    with torch.no_grad():
        torch.testing.assert_close(_hf(family, out)(tokens).logits, _hf(family, d)(tokens).logits, rtol=0, atol=0)
