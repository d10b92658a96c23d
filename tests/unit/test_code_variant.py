"""``--variant code`` is Gibson's computation (code_variant's docstring, main.py at 4a2c7ab):
each piece against an independent term-by-term formula on the tiny random checkpoint."""

from __future__ import annotations

import math

import pytest
import torch

from headscope.layer0 import code_variant as CV
from headscope import layer0

N, WIN, HEADS = 30, 20, [0, 2]
TEXT = ("Rain fell on the harbour while the fishermen mended their nets and talked about the price of cod, "
        "the weather, and the new road to the city. ") * 4


@pytest.fixture(scope="module")
def w(tiny):
    return layer0.view(tiny)


@pytest.fixture(scope="module")
def toks(tiny):
    return [tiny.bos_id] + tiny.tokenizer.encode(TEXT)[:39]


def centre(v):
    return [x - sum(v) / len(v) for x in v]


def test_token_input_has_no_cross_term(w):
    d = w.cfg.d_model
    E = CV.token_inputs(w, N)
    for t in (11, 262, 4000):
        e, p = centre(w.W_E[t].double().tolist()), centre(w.W_pos[N].double().tolist())
        norm = math.sqrt(sum(x * x for x in p) + sum(x * x for x in e))         # no 2 e·p
        want = torch.tensor([math.sqrt(d) * x / norm for x in e], dtype=torch.float64)
        torch.testing.assert_close(E[t], want)
        cross = 2 * sum(a * b for a, b in zip(e, p))
        assert abs(cross) > 1e-6                                                # the dropped term is not 0 here


def test_position_input_uses_token_11s_norm(w):
    d = w.cfg.d_model
    p, e = centre(w.W_pos[N].double().tolist()), centre(w.W_E[11].double().tolist())
    norm = math.sqrt(sum(x * x for x in p) + sum(x * x for x in e))
    torch.testing.assert_close(CV.position_input(w, N), torch.tensor([math.sqrt(d) * x / norm for x in p],
                                                                     dtype=torch.float64))


def test_scalar_query_and_its_vanishing_with_centred_W_Q(w, toks):
    E = CV.token_inputs(w, N)
    s = CV.scalar(E, toks)
    want = sum(float(E[t].sum()) for t in toks) / (len(toks) * w.cfg.d_model)
    assert s == pytest.approx(want, abs=1e-12) and abs(s) < 1e-12              # Ẽ's rows are centred
    b = w.blocks[0]
    x = CV.position_input(w, N) + 0.3
    WQ = b.W_Q[2].double()
    q = CV.queries(w, [2], N, 0.3)[0]
    for e in range(w.cfg.d_head):
        col = [float(WQ[k, e]) for k in range(w.cfg.d_model)]
        col = centre(col)                                                       # TransformerLens's centring
        want = sum(float(x[k]) * col[k] for k in range(w.cfg.d_model)) + float(b.b_Q[2, e])
        assert float(q[e]) == pytest.approx(want, abs=1e-9)
    torch.testing.assert_close(q, CV.queries(w, [2], N, 0.0)[0])                # s·1 @ c(W_Q) = 0


def test_log_weights_keys_from_the_embedding_alone(w, toks):
    E = CV.token_inputs(w, N)
    q = CV.queries(w, HEADS, N, 0.0)
    lw = CV.log_weights(w, HEADS, N, q, E)
    b = w.blocks[0]
    for k, h in enumerate(HEADS):
        WK = CV.centred(b.W_K[h].double())
        for t in (5, 262):
            key = [sum(float(E[t, dd]) * float(WK[dd, e]) for dd in range(w.cfg.d_model)) for e in range(w.cfg.d_head)]
            want = sum(float(q[k, e]) * key[e] for e in range(w.cfg.d_head)) / math.sqrt(w.cfg.d_head)
            assert float(lw[k, t]) == pytest.approx(want, abs=1e-9)


def test_denominator_is_a_uniform_window_mean(w, toks):
    E = CV.token_inputs(w, N)
    lw = CV.log_weights(w, HEADS, N, CV.queries(w, HEADS, N, 0.0), E)
    got = CV.log_denominators(lw, toks, N, WIN)
    for k in range(len(HEADS)):
        want = sum(math.exp(float(lw[k, toks[i]])) for i in range(N - WIN, N)) / WIN
        assert float(got[k]) == pytest.approx(math.log(want), abs=1e-9)
    with pytest.raises(CV.HeadscopeError, match="--variant code"):
        CV.log_denominators(lw, toks, 10, WIN)


def test_token_values_and_the_scan_are_the_cells_big(tiny, w, toks):
    from headscope.layer0.calibration import calibrate
    from headscope.layer0.contextual import build_circuit
    from headscope.layer0.neurons import readout_vectors, scan_neurons

    Y = CV.token_values(w, HEADS, toks, N, WIN)                                  # [V H*e]
    E = CV.token_inputs(w, N)
    q = CV.queries(w, HEADS, N, CV.scalar(E, toks))
    lw = CV.log_weights(w, HEADS, N, q, E)
    logS = CV.log_denominators(lw, toks, N, WIN)
    b = w.blocks[0]
    full = sum((lw[k] - logS[k]).exp()[:, None] * (E @ CV.centred(b.W_V[h].double()) @ b.W_O[h].double())
               for k, h in enumerate(HEADS))                                     # [V d] the code's full_pattern
    W_O = torch.cat([b.W_O[h].double() for h in HEADS])                          # [H*e d]
    torch.testing.assert_close(Y @ W_O, full)
    # through the scan: max |big[:, j]| with big = full_pattern @ c(W_in) and no LN2 scale
    cal = calibrate(tiny, TEXT)
    circ, choice = build_circuit(tiny, cal, heads=HEADS)
    assert cal.tokens[:40] == toks[:40]
    scan = scan_neurons(circ, choice, tiny.tokenizer, threshold=-1e9, variant=f"code,position={N}",
                        dtype=torch.float64)
    Yc = CV.token_values(circ.weights, HEADS, cal.tokens, N, min(CV.WINDOW, N))
    big = Yc @ W_O @ readout_vectors(circ, ln2_scale=1.0)
    torch.testing.assert_close(torch.tensor(scan.max_all, dtype=torch.float64), big.amax(0))
    assert scan.variant["computation"] == "code" and scan.variant["spec"].startswith("computation=code")
