"""`headscope reproduce --find` (issue 32 §3): the model's own components, then every claim on them.

On the planted checkpoint the components found are the manifest's and every row whose mechanism
is planted passes; on random weights at realistic scales no row passes; every row says which
component it used and why, and the JSON lists every component."""

from __future__ import annotations

import contextlib
import io
import json

import pytest

from headscope.cli import main

#: rows whose mechanism the planted checkpoint plants and --find must locate by itself
PLANTED_ROWS = ("kernel_categories", "contextual_heads", "contextual_heads_auto", "denominator_worst_heads",
                "circuit_fidelity", "n_contextual_neurons", "neuron_704_texts", "naive_bayes", "neuron_topics",
                "neuron_transfer", "semantic_pairs", "self_suppression", "bos_fallback", "position_independence",
                "negative_eigenvalues", "steer_restores_self", "steer_alpha_sweep",
                # issue 32 §3: on the categories the head was found by; TV against the model's own null
                "survey_top", "survey_outlier", "three_rules_by_category", "tv_contextual",
                # the rows of issue 32 §2: the worst heads' keywords, the neurons' far keys, the head's
                # clusters and scores
                "keyword_density", "broad_context", "semantic_clusters", "explain_score")
#: rows whose published figure is GPT-2 Small's own component: no verdict under --find
GPT2_ONLY = ("neuron_704_top", "neuron_704_bottom", "sym_vs_skew")

#: rows about every layer-0 kernel that have no null yet (issue 32 §1; claims/null.py)
def _reproduce_json(*argv) -> tuple[int, dict]:
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        code = main(["reproduce", *map(str, argv), "--json", "--no-details"])
    return code, json.loads(buf.getvalue())


@pytest.fixture(scope="module", autouse=True)
def _forget_the_measurements():
    """The planted tables share their measurements through the process memo (claims.work.shared;
    test_reproduce.py runs just before this module): none is needed after it."""
    yield
    from headscope.claims.work import clear_memo

    clear_memo()


@pytest.fixture(scope="module")
def planted_found(planted_dir):
    """`reproduce PLANTED --find`: the search, then the table on what it found (in a whole-suite run
    served the measurements test_reproduce.py made where they agree)."""
    return _reproduce_json(planted_dir, "--find")


def test_find_locates_the_planted_components(planted_found, planted_manifest):
    _, d = planted_found
    assert d["reference"] == "found in the model (--find)"
    comps = {c["kind"]: c for c in d["components"]}
    assert set(comps) == {"contextual_heads", "semantic_head", "contextual_neurons", "dialect_neuron", "worst_heads"}
    assert all(c["found"] and c["why"] for c in comps.values()), comps
    l0, l1 = planted_manifest["layer0"], planted_manifest["layer1"]
    assert comps["contextual_heads"]["heads"] == sorted(l0["contextual_heads"])
    sem = l1["semantic_head"]
    assert comps["semantic_head"]["head"] == [sem["layer"], sem["head"]]
    assert comps["contextual_neurons"]["neurons"] == sorted(n["index"] for n in l0["neurons"])
    dialect = next(n["index"] for n in l0["neurons"] if n["name"] == "commonwealth_spelling")
    assert comps["dialect_neuron"]["neurons"] == [dialect]
    assert comps["worst_heads"]["heads"] == sorted(l0["keyword_heads"])
    # the criteria are against nulls, and the components clear them
    for kind in ("contextual_heads", "semantic_head", "dialect_neuron"):
        assert comps[kind]["null"]["clears"] is True, kind


def test_find_on_the_planted_checkpoint_passes_the_planted_rows(planted_found, planted_manifest):
    _, d = planted_found
    rows = {r["id"]: r for r in d["rows"]}
    assert {rid: rows[rid]["verdict"] for rid in PLANTED_ROWS} == {rid: "PASS" for rid in PLANTED_ROWS}
    assert all(rows[rid]["verdict"] == "no verdict" and "GPT-2-specific figure" in rows[rid]["note"] for rid in GPT2_ONLY)
    # every row names its component and why; the rows ran on the found components
    assert all(r["component"] and r["why"] for r in d["rows"])
    assert rows["survey_top"]["component"] == "1.5" and rows["neuron_704_texts"]["component"].startswith("neuron ")
    assert rows["contextual_heads"]["measured"] == sorted(planted_manifest["layer0"]["contextual_heads"])
    assert rows["n_contextual_neurons"]["measured"] == sorted(n["index"] for n in planted_manifest["layer0"]["neurons"])


@pytest.fixture(scope="module")
def random_report(tmp_path_factory):
    """The optional claims page of a report on random weights at GPT-2's scales (headscope.testing.hub;
    small all-distinct widths): neither GPT-2 Small nor planted, so the table runs with --find."""
    from headscope import load
    from headscope.report import ReportOptions, build_report
    from headscope.testing.hub import write_hub_checkpoint

    d = write_hub_checkpoint(tmp_path_factory.mktemp("random") / "r", n_layer=2, n_embd=320, n_head=5, n_ctx=256,
                             seed=7)
    out = tmp_path_factory.mktemp("random_report") / "report"
    build_report(load(d), out, ReportOptions(stages=["claims"], progress=False))
    return out


def test_find_on_random_weights_passes_no_row(random_report, check_report):
    from headscope.shipped import seed_claims

    d = check_report(random_report)["claims"]                  # finite JSON, balanced HTML
    assert d["reference"] == "found in the model (--find)" and not d["ok"]
    assert [r["id"] for r in d["rows"]] == [c["id"] for c in seed_claims()["claims"]]     # every row, the newest too
    passed = [r for r in d["rows"] if r["passed"] is True]
    assert not passed, [(r["id"], r["measured"], r["note"][:200]) for r in passed]      # no row passes
    assert {r["verdict"] for r in d["rows"] if r not in passed} <= {"FAIL", "indistinguishable from random",
                                                                    "no verdict"}
    comps = {c["kind"]: c for c in d["components"]}
    assert len(comps) == 5 and all(r["component"] and r["why"] for r in d["rows"])
    for c in comps.values():                     # nothing random is found, and the JSON says why
        assert c["found"] is False and c["why"].startswith("not found: "), c


def test_a_row_on_a_component_not_found_cannot_pass():
    from headscope.claims.find import Component, Found
    from headscope.reproduce import ClaimRow

    found = Found(components={"semantic_head": Component(kind="semantic_head", label="1.2 (best candidate)",
                                                         found=False, why="not found: nothing clears its null")},
                  source="x", fingerprint="y")
    row = ClaimRow(id="bos_fallback", seed="002", claim="c", measure="m", published=0.5, measured=0.9, tolerance="t",
                   passed=True, note="n", verdict="PASS")
    found.annotate([row])
    assert (row.passed, row.verdict, row.component) == (False, "FAIL", "1.2 (best candidate)")
    assert row.why == "not found: nothing clears its null" and row.note.startswith("semantic head not found")


def test_report_claims_page_links_each_row_to_its_component(random_report):
    from headscope.report import default_stages
    from headscope.report.stages import select

    assert "claims" not in [s.name for s in select(default_stages(), None)]      # optional: minutes on GPT-2
    data = json.loads((random_report / "data" / "claims.json").read_text(encoding="utf-8"))["data"]
    page = (random_report / "claims.html").read_text(encoding="utf-8")
    for r in data["rows"]:
        assert f"<td>{r['id']}</td>" in page
    sem = next(c for c in data["components"] if c["kind"] == "semantic_head")
    l, h = sem["head"]                                                       # the best candidate's page
    assert f'<a href="heads/L{l}H{h}.html">{l}.{h}</a>' in page                     # the row links its head …
    assert "All claims" in (random_report / "heads" / f"L{l}H{h}.html").read_text(encoding="utf-8")   # … which exists
    assert "&lt;a href" not in page                                          # links are links, not escaped text
    assert "not found: " in page and "claims.html" in (random_report / "index.html").read_text(encoding="utf-8")


def test_contextual_neurons_below_the_seeds_threshold_are_still_found(planted_model, planted_manifest):
    """The planted neurons' readouts scaled by 0.25: every score falls below the seed's 5.0 (the
    absolute bar finds none) but not against random readouts of their own norm, nor the break."""
    import dataclasses

    from headscope.claims.find import find_contextual_neurons
    from headscope.layer0.neurons import DEFAULT_THRESHOLD
    from headscope.claims.work import Work as _Work
    from headscope.reproduce import seed_claims, seed_reference

    planted = sorted(n["index"] for n in planted_manifest["layer0"]["neurons"])
    W = planted_model.weights()
    b = W.blocks[0]
    W_in = b.W_in.clone()
    W_in[:, planted] *= 0.25
    scaled = planted_model.with_weights(dataclasses.replace(W, blocks=[dataclasses.replace(b, W_in=W_in),
                                                                      *W.blocks[1:]]))
    w = _Work(scaled, seed_reference(seed_claims()))
    c, bar = find_contextual_neurons(w, sorted(planted_manifest["layer0"]["contextual_heads"]))
    assert c.found and c.neurons == planted, c
    scores = {x["neuron"]: x["score"] for x in c.candidates}
    assert max(scores[j] for j in planted) < DEFAULT_THRESHOLD and bar < DEFAULT_THRESHOLD


def test_find_with_revisions_is_refused_in_one_line(tiny_hf_dir, tmp_path, capsys):
    code = main(["reproduce", str(tiny_hf_dir), "--find", "--revisions", "main", "--revisions-out", str(tmp_path / "r")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and err == ["headscope: error: --find runs on one model; leave out --revisions"]
    assert not (tmp_path / "r").exists()
