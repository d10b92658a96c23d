"""Pure pieces of the seed-002 analyses on small synthetic inputs."""

from __future__ import annotations

import numpy as np
import torch

from headscope.semantic import bilinear, clustering
from headscope.semantic.survey import pattern_metrics, target_masks


def test_ari_known_values():
    ari = clustering.adjusted_rand_index
    assert ari([0, 0, 1, 1], [5, 5, 2, 2]) == 1.0
    assert abs(ari([0, 0, 0, 1, 1, 1], [0, 0, 1, 1, 2, 2]) - 0.24242424) < 1e-6
    assert ari([0, 1, 2, 3], [0, 0, 0, 0]) == 0.0


def test_chunked_topk_matches_dense():
    g = torch.Generator().manual_seed(0)
    Q, K = torch.randn(23, 5, generator=g), torch.randn(23, 5, generator=g)
    v, i, lse = bilinear.topk_targets(Q, K, 4, self_index=torch.arange(23), chunk=7, return_lse=True)
    S = Q @ K.T
    S.fill_diagonal_(float("-inf"))
    dv, di = torch.topk(S, 4, dim=1)
    torch.testing.assert_close(v, dv)
    assert torch.equal(i, di)
    torch.testing.assert_close(lse, torch.logsumexp(S, 1))


def test_topk_lse_is_torch_logsumexp_bit_for_bit():
    """The row logsumexp read from the top-k's max, in the scores' own buffer: torch.logsumexp's
    values exactly, also for rows with an infinite max or every key hidden."""
    g = torch.Generator().manual_seed(1)
    for dtype in (torch.float32, torch.float64):
        S = torch.randn(9, 300, generator=g, dtype=dtype) * 30
        S[0] = float("-inf")
        S[1, 7] = float("inf")
        S[2, :299] = float("-inf")
        ref = torch.logsumexp(S, 1)
        top = torch.topk(S, 3, dim=1).values[:, :1]
        for got in (bilinear._logsumexp_rows(S.clone(), top), bilinear._logsumexp_rows(S.clone(), None)):
            assert torch.equal(got.nan_to_num(0.5), ref.nan_to_num(0.5))


def test_topk_chunk_shrinks_to_the_available_memory(monkeypatch):
    """With little memory the chunk shrinks (never grows) and every row's result is unchanged."""
    from headscope import _memory

    g = torch.Generator().manual_seed(3)
    Q, K = torch.randn(40, 6, generator=g, dtype=torch.float64), torch.randn(31, 6, generator=g, dtype=torch.float64)
    ref = bilinear.topk_targets(Q, K, 5, self_index=torch.arange(40) % 31, return_lse=True)
    row = 3 * 31 * 8                                            # [chunk m] scores and temporaries, float64
    chunks = []
    real = bilinear.rows_that_fit
    monkeypatch.setattr(bilinear, "rows_that_fit", lambda b, r: chunks.append(real(b, r)) or chunks[-1])
    monkeypatch.setattr(_memory, "available_bytes", lambda: int(9 * row / _memory.CHUNK_SHARE))
    got = bilinear.topk_targets(Q, K, 5, self_index=torch.arange(40) % 31, return_lse=True)
    assert chunks == [9]
    for a, b in zip(ref, got):
        assert torch.equal(a, b)
    monkeypatch.setattr(_memory, "available_bytes", lambda: 10**15)    # plenty: the caller's chunk, not more
    assert _memory.rows_that_fit(row, 2048) == 2048
    monkeypatch.setattr(_memory, "available_bytes", lambda: None)      # unknown: the caller's chunk
    assert _memory.rows_that_fit(row, 2048) == 2048
    monkeypatch.setattr(_memory, "available_bytes", lambda: 1)         # next to nothing: one row at a time
    assert _memory.rows_that_fit(row, 2048) == 1


def test_eigen_counts_and_skew():
    g = torch.Generator().manual_seed(1)
    V = torch.linalg.qr(torch.randn(10, 10, generator=g, dtype=torch.float64))[0]
    lam = torch.tensor([3.0, -2.0, 1.0, -0.5] + [0.0] * 6, dtype=torch.float64)
    S = (V * lam) @ V.T
    A = torch.randn(10, 10, generator=g, dtype=torch.float64)
    A = 0.1 * (A - A.T)
    form = bilinear.bilinear_form(S + A, 0, 0, top=2)
    assert form.n_negative == 2 and form.n_positive == 2 and form.n_negative_top == 1
    torch.testing.assert_close(form.sym, S)
    torch.testing.assert_close(form.skew, A)
    torch.testing.assert_close(form.sigma_skew, torch.linalg.svdvals(A)[:8])


def test_metrics_on_a_handmade_pattern():
    tokens = torch.tensor([[9, 1, 2, 1, 3]])         # BOS, a(cat0), b(cat0), a again, c(cat1)
    labels = torch.tensor([[-1, 0, 0, 0, 1]])
    m = target_masks(tokens, labels)
    A = torch.zeros(1, 1, 5, 5)
    A[0, 0, 1, 0] = 1                                # a → BOS (no partner): fallback
    A[0, 0, 2, 1] = 1                                # b → a: partner
    A[0, 0, 3, 3] = 1                                # a → itself: wrong
    A[0, 0, 4, 0] = 1                                # c → BOS: fallback
    met = pattern_metrics(A, m)
    assert abs(met["self_attention"][0] - 0.25) < 1e-9
    assert abs(met["bos_fallback"][0] - 1.0) < 1e-9 and abs(met["same_category"][0] - 0.5) < 1e-9
    assert abs(met["semantic_loss"][0] - (-np.log(1e-30) / 4)) < 1e-6
    assert abs(met["copy_attention"][0] - 0.0) < 1e-9


def test_frequency_from_corpus(tmp_path):
    from headscope.core.tokenizer import bundled_gpt2_tokenizer

    tok = bundled_gpt2_tokenizer()
    (tmp_path / "c.txt").write_text(" red red red blue blue green")
    assert clustering.frequent_tokens(tok, 2, tmp_path / "c.txt") == tok.encode(" red blue")
    assert clustering.frequent_tokens(tok, 3) == [256, 257, 258]


def test_metrics_count_only_partners_inside_a_local_window():
    """Window 2 (GPT-Neo local layers, Mistral/Qwen2/Phi-3/Gemma 2 windows): a query sees itself and
    the key before it. A partner or BOS outside the window is no target (the layer's own mask,
    Config.hidden_keys); the masks used to count them, as if every layer were global."""
    from headscope.core.config import Config

    tokens = torch.tensor([[9, 1, 5, 6, 2]])          # BOS, a(cat0), x(cat1), y(cat1), b(cat0)
    labels = torch.tensor([[-1, 0, 1, 1, 0]])
    cfg = Config(n_layers=1, d_model=4, n_heads=1, d_mlp=4, n_ctx=8, d_vocab=10, attn_windows=(2,))
    pos = torch.arange(5)
    hidden = cfg.hidden_keys(0, pos[:, None], pos[None, :])
    m = target_masks(tokens, labels, hidden=hidden)
    assert m["has_partner"].tolist() == [[False, False, False, True, False]]   # b's partner a is outside
    assert m["sees_bos"].tolist() == [[True, True, False, False, False]]
    A = torch.zeros(1, 1, 5, 5)
    A[0, 0, 0, 0] = A[0, 0, 1, 0] = 1                 # a → BOS (no partner, BOS visible): fallback
    A[0, 0, 2, 2] = 1                                 # x → itself: sees neither BOS nor a partner
    A[0, 0, 3, 2] = 1                                 # y → x: partner
    A[0, 0, 4, 4] = 1                                 # b → itself: a and BOS are outside the window
    met = pattern_metrics(A, m)
    assert abs(met["same_category"][0] - 1.0) < 1e-9  # only y has a partner it can see
    assert abs(met["bos_fallback"][0] - 1.0) < 1e-9   # only a has no partner and sees BOS
    assert abs(met["semantic_loss"][0]) < 1e-9        # a and y (the queries with a target) hit it
    glob = pattern_metrics(A, target_masks(tokens, labels))   # as a global layer reads the same pattern
    assert abs(glob["same_category"][0] - 0.5) < 1e-9 and abs(glob["bos_fallback"][0] - 0.5) < 1e-9


def test_the_survey_forward_runs_on_the_callers_threads_with_the_same_result(tiny_hf_dir, monkeypatch):
    """Idle, the survey's prompts forward is ~1.8× faster in wall time on two threads than on one (GPT-2 small,
    README): it runs on the caller's threads, and the survey is the same on one thread."""
    import json

    import headscope
    from headscope.semantic import survey as S

    seen, real = [], S.run_with_cache
    monkeypatch.setattr(S, "run_with_cache", lambda *a, **k: seen.append(torch.get_num_threads()) or real(*a, **k))
    model = headscope.load(tiny_hf_dir)
    old = torch.get_num_threads()
    try:
        got = {}
        for n in (2, 1):
            torch.set_num_threads(n)
            got[n] = json.dumps(S.survey(model).to_dict(), sort_keys=True)
            assert seen[-1] == n and torch.get_num_threads() == n
        assert got[1] == got[2]
    finally:
        torch.set_num_threads(old)
