"""Seed 000, second half, on the planted checkpoint: calibration, contextual circuit,
contextual neurons, denominator stability, and the CLI.

Ground truth: planted.json["layer0"] (contextual heads, planted neurons with positive
and negative token sets). Texts below are written for these tests.
"""

from __future__ import annotations

import json
import re
import warnings

import pytest
import torch

pytestmark = pytest.mark.slow

CALIBRATION_TEXT = (
    "The town sits on a wide river, and most of its people work in the shops, the schools and the "
    "small workshops along the main road. In the morning the buses fill with students and workers; "
    "by noon the market square is busy with traders selling bread, fruit and tools. The library "
    "opens at nine and closes at six, and on Saturdays it holds a reading hour for children. "
    "Last year the council repaired the old bridge, planted trees beside the station and opened a "
    "new clinic near the park. Some residents wanted more parking, others asked for better "
    "lighting, and the local paper printed letters from both sides for weeks. A team of engineers "
    "studied the traffic and wrote a long report about the junction by the post office. "
    "In the evening the streets are quiet. Families walk by the water, older men play cards in "
    "the cafe, and the lights of the factory across the river go out one by one. Visitors often "
    "say the town is calm and ordinary, which is exactly what most of the people who live there "
    "like about it. The weather is mild, the trains are usually on time, and the hills to the "
    "north are good for walking when the season allows it. "
) * 3

NEUTRAL_TEXT = (
    "On most days the harbour office opens early. Clerks check the lists of boats, answer the phone and "
    "send letters to the families who rent the small houses on the hill. The road to the village is "
    "narrow, so the buses run slowly, and people often walk the last part of the way with their bags. "
    "In winter the wind is strong and the shops close before dark; in summer the square stays busy "
    "until late, and the school hall hosts meetings about roads, water and the price of land."
)

#: planted neuron name → (text rich in its positive set, text rich in its negative set)
TEXTS = {
    "commonwealth_spelling": (
        "The colour of the centre was my favourite, and the programme about behaviour and labour at the "
        "theatre was a favour to my neighbour. Their organisation had a licence, armour and a grey "
        "harbour; whilst travelling we realise the humour and flavour of the catalogue.",
        "The color of the center was my favorite, and the program about behavior and labor at the "
        "theater was a favor to my neighbor. Their organization had a license, armor and a gray "
        "harbor; while traveling we realize the humor and flavor of the catalog.",
    ),
    "sport_vs_cooking": (
        "The team won the match when the striker scored a goal; the coach, the players and the fans "
        "in the stadium cheered, and the referee gave a penalty late in the league season.",
        "Put the flour and butter in the oven to bake, then make a sauce with garlic, onion, salt "
        "and pepper, and simmer the soup while the chicken and vegetables roast in the kitchen.",
    ),
    "french_vs_english": (
        "Je pense que le chat est sur la table et que il ne veut pas partir; les enfants sont au "
        "jardin pour jouer, et je ne sais pas qui est le maire de la ville.",
        "I think that the cat is on the table and that it does not want to leave; the children are "
        "in the garden to play, and I do not know who is the mayor of the town.",
    ),
    "positive_vs_negative_sentiment": (
        "What a wonderful day: the food was excellent, the music brilliant, and we were happy and "
        "delighted, full of joy and hope; the best and most perfect holiday, a lovely pleasure.",
        "What a terrible day: the food was awful, the music horrible, and we were sad and angry, "
        "full of fear and grief; the worst and most miserable holiday, a tragic disaster of pain.",
    ),
}


def _has_clean_contextual_ov(model, layer0) -> bool:
    """True when the contextual heads' value dims beyond the planted features are zero."""
    K = len(layer0["neurons"])
    W_V = model.raw.blocks[0].W_V
    return all(bool((W_V[h, :, K:] == 0).all()) for h in layer0["contextual_heads"])


@pytest.fixture(scope="module")
def ctx_dir(planted_dir, planted_model, planted_manifest, tmp_path_factory):
    """The shared planted checkpoint, or — if its contextual heads still carry the base's random
    value columns, which make ~half of all random MLP0 neurons genuinely contextual through the
    keyword heads — a copy with those columns zeroed (see the report on issue 5)."""
    layer0 = planted_manifest["layer0"]
    if _has_clean_contextual_ov(planted_model, layer0):
        return planted_dir
    warnings.warn("planted contextual heads have random value columns; testing on a corrected copy")
    from headscope.core.writing import save_checkpoint
    from headscope.planted import build_weights

    w, manifest = build_weights(seed=planted_manifest["seed"])
    K = len(manifest["layer0"]["neurons"])
    for h in manifest["layer0"]["contextual_heads"]:
        w.blocks[0].W_V[h, :, K:] = 0.0
    out = tmp_path_factory.mktemp("ctx") / "planted_clean_ov"
    return save_checkpoint(w, out, extra_files={"planted.json": json.dumps(manifest)})


@pytest.fixture(scope="module")
def model(ctx_dir):
    import headscope

    return headscope.load(ctx_dir)


@pytest.fixture(scope="module")
def layer0(ctx_dir):
    from headscope.planted.build import read_manifest

    return read_manifest(ctx_dir)["layer0"]


@pytest.fixture(scope="module")
def calibration(model):
    from headscope.layer0.calibration import calibrate

    return calibrate(model, CALIBRATION_TEXT, window=128)


@pytest.fixture(scope="module")
def circuit(model, calibration):
    from headscope.layer0.contextual import build_circuit

    return build_circuit(model, calibration)


@pytest.fixture(scope="module")
def scan(model, circuit):
    from headscope.layer0.neurons import scan_neurons

    circ, choice = circuit
    return scan_neurons(circ, choice, model.tokenizer, top=50)


def test_selected_heads_are_the_planted_contextual_heads(circuit, layer0):
    _, choice = circuit
    assert choice.automatic
    assert choice.heads == sorted(layer0["contextual_heads"])
    assert "width" in choice.reason


def test_planted_neurons_found_with_precision_and_recall(scan, layer0):
    from headscope.layer0.neurons import DEFAULT_THRESHOLD

    assert scan.threshold == DEFAULT_THRESHOLD
    found = {nr["neuron"] for nr in scan.neurons}
    planted = {nr["index"] for nr in layer0["neurons"]}
    tp = len(found & planted)
    assert tp / max(len(found), 1) >= 0.95, (sorted(found), sorted(planted))
    assert tp / len(planted) >= 0.95
    maxes = [nr["max_contribution"] for nr in scan.neurons]
    assert maxes == sorted(maxes, reverse=True)


def test_top_and_bottom_tokens_are_the_planted_sets(scan, layer0):
    by_index = {nr["neuron"]: nr for nr in scan.neurons}
    for p in layer0["neurons"]:
        nr = by_index[p["index"]]
        k_pos, k_neg = len(p["positive_ids"]), len(p["negative_ids"])
        assert set(nr["top_ids"][:k_pos]) == set(p["positive_ids"]), p["name"]
        assert set(nr["bottom_ids"][:k_neg]) == set(p["negative_ids"]), p["name"]
        assert nr["top_tokens"][0] in p["positive"] and nr["bottom_tokens"][0] in p["negative"]


def test_planted_neuron_fires_on_positive_text_not_negative(model, circuit, layer0):
    from headscope.layer0.neurons import neuron_trace

    circ, _ = circuit
    for p in layer0["neurons"]:
        pos_text, neg_text = TEXTS[p["name"]]
        texts = [model.to_tokens(pos_text), model.to_tokens(neg_text)]
        tr = neuron_trace(circ, p["index"], model.tokenizer, texts)
        mean = lambda xs: sum(xs[8:]) / len(xs[8:])
        t_pos, t_neg = tr.texts
        assert mean(t_pos["true"]) > mean(t_neg["true"]) + 1.0, p["name"]
        assert mean(t_pos["predicted"]) > mean(t_neg["predicted"]) + 1.0, p["name"]
        assert tr.correlation > 0.8, (p["name"], tr.correlation)


def test_circuit_fidelity_on_texts(model, circuit):
    from headscope.layer0.contextual import circuit_fidelity

    circ, _ = circuit
    neutral = [model.to_tokens(NEUTRAL_TEXT)]         # same kind of text as the calibration
    fid = circuit_fidelity(circ, neutral, stride=8)
    assert fid.median_correlation > 0.95
    assert fid.median_fvu < 0.1
    # keyword-rich texts: the keyword heads' denominators differ from the calibrated ones,
    # which rescales the output (FVU grows) but keeps its direction
    rich = [model.to_tokens(t) for pair in TEXTS.values() for t in pair]
    fid_rich = circuit_fidelity(circ, rich, stride=8)
    assert fid_rich.median_correlation > 0.9
    assert fid_rich.median_fvu > fid.median_fvu


def test_denominators_contextual_heads_stable_and_predicted(model, layer0):
    """I.i.d. token windows from a small unigram distribution: the measured spread matches
    the exact i.i.d. prediction, the bounds hold, and broad heads beat local heads."""
    from headscope.layer0.denominators import denominator_stability

    g = torch.Generator().manual_seed(0)
    words = [i for p in layer0["neurons"][:1] for i in p["positive_ids"][:4]] + \
        model.tokenizer.encode(" town river people work school road market bread")
    ids = torch.tensor(words)
    wins = [torch.cat([torch.tensor([model.bos_id]), ids[torch.randint(len(ids), (63,), generator=g)]])
            for _ in range(48)]
    r = denominator_stability(model, wins, window=64, n_min=16, stride=16)
    ctx = [h for h in layer0["contextual_heads"] if h not in layer0["keyword_heads"]]
    local = layer0["categories"]["local"]
    for h in ctx:
        ratio = torch.tensor(r.measured_rel_std[h]) / torch.tensor(r.predicted_rel_std[h])
        assert ((ratio > 0.6) & (ratio < 1.6)).all(), (h, ratio)
        assert (torch.tensor(r.hoeffding_rel[h]) >= torch.tensor(r.measured_rel_quantile[h])).all()
    for h in layer0["keyword_heads"]:   # content-dependent: spread predicted, and larger
        assert r.median_rel_spread[h] > max(r.median_rel_spread[k] for k in ctx)
    assert max(r.median_rel_spread[h] for h in ctx) < min(r.median_rel_spread[h] for h in local)


def test_calibration_refused_for_other_model_or_processing(model, calibration, tiny_hf_dir, tmp_path):
    import headscope
    from headscope import HeadscopeError, Processing
    from headscope.layer0.calibration import load_calibration

    path = calibration.save(tmp_path / "calib.json")
    assert load_calibration(path, model).fingerprint == model.fingerprint
    with pytest.raises(HeadscopeError, match="another model"):
        load_calibration(path, headscope.load(tiny_hf_dir))
    with pytest.raises(HeadscopeError, match="other processing"):
        load_calibration(path, model.bound(Processing(fold_ln=True)))


def test_cli_calibrate_neurons_neuron(ctx_dir, layer0, tmp_path, capsys):
    from headscope.cli import main

    text = tmp_path / "calib.txt"
    text.write_text(CALIBRATION_TEXT, encoding="utf-8")
    calib = tmp_path / "calib.json"
    assert main(["calibrate", str(ctx_dir), "--text", str(text), "--window", "128", "--out", str(calib)]) == 0
    capsys.readouterr()
    assert main(["neurons", str(ctx_dir), "--calibration", str(calib), "--top", "5", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["heads"] == sorted(layer0["contextual_heads"])
    assert {n["neuron"] for n in out["neurons"]} == {p["index"] for p in layer0["neurons"]}
    for n in out["neurons"]:
        assert {"neuron", "max_contribution", "top_tokens", "bottom_tokens"} <= set(n) and len(n["top_tokens"]) == 5
    p = layer0["neurons"][0]
    uk, us = tmp_path / "uk.txt", tmp_path / "us.txt"
    uk.write_text(TEXTS[p["name"]][0]), us.write_text(TEXTS[p["name"]][1] + " <script>")
    html = tmp_path / "heat.html"
    assert main(["neuron", str(ctx_dir), str(p["index"]), "--text", str(uk), str(us), "--calibration", str(calib),
                 "--out", str(html), "--json"]) == 0
    tr = json.loads(capsys.readouterr().out)
    assert tr["neuron"] == p["index"] and tr["correlation"] > 0.8
    page = html.read_text()
    assert " &lt;" in page  # the token " <" is escaped
    own = re.sub(r'<script>.*?</script>|<script type="application/json" id="hs-[a-z-]+">[^<]*</script>', "", page,
                 flags=re.S)                    # the page's own hashed script and JSON data blocks
    assert "<script" not in own
    # corrupted calibration → one clear line, exit 2
    calib.write_text(calib.read_text()[:200])
    assert main(["neurons", str(ctx_dir), "--calibration", str(calib)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not valid JSON" in err[0]
