"""Seed 000's layer-0 study on rotary models (headscope.layer0.rotary_split, docs/rotary-layer0.md): the split
is exact where the maths says so and close to the model's own attention elsewhere, and on the planted rotary
checkpoint the calibrated contextual circuit chooses the planted heads and the scan finds the planted neuron."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import headscope
from headscope._errors import NotApplicable
from headscope.core.forward import run_with_cache
from headscope.layer0 import calibration as C, contextual as X, denominators as D, neurons as N, rotary_split as RS
from headscope.planted import rotary as P
from headscope.shipped import calibration_text


TEXT = 12000   #: characters of the shipped calibration text used (≈ 20 windows of 64 tokens)


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    d = P.build(tmp_path_factory.mktemp("rot0") / "ckpt", seed=0, n_layers=2)
    m = headscope.load(d)
    cal = C.calibrate(m, calibration_text().text[:TEXT])
    return m, json.loads((d / P.MANIFEST).read_text()), cal


def _topic_texts(m, manifest, n=8, p=48):
    """Windows whose density of the planted topic tokens runs from 0 to 0.5."""
    topic = manifest["contextual"]["topic_tokens"]
    rng = np.random.default_rng(0)
    others = [t for t in range(256, 1024) if t not in set(topic)]
    return [torch.tensor([m.bos_id] + [int(rng.choice(topic)) if rng.random() < k / (2 * (n - 1))
                                       else int(rng.choice(others)) for _ in range(p - 1)]) for k in range(n)]


def test_fixed_query_scores_are_the_models_own(planted):
    """A text made of the query token only: the fixed-query scores are the forward's scores, exactly."""
    m, _, _ = planted
    w = RS.view(m)
    t = int(m.to_tokens(" the")[-1])
    x = torch.full((1, 20), t)
    c = run_with_cache(w, x, names=["blocks.0.attn.hook_k", "blocks.0.attn.hook_attn_scores"], stop_at_layer=1)
    mine = RS.fixed_query_scores(w, c["blocks.0.attn.hook_k"], t)
    true = c["blocks.0.attn.hook_attn_scores"]
    keep = torch.isfinite(mine)
    assert torch.equal(keep, torch.isfinite(true))
    torch.testing.assert_close(mine[keep], true[keep].to(mine.dtype), rtol=1e-9, atol=1e-9)
    # log Z is the running log-sum-exp of the kernel, and the frame's is its last entry
    fr = RS.frame(w, t, 9)
    torch.testing.assert_close(RS.log_Z(w, t, 10)[:, 9], fr.log_Z)


def test_split_matches_the_models_attention_and_the_circuit_the_heads_output(planted):
    m, manifest, cal = planted
    w = RS.view(m)
    texts = _topic_texts(m, manifest)
    tv = RS.split_tv(w, texts[:3])
    assert tv.median() < 1e-4 and tv.max() < 1e-2      # query-independent heads on a slow plane: near exact
    circ, choice = X.build_circuit(m, cal)
    assert choice.heads == manifest["contextual"]["heads"] and choice.automatic
    fid = X.circuit_fidelity(circ, [m.to_tokens(calibration_text().text)[:64]])
    assert fid.median_correlation > 0.99 and fid.median_fvu < 0.05


def test_scan_finds_the_planted_contextual_neuron_and_its_trace_follows_topic_density(planted):
    m, manifest, cal = planted
    j = manifest["contextual"]["neuron"]
    circ, choice = X.build_circuit(m, cal)
    scan = N.scan_neurons(circ, choice, m.tokenizer)
    assert [r["neuron"] for r in scan.neurons] == [j]
    top = scan.neurons[0]["top_ids"]
    assert set(top[:N_TOP]) <= set(manifest["contextual"]["topic_tokens"])
    tr = N.neuron_trace(circ, j, m.tokenizer, _topic_texts(m, manifest))
    assert tr.correlation > 0.8


N_TOP = 20


def test_denominators_of_the_contextual_heads_are_stable_and_predicted(planted):
    m, manifest, _ = planted
    ds = D.denominator_stability(m, [calibration_text().text[:TEXT]], window=64, n_min=8, stride=8)
    for h in manifest["contextual"]["heads"]:
        assert ds.median_rel_spread[h] < 0.3
        pred, meas = np.array(ds.predicted_rel_std[h][2:]), np.array(ds.measured_rel_std[h][2:])
        assert np.all(pred < 2 * meas) and np.all(pred > meas / 2)      # the i.i.d. prediction, within a factor 2


def test_the_w_pos_key_split_is_refused_with_its_reason_not_a_crash(planted):
    from headscope.layer0 import kernels as K, split

    m, _, _ = planted
    for f in (lambda: K.kernel_heatmap(m, " the", "measured", 8),
              lambda: split.approx_pattern(split.view(m), m.to_tokens("the cat"), 1.0)):
        with pytest.raises(NotApplicable, match="Qwen2 is a rotary model"):
            f()


def test_parallel_residual_neurons_are_refused_with_the_exact_reason(tmp_path):
    pytest.importorskip("transformers")
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from test_families import build

    _, d = build("gpt_neox", tmp_path)
    m = headscope.load(d)
    cal = C.calibrate(m, calibration_text().text[:2000])   # the calibration and the circuit apply
    circ, choice = X.build_circuit(m, cal, heads=[0, 1, 2])
    with pytest.raises(NotApplicable, match="parallel residual .*MLP0 reads the block's input"):
        N.scan_neurons(circ, choice, m.tokenizer)


def test_report_computes_the_seed000_stages_and_finds_the_planted_neuron(planted, tmp_path):
    from headscope.report import ReportOptions, build_report

    m, manifest, _ = planted
    out = tmp_path / "report"
    res = build_report(m, out, ReportOptions(progress=False, stages=["kernels", "denominators", "neurons"],
                                             kernel_windows=2, denominator_window=64))
    assert all(s.status == "computed" for s in res.stages), [(s.name, s.not_applicable) for s in res.stages]
    data = {s: json.loads((out / "data" / f"{s}.json").read_text())["data"] for s in ("kernels", "neurons")}
    assert data["neurons"]["heads"] == manifest["contextual"]["heads"]
    assert [n["neuron"] for n in data["neurons"]["neurons"]] == [manifest["contextual"]["neuron"]]
    assert max(data["kernels"]["tv"]["p90"]) < 1e-3


@pytest.mark.parametrize("case", ["llama", "gpt_neox_sequential"])
def test_split_beats_the_uniform_null_on_random_weights(case, tmp_path):
    """Weights we did not choose (transformers' initialiser, randomised norms and biases): the split's TV
    against the model's own attention is below that of uniform attention on the same windows (the null)."""
    pytest.importorskip("transformers")
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from test_families import build

    _, d = build(case, tmp_path)
    m = headscope.load(d)
    w = RS.view(m)
    x = m.to_tokens(calibration_text().text[:400])[: m.cfg.n_ctx]
    true, approx = RS.split_patterns(w, x)
    causal = torch.ones(len(x), len(x), dtype=torch.bool).tril()
    uniform = causal.double() / causal.sum(-1, keepdim=True)
    tv = lambda a: 0.5 * (true - a).abs().sum(-1)[:, 1:]                           # noqa: E731
    assert tv(approx).median() < 0.75 * tv(uniform).median()
    assert torch.allclose(approx.sum(-1), torch.ones(()).double()) and not approx.triu(1).any()
