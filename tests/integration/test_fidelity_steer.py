"""Steering the authors' way (issue 16, item 5): their truncated eigen-form and raw scores,
beside headscope's rebuilt checkpoint, against the maths."""

from __future__ import annotations

import pytest
import torch

from headscope.semantic.options import SteerOptions
from headscope.semantic.steering import AUTHORS_TOP, authors_form, authors_steer, steer, steered_qk

pytestmark = pytest.mark.slow


def test_authors_form_truncates_a_full_rank_symmetric_part():
    """W = W_Q W_Kᵀ has rank d_head = 64, its symmetric part up to 128: keeping the top 64
    eigenpairs loses the rest even at α = 1; keeping all of them does not."""
    g = torch.Generator().manual_seed(0)
    d, e = 200, 64
    W = torch.randn(d, e, generator=g, dtype=torch.float64) @ torch.randn(d, e, generator=g, dtype=torch.float64).T
    S = (W + W.T) / 2
    assert int((torch.linalg.eigvalsh(S).abs() > 1e-8 * S.norm()).sum()) == 2 * e
    W1, n_neg = authors_form(W, 1.0, AUTHORS_TOP)
    assert float((W1 - W).norm() / W.norm()) > 0.1 and 0 < n_neg < AUTHORS_TOP
    torch.testing.assert_close(authors_form(W, 1.0, d)[0], W)
    # α scales exactly the negative eigenvalues among the kept ones; the skew part is whole
    W0, _ = authors_form(W, 0.0, AUTHORS_TOP)
    torch.testing.assert_close((W0 - W0.T) / 2, (W - W.T) / 2)
    lam0 = torch.linalg.eigvalsh((W0 + W0.T) / 2)
    assert float(lam0.min()) > -1e-8 * float(lam0.abs().max())                 # no negative left
    Wm, _ = authors_form(W, -0.5, AUTHORS_TOP)
    x = torch.randn(d, generator=g, dtype=torch.float64)
    assert float(x @ Wm @ x) >= float(x @ W0 @ x) >= float(x @ authors_form(W, 1.1, AUTHORS_TOP)[0] @ x)


def test_authors_steer_on_planted(planted_model, planted_manifest):
    r = authors_steer(planted_model, 1, 5)
    assert r.truncation_error < 1e-12                                            # rank 21 ≤ 64: nothing lost
    assert r.n_negative_top >= planted_manifest["layer1"]["bilinear_form"]["n_negative"]
    assert len(r.tokens) == 30 and r.alphas == [1.1, 0.0, -0.5]
    by = {s["alpha"]: s for s in r.summary}
    # self scores rise as α falls (Σ α λ_i (x·v_i)² over negative λ_i), and turn positive at α = 0
    assert by[1.1]["self_mean"] < by["unsteered"]["self_mean"] < 0 < by[0.0]["self_mean"] < by[-0.5]["self_mean"]
    assert by[0.0]["self_rank_mean"] < by["unsteered"]["self_rank_mean"]
    # the planted tokens among the 30: at α = 0 a planted token scores itself α a²/σ² > 0
    S0 = torch.tensor(r.scores["0.0"])
    monday = r.tokens.index(" Monday")
    assert S0[monday, monday] > 0 > torch.tensor(r.scores["unsteered"])[monday, monday]


def test_headscope_top64_selection_agrees_when_all_negatives_are_in_the_top(planted_model):
    W = planted_model.weights()
    a = steered_qk(W, 1, 5, 0.0, select="negative")
    b = steered_qk(W, 1, 5, 0.0, select="negative-top64")
    assert a.selected == b.selected and torch.equal(a.W_Q, b.W_Q) and torch.equal(a.W_K, b.W_K)
    s = steer(planted_model, 1, 5, 0.0, SteerOptions(select="negative-top64")).result
    assert s.select == "negative-top64" and s.rebuild_error < 1e-10
    assert s.self_attention_after > s.self_attention_before + 0.1


def test_steer_cli_seed_preset(planted_dir, tmp_path, capsys):
    import json

    from headscope.cli import main

    capsys.readouterr()
    assert main(["steer", str(planted_dir), "1.5", "--scale-negative", "0", "--preset", "seed",
                 "--out", str(tmp_path / "st"), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["select"] == "negative-top64" and d["authors"]["alphas"] == [0.0]
    assert (tmp_path / "st" / "model.safetensors").is_file()
