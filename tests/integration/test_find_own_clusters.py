"""`reproduce --find` judges the semantic head it finds on the head's OWN clusters (issue 32 §3: "a
head whose categories are not among the shipped prompts must still be found"): a planted checkpoint
whose head 1.5 attends within categories that no shipped list holds (planted.layer1.UNSHIPPED_CATEGORIES)
is found by its weights, its Leiden clusters are the planted categories, and the survey rows pass on
them; a random head of the same model has no clusters of its own and earns no verdict."""

from __future__ import annotations

import dataclasses
import importlib

import pytest

R = importlib.import_module("headscope.reproduce")
CLAIMS = {c["id"]: c for c in R.seed_claims()["claims"]}
#: the rows that read the semantic head's categories (the authors' lists on GPT-2 Small)
CATEGORY_ROWS = ("survey_top", "survey_outlier", "three_rules_by_category", "semantic_pairs")


@pytest.fixture(scope="module")
def unshipped(tmp_path_factory):
    import headscope
    from headscope.planted import build
    from headscope.planted.layer1 import UNSHIPPED_CATEGORIES

    return headscope.load(build(tmp_path_factory.mktemp("unshipped") / "p", seed=0, categories=UNSHIPPED_CATEGORIES))


def _found_ref(model, head):
    from headscope.claims.own_clusters import own_categories
    from headscope.claims.reference import FOUND_REFERENCE

    seed = R.seed_reference(R.seed_claims())
    return dataclasses.replace(seed, name=FOUND_REFERENCE, semantic_head=head, own_categories=True,
                               survey_categories=own_categories(model, head))


def test_unshipped_categories_are_in_no_shipped_list():
    import json

    from headscope import shipped
    from headscope.planted.layer1 import UNSHIPPED_CATEGORIES

    def words(x):
        return {x.strip().lower()} if isinstance(x, str) else {w for y in x for w in words(y)}

    lists = [shipped.categories()] + [json.loads(shipped.read(f)) for f in ("categories_seed.json", "categories_rules.json")]
    known = {w for d in lists for k, v in d.items() if not k.startswith("_") for w in words(v)}
    assert not words(list(UNSHIPPED_CATEGORIES.values())) & known


def test_find_judges_the_semantic_head_on_its_own_clusters(unshipped):
    from headscope.claims.find import find_semantic_head
    from headscope.claims.work import Work
    from headscope.planted.build import read_manifest

    manifest = read_manifest(unshipped.directory)["layer1"]
    c = find_semantic_head(Work(unshipped, R.seed_reference(R.seed_claims())))
    assert c.found and c.head == [1, 5], c                   # by its weights: the shipped survey does not rank it first
    ref = _found_ref(unshipped, (1, 5))
    planted = sorted(sorted(v["tokens"]) for v in manifest["categories"].values())
    assert sorted(sorted(v) for v in ref.survey_categories.values()) == planted   # its clusters: the planted categories
    w = Work(unshipped, ref)
    for rid in CATEGORY_ROWS:
        out = R.CHECKS[rid](CLAIMS[rid], ref, w)
        assert R.verdict(out[3], out[5]) == (True, "PASS"), (rid, out[1], out[4][:300], out[5])
    assert "own clusters" in out[4] and "own clusters" in out[5].null


def test_a_random_head_has_no_clusters_to_be_judged_on(unshipped):
    from headscope._errors import NotApplicable
    from headscope.claims.work import Work

    ref = _found_ref(unshipped, (1, 4))                      # head 1.4: base weights, nothing planted
    assert ref.survey_categories == {}
    w = Work(unshipped, ref)
    for rid in CATEGORY_ROWS:
        with pytest.raises(NotApplicable, match="no categories of its own"):
            R.CHECKS[rid](CLAIMS[rid], ref, w)


def test_own_examples_skip_clusters_that_hold_a_filler():
    from headscope.claims.seed002 import own_examples

    cats = {"a": [" car", " bus", " truck", " van", " train"], "b": [" chair", " table", " sofa", " bed"],
            "c": [" tea", " milk", " juice"], "d": [" nurse", " doctor", " pilot", " clerk"]}
    got = own_examples(cats, [" table", " idea"])
    assert got == [{"query": " car", "targets": [" bus", " truck", " van"]},
                   {"query": " nurse", "targets": [" doctor", " pilot", " clerk"]}]
    assert own_examples(cats, [], n=1) == [{"query": " car", "targets": [" bus", " truck", " van"]}]
