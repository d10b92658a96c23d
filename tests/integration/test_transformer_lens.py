"""Parity with TransformerLens 4.3.0 (a test-only peer: ``pip install -e .[test]``).

On one random GPT-2-small-shaped checkpoint (d_model 768, 12 heads of 64, d_mlp 3072, GPT-2's
vocabulary; 2 layers to stay fast; biases and LayerNorms randomised so folding is exercised),
booted by ``TransformerBridge.boot_transformers`` from a local directory (no hub access) with its
default processing, headscope's default processing must give: the same processed tensors, the
same forward cache, the same QK and OV eigenvalues, the same composition scores and the same
Framework copying score — to float32 rounding. Each check is a function returning what differs, so
the test also shows that changing a convention (centring of the readers, Q ↔ K composition) fails.
"""

from __future__ import annotations

import importlib
import os
import shutil

import pytest
import torch

import headscope
from headscope.maps import composition
from headscope.core.weights import Processing

tl = pytest.importorskip("transformer_lens", reason="transformer_lens is not installed (pip install -e .[test])")
A = importlib.import_module("headscope.maps.atlas")

BLOCK = ("W_Q", "W_K", "W_V", "W_O", "b_Q", "b_K", "b_V", "b_O", "W_in", "b_in", "W_out", "b_out")
TOP = ("W_E", "W_pos", "W_U", "b_U")
RTOL, ATOL = 1e-5, 1e-6            # float32 rounding of processed weights of norm ≈ 1


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    from transformers import GPT2Config, GPT2LMHeadModel

    from headscope.core.tokenizer import gpt2_bpe_files

    torch.manual_seed(2024)
    cfg = GPT2Config(vocab_size=50257, n_positions=128, n_embd=768, n_layer=2, n_head=12, n_inner=3072)
    model = GPT2LMHeadModel(cfg).eval()
    g = torch.Generator().manual_seed(7)
    with torch.no_grad():                      # HF's init hides folding bugs (biases 0, LN 1/0)
        for name, p in model.named_parameters():
            if name.endswith("bias") or "ln_" in name:
                p.add_(0.1 * torch.randn(p.shape, generator=g))
    out = tmp_path_factory.mktemp("tl") / "gpt2ish"
    model.save_pretrained(out)
    vocab, merges = gpt2_bpe_files()
    shutil.copyfile(vocab, out / "vocab.json")
    shutil.copyfile(merges, out / "merges.txt")
    return out


@pytest.fixture(scope="module")
def bridge(checkpoint):
    from transformers import GPT2TokenizerFast
    from transformer_lens.model_bridge import TransformerBridge

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    b = TransformerBridge.boot_transformers(str(checkpoint), device="cpu",
                                            tokenizer=GPT2TokenizerFast.from_pretrained(checkpoint))
    b.enable_compatibility_mode(disable_warnings=True)      # fold_ln, centring, value biases: TL's defaults
    return b


@pytest.fixture(scope="module")
def model(checkpoint):
    return headscope.load(checkpoint)


def _close(a, b, rtol=RTOL, atol=ATOL) -> bool:
    try:
        torch.testing.assert_close(a.detach().double(), b.detach().double(), rtol=rtol, atol=atol)
        return True
    except AssertionError:
        return False


def weight_mismatches(W, bridge) -> list[str]:
    """Names of processed tensors that differ from TransformerLens's."""
    bad = [n for n in TOP if not _close(getattr(W, n), getattr(bridge, n))]
    for l, blk in enumerate(W.blocks):
        bad += [f"blocks.{l}.{n}" for n in BLOCK if not _close(getattr(blk, n), getattr(bridge, n)[l])]
    return bad


def composition_mismatches(scores: dict, theirs: dict) -> list[str]:
    return [m for m in composition.MODES if not _close(scores[m], theirs[m], rtol=1e-4, atol=1e-6)]


def _same_spectrum(a, b, rel: float = 1e-4) -> bool:
    """Same multiset of complex eigenvalues up to rel · max|λ| (each matched to its nearest)."""
    a, b = a.to(torch.complex128).flatten(), b.to(torch.complex128).flatten()
    if a.numel() != b.numel():
        return False
    d = (a[:, None] - b[None, :]).abs()
    tol = rel * float(b.abs().max())
    return bool((d.min(1).values <= tol).all() and (d.min(0).values <= tol).all())


@torch.no_grad()
def test_processed_weights_equal_transformer_lens(model, bridge):
    assert weight_mismatches(model.weights(), bridge) == []
    # a changed convention fails: the earlier default does not centre the readers
    bad = weight_mismatches(model.weights(Processing.default_uncentred()), bridge)
    assert set(bad) == {"W_U"} | {f"blocks.{l}.{n}" for l in range(2) for n in ("W_Q", "W_K", "W_V", "W_in")}


@torch.no_grad()
def test_forward_cache_equals_transformer_lens(model, bridge):
    tokens = torch.randint(0, 50257, (2, 24), generator=torch.Generator().manual_seed(5))
    names = [f"blocks.{l}.{n}" for l in range(2) for n in
             ("hook_resid_pre", "attn.hook_pattern", "attn.hook_attn_scores", "hook_attn_out", "mlp.hook_pre",
              "hook_mlp_out", "hook_resid_post")]
    ours = headscope.run_with_cache(model.weights(), tokens, names=names + ["logits"])
    logits, theirs = bridge.run_with_cache(tokens)
    for n in names:
        a, b = ours[n], theirs[n]
        if n.endswith("hook_attn_scores"):                 # masked entries: −inf in both conventions or not
            keep = torch.isfinite(a) & torch.isfinite(b)
            a, b = a[keep], b[keep]
        torch.testing.assert_close(a.double(), b.double(), rtol=1e-4, atol=1e-5, msg=n)
    torch.testing.assert_close(ours.logits.log_softmax(-1).double(), logits.log_softmax(-1).double(),
                               rtol=1e-4, atol=1e-4)


@torch.no_grad()
def test_eigenvalues_composition_and_copying_equal_transformer_lens(model, bridge):
    W = model.weights()
    at = A.atlas(model, n_tokens=200, kernels=False)
    for l, h in [(0, 0), (0, 7), (1, 3), (1, 11)]:
        r = at.row(l, h)
        # sym(W_QK)'s eigenvalues, from TL's d × d QK matrix
        QK = bridge.QK[l, h].AB.double()
        lam = torch.linalg.eigvalsh((QK + QK.T) / 2)
        lam = lam[torch.argsort(lam.abs(), descending=True)][: len(r.qk_eigenvalues)]
        torch.testing.assert_close(torch.tensor(r.qk_eigenvalues, dtype=torch.float64) * model.cfg.attn_scale(l), lam,
                                   rtol=1e-4, atol=1e-7)
        # the Framework's OV circuit W_E W_OV W_U: eigenvalues and copying score
        full = (bridge.W_E @ bridge.OV[l, h] @ bridge.W_U).eigenvalues.to(torch.complex128)      # [e]
        ours = composition.framework_ov_eigenvalues(W, l)[h]
        assert _same_spectrum(ours, full)
        copying = float(full.real.sum() / full.abs().sum())
        assert r.ov_copying_framework == pytest.approx(copying, abs=1e-4)
        # TL's OV eigenvalues (W_V W_O): headscope's low-rank identity on the same factors
        ov = A.low_rank_eigenvalues(W.blocks[l].W_V[h], W.blocks[l].W_O[h])
        assert _same_spectrum(ov, bridge.OV[l, h].eigenvalues)
    scores = composition.composition_scores(W)
    theirs = {m: bridge.all_composition_scores(m).scores for m in composition.MODES}   # TL's, computed once
    assert composition_mismatches(scores, theirs) == []
    # changed conventions fail: Q and K composition swapped; or scores of the uncentred weights
    assert composition_mismatches({"Q": scores["K"], "K": scores["Q"], "V": scores["V"]}, theirs) == ["Q", "K"]
    uncentred = composition.composition_scores(model.weights(Processing.default_uncentred()))
    assert composition_mismatches(uncentred, theirs) != []
