"""The crude key split of row key_split_vs_crude (|W_E[x_i] + W_pos[i]| ≈ √(|W_pos[i]|² + c²))
against a direct formula, and the exactness that makes it crude: it is exact only where the
token norm equals c and e ⟂ p, while the seed's split is exact at i = n."""

from __future__ import annotations

import math

import torch

from headscope import layer0
from headscope.claims import seed000_heads as H


def test_crude_pattern_matches_a_direct_formula(tiny):
    w = layer0.view(tiny)
    tokens = torch.tensor([tiny.bos_id] + tiny.tokenizer.encode(" The cat sat on the warm mat by the door."))
    c = 2.5
    got = layer0.crude_pattern(w, tokens, c)                                         # [h q k]
    b, d = w.blocks[0], w.cfg.d_model
    Q = layer0.queries(w, tokens)                                                    # [q h e]
    cen = lambda v: v - v.mean()                                                     # noqa: E731
    for h in (0, 2):
        for n in (3, len(tokens) - 1):
            scores = []
            for i in range(n + 1):
                p, e = cen(w.W_pos[i]), cen(w.W_E[tokens[i]])
                key = math.sqrt(d) * (e + p) @ b.W_K[h] / math.sqrt(float(p @ p) + c * c) + b.b_K[h]
                scores.append(float(Q[n, h] @ key) / w.cfg.attn_scale(0))
            want = torch.softmax(torch.tensor(scores, dtype=torch.float64), 0)
            torch.testing.assert_close(got[h, n, :n + 1].double(), want, rtol=1e-6, atol=1e-9)
            assert float(got[h, n, n + 1:].abs().sum()) == 0.0                        # causal


def test_row_rejects_the_crude_split(tiny):
    import importlib
    import types

    R = importlib.import_module("headscope.reproduce")
    c = {x["id"]: x for x in R.seed_claims()["claims"]}["key_split_vs_crude"]
    ref = R.seed_reference(R.seed_claims())
    ctx = types.SimpleNamespace(heads=[0, 2, 6, 8, 9, 10])
    good = {"seed": [0.03] * 12, "crude": [0.2] * 12, "c": 3.5, "n_windows": 7,
            "seed_w": [[0.03 + 0.001 * k] * 12 for k in range(7)], "crude_w": [[0.2] * 12] * 7}
    same = {"seed": [0.2] * 12, "crude": [0.2] * 12, "c": 3.5, "n_windows": 7,        # the crude split as the seed's
            "seed_w": [[0.2] * 12] * 7, "crude_w": [[0.2] * 12] * 7}
    for d, ok in ((good, True), (same, False)):
        out = H._key_split_vs_crude(c, ref, types.SimpleNamespace(split_tv=d, circuit=(None, ctx)))
        assert R.verdict(out[3], out[5])[0] is ok
