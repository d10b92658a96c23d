"""The maths of seed 000's second half on a tiny GPT-2 with all-distinct dimensions
(n_heads 3, d_head 4, d_model 12, d_mlp 20, n_ctx 40): denominators, the calibrated
circuit where it is exact, and the vocabulary scan against brute force."""

from __future__ import annotations

import json

import pytest
import torch

TEXT = "The cat sat on the mat and the dog ran to the park with the ball."


@pytest.fixture(scope="module")
def tiny_nopos(tiny, tmp_path_factory):
    """The tiny model with W_pos = 0: the key and value splits are then exact and every
    kernel is uniform, so the calibrated circuit must reproduce the heads exactly."""
    import headscope
    from headscope.core.writing import save_checkpoint

    raw = tiny.raw.map(lambda t: t.clone())
    raw.W_pos.zero_()
    return headscope.load(save_checkpoint(raw, tmp_path_factory.mktemp("nopos") / "m", tokenizer_from=tiny.directory))


def _circuit(model, heads=None, text=TEXT):
    from headscope.layer0.calibration import calibrate
    from headscope.layer0.contextual import build_circuit

    cal = calibrate(model, text)
    return build_circuit(model, cal, heads=heads), cal


def test_fixed_query_denominator_is_hook_denom_where_the_query_is_the_token(tiny):
    """Where x_n is the fixed query token, the fixed-query log-denominator is the model's."""
    from headscope import run_with_cache
    from headscope.layer0 import split as layer0

    w = tiny.weights()
    toks = tiny.to_tokens(TEXT)
    the = tiny.tokenizer.encode(" the")[0]
    cache = run_with_cache(w, toks[None], names=["blocks.0.attn.hook_k", "blocks.0.attn.hook_denom"], stop_at_layer=1)
    L = torch.logsumexp(layer0.fixed_query_scores(w, cache["blocks.0.attn.hook_k"], the), -1)[0]   # [head p]
    at = (toks == the).nonzero().squeeze(1)
    assert len(at) >= 3
    torch.testing.assert_close(L[:, at], cache["blocks.0.attn.hook_denom"][0][:, at])
    others = (toks != the).nonzero().squeeze(1)
    assert not torch.allclose(L[:, others], cache["blocks.0.attn.hook_denom"][0][:, others])


def test_frame_matches_the_seeds_key_split(tiny):
    """The fixed-query frame's kernel and content factors are the seed's q·P[n, i]/s and q·E[n, t]/s."""
    from headscope.layer0 import split as layer0

    w = tiny.weights().to(dtype=torch.float64)
    c = layer0.measure_c(w)
    n, tok = 17, 262
    fr = layer0.frame(w, tok, n, c)
    tokens = torch.randint(0, w.cfg.d_vocab, (n + 1,), generator=torch.Generator().manual_seed(3))
    E, P = layer0.key_split(w, tokens, n, c)                                 # [h i e]
    q = layer0.queries(w, torch.tensor([tok]), torch.tensor([n]))[0]         # [h e]
    s = w.cfg.attn_scale(0)
    torch.testing.assert_close(fr.pos, torch.softmax(torch.einsum("hie,he->hi", P, q) / s, -1))
    torch.testing.assert_close(fr.content_logits(w, tokens), torch.einsum("hie,he->hi", E, q) / s)
    torch.testing.assert_close(layer0.log_content_factors(w, tok, n)[:, tokens], torch.einsum("hie,he->hi", E, q) / s)


def test_seed_denominator_is_exact_at_position_zero(tiny):
    """At n = 0 the split is exact: S = content(x_0) and the circuit is the head output."""
    (circ, _), cal = _circuit(tiny, heads=[0, 1, 2])
    toks = tiny.to_tokens(TEXT)
    fr = circ.frame(0)
    torch.testing.assert_close(cal.log_seed_denom[:, 0], fr.content_logits(circ.weights, toks[:1])[:, 0])
    torch.testing.assert_close(circ.predict(toks, [0])[0], circ.true_output(toks)[0])
    # away from n = 0 the split (W_pos ≠ 0) is an approximation, not an identity
    assert not torch.allclose(circ.predict(toks, [12])[0], circ.true_output(toks)[12], atol=1e-6)


def test_calibrated_circuit_is_exact_without_position_embeddings(tiny_nopos):
    """W_pos = 0, calibration on the text itself (one window): Σ_i pos·contribution = Σ_h out_h."""
    (circ, choice), cal = _circuit(tiny_nopos, heads=[0, 1, 2])
    assert cal.n_windows == 1
    toks = tiny_nopos.to_tokens(TEXT)
    n = list(range(len(toks)))
    torch.testing.assert_close(circ.predict(toks, n), circ.true_output(toks))
    # per head: the shared kernel is uniform, S̄ = exp(L)/(n+1)
    torch.testing.assert_close(cal.log_seed_denom, cal.log_denom - torch.log(torch.arange(1.0, len(toks) + 1)).double())
    # another text: denominators no longer match, so the circuit is approximate
    other = tiny_nopos.to_tokens("Stocks fell sharply in Tokyo as investors sold banks, energy and tech shares.")
    m = list(range(1, min(len(other), len(toks))))
    assert not torch.allclose(circ.predict(other, m), circ.true_output(other)[m], atol=1e-6)


def test_scan_matches_brute_force(tiny):
    """Chunked two-pass scan == brute force over the explicit [d_vocab d_model] contributions."""
    from headscope.layer0.neurons import scan_neurons

    (circ, choice), cal = _circuit(tiny, heads=[0, 2])
    b = circ.weights.blocks[0]
    C = circ.contribution(choice.position)                                       # [V d]
    C = C - C.mean(-1, keepdim=True)
    score = (C * b.ln2_w) @ b.W_in                        # [V m] the seed's formula (paper): no LN2 scale
    scan = scan_neurons(circ, choice, tiny.tokenizer, threshold=float(score.amax(0).median()), top=7, chunk=5000,
                        dtype=torch.float64)
    torch.testing.assert_close(torch.tensor(scan.max_all, dtype=torch.float64), score.amax(0))
    torch.testing.assert_close(torch.tensor(scan.min_all, dtype=torch.float64), score.amin(0))
    assert 0 < len(scan.neurons) < tiny.cfg.d_mlp
    for nr in scan.neurons:
        j = nr["neuron"]
        assert nr["top_ids"] == score[:, j].topk(7).indices.tolist()
        assert nr["bottom_ids"] == score[:, j].topk(7, largest=False).indices.tolist()
        assert nr["max_contribution"] >= scan.threshold


def test_one_pass_scan_equals_the_two_pass_scan(tiny, monkeypatch):
    """Where the first chunk already selects most neurons, the scan keeps every neuron's top / bottom k
    in its first pass (no second product over the vocabulary): the same neurons, ids and values."""
    from headscope.layer0 import neurons as N

    (circ, choice), _ = _circuit(tiny, heads=[0, 2])
    calls = []
    running = N._running_topk
    monkeypatch.setattr(N, "_running_topk", lambda *a, **k: calls.append(1) or running(*a, **k))

    def scan(fraction, minimum):
        monkeypatch.setattr(N, "ONE_PASS_FRACTION", fraction)
        monkeypatch.setattr(N, "ONE_PASS_MIN", minimum)
        return N.scan_neurons(circ, choice, tiny.tokenizer, threshold=-1e9, top=7, chunk=3001).to_dict()

    two = scan(2.0, 10**9)
    assert calls == [1]                                                   # pass 2 ran
    one = scan(0.0, 0)
    assert calls == [1]                                                   # no second pass
    assert [nr["neuron"] for nr in one["neurons"]] == [nr["neuron"] for nr in two["neurons"]] != []
    for a, b in zip(one["neurons"], two["neurons"]):
        assert (a["top_ids"], a["bottom_ids"]) == (b["top_ids"], b["bottom_ids"])
        for key in ("top_values", "bottom_values", "max_contribution", "min_contribution"):
            torch.testing.assert_close(torch.tensor(a[key]), torch.tensor(b[key]), rtol=1e-6, atol=1e-6)
        assert a["max_contribution"] == a["top_values"][0] and a["min_contribution"] == a["bottom_values"][0]


@pytest.mark.parametrize("k", [1, 3, 7, 40])
def test_running_topk_is_a_stable_sort_of_each_neuron_scores(k):
    """The chunked running top / bottom k (candidates past the running k-th only) equals a stable sort of
    every neuron's whole column: values, and on ties (few distinct values, ±inf, repeated chunks) the
    smaller token id first; chunks of every size, including ones narrower than k."""
    from headscope.layer0.neurons import _running_topk, _topk_step

    g = torch.Generator().manual_seed(0)
    Y = torch.randint(-3, 4, (301, 5), generator=g).float()                         # [V e]: few distinct scores
    Y[7], Y[30] = Y[2], Y[2]
    M = torch.randint(-2, 3, (5, 11), generator=g).float()                         # [e m]
    M[:, 4] = 0.0                                                                  # a neuron tied on every token
    S = Y @ M                                                                      # [V m]
    S[9, 1], S[240, 1], S[11, 2] = float("inf"), float("inf"), float("-inf")
    Y2 = torch.cat([Y, torch.zeros(1, 5)])
    kk = min(k, S.shape[0])
    for chunk in (1, 17, 64, 128, 150, 1000):                          # blocks of 64 (whole rows of them) and tails
        best = [None, None]
        for s in range(0, S.shape[0], chunk):
            _topk_step(best, S[s:s + chunk].T.contiguous(), s, k)
        for side, desc in ((0, True), (1, False)):
            ref_v, ref_i = S.T.sort(dim=1, descending=desc, stable=True)
            torch.testing.assert_close(best[side][0], ref_v[:, :kk], rtol=0, atol=0)
            assert torch.equal(best[side][1], ref_i[:, :kk]), (chunk, side)
        (tv, ti), (bv, bi) = _running_topk(Y2, M, k, chunk)                          # [k m] each
        ref_v, ref_i = (Y2 @ M).sort(dim=0, descending=True, stable=True)
        assert torch.equal(tv, ref_v[:min(k, 302)]) and torch.equal(ti, ref_i[:min(k, 302)])
    S[200, 3] = float("nan")                                                       # NaN reaches the top-1 (the scan's
    best = [None, None]                                                            # float64 retry reads it)
    for s in range(0, S.shape[0], 70):
        _topk_step(best, S[s:s + 70].T.contiguous(), s, k)
    assert best[0][0][3, 0].isnan() and best[0][1][3, 0] == 200


def test_predict_in_small_position_blocks_equals_one_block(tiny, monkeypatch):
    """grouped_predict's blocks of at most BLOCK_POSITIONS ascending positions (each block's keys end at
    its own largest position: hidden keys skipped), their query frames computed FRAME_POSITIONS at a
    time, give the one-block prediction, content and not."""
    from headscope.layer0 import contextual as C

    (circ, _), _ = _circuit(tiny, heads=[0, 2])
    toks = tiny.to_tokens(TEXT)
    pos = list(range(len(toks)))
    assert C._position_blocks(list(range(40)), 48, 10**9)[:2] == [(0, C.BLOCK_POSITIONS), (C.BLOCK_POSITIONS, 2 * C.BLOCK_POSITIONS)]
    assert C._position_blocks([5, 1, 9], 48, 48 * 12) == [(0, 2), (2, 3)]      # bytes: 2 rows of 6 keys fit 12, 3 of 10 not
    for content in (True, False):
        monkeypatch.setattr(C, "BLOCK_POSITIONS", 10**9)
        one = circ.predict(toks, pos, content=content)
        for b, f in ((1, 10**9), (3, 10**9), (5, 10**9), (1, 1), (3, 4), (5, 7)):
            monkeypatch.setattr(C, "BLOCK_POSITIONS", b)
            monkeypatch.setattr(C, "FRAME_POSITIONS", f)
            assert len(C._frame_chunks(C._position_blocks(pos, 48, 10**9))) == (1 if f > len(pos) else -(-len(pos) // (f - f % b or b)))
            torch.testing.assert_close(circ.predict(toks, pos, content=content), one, rtol=1e-6, atol=1e-6)
        monkeypatch.setattr(C, "FRAME_POSITIONS", 10**9)


def test_predict_neuron_is_the_circuit_read_by_the_neuron(tiny):
    from headscope.layer0.neurons import predict_neuron

    (circ, _), cal = _circuit(tiny, heads=[1, 2])
    b = circ.weights.blocks[0]
    toks = tiny.to_tokens(TEXT)
    pos = list(range(len(toks)))
    pred = circ.predict(toks, pos)
    pred = pred - pred.mean(-1, keepdim=True)
    for j in (0, 7, 19):
        expected = (pred * b.ln2_w) @ b.W_in[:, j] / cal.ln2_scale + b.b_in[j]
        torch.testing.assert_close(predict_neuron(circ, j, toks), expected)


def test_calibration_roundtrip_and_bad_files(tiny, tmp_path):
    from headscope import HeadscopeError, Processing
    from headscope.layer0.calibration import calibrate, load_calibration

    cal = calibrate(tiny, TEXT, query=" dog")
    path = cal.save(tmp_path / "c.json")
    back = load_calibration(path, tiny)
    torch.testing.assert_close(back.log_seed_denom, cal.log_seed_denom, rtol=1e-6, atol=1e-6)
    assert back.query == " dog" and back.text_sha256 == cal.text_sha256 and back.processing == Processing.default().to_dict()
    assert path.read_text() == cal.save(tmp_path / "d.json").read_text()         # deterministic bytes
    with pytest.raises(HeadscopeError, match="other processing"):
        load_calibration(path, tiny.bound(Processing.none()))
    path.write_text(path.read_text()[:-40])
    with pytest.raises(HeadscopeError, match="not valid JSON"):
        load_calibration(path, tiny)
    d = json.loads((tmp_path / "d.json").read_text())
    del d["ln2_scale"]
    (tmp_path / "e.json").write_text(json.dumps(d))
    with pytest.raises(HeadscopeError, match="missing the field 'ln2_scale'"):
        load_calibration(tmp_path / "e.json", tiny)
    with pytest.raises(HeadscopeError, match="single token"):
        calibrate(tiny, TEXT, query=" the cat")
    with pytest.raises(HeadscopeError, match="empty"):
        calibrate(tiny, "   ")


def test_select_heads_reports_metrics_and_respects_given_heads(tiny):
    from headscope import HeadscopeError
    from headscope.layer0.contextual import select_heads

    w = tiny.weights().to(dtype=torch.float64)
    ch = select_heads(w, 262, 30, 1.0, heads=[2, 0])
    assert ch.heads == [0, 2] and not ch.automatic and len(ch.width) == 3
    with pytest.raises(HeadscopeError, match="--heads"):
        select_heads(w, 262, 30, 1.0, heads=[5])


def test_denominators_cli_and_own_query_mode(tiny_hf_dir, tiny, tmp_path, capsys):
    """Own-query mode reports exp(hook_denom) as it is; the CLI writes JSON + SVG."""
    from headscope import run_with_cache
    from headscope.cli import main
    from headscope.layer0.denominators import denominator_stability

    texts = [TEXT, "Stocks fell sharply in Tokyo as investors sold banks and tech shares today.",
             "A small boat drifted past the old pier while gulls circled over the quiet harbour."]
    r = denominator_stability(tiny, texts, query=None, window=12, n_min=2, stride=4)
    from headscope.corpus import windows

    X = torch.stack([x for x in windows(tiny, texts, n_ctx=12) if len(x) == 12])   # the windows it used
    assert r.predicted_rel_std is None and r.n_texts == len(X) >= 3
    S = run_with_cache(tiny.weights().to(dtype=torch.float64), X, names=["blocks.0.attn.hook_denom"],
                       stop_at_layer=1)["blocks.0.attn.hook_denom"].exp()
    torch.testing.assert_close(torch.tensor(r.mean, dtype=torch.float64), S.mean(0))
    corpus = tmp_path / "c.txt"
    corpus.write_text(" ".join(texts * 4))
    assert main(["denominators", str(tiny_hf_dir), "--corpus", str(corpus), "--window", "16",
                 "--out", str(tmp_path / "d"), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert len(out["hoeffding_rel"]) == 3 and (tmp_path / "d" / "denominators.svg").read_text().startswith("<svg")
    assert main(["denominators", str(tiny_hf_dir), "--corpus", str(tmp_path / "missing")]) == 2


def test_batched_neuron_prediction_matches_the_term_by_term_formula(tiny):
    """predict_neurons (the circuit's residual prediction read out by m_j) equals the circuit
    written term by term for one neuron: Σ_h Σ_i pos[n, i]·content_h/S̄_h·(LN(x_i + p_n) W_V + b_V) W_O m_j
    + off[n]·m_j + b_in[j]."""
    from headscope.layer0 import split as layer0
    from headscope.layer0.neurons import predict_neurons, readout_vectors

    (circuit, _), _ = _circuit(tiny, heads=[0, 2])
    w, b = circuit.weights, circuit.weights.blocks[0]
    tokens = tiny.to_tokens("The colour of the neighbour's favourite theatre was grey.")
    js = [3, 11, 7]
    got = predict_neurons(circuit, js, tokens)                                  # [p s]
    for c, j in enumerate(js):
        m_j = readout_vectors(circuit, [j])[:, 0]                               # [d]
        for n in range(len(tokens)):
            fr = circuit.frame(n)
            a = circuit.token_weights(fr, tokens[: n + 1]) * circuit.shared_kernel(fr)   # [H k]
            X = layer0.ln1(w, w.W_E[tokens[: n + 1]] + w.W_pos[n])                        # [k d]
            want = circuit.offset(fr) @ m_j + b.b_in[j]
            for k, h in enumerate(circuit.heads):
                want = want + (a[k] * (((X @ b.W_V[h] + b.b_V[h]) @ b.W_O[h]) @ m_j)).sum()
            torch.testing.assert_close(got[n, c], want)
