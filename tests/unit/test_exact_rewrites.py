"""Rewrites of the layer-0 analyses that must not move a bit (speed, ninth round): each against the
computation it replaced, written out the old way here, and against a float64 reference built from
the definition. The tiny checkpoint has all-distinct dimensions (n_heads 3, d_head 4, d_model 12)."""

from __future__ import annotations

import dataclasses

import torch

from headscope.core.tokenizer import to_str_tokens
from headscope.layer0 import split as L0
from headscope.layer0.split_windows import _by_columns, query_rows


def test_query_rows_are_einsums_values_without_its_copy(tiny):
    """query_rows(b, x) = einsum("pd,hde->phe", x, W_Q) + b_Q bit for bit (one product with W_Q laid
    out by columns once), = Σ_d x[p, d] W_Q[h, d, e] + b_Q[h, e] in float64; rebuilt when W_Q changes."""
    w = L0.view(tiny)
    b = w.blocks[0]
    g = torch.Generator().manual_seed(0)
    for p in (1, 2, 7, 40):
        x = torch.randn(p, w.cfg.d_model, dtype=torch.float64, generator=g)
        got = query_rows(b, x)
        assert got.shape == (p, w.cfg.n_heads, w.cfg.d_head)
        assert torch.equal(got, torch.einsum("pd,hde->phe", x, b.W_Q) + b.b_Q)
        ref = (x[:, None, :, None] * b.W_Q[None]).sum(2) + b.b_Q                 # [p h e] from the definition
        torch.testing.assert_close(got, ref, rtol=1e-12, atol=1e-12)
    toks = torch.tensor([3, 17, 5, 3])
    assert torch.equal(L0.queries(w, toks), torch.einsum(
        "pd,hde->phe", L0.ln1(w, w.W_E[toks] + w.W_pos[:4]), b.W_Q) + b.b_Q)
    b2 = dataclasses.replace(b, W_Q=b.W_Q.clone())                 # a block of its own (the view is shared)
    old = query_rows(b2, x)
    b2.W_Q.mul_(2.0)                                               # in place: the layout is rebuilt, not reused
    assert torch.equal(query_rows(b2, x), torch.einsum("pd,hde->phe", x, b2.W_Q) + b2.b_Q)
    assert not torch.equal(query_rows(b2, x), old)
    assert torch.equal(_by_columns(b)[0], b.W_Q.permute(1, 0, 2).reshape(w.cfg.d_model, -1))


def test_log_content_factors_are_the_chunks_content_logits(tiny, monkeypatch):
    """log_content_factors writes each chunk's LN(W_E[t] + W_pos[n]) @ Kq into one buffer and adds b_K·q/s
    once: the concatenation of the chunks' content_logits bit for bit (whole vocabulary, and given ids
    across chunk boundaries), and q·E[n, t]/s from the key split in float64."""
    w = L0.view(tiny)
    tok = 5
    monkeypatch.setattr(L0, "CONTENT_CHUNK", 7)                    # several chunks and a narrower last one
    V = w.cfg.vocab
    for n in (0, 3, w.cfg.n_ctx - 1):
        fr = L0.frame(w, tok, n, c=1.0)
        whole = L0.log_content_factors(w, tok, n)
        old = torch.cat([fr.content_logits(w, slice(a, min(a + 7, V))) for a in range(0, V, 7)], dim=1)
        assert whole.is_contiguous() and torch.equal(whole, old)
        ids = torch.tensor([9, 2, 9, 40, 11, 0, 33, 7, 21, 5, 1, 8, 30, 6, 2, 19])
        given = L0.log_content_factors(w, tok, n, ids)
        assert torch.equal(given, torch.cat([fr.content_logits(w, part) for part in ids.split(7)], dim=1))
        x = L0.ln1(w, w.W_E[ids] + w.W_pos[n])                                   # [t d] the seed's E[n, t]
        E = torch.einsum("td,hde->hte", x, w.blocks[0].W_K) + w.blocks[0].b_K[:, None]
        ref = torch.einsum("hte,he->ht", E, fr.q) / w.cfg.attn_scale(0)
        torch.testing.assert_close(given, ref, rtol=1e-10, atol=1e-12)
    assert L0.log_content_factors(w, tok, 2, torch.tensor([], dtype=torch.long)).shape == (w.cfg.n_heads, 0)


def _token_values_fresh(circ, n, dtype, chunk, position_part):
    """token_values as it was written before its buffers were reused: fresh temporaries per chunk."""
    w, b = circ.weights, circ.weights.blocks[0]
    fr = circ.frame(n)
    H, e = len(circ.heads), w.cfg.d_head
    log_S = circ.calibration.log_seed_denom[circ.heads, n].to(dtype)
    Wcat = torch.cat([fr.Kq[:, circ.heads], b.W_V[circ.heads].permute(1, 0, 2).reshape(w.cfg.d_model, H * e)],
                     dim=1).to(dtype)
    bq, bV = fr.bq[circ.heads].to(dtype), b.b_V[circ.heads].reshape(H * e).to(dtype)
    wpos, ln_w, ln_b = w.W_pos[n].to(dtype), b.ln1_w.to(dtype), b.ln1_b.to(dtype)
    Y = torch.empty(w.cfg.vocab, H * e, dtype=dtype)
    for s in range(0, w.cfg.vocab, chunk):
        x = w.W_E[s:min(s + chunk, w.cfg.vocab)].to(dtype) + wpos
        x.sub_(x.mean(-1, keepdim=True))
        sigma = (x.pow(2).mean(-1, keepdim=True) + w.cfg.ln_eps).sqrt()
        x.div_(sigma).mul_(ln_w).add_(ln_b)
        out = x @ Wcat
        a = (out[:, :H] + bq - log_S).exp()
        val = out[:, H:]
        if not position_part:
            pc = (wpos - wpos.mean()) * ln_w
            val = val - (pc @ Wcat[:, H:])[None, :] / sigma
        torch.mul((val + bV).view(-1, H, e), a[:, :, None], out=Y[s:s + chunk].view(-1, H, e))
    return Y


def test_token_values_reuse_their_buffers_without_moving_a_bit(tiny):
    """token_values fills Y chunk by chunk through buffers reused across chunks: bit for bit what fresh
    temporaries per chunk gave (chunks of 1000 and 4096 rows, a narrower last one), with and without the
    position part, float32 and float64; and content/S̄ · (LN1(W_E[t] + W_pos[n]) W_V[h] + b_V[h]) in float64."""
    from headscope.layer0.calibration import calibrate
    from headscope.layer0.contextual import build_circuit
    from headscope.layer0.neurons import token_values

    circ, choice = build_circuit(tiny, calibrate(tiny, "The cat sat on the mat and the dog ran to the park."),
                                 heads=[0, 2])
    n = choice.position
    for dtype in (torch.float32, torch.float64):
        for part in (True, False):
            for chunk in (1000, 4096):                                    # a narrower last chunk
                assert torch.equal(token_values(circ, n, dtype, chunk=chunk, position_part=part),
                                   _token_values_fresh(circ, n, dtype, chunk, part)), (dtype, chunk, part)
    Y = token_values(circ, n, torch.float64)
    b, w = circ.weights.blocks[0], circ.weights
    fr = circ.frame(n)
    x = L0.ln1(w, w.W_E[: w.cfg.vocab] + w.W_pos[n])                              # [V d]
    H = circ.heads
    a = torch.exp(x @ fr.Kq[:, H] + fr.bq[H] - circ.calibration.log_seed_denom[H, n])   # [V H] content/S̄
    ref = (torch.einsum("vd,hde->vhe", x, b.W_V[H]) + b.b_V[H]) * a[:, :, None]        # [V H e]
    torch.testing.assert_close(Y, ref.reshape(len(x), -1), rtol=1e-10, atol=1e-12)


class _CountingTokenizer:
    def __init__(self, inner):
        self.inner, self.calls = inner, []

    def decode(self, ids):
        self.calls.append(list(ids))
        return self.inner.decode(ids)


def test_to_str_tokens_decodes_each_distinct_id_once(tiny):
    ids = [464, 262, 3290, 262, 464, 13, 262]
    tok = _CountingTokenizer(tiny.tokenizer)
    got = to_str_tokens(tok, torch.tensor(ids))
    assert got == [tiny.tokenizer.decode([i]) for i in ids]
    assert sorted(map(tuple, tok.calls)) == sorted({(i,) for i in ids})                # one decode per distinct id
