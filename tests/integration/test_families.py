"""Every family headscope reads, exact against transformers' own implementation.

For each family a random-weight model built by transformers from its config class (all-distinct
dimensions, odd head counts, grouped-query attention with n_kv_heads < n_heads, partial rotary,
llama3 rope scaling, a local attention layer shorter than the sequence, tied and untied
unembeddings), written with ``save_pretrained`` (the hub's layout) beside a tokenizer.json only,
laid out as an offline Hugging Face cache and loaded by hub id with HF_HUB_OFFLINE. Its logits
and attention probabilities must match transformers' eager forward to float32 tolerance, the
default processing must keep its log-probabilities, and ``Model.save`` must write a checkpoint
the family's transformers class loads with the same logits.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import headscope
from headscope._errors import HeadscopeError
from headscope.core.forward import run_with_cache
from headscope.testing.hub import cache_directory
from headscope.testing import assert_matches_transformers
from headscope.testing.tokenizers import write_family_tokenizer

transformers = pytest.importorskip("transformers")

N_TOKENS = 301          # byte-level BPE needs ≥ 256 + specials
SRC = str(Path(__file__).resolve().parents[2] / "src")

#: family → (config class, kwargs, vocabulary rows, tokenizer flavour)
CASES = {
    "gpt_neo": ("GPTNeoConfig", dict(hidden_size=24, num_layers=3, num_heads=3, intermediate_size=40,
                                     max_position_embeddings=37, attention_types=[[["global", "local"], 1], [["local"], 1]],
                                     window_size=5, activation_function="gelu_new"), N_TOKENS, "gpt_neo"),
    "gpt_neox": ("GPTNeoXConfig", dict(hidden_size=24, num_hidden_layers=3, num_attention_heads=3,
                                       intermediate_size=40, max_position_embeddings=37, rotary_pct=0.5,
                                       rotary_emb_base=100.0, use_parallel_residual=True, tie_word_embeddings=False),
                 320, "gpt_neox"),
    "gpt_neox_sequential": ("GPTNeoXConfig", dict(hidden_size=30, num_hidden_layers=2, num_attention_heads=5,
                                                  intermediate_size=44, max_position_embeddings=37, rotary_pct=0.34,
                                                  use_parallel_residual=False, tie_word_embeddings=False),
                            N_TOKENS, "gpt_neox"),
    "opt": ("OPTConfig", dict(hidden_size=24, num_hidden_layers=3, num_attention_heads=3, ffn_dim=40,
                              max_position_embeddings=37, word_embed_proj_dim=24, activation_function="relu"),
            N_TOKENS + 3, "opt"),
    "opt_350m": ("OPTConfig", dict(hidden_size=24, num_hidden_layers=2, num_attention_heads=3, ffn_dim=40,
                                   max_position_embeddings=37, word_embed_proj_dim=14, do_layer_norm_before=False,
                                   activation_function="relu"), N_TOKENS + 5, "opt"),
    "llama": ("LlamaConfig", dict(hidden_size=24, num_hidden_layers=3, num_attention_heads=3, num_key_value_heads=1,
                                  head_dim=10, intermediate_size=40, max_position_embeddings=37, rope_theta=500.0,
                                  rope_scaling={"rope_type": "llama3", "factor": 4.0, "low_freq_factor": 1.0,
                                                "high_freq_factor": 4.0, "original_max_position_embeddings": 16},
                                  tie_word_embeddings=False), 307, "llama"),
    "llama_tied_biases": ("LlamaConfig", dict(hidden_size=24, num_hidden_layers=2, num_attention_heads=6,
                                              num_key_value_heads=2, intermediate_size=40, max_position_embeddings=37,
                                              attention_bias=True, mlp_bias=True, tie_word_embeddings=True),
                          N_TOKENS, "llama"),
    "qwen2": ("Qwen2Config", dict(hidden_size=24, num_hidden_layers=3, num_attention_heads=3, num_key_value_heads=1,
                                  intermediate_size=40, max_position_embeddings=37, tie_word_embeddings=False),
              311, "qwen2"),
    "qwen2_sliding": ("Qwen2Config", dict(hidden_size=30, num_hidden_layers=3, num_attention_heads=5, num_key_value_heads=1,
                                          intermediate_size=44, max_position_embeddings=41, use_sliding_window=True,
                                          sliding_window=6, max_window_layers=1, tie_word_embeddings=True),
                      N_TOKENS, "qwen2"),
    "mistral": ("MistralConfig", dict(hidden_size=28, num_hidden_layers=2, num_attention_heads=7, num_key_value_heads=1,
                                      head_dim=6, intermediate_size=44, max_position_embeddings=43, sliding_window=9,
                                      rope_theta=300.0, tie_word_embeddings=False), 305, "llama2"),
    "gptj": ("GPTJConfig", dict(n_embd=30, n_layer=2, n_head=3, n_inner=44, n_positions=37, rotary_dim=6,
                                tie_word_embeddings=False), 309, "gpt2"),
    "gemma2": ("Gemma2Config", dict(hidden_size=30, num_hidden_layers=3, num_attention_heads=3, num_key_value_heads=1,
                                    head_dim=14, intermediate_size=44, max_position_embeddings=41, sliding_window=7,
                                    query_pre_attn_scalar=11, attn_logit_softcapping=0.01, final_logit_softcapping=0.05,
                                    rope_theta=400.0), N_TOKENS + 4, "gemma2"),
    "gemma2_untied_full": ("Gemma2Config", dict(hidden_size=28, num_hidden_layers=2, num_attention_heads=7,
                                                num_key_value_heads=7, head_dim=6, intermediate_size=36,
                                                max_position_embeddings=39, layer_types=["full_attention"] * 2,
                                                final_logit_softcapping=None, tie_word_embeddings=False), N_TOKENS,
                           "gemma2"),
    "phi3": ("Phi3Config", dict(hidden_size=30, num_hidden_layers=2, num_attention_heads=3, num_key_value_heads=1,
                                intermediate_size=44, max_position_embeddings=41, partial_rotary_factor=0.6,
                                sliding_window=8, rope_theta=700.0, pad_token_id=0, eos_token_id=2), 303, "llama2"),
    "phi3_longrope": ("Phi3Config", dict(hidden_size=28, num_hidden_layers=2, num_attention_heads=7,
                                         intermediate_size=36, max_position_embeddings=64, original_max_position_embeddings=16,
                                         rope_scaling={"type": "su", "short_factor": [1.0, 1.2],
                                                       "long_factor": [1.5, 3.0]}, pad_token_id=0, eos_token_id=2),
                      N_TOKENS, "llama2"),
    "olmo2": ("Olmo2Config", dict(hidden_size=30, num_hidden_layers=3, num_attention_heads=5, num_key_value_heads=1,
                                  intermediate_size=44, max_position_embeddings=41, rope_theta=600.0,
                                  pad_token_id=0, eos_token_id=0), 313, "olmo2"),
    "gptj_tied": ("GPTJConfig", dict(n_embd=28, n_layer=2, n_head=7, n_inner=36, n_positions=39, rotary_dim=4,
                                     activation_function="gelu", tie_word_embeddings=True), N_TOKENS, "gpt2"),
}


def _randomise(model) -> None:
    """Non-trivial norms and biases (transformers initialises them to 1 and 0)."""
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name or "ln" in name or name.endswith("bias"):
                p.copy_(p + 0.1 * torch.randn(p.shape, generator=g))


def build(case: str, tmp: Path, n_tokens: int = N_TOKENS) -> tuple[object, Path]:
    """`case` built by transformers, saved with a tokenizer of `n_tokens` tokens (the embedding keeps
    the case's padding rows beyond them)."""
    cls, kwargs, vocab, flavour = CASES[case]
    torch.manual_seed(0)
    config = getattr(transformers, cls)(vocab_size=vocab + n_tokens - N_TOKENS, **kwargs)
    hf = transformers.AutoModelForCausalLM.from_config(config, attn_implementation="eager").eval()
    _randomise(hf)
    d = tmp / case
    hf.save_pretrained(d)
    write_family_tokenizer(d, flavour, n_tokens)
    return hf, d


@pytest.fixture
def offline_cache(tmp_path, monkeypatch):
    from huggingface_hub import constants

    cache = tmp_path / "hub"
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    return cache


def _tokens(model, n: int = 29) -> torch.Tensor:
    ids = model.to_tokens("The colour of the harbour, said the neighbour, was grey; 1234 + 5678.")[:n]
    assert len(ids) == n and int(ids.max()) < N_TOKENS
    return ids[None]                                                                     # [1 n]


@pytest.mark.parametrize("case", list(CASES))
def test_family_matches_transformers(case, tmp_path, offline_cache):
    hf, d = build(case, tmp_path)
    repo = f"headscope-test/{case.replace('_', '-')}"
    cache_directory(offline_cache, repo, d)
    model = headscope.load(repo)
    assert model.cfg.family == hf.config.model_type
    tokens = _tokens(model)
    out = assert_matches_transformers(model, hf, tokens)
    # default processing (the options exact for this family) keeps the log-probabilities
    processed = run_with_cache(model.weights(), tokens, names=["logits"])
    torch.testing.assert_close(processed["logits"].log_softmax(-1), out.logits.log_softmax(-1), rtol=1e-4, atol=1e-4)
    # a written-back checkpoint loads in the family's transformers class with the same logits
    block = model.raw_block(1)
    saved = model.save(tmp_path / "saved", blocks={1: block})
    again = transformers.AutoModelForCausalLM.from_pretrained(saved, attn_implementation="eager").eval()
    with torch.no_grad():
        torch.testing.assert_close(again(tokens).logits, out.logits, rtol=1e-5, atol=1e-5)
    assert json.loads((saved / "config.json").read_text())["model_type"] == hf.config.model_type


def test_what_each_family_reads(tmp_path, offline_cache):
    """Config fields as the hub's config.json states them: the adapters' readings, checked by value."""
    expect = {
        "gpt_neo": dict(positional="learned", scale_attn_weights=False, attn_windows=[0, 5, 5], norm="layernorm"),
        "gpt_neox": dict(positional="rotary", rotary_dim=4, rotary_base=100.0, parallel_residual=True),
        "llama": dict(positional="rotary", norm="rmsnorm", gated_mlp=True, n_kv_heads=1, head_dim=10, rotary_dim=10),
        "qwen2": dict(positional="rotary", norm="rmsnorm", gated_mlp=True, n_kv_heads=1, head_dim=8),
        "qwen2_sliding": dict(attn_windows=[0, 6, 6], qk_bias=True),
        "gemma2": dict(attn_windows=[7, 0, 7], branch_norms=True, attn_softcap=0.01, final_softcap=0.05,
                       n_kv_heads=1, head_dim=14, attn_divisor=11 ** 0.5),
        "phi3": dict(rotary_dim=6, attn_windows=[8, 8], n_kv_heads=1, gated_mlp=True, qk_bias=False),
        "olmo2": dict(pre_norms=False, qk_norm=True, branch_norms=True, n_kv_heads=1, rotary_dim=6),
        "gptj": dict(positional="rotary", rotary_dim=6, parallel_residual=True, qk_bias=False, head_dim=10),
        "mistral": dict(attn_windows=[9, 9], n_kv_heads=1, head_dim=6, qk_bias=False, rotary_base=300.0),
        "opt": dict(positional="learned", act_fn="relu", n_ctx=37),
    }
    for case, want in expect.items():
        _, d = build(case, tmp_path)
        model = headscope.load(d)
        got = model.cfg.to_dict()
        assert {k: got[k] for k in want} == want, case
        assert model.describe()["bos"]["id"] == model.bos_id


def test_padding_rows_and_bos(tmp_path):
    """Pythia-style padding (more embedding rows than tokens) loads; BOS follows the family table."""
    _, d = build("gpt_neox", tmp_path)
    model = headscope.load(d)
    assert (model.cfg.d_vocab, len(model.tokenizer)) == (320, N_TOKENS)
    assert model.bos == {"token": "<|endoftext|>", "id": 0, "source": "gpt_neox convention",
                         "prepended_by_tokenizer": False, "padding_row": False}
    _, d = build("opt", tmp_path)
    assert headscope.load(d).bos["token"] == "</s>" and headscope.load(d).bos_id == 2
    _, d = build("llama", tmp_path)
    m = headscope.load(d)
    assert m.bos["token"] == "<|begin_of_text|>" and m.to_tokens("a b")[0] == m.bos_id
    assert (m.to_tokens("a b") == m.bos_id).sum() == 1               # prepended once, not by the tokenizer too


def test_unknown_and_unsupported_configs_are_refused_in_one_line(tmp_path):
    _, d = build("opt", tmp_path)
    cfg = json.loads((d / "config.json").read_text())
    for change, needle in (({"model_type": "mamba"}, "model_type 'mamba'"),
                           ({"enable_bias": False}, "enable_bias"),
                           ({"_remove_final_layer_norm": True}, "final")):
        (d / "config.json").write_text(json.dumps(cfg | change))
        with pytest.raises(HeadscopeError, match=needle) as e:
            headscope.load(d)
        assert "\n" not in str(e.value)
    (d / "config.json").write_text(json.dumps(cfg | {"model_type": "mamba"}))
    r = subprocess.run([sys.executable, "-m", "headscope.cli", "info", str(d)], capture_output=True, text=True,
                       env={"PYTHONPATH": SRC, "PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1"})
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "gpt_neox" in r.stderr and "llama" in r.stderr


def test_gqa_write_back_refuses_diverged_groups(tmp_path):
    _, d = build("llama_tied_biases", tmp_path)
    model = headscope.load(d)
    block = model.raw_block(0)
    block.W_K[1] += 0.5                        # query head 1 now disagrees with head 0 on their shared key
    with pytest.raises(HeadscopeError, match="grouped-query"):
        model.save(tmp_path / "bad", blocks={0: block})


def test_vocabulary_neighbours_leave_padding_rows_out(tmp_path):
    """A padded embedding's rows beyond the tokenizer's ids are never a neighbour, even when they
    copy the top neighbour's embedding (then they would tie with it at the top of every list)."""
    from safetensors.torch import load_file, save_file

    from headscope.semantic.head import analyse_head
    from headscope.semantic.options import HeadOptions

    n = 1024                                         # enough tokens for single-token category words
    _, d = build("gpt_neox", tmp_path, n_tokens=n)                       # 1043 rows, 1024 tokens
    o = HeadOptions(keys="vocab", n_tokens=200, k=6, n_examples=3)
    first = analyse_head(headscope.load(d), 0, 1, o)
    top = first.neighbours[0].target_ids[0]
    f = next(d.glob("*.safetensors"))
    state = load_file(f)
    name = next(k for k in state if k.endswith("embed_in.weight"))
    assert state[name].shape[0] == n + 19
    state[name][n:] = state[name][top]                                    # 19 copies of the top neighbour
    save_file(state, f, metadata={"format": "pt"})
    again = analyse_head(headscope.load(d), 0, 1, o)
    assert again.neighbours[0].target_ids[0] == top
    for nb in again.neighbours:
        assert max(nb.target_ids) < n, (nb.token, nb.target_ids)


REFUSED = {"olmo2": "QK-norm.*un-normalised residual stream", "opt_350m": "post-LN"}


@pytest.mark.parametrize("case", ["mistral", "gptj", "gemma2", "phi3", "olmo2", "opt_350m"])
def test_new_families_atlas_runs_or_refuses_with_the_reason(case, tmp_path):
    """The weight atlas and composition run on each new family's tiny checkpoint, except OLMo 2 (QK-norm,
    no pre-norms) and OPT-350m (post-LN), which leave no fixed QK/OV circuit: refused with that reason."""
    from headscope._errors import NotApplicable
    from headscope.maps.atlas import atlas
    from headscope.maps.composition import composition

    _, d = build(case, tmp_path, n_tokens=1024)
    model = headscope.load(d)
    if case in REFUSED:
        for run in (lambda: atlas(model, n_tokens=300), lambda: composition(model)):
            with pytest.raises(NotApplicable, match=REFUSED[case]) as e:
                run()
            assert "\n" not in str(e.value)
        return
    rows = atlas(model, n_tokens=300).to_dict()
    assert json.dumps(rows, allow_nan=False)
    composition(model)


SPLIT_REFUSED = {"olmo2": "QK-norm", "gemma2": "soft-caps scores"}


@pytest.mark.parametrize("case", ["mistral", "gemma2", "olmo2"])
def test_rotary_layer0_split_applies_or_refuses_with_the_reason(case, tmp_path):
    """The rotary layer-0 split (denominators, calibration, circuit) refuses models where its premises fail —
    QK-norm without a first norm (OLMo 2), soft-capped scores (Gemma 2) — and runs elsewhere; the seed's query
    ' the' is the word after a space in a SentencePiece-style vocabulary too (▁the), not two tokens."""
    from headscope._errors import NotApplicable
    from headscope.layer0 import split
    from headscope.core.applicability import mlp_reads_attention

    _, d = build(case, tmp_path, n_tokens=1024)
    model = headscope.load(d)
    qid = split.token_id(model, " the")
    assert model.tokenizer.decode([qid]).strip() == "the"
    if case in SPLIT_REFUSED:
        with pytest.raises(NotApplicable, match=SPLIT_REFUSED[case]) as e:
            split.view(model)
        assert "\n" not in str(e.value)
    else:
        assert split.view(model).cfg.n_layers == 1
    if case == "gemma2":                  # post-attention norm: MLP0 does not read the heads' outputs linearly
        with pytest.raises(NotApplicable, match="post-attention norm"):
            mlp_reads_attention(model.cfg, "contextual MLP0 neurons")


def test_relative_kernel_refused_without_a_fixed_qk_form(tmp_path, capsys):
    """OLMo 2's QK-norm leaves no fixed QK form: `headscope kernels` refuses the relative kernel in one line."""
    from headscope.cli import main

    _, d = build("olmo2", tmp_path, n_tokens=1024)
    capsys.readouterr()
    assert main(["kernels", str(d)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("headscope: error: ") and "QK-norm" in err[0], err
