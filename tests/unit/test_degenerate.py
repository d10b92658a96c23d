"""Degenerate models and inputs: every analysis gives finite figures, an explicit "not applicable",
or one clear error — never NaN, inf or a null where a number is promised, never a crash deep inside.

Tiny checkpoints (GPT-2's vocabulary, all dimensions distinct) built from the `tiny` fixture
(2 layers, 3 heads, d_head 4, d_model 12, d_mlp 20, n_ctx 40) or from
:func:`headscope.testing.hub.write_hub_checkpoint`, edited where the case needs it:

- scores hundreds to thousands of nats apart between heads (the stable log-sum-exp of
  the calibration, checked against an independent float64 reference; the denominators'
  shift invariance far outside float64's range);
- all-zero W_Q/W_K (uniform kernels, a zero QK form, constant scores, a graph without
  edges, steering a zero head), a 1-layer model through the whole report;
- identical kernels, a head attending only to BOS (its kernel's mass beyond any shorter
  window), no contextual head (the report goes on and says so), no neuron above the
  threshold, constant pre-activations and outputs (undefined correlations), a category
  without single-token words, texts of one token, figures of zeros and constants.
"""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pytest
import torch

import headscope
from headscope import HeadscopeError, NotApplicable
from headscope._json import NonFiniteError, assert_finite_json, clean, dumps, is_not_applicable, not_applicable

TEXT = ("The council approved the new budget on Tuesday after a long debate about roads, schools and the "
        "local library, which will stay open on Sundays. The shop on the high street sells bread, milk and "
        "newspapers, and the bakery next to it opens at seven in the morning.")
FAST = dict(progress=False, n_neurons=3, deep_dives=1, semantic_tokens=300, kernel_windows=3,
            denominator_window=32, max_positions=24)


def _edit(model, tmp_path_factory, name: str, edit) -> headscope.Model:
    """A copy of `model` whose raw (unprocessed) weights `edit(raw)` changed in place, saved and loaded."""
    from headscope.core.writing import save_checkpoint

    raw = model.raw.map(lambda t: t.clone())
    with torch.no_grad():
        edit(raw)
    return headscope.load(save_checkpoint(raw, tmp_path_factory.mktemp(name) / "m", tokenizer_from=model.directory))


def _texts(tmp_path) -> tuple:
    from headscope.shipped import calibration_text

    cal = tmp_path / "calibration.txt"
    cal.write_text(" ".join(calibration_text().text.split()[:160]) + "\n", encoding="utf-8")
    sample = tmp_path / "sample.txt"
    sample.write_text(TEXT + "\n", encoding="utf-8")
    return cal, [sample]


def _finite(result, nullable=(), what="result") -> dict:
    d = clean(result)
    assert_finite_json(d, nullable, what=what)
    return d


# -- the JSON policy ---------------------------------------------------------------------


def test_json_refuses_nan_and_inf_and_says_where():
    with pytest.raises(NonFiniteError, match=r"heads\[1\]\.tv_median"):
        dumps({"heads": [{"tv_median": 0.1}, {"tv_median": float("nan")}]})
    with pytest.raises(NonFiniteError, match=r"x\[2\]"):
        clean({"x": torch.tensor([1.0, 2.0, float("inf")])})
    assert json.loads(dumps({"a": None, "b": [1.5, None]})) == {"a": None, "b": [1.5, None]}


def test_assert_finite_json_knows_nullable_fields():
    data = {"neurons": [{"correlation": None, "true": [[None, 1.0]]}], "n": 3}
    assert_finite_json(data, ("neurons[].correlation", "neurons[].true[][]"))
    with pytest.raises(AssertionError, match=r"neurons\[0\]\.correlation"):
        assert_finite_json(data, ("neurons[].true[][]",))
    with pytest.raises(AssertionError, match="non-finite"):
        assert_finite_json({"x": float("inf")})
    assert_finite_json(not_applicable("no contextual circuit"))       # an explicit "not applicable" is fine
    assert is_not_applicable(not_applicable("why")) and not is_not_applicable({"heads": []})


# -- stable log-sum-exp: the calibration --------------------------------------------------


def _bias_scores(raw, head: int, score: float) -> None:
    """Add `score` nats to every layer-0 score of `head` through the bias product b_Q·b_K / √e."""
    b = raw.blocks[0]
    e = b.b_Q.shape[-1]
    u = torch.zeros(e)
    u[0] = 1.0
    b.b_Q[head] += 40.0 * u
    b.b_K[head] += score * math.sqrt(e) / 40.0 * u


def _reference_log_denominators(directory, windows, query_id: int) -> np.ndarray:
    """log mean_w exp(L_w[h, n]), L = logsumexp_{i ≤ n} q·k_i/√e with the query token at n, in float64
    straight from the checkpoint file (HF layout, raw weights; numpy and scipy only)."""
    from safetensors.numpy import load_file
    from scipy.special import logsumexp

    sd = {k.removeprefix("transformer."): v.astype(np.float64)
          for k, v in load_file(directory / "model.safetensors").items()}
    cfg = json.loads((directory / "config.json").read_text())
    d, H = cfg["n_embd"], cfg["n_head"]
    e = d // H
    eps = cfg.get("layer_norm_epsilon", 1e-5)

    def ln(x):
        m = x - x.mean(-1, keepdims=True)
        return m / np.sqrt((m ** 2).mean(-1, keepdims=True) + eps) * sd["h.0.ln_1.weight"] + sd["h.0.ln_1.bias"]

    W, bias = sd["h.0.attn.c_attn.weight"], sd["h.0.attn.c_attn.bias"]           # [d 3d], [3d]
    P = max(len(x) for x in windows)
    acc = np.full((H, P), -np.inf)
    count = np.zeros(P)
    for x in windows:
        x = np.asarray(x)
        p = len(x)
        k = (ln(sd["wte.weight"][x] + sd["wpe.weight"][:p]) @ W[:, d:2 * d] + bias[d:2 * d]).reshape(p, H, e)
        q = (ln(sd["wte.weight"][query_id] + sd["wpe.weight"][:p]) @ W[:, :d] + bias[:d]).reshape(p, H, e)
        s = np.einsum("nhe,ihe->hni", q, k) / math.sqrt(e)                              # [h n i]
        s = np.where(np.tril(np.ones((p, p), dtype=bool))[None], s, -np.inf)
        acc[:, :p] = np.logaddexp(acc[:, :p], logsumexp(s, axis=-1))
        count[:p] += 1
    return acc - np.log(count)


def test_calibration_log_sum_exp_is_stable_per_head(tiny, tmp_path_factory):
    """Heads whose scores are ~ −700, ~ +1 and ~ +900 nats: every calibrated log-denominator is finite
    and matches an independent float64 reference (one shared shift would give log 0 = −inf)."""
    from headscope.layer0.calibration import Calibration, calibrate
    from headscope.corpus import windows

    def edit(raw):
        _bias_scores(raw, 0, -700.0)
        _bias_scores(raw, 1, 1.0)
        _bias_scores(raw, 2, 900.0)

    model = _edit(tiny, tmp_path_factory, "lse", edit)
    cal = calibrate(model, TEXT, window=16)
    wins = windows(model, [TEXT], n_ctx=16)
    assert len(wins) >= 3 and len(wins[-1]) < 16            # several windows, the last one shorter
    ref = _reference_log_denominators(model.directory, [w.tolist() for w in wins], cal.query_id)
    ld = cal.log_denom.numpy()
    assert np.isfinite(ld).all() and np.isfinite(cal.log_seed_denom.numpy()).all()
    assert ld[0].max() < -650 and abs(ld[1]).max() < 30 and ld[2].min() > 850
    np.testing.assert_allclose(ld, ref, rtol=1e-6, atol=1e-4)
    # the file round-trips (the symptom was a null here)
    back = Calibration.from_dict(json.loads(dumps(cal.to_dict())))
    np.testing.assert_allclose(back.log_denom.numpy(), ld, rtol=1e-6)


# -- denominators far outside float64 -----------------------------------------------------


def _shift_model(tiny, tmp_path_factory, name: str, shifts: dict[int, float]):
    """Layer-0 heads whose last query/key coordinate is a constant: every score of head h (and every
    content logit) moves by exactly shifts[h] nats, the positional logits not at all."""
    def edit(raw):
        b = raw.blocks[0]
        e = b.W_Q.shape[-1]
        b.W_Q[:, :, e - 1] = 0.0
        b.W_K[:, :, e - 1] = 0.0
        b.b_Q[:, e - 1] = 0.0
        b.b_K[:, e - 1] = 0.0
        for h, s in shifts.items():
            b.b_Q[h, e - 1] = 100.0
            b.b_K[h, e - 1] = s * math.sqrt(e) / 100.0

    return _edit(tiny, tmp_path_factory, name, edit)


def test_denominators_are_shift_invariant_beyond_float64(tiny, tmp_path_factory):
    """S·e^{±3000}: the relative spreads, bounds and predictions are unchanged, the logs move by ±3000,
    the absolute S is None (with the reason) where float64 cannot hold it."""
    from headscope.layer0.calibration import calibrate
    from headscope.corpus import windows
    from headscope.layer0.denominators import denominator_stability

    base = _shift_model(tiny, tmp_path_factory, "shift0", {})
    far = _shift_model(tiny, tmp_path_factory, "shift3000", {0: 3000.0, 2: -3000.0})
    wins = windows(base, [TEXT * 3], n_ctx=24)
    r0 = denominator_stability(base, wins, window=24, n_min=4, stride=4)
    r1 = denominator_stability(far, wins, window=24, n_min=4, stride=4)
    d1 = _finite(r1, ("mean", "traces", "predicted_mean"), "denominators, shifted")
    assert r0.absolute_overflow is None and r0.mean is not None
    assert r1.mean is None and r1.traces is None and r1.predicted_mean is None and "float64" in r1.absolute_overflow
    for f in ("rel_spread", "median_rel_spread", "trend_slope", "measured_rel_std", "measured_rel_quantile",
              "predicted_rel_std", "chebyshev_rel", "hoeffding_rel", "sum_pos2"):
        np.testing.assert_allclose(np.array(getattr(r1, f)), np.array(getattr(r0, f)), rtol=1e-5, atol=1e-9, err_msg=f)
    shift = np.array([3000.0, 0.0, -3000.0])[:, None]
    np.testing.assert_allclose(np.array(r1.log_mean) - np.array(r0.log_mean),
                               np.broadcast_to(shift, np.shape(r0.log_mean)), atol=1e-6)
    np.testing.assert_allclose(np.array(r1.log_predicted_mean) - np.array(r0.log_predicted_mean),
                               np.broadcast_to(shift, np.shape(r0.log_predicted_mean)), atol=1e-6)
    assert np.isfinite(np.array(d1["log_traces"])).all()
    # the calibration moves head by head, each by its own shift
    c0, c1 = calibrate(base, TEXT, window=16), calibrate(far, TEXT, window=16)
    torch.testing.assert_close(c1.log_denom - c0.log_denom, torch.tensor(shift).expand_as(c0.log_denom),
                               rtol=0, atol=1e-6)


# -- all-zero W_Q / W_K, one layer, through the whole report --------------------------------


@pytest.fixture(scope="module")
def zero_qk(tmp_path_factory):
    """1 layer, 5 heads of d_head 6 (d_model 30, d_mlp 17, n_ctx 28), W_Q = W_K = 0 in every head,
    and b_Q = b_K = 0 in head 0 (its scores are all exactly 0)."""
    from headscope.testing.hub import write_hub_checkpoint

    hub = headscope.load(write_hub_checkpoint(tmp_path_factory.mktemp("zqk-hub") / "m", n_layer=1, n_embd=30,
                                              n_head=5, n_ctx=28, n_inner=17, seed=3))

    def edit(raw):
        b = raw.blocks[0]
        b.W_Q.zero_()
        b.W_K.zero_()
        b.b_Q[0] = 0.0
        b.b_K[0] = 0.0

    return _edit(hub, tmp_path_factory, "zqk", edit)


def test_zero_qk_analyses(zero_qk):
    from headscope.semantic.bilinear import bilinear_form, qk_matrix
    from headscope.corpus import windows
    from headscope.semantic.head import analyse_head
    from headscope.semantic.options import HeadOptions
    from headscope.layer0.kernels import analyse_kernels
    from headscope.semantic.steering import steer

    model = zero_qk
    wins = windows(model, [TEXT])
    k = analyse_kernels(model, windows=wins)
    assert all(h.category == "uniform" and abs(h.width - (k.n_ref + 1)) < 1e-6 for h in k.heads)
    assert all(abs(h.decay_rate) < 1e-9 and h.translation_tv < 1e-12 for h in k.heads)
    _finite(k, what="kernels")

    form = bilinear_form(qk_matrix(model.weights(), 0, 0), 0, 0)
    assert form.eigenvalues.tolist() == [0.0] and form.n_negative == form.n_positive == 0
    assert form.to_dict()["skew_to_sym_ratio"] is None                 # σ_skew / σ_sym = 0/0
    a = analyse_head(model, 0, 0, HeadOptions(n_tokens=1200, k=5, with_spectral=True))
    d = _finite(a, ("leiden.ari", "spectral.ari", "clusters[].category", "clusters[].purity", "skew_to_sym_ratio",
                    "position.identity_fraction", "position.position_fraction", "leiden.modularity",
                    "spectral.modularity", "spectral.clusters[].category", "spectral.clusters[].purity",
                    "graph.max_comm_size"), "head 0.0")
    assert d["position"]["identity_fraction"] is None                  # every score is 0: 0/0
    assert d["leiden"]["modularity"] is None and d["leiden"]["n_clusters"] == 0   # uniform 1/N: no edge kept
    assert "undefined" in a.render()

    s = steer(model, 0, 0, 0.0)
    assert s.result.rank == 0 and s.result.rebuild_error == 0.0 and s.result.key_bias_error == 0.0
    _finite(s.result, ("out", "steered_fingerprint"), "steer a zero head")


def test_one_layer_zero_qk_report(zero_qk, tmp_path, check_report):
    from headscope.report import ReportOptions, build_report

    cal, samples = _texts(tmp_path)
    out = tmp_path / "r"
    build_report(zero_qk, out, ReportOptions(calibration_text=cal, samples=samples, **FAST))
    datas = check_report(out)
    assert datas["attention"]["layers"] == [0]                         # layer 1 asked for, not there
    assert sorted(p.name for p in (out / "heads").glob("*.html")) == [f"L0H{h}.html" for h in range(5)]
    assert not [k for k, d in datas.items() if is_not_applicable(d)]
    assert datas["steering"]["rank"] == 0                              # the survey's best head is a zero head
    sem = datas["semantic"]["heads"][0]
    assert sem["eigenvalues"] == [0.0] and sem["skew_to_sym_ratio"] is None


# -- identical kernels, a head attending only to BOS --------------------------------------------


def test_identical_kernels_form_one_group(tiny, tmp_path_factory):
    from headscope.layer0 import split as layer0
    from headscope.layer0.calibration import calibrate
    from headscope.layer0.contextual import build_circuit, circuit_fidelity, select_heads
    from headscope.corpus import windows
    from headscope.layer0.neurons import scan_neurons

    def edit(raw):
        b = raw.blocks[0]
        for name in ("W_Q", "W_K", "b_Q", "b_K", "W_V", "b_V", "W_O"):
            t = getattr(b, name)
            t[1] = t[0]
            t[2] = t[0]

    model = _edit(tiny, tmp_path_factory, "same", edit)
    w = layer0.view(model)
    ch = select_heads(w, 262, 30, layer0.measure_c(w), min_width=0.0, max_content_std=1e9)
    assert ch.groups == [[0, 1, 2]] and ch.heads == [0, 1, 2]
    cal = calibrate(model, TEXT)
    circ, _ = build_circuit(model, cal, heads=[0, 1, 2])
    fid = circuit_fidelity(circ, windows(model, [TEXT]), stride=4)
    _finite(fid, ("median_*",), "fidelity")
    scan = scan_neurons(circ, ch, model.tokenizer, threshold=-1e30, top=5)
    assert len(scan.neurons) == model.cfg.d_mlp
    _finite(scan, (), "scan")


@pytest.fixture(scope="module")
def bos_only(tiny, tmp_path_factory):
    """Layer-0 head 0 scores BOS ~ 2400 nats above every other key (W_pos[0] big along v, W_K reads v)."""
    def edit(raw):
        b = raw.blocks[0]
        d = raw.W_pos.shape[1]
        v = torch.zeros(d)
        v[0], v[1] = 1.0, -1.0
        v /= v.norm()                                                  # centred: LayerNorm keeps it
        raw.W_pos[0] += 30.0 * v
        b.W_Q[0] = 0.0
        b.W_K[0] = 0.0
        b.W_K[0][:, 0] = v / b.ln1_w                                   # k_0 = (LN x)·v / ln1_w-folded
        b.b_Q[0] = 0.0
        b.b_Q[0][0] = 2000.0
        b.b_K[0] = 0.0

    return _edit(tiny, tmp_path_factory, "bos", edit)


def test_head_attending_only_to_bos(bos_only):
    from headscope.layer0.calibration import calibrate
    from headscope.corpus import windows
    from headscope.layer0.denominators import denominator_stability
    from headscope.layer0.kernels import analyse_kernels
    from headscope.layer0.split import positional_logits, measure_c, view
    from headscope.maps.patterns import attention_summary
    from headscope.shipped import Text

    model = bos_only
    att = attention_summary(model, [Text("a", TEXT)], [0, 1], max_positions=24)
    h0 = att.heads[0]
    assert h0.bos > 0.999 and h0.entropy < 1e-3
    _finite(att, (), "attention")
    # its kernel: all mass on i = 0, so a shorter window (δ ≤ m < n) holds e^{-thousands} of it
    w = view(model)
    lg = positional_logits(w, [262], 39, measure_c(w))[0, 0]
    assert float(lg[0] - lg[1:].max()) > 800                           # beyond float64: the old 0/0
    k = analyse_kernels(model, windows=windows(model, [TEXT]), n_ref=39)
    hk = k.heads[0]
    assert hk.category_width == "local" and hk.width < 1.0001 and 0 <= hk.translation_tv <= 1
    # the shape rule leaves position 0 out: the rest's shape from its own logits, not a 0/0
    # (the fitted geometric kernel has the mean distance of softmax(logits[1:]))
    from headscope.layer0.kernels import _geometric_mean_distance

    rest = torch.softmax(lg[1:].double().flip(0), 0)                      # [δ] δ = 39 − i
    mean = float((torch.arange(39, dtype=torch.float64) * rest).sum())
    assert hk.shape_positions == [39] and math.isfinite(hk.shape_decay_rate[0])
    assert _geometric_mean_distance(hk.shape_decay_rate[0], 39) == pytest.approx(mean, rel=1e-6, abs=1e-9)
    assert hk.category == hk.category_shape
    _finite(k, (), "kernels")
    wins = windows(model, [TEXT * 2], n_ctx=24)
    d = denominator_stability(model, wins, window=24, n_min=4, stride=4)
    _finite(d, ("mean", "traces", "predicted_mean", "absolute_overflow"), "denominators")
    assert max(d.sum_pos2[0]) < 1e-300                                 # the kernel is BOS alone …
    _check_prediction(model, w, wins, d)                              # … and the i.i.d. predictions still hold
    cal = calibrate(model, TEXT)
    assert torch.isfinite(cal.log_denom).all() and torch.isfinite(cal.log_seed_denom).all()


def _check_prediction(model, w, wins, d) -> None:
    """The i.i.d. predictions at the last position against 60-digit arithmetic (mpmath) on the same
    logits: E[S] = pos_0 c_BOS + (1 − pos_0) μ, std/E[S] = σ sqrt(s₂)/E[S],
    Hoeffding R sqrt(s₂ ln(2/δ)/2)/E[S]."""
    import mpmath

    from headscope.layer0.split import frame, measure_c, token_id

    mpmath.mp.dps = 60
    n = d.positions[-1]
    keys = torch.stack([x[:24] for x in wins if len(x) >= 24])[:, 1:].reshape(-1)
    ids, counts = keys.unique(return_counts=True)
    u = [mpmath.mpf(int(c)) / int(counts.sum()) for c in counts]
    fr = frame(w, token_id(model, " the"), n, measure_c(w))
    lc = fr.content_logits(w, ids).tolist()
    lbos = fr.content_logits(w, torch.tensor([model.bos_id]))[:, 0].tolist()
    for h in range(model.cfg.n_heads):
        lp = [mpmath.mpf(x) for x in fr.pos_logits[h].tolist()]
        Z = mpmath.fsum(mpmath.exp(x) for x in lp)
        pos = [mpmath.exp(x) / Z for x in lp]
        c = [mpmath.exp(mpmath.mpf(x)) for x in lc[h]]
        mu = mpmath.fsum(ci * ui for ci, ui in zip(c, u))
        var = mpmath.fsum((ci - mu) ** 2 * ui for ci, ui in zip(c, u))
        s2 = mpmath.fsum(p ** 2 for p in pos[1:])
        ES = pos[0] * mpmath.exp(mpmath.mpf(lbos[h])) + mpmath.fsum(pos[1:]) * mu   # 1 − pos_0 as Σ_{i≥1} pos_i
        rel = mpmath.sqrt(var * s2) / ES
        hoeff = (max(c) - min(c)) * mpmath.sqrt(s2 * mpmath.log(2 / mpmath.mpf(d.delta)) / 2) / ES
        assert d.predicted_rel_std[h][-1] == pytest.approx(float(rel), rel=1e-6, abs=1e-300)
        assert d.hoeffding_rel[h][-1] == pytest.approx(float(hoeff), rel=1e-6, abs=1e-300)
        assert d.log_predicted_mean[h][-1] == pytest.approx(float(mpmath.log(ES)), rel=1e-9, abs=1e-6)


# -- no contextual head, no neuron above the threshold, constant sides -----------------------------


@pytest.fixture(scope="module")
def sharp(tiny, tmp_path_factory):
    """Layer-0 W_Q, W_K × 300: every head is sharply content-dependent, none qualifies as contextual."""
    def edit(raw):
        raw.blocks[0].W_Q.mul_(300.0)
        raw.blocks[0].W_K.mul_(300.0)

    return _edit(tiny, tmp_path_factory, "sharp", edit)


def test_no_contextual_head_is_not_applicable(sharp, capsys):
    from headscope.layer0.calibration import calibrate
    from headscope.cli import main
    from headscope.layer0.contextual import build_circuit

    with pytest.raises(NotApplicable, match="no contextual circuit"):
        build_circuit(sharp, calibrate(sharp, TEXT))
    assert main(["neurons", str(sharp.directory), "--calibration-text", _write(sharp.directory.parent / "t.txt")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("headscope: error: no contextual circuit")


def _write(path):
    path.write_text(TEXT + "\n", encoding="utf-8")
    return str(path)


def test_report_goes_on_without_a_contextual_circuit(sharp, tmp_path, check_report):
    from headscope.report import ReportOptions, build_report

    cal, samples = _texts(tmp_path)
    out = tmp_path / "r"
    build_report(sharp, out, ReportOptions(calibration_text=cal, samples=samples, **FAST))
    datas = check_report(out)
    assert is_not_applicable(datas["neurons"]) and "no contextual circuit" in datas["neurons"]["not_applicable"]
    assert datas["activations"]["selection"].startswith("top 3 by std")     # falls back, still applies
    assert not any(is_not_applicable(d) for k, d in datas.items() if k != "neurons")
    index = (out / "index.html").read_text(encoding="utf-8")
    section = index[index.index('id="neurons"'):]
    assert re.search(r"Not applicable:</strong> no contextual circuit", section[:2000])
    assert "not applicable: no contextual circuit" in index                 # and in the summary table
    assert len(list((out / "neurons").glob("*.html"))) == 3                 # the activations stage's pages


def test_no_neuron_above_threshold(tiny, tmp_path, monkeypatch, check_report):
    from headscope.layer0.calibration import calibrate
    from headscope.layer0.contextual import build_circuit
    from headscope.layer0.neurons import scan_neurons
    from headscope.report import ReportOptions, build_report
    from headscope.report.builtin import neurons as stage

    circ, ch = build_circuit(tiny, calibrate(tiny, TEXT), heads=[0, 1])
    scan = scan_neurons(circ, ch, tiny.tokenizer, threshold=1e30)
    assert scan.neurons == [] and all(math.isfinite(x) for x in scan.max_all)
    _finite(scan, (), "scan")
    monkeypatch.setattr(stage, "DEFAULT_THRESHOLD", 1e30)
    monkeypatch.setattr("headscope.layer0.contextual.SELECTION", {"min_width": 0.0, "max_content_std": 1e9,
                                                          "max_kernel_tv": 1.0})
    cal, samples = _texts(tmp_path)
    out = tmp_path / "r"
    build_report(tiny, out, ReportOptions(calibration_text=cal, samples=samples, stages=["neurons", "activations"],
                                          **FAST))
    datas = check_report(out)
    assert datas["neurons"]["n_contextual"] == 0 and datas["neurons"]["neurons"] == []
    assert datas["activations"]["selection"].startswith("top 3 by std")


def test_constant_sides_give_undefined_correlations(tiny, tmp_path_factory):
    """A neuron reading nothing (W_in[:, j] = 0) and heads writing nothing (W_O = 0): correlations and
    FVU are 0/0, reported as None, never NaN."""
    from headscope.layer0.calibration import calibrate
    from headscope.layer0.contextual import build_circuit, circuit_fidelity
    from headscope.corpus import windows
    from headscope.layer0.neurons import neuron_trace

    def edit(raw):
        raw.blocks[0].W_in[:, 7] = 0.0
        raw.blocks[0].W_O.zero_()

    model = _edit(tiny, tmp_path_factory, "const", edit)
    circ, _ = build_circuit(model, calibrate(model, TEXT), heads=[0, 2])
    tr = neuron_trace(circ, 7, model.tokenizer, [model.to_tokens(TEXT)])
    assert tr.correlation is None and tr.texts[0]["correlation"] is None
    _finite(tr, ("correlation", "texts[].correlation"), "neuron trace")
    fid = circuit_fidelity(circ, windows(model, [TEXT]), stride=4)
    assert fid.median_correlation is None and fid.median_fvu is None
    assert all(v is None for row in fid.correlation + fid.fvu for v in row)
    _finite(fid, ("correlation[][]", "fvu[][]", "median_correlation", "median_fvu"), "fidelity")


def test_scan_beyond_float32_is_redone_in_float64(tiny):
    """Token weights content/S̄ ~ e^200 (a calibration whose S̄ is e^200 smaller): float32 overflows at
    e^88, so the scan is redone in float64 and equals a float64 scan; nothing is inf."""
    from headscope.layer0.calibration import calibrate
    from headscope.layer0.contextual import build_circuit
    from headscope.layer0.neurons import scan_neurons

    cal = calibrate(tiny, TEXT)
    cal.log_seed_denom = cal.log_seed_denom - 200.0
    circ, ch = build_circuit(tiny, cal, heads=[0, 1])
    s32 = scan_neurons(circ, ch, tiny.tokenizer, threshold=0.0, top=4)
    s64 = scan_neurons(circ, ch, tiny.tokenizer, threshold=0.0, top=4, dtype=torch.float64)
    assert max(s32.max_all) > 1e80 and s32.to_dict() == s64.to_dict()
    _finite(s32, (), "scan")


def test_circuit_weights_beyond_float64_are_not_applicable(tiny, tmp_path_factory):
    """User-chosen heads whose content/S̄ exceeds e^709: the circuit says so instead of writing inf."""
    from headscope.layer0.calibration import calibrate
    from headscope.layer0.contextual import build_circuit
    from headscope.layer0.neurons import scan_neurons

    def edit(raw):
        raw.blocks[0].W_Q.mul_(3000.0)
        raw.blocks[0].W_K.mul_(3000.0)

    model = _edit(tiny, tmp_path_factory, "huge", edit)
    circ, ch = build_circuit(model, calibrate(model, TEXT), heads=[0, 1, 2])
    with pytest.raises(NotApplicable, match="float64"):
        scan_neurons(circ, ch, model.tokenizer)
    with pytest.raises(NotApplicable, match="float64"):
        circ.predict(model.to_tokens(TEXT), [5, 10])


# -- survey inputs, texts of one token ---------------------------------------------------------


def test_category_without_single_token_words(tiny):
    from headscope.semantic.survey import survey

    cats = {"colours": ["red", "blue", "green", "yellow"], "animals": ["cat", "dog", "horse", "cow"],
            "phrases": ["ice cream parlour", "antidisestablishmentarianism", "hot dog stand"]}
    r = survey(tiny, categories=cats, n_prompts=8)
    assert sorted(r.categories) == ["animals", "colours"]               # the multi-token category is dropped
    _finite(r, ("rows[].copy_attention", "rows[].same_category", "rows[].bos_fallback"), "survey")
    with pytest.raises(HeadscopeError, match="at least 2 categories"):
        survey(tiny, categories={"colours": cats["colours"], "phrases": cats["phrases"]})


def test_undefined_survey_rates_are_none():
    """Prompts where no query has an earlier copy or partner: those rates are None, not 0."""
    from headscope.semantic.survey import pattern_metrics, target_masks

    tokens = torch.tensor([[50256, 10, 11, 12]])
    labels = torch.tensor([[-1, 0, 1, 2]])                             # every word its own category
    A = torch.softmax(torch.randn(1, 2, 4, 4).masked_fill(~torch.ones(4, 4, dtype=torch.bool).tril(), -math.inf), -1)
    met = pattern_metrics(A, target_masks(tokens, labels))
    assert torch.isnan(met["copy_attention"]).all() and torch.isnan(met["same_category"]).all()
    assert torch.isfinite(met["bos_fallback"]).all() and torch.isfinite(met["semantic_loss"]).all()


def test_texts_of_one_token(tiny):
    from headscope.maps.activations import activation_profile
    from headscope.maps.patterns import attention_summary
    from headscope.shipped import Text

    att = attention_summary(tiny, [Text("a", " Hello"), Text("b", " the cat")], [0, 1], max_positions=40)
    assert att.offsets == 3 and att.n_queries == 3                     # offsets reached: 0, 1, 2
    _finite(att, (), "attention")
    with pytest.raises(NotApplicable, match="BOS alone"):
        attention_summary(tiny, [Text("a", "")], [0])
    with pytest.raises(NotApplicable, match="none of"):
        attention_summary(tiny, [Text("a", TEXT)], [5, 6])
    with pytest.raises(NotApplicable, match="at least 2"):
        activation_profile(tiny, [Text("a", " Hello")])
    _finite(activation_profile(tiny, [Text("a", " Hello there")]), ("neurons[].values[][]",), "activations")


# -- clustering and top-k on degenerate graphs ----------------------------------------------


def test_graphs_without_edges_and_single_nodes():
    import igraph

    from headscope.semantic.bilinear import topk_targets
    from headscope.semantic.clustering import describe, knn_graph, leiden, modularity, spectral

    one = igraph.Graph(n=1)
    one.es["weight"] = []
    assert leiden(one).tolist() == [0] and modularity(one, [0]) is None
    c = describe(one, leiden(one), [262], [" the"], "leiden", categories={"a": [262]})
    assert c.n_clusters == 0 and c.modularity is None and c.ari == 1.0
    # a query with no preference over 2000 keys spreads 1/2000 < min_weight: no edge at all
    vals, idx = torch.zeros(2000, 3), torch.randint(0, 2000, (2000, 3), generator=torch.Generator().manual_seed(0))
    g = knn_graph(vals, idx, 2000, lse=torch.full((2000,), math.log(2000)))
    assert g.ecount() == 0 and modularity(g, leiden(g)) is None and spectral(g, 3).tolist() == [0] * 2000
    # more neighbours asked for than keys exist
    v, i = topk_targets(torch.randn(4, 3), torch.randn(5, 3), 50, self_index=torch.tensor([0, 1, 2, -1]))
    assert v.shape == (4, 4) and torch.isfinite(v[:3]).all()


# -- figures of zeros, constants and nothing -------------------------------------------------


def test_figures_of_zeros_constants_and_nothing():
    from headscope.report import figures as F

    figs = [
        F.line_plot([F.Series([0, 1, 2], [0.0, 0.0, 0.0])], log_y=True),
        F.line_plot([F.Series([0, 1, 2], [1e-320, 1e300, None])], log_y=True),
        F.line_plot([F.Series([], [])]),
        F.histogram([3.0, 3.0, 3.0]),
        F.histogram([]),
        F.heatmap([[None, None], [None]]),
        F.heatmap([[0.0, 0.0]], signed=True),
        F.bar_plot([], []),
        F.bar_plot([None, 0.0], ["a", "b"]),
        F.spectrum_plot({"λ": [0.0]}),
        F.token_heatmap(["a", "b"], [None, 0.0]),
    ]
    for svg in figs:
        assert not re.search(r'="[^"]*(?:nan|inf)', str(svg), flags=re.IGNORECASE), svg[:300]
