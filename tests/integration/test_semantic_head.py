"""Seed 002 analyses recover the planted semantic head (planted checkpoint, HF as oracle)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from headscope import cli
from headscope.semantic import bilinear, clustering, steering
from headscope.semantic.survey import survey


def _cli_json(capsys, argv):
    assert cli.main(argv + ["--json"]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.fixture(scope="module")
def head_json(planted_dir):
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert cli.main(["head", str(planted_dir), "1.5", "--tokens", "1000", "--keys", "nodes", "--json"]) == 0
    return json.loads(buf.getvalue())


def _hf_self_attention(directory, tokens, layer=1, head=5):
    from transformers import GPT2LMHeadModel

    hf = GPT2LMHeadModel.from_pretrained(directory, attn_implementation="eager").eval()
    with torch.no_grad():
        A = hf(tokens, output_attentions=True).attentions[layer][:, head]              # [b q k]
    return torch.diagonal(A, dim1=-2, dim2=-1)[:, 1:].mean().item()


def test_survey_ranks_planted_head_first(planted_model, planted_manifest, capsys):
    sem = planted_manifest["layer1"]["semantic_head"]
    res = survey(planted_model)
    best = res.rows[0]
    assert (best.layer, best.head) == (sem["layer"], sem["head"])
    assert best.semantic_loss < 0.5 * res.rows[1].semantic_loss
    assert best.self_attention < 0.05 and best.bos_fallback > 0.8 and best.same_category > 0.8
    rows = _cli_json(capsys, ["survey", str(planted_model.directory), "--layer", "1"])["rows"]
    assert {"layer", "head", "semantic_loss", "self_attention", "bos_fallback"} <= set(rows[0])
    assert (rows[0]["layer"], rows[0]["head"]) == (1, 5) and len(rows) == 12
    assert [r["semantic_loss"] for r in rows] == sorted(r["semantic_loss"] for r in rows)
    again = cli.main(["survey", str(planted_model.directory), "--layer", "1", "--json"])
    assert again == 0 and json.loads(capsys.readouterr().out)["rows"] == rows   # deterministic


def test_eigenvalues_match_manifest(head_json, planted_manifest):
    form = planted_manifest["layer1"]["bilinear_form"]
    assert head_json["n_negative_top64"] == form["n_negative"]
    assert head_json["n_negative"] == form["n_negative"] and head_json["n_positive"] == form["n_positive"]
    lam = np.array(head_json["eigenvalues"])
    assert len(lam) == form["rank"]
    np.testing.assert_allclose(np.sort(lam[lam < 0]), form["negative_eigenvalue"], rtol=1e-4)
    np.testing.assert_allclose(np.sort(lam[lam > 0]), form["positive_eigenvalue"], rtol=1e-4)
    assert head_json["sigma_skew"][0] < 1e-6 * head_json["sigma_sym"][0]        # planted symmetric
    for key in ("fingerprint", "processing", "embedding_variant", "clusters", "position"):
        assert key in head_json
    assert head_json["position"]["identity_fraction"] > 0.95


@pytest.mark.parametrize("method", ["leiden", "spectral"])
def test_clusters_recover_categories(head_json, planted_manifest, method):
    cats = planted_manifest["layer1"]["categories"]
    clusters = head_json["clusters"] if method == "leiden" else head_json["spectral"]["clusters"]
    where = {t: i for i, c in enumerate(clusters) for t in c["token_ids"]}
    truth, pred = [], []
    for n, (name, cat) in enumerate(cats.items()):
        for t in cat["ids"]:
            truth.append(n)
            pred.append(where.get(t, -1 - len(pred)))        # unclustered: a singleton of its own
    assert clustering.adjusted_rand_index(truth, pred) >= 0.9


def test_neighbours_are_category_partners(head_json, planted_manifest):
    cat_of = {t: k for k, c in planted_manifest["layer1"]["categories"].items() for t in c["ids"]}
    for row in head_json["neighbours"]:
        t = row["token_id"]
        partners = len(planted_manifest["layer1"]["categories"][cat_of[t]]["ids"]) - 1
        assert t not in row["target_ids"]
        assert all(cat_of.get(s) == cat_of[t] for s in row["target_ids"][:partners])
    for row in head_json["self_scores"]:
        assert row["self"]["score"] < 0 < row["to_top_target"]["score"]
        assert row["self"]["negative_part"] < -abs(row["self"]["positive_part"]) * 0.5


@pytest.mark.parametrize("preset", ["headscope", "seed"])
def test_leiden_in_child_processes_is_the_leiden_here(planted_model, monkeypatch, preset):
    """analyse_heads with every head's Leiden in a child process (started as its graph is ready, collected
    after the walk) gives what the partitions computed in this process give, on the planted heads."""
    from headscope.semantic import _leiden
    from headscope.semantic.head import analyse_heads
    from headscope.semantic.options import HeadOptions

    o = HeadOptions(preset=preset, n_tokens=1200, keys="nodes", seed=0)
    jobs = []
    start = _leiden.start

    def spy(*a, **k):
        jobs.append(start(*a, **k))
        return jobs[-1]

    monkeypatch.setattr(_leiden, "start", spy)
    monkeypatch.setattr(_leiden, "CHILD_MIN_SIZE", 0)                 # every graph with an edge: a child
    monkeypatch.setattr(_leiden, "_cpus", lambda: 2)                  # whatever this machine's CPUs
    child = [a.to_dict() for a in analyse_heads(planted_model, [(1, 5), (1, 0)], o)]
    assert [j.by_child for j in jobs] == [True, True] and all(j._proc is None for j in jobs)   # waited for
    monkeypatch.setattr(_leiden, "CHILD_MIN_SIZE", 10 ** 12)          # none: this process
    here = [a.to_dict() for a in analyse_heads(planted_model, [(1, 5), (1, 0)], o)]
    assert [j.in_child for j in jobs[2:]] == [False, False]
    assert child == here
    assert child[0]["leiden"]["n_clusters"] > 1 and child[0]["leiden"]["modularity"] > 0.3


def test_sym_part_reproduces_self_scores(planted_model):
    """x S xᵀ = x W xᵀ, and with the biases it is the forward pass's diagonal score."""
    import headscope

    W = planted_model.weights()
    toks = planted_model.to_tokens(" red dog the Monday of cat blue window seven")[None]
    cache = headscope.run_with_cache(
        W, toks, names=["blocks.1.ln1.hook_normalized", "blocks.1.attn.hook_attn_scores"])
    x = cache["blocks.1.ln1.hook_normalized"][0].double()                         # [p d]
    for head in (5, 2):
        Wqk = bilinear.qk_matrix(W, 1, head)
        form = bilinear.bilinear_form(Wqk, 1, head)
        xSx = torch.einsum("pd,de,pe->p", x, form.sym, x)
        torch.testing.assert_close(xSx, torch.einsum("pd,de,pe->p", x, Wqk, x), rtol=1e-9, atol=1e-9)
        b = W.blocks[1]
        bias = (x @ b.W_K[head].double() @ b.b_Q[head].double() + x @ b.W_Q[head].double() @ b.b_K[head].double()
                + b.b_Q[head].double() @ b.b_K[head].double())
        diag = torch.diagonal(cache["blocks.1.attn.hook_attn_scores"][0, head]).double()
        torch.testing.assert_close((xSx + bias) / 8, diag, rtol=1e-4, atol=1e-4)
        ex = bilinear.explain_score(form, x[3], x[3], divisor=8)
        torch.testing.assert_close(torch.tensor(ex["score"], dtype=torch.float64), xSx[3] / 8, rtol=1e-9, atol=1e-9)


def test_rebuild_at_alpha_one_is_exact(planted_model, tiny_hf_dir, tmp_path):
    import headscope
    from transformers import GPT2LMHeadModel

    for model, (l, h) in ((planted_model, (1, 5)), (planted_model, (1, 2)), (headscope.load(tiny_hf_dir), (1, 1))):
        W = model.weights()
        rb = steering.steered_qk(W, l, h, 1.0)
        torch.testing.assert_close(rb.W_Q @ rb.W_K.T, bilinear.qk_matrix(W, l, h), rtol=0, atol=1e-10)
        assert rb.rebuild_error < 1e-12 and rb.key_bias_error < 1e-9
    # the saved α = 1 checkpoint of the tiny model (random LN and biases) gives HF the same logits
    tiny = headscope.load(tiny_hf_dir)
    steered = steering.steer(tiny, 1, 1, 1.0, tokens=tiny.to_tokens(" the cat sat on the mat")[None])
    steering.save_steered(tiny, steered, tmp_path / "same")
    ids = torch.tensor([[50256, 262, 3797, 3332, 319, 262, 2603]])
    with torch.no_grad():
        a = GPT2LMHeadModel.from_pretrained(tiny_hf_dir).eval()(ids).logits
        b = GPT2LMHeadModel.from_pretrained(tmp_path / "same").eval()(ids).logits
    torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)


def test_alpha_zero_raises_self_attention_in_hf(planted_model, planted_dir, tmp_path, capsys):
    from headscope.semantic.prompts import prompts_for

    out = tmp_path / "steered0"
    res = _cli_json(capsys, ["steer", str(planted_dir), "1.5", "--scale-negative", "0", "--out", str(out)])
    assert res["n_selected"] == 11 and res["rebuild_error"] < 1e-9
    tokens = prompts_for(planted_model, None, n_prompts=16, length=16, seed=7)[0].tokens
    before = _hf_self_attention(planted_dir, tokens)
    after = _hf_self_attention(out, tokens)
    assert before < 0.05 and after > 0.3, (before, after)
    assert res["self_attention_after"] > res["self_attention_before"]
    assert res["self_rank_after"] < res["self_rank_before"]
    # the post's other settings: 1.1 suppresses self at least as much, −0.5 favours self even more
    s = {a: steering.steer(planted_model, 1, 5, a, tokens=tokens).result.self_attention_after for a in (1.1, 0.0, -0.5)}
    assert s[1.1] <= before + 1e-6 and s[-0.5] > s[0.0]


@pytest.mark.parametrize("argv, needle", [
    (["head", "{m}", "1.99"], "head index 99"),
    (["head", "{m}", "1.x"], "LAYER.HEAD"),
    (["survey", "{m}", "--layer", "7"], "layer 7 out of range"),
    (["steer", "{m}", "1.5", "--scale-negative", "abc", "--out", "{o}"], "must be a number"),
    (["steer", "{m}", "1.5", "--scale-negative", "nan", "--out", "{o}"], "must be finite"),
    (["steer", "{m}", "9.5", "--scale-negative", "0", "--out", "{o}"], "layer 9 out of range"),
])
def test_bad_input_is_one_line_exit_2(planted_dir, tmp_path, capsys, argv, needle):
    argv = [a.format(m=planted_dir, o=tmp_path / "o") for a in argv]
    assert cli.main(argv) == 2
    cap = capsys.readouterr()
    lines = cap.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("headscope: error:") and needle in lines[0], cap.err
    assert cap.out == "" and not (tmp_path / "o").exists()


def test_steer_reads_the_raw_block_only_when_it_is_saved(tiny_hf_dir, monkeypatch):
    """A measurement alone (the report's steering stage) does not read the steered block's raw weights;
    ``Steered.raw_block`` reads them on first access (once), the same tensors as an eager rebuild."""
    import headscope
    from headscope.core.model import Model

    model = headscope.load(tiny_hf_dir)
    tokens = model.to_tokens(" the cat sat on the mat")[None]
    reads, real = [], Model.raw_block
    monkeypatch.setattr(Model, "raw_block", lambda self, layer: reads.append(layer) or real(self, layer))
    st = steering.steer(model, 1, 1, 0.0, tokens=tokens)
    assert reads == []
    block = st.raw_block
    assert reads == [1] and st.raw_block is block
    eager = steering.unfold_into_raw(real(model, 1), 1, steering.steered_qk(model.weights(), 1, 1, 0.0))
    for name in ("W_Q", "W_K", "b_Q", "b_K", "W_V", "W_in"):
        assert torch.equal(getattr(block, name), getattr(eager, name)), name
