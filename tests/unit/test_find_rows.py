"""Which component each claims row reads under `reproduce --find` (claims.find.ROW_COMPONENTS): seed
002's rows the semantic head, seed 000's a layer-0 component — the report's claims page links each row
to that component's page."""

from __future__ import annotations


def test_every_row_reads_its_seeds_component():
    from headscope.claims.find import LAYER0, SEMANTIC, Component, Found
    from headscope.shipped import seed_claims

    comps = {k: Component(kind=k, label=k, found=True, why=k)
             for k in ("contextual_heads", SEMANTIC, "contextual_neurons", "dialect_neuron", "worst_heads")}
    found = Found(components=comps, source="x", fingerprint="y")
    for c in seed_claims()["claims"]:
        kind = found.component_of(c["id"]).kind
        if c["seed"].startswith("002"):
            assert kind == SEMANTIC, c["id"]
        else:
            assert kind != SEMANTIC, (c["id"], kind)
    assert found.component_of("denominator_concentration") is LAYER0      # every layer-0 head's denominator


def test_claims_page_links_the_concentration_row_to_no_single_head():
    from headscope.report.views.reproduce import row_component

    d = {"components": [{"kind": "semantic_head", "label": "1.5", "head": [1, 5], "found": True, "why": "w"}]}
    assert row_component(d, {"id": "denominator_concentration"}) is None          # "every layer-0 head"
    assert row_component(d, {"id": "survey_top"})["label"] == "1.5"
