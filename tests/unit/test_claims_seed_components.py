"""The seed reference names GPT-2 Small's own components (layer-0 heads 0, 2, 6, 8, 9, 10; L1H5; neuron 704).
On a model that lacks one (fewer heads, a smaller MLP0: every family's small checkpoints), a row that needs
it has no verdict and says why in one line, pointing at ``reproduce --find``; it used to FAIL with
"not measured: head index 5 out of range". A planted manifest's index out of range stays an error."""

from __future__ import annotations

import dataclasses

import pytest

import headscope
from headscope._errors import HeadscopeError, NotApplicable
from headscope.claims.reference import PLANTED_REFERENCE, check_layer0_heads, seed_component, seed_reference
from headscope.claims.work import Work
from headscope.reproduce import reference_for, reproduce
from headscope.testing.hub import write_hub_checkpoint


@pytest.fixture(scope="module")
def small_gpt2(tmp_path_factory):
    """GPT-2's layout and tokenizer, 2 layers of 3 heads (d_head 7), MLP0 of 84 neurons, n_ctx 40: L1H5,
    neuron 704 and the published heads 6, 8, 9, 10 are not in it."""
    d = write_hub_checkpoint(tmp_path_factory.mktemp("small") / "m", n_layer=2, n_embd=21, n_head=3, n_ctx=40)
    return headscope.load(d)


def test_rows_on_gpt2_small_components_the_model_lacks_have_no_verdict(small_gpt2):
    res = reproduce(small_gpt2, details=False)
    assert len(res.rows) > 30
    for r in res.rows:
        assert "out of range" not in r.note or r.verdict == "no verdict", (r.id, r.verdict, r.note)
        assert not r.note.startswith("not measured"), (r.id, r.note)           # no row fails for the wrong reason
        assert "\n" not in r.note
    lacking = {r.id: r for r in res.rows if "GPT-2 Small's component is not in this model" in r.note}
    # L1H5's rows and the rows on the published layer-0 heads (the neuron rows run on those heads' circuit)
    for rid in ("survey_top", "negative_eigenvalues", "steer_restores_self", "semantic_clusters", "explain_score",
                "contextual_heads", "circuit_fidelity", "neuron_704_texts", "keyword_density", "tv_contextual"):
        assert rid in lacking and lacking[rid].verdict == "no verdict" and lacking[rid].passed is None, rid
        assert "reproduce --find" in lacking[rid].note
    assert "head index 5 out of range" in lacking["survey_top"].note
    assert "layer-0 heads [6, 8, 9, 10] out of range" in lacking["circuit_fidelity"].note
    # the translation row names the positions it compared: n_ctx 40 caps 64, 128, 255 at the reference n = 39
    rows = {r.id: r for r in res.rows}
    assert "kernels at n = 32, 39:" in rows["translation_equivariance"].note, rows["translation_equivariance"].note


def test_work_refuses_each_missing_seed_component(small_gpt2):
    w = Work(small_gpt2, reference_for(small_gpt2))
    for get in (w._check_head, lambda: w._check_neuron(704), lambda: w.heads):
        with pytest.raises(NotApplicable, match="reproduce --find"):
            get()
    assert w._check_neuron(83) == 83                                   # MLP0's last neuron exists
    # a planted reference's indices are the model's own: out of range is a malformed manifest, an error
    planted = Work(small_gpt2, dataclasses.replace(reference_for(small_gpt2), name=PLANTED_REFERENCE))
    with pytest.raises(HeadscopeError, match="head index 5 out of range") as e:
        planted._check_head()
    assert not isinstance(e.value, NotApplicable)
    with pytest.raises(HeadscopeError, match=r"layer-0 heads \[6, 8, 9, 10\]"):
        planted.heads


def test_check_layer0_heads():
    assert check_layer0_heads([0, 2], 3) == [0, 2]
    for bad in ([3], [-1, 0]):
        with pytest.raises(HeadscopeError, match="out of range"):
            check_layer0_heads(bad, 3)
    from headscope.shipped import seed_claims

    seed = seed_reference(seed_claims())
    assert seed_component(seed, check_layer0_heads, [1], 3) == [1]
    with pytest.raises(NotApplicable, match=r"layer-0 heads \[3\] out of range"):
        seed_component(seed, check_layer0_heads, [1, 3], 3)


def test_find_without_any_candidate_leaves_the_rows_without_a_verdict(small_gpt2):
    """--find on a model whose search does not apply (OLMo 2's QK-norm: no QK form, so no semantic head, not even
    a best candidate): GPT-2 Small's L1H5 and neuron 704 stay in the reference as placeholders only, and the rows
    on them have no verdict with the search's reason (they failed "not measured: head index 5 out of range")."""
    from headscope.claims.find import Component, Found
    from headscope.claims.reference import FOUND_REFERENCE

    why = "not found: the QK bilinear form of the semantic head needs fixed QK and OV circuits"
    comps = {"semantic_head": Component(kind="semantic_head", label="not found", found=False, why=why),
             "dialect_neuron": Component(kind="dialect_neuron", label="not found", found=False, why="not found: x")}
    found = Found(components=comps, source="m", fingerprint="f")
    ref = dataclasses.replace(reference_for(small_gpt2), name=FOUND_REFERENCE, found=found, contextual_heads=[0, 1])
    w = Work(small_gpt2, ref)
    with pytest.raises(NotApplicable, match="semantic head not found: the QK bilinear form") as e:
        w._check_head()
    assert "\n" not in str(e.value)
    with pytest.raises(NotApplicable, match="dialect neuron not found: x"):
        w._check_neuron(ref.neuron)
    assert w._check_neuron(7) == 7                                         # another neuron: the model's own
    # a best candidate (found=False but a head) is measured, as before: the annotation then fails the row
    comps["semantic_head"] = dataclasses.replace(comps["semantic_head"], head=[1, 2], label="1.2 (best candidate)")
    assert Work(small_gpt2, dataclasses.replace(ref, semantic_head=(1, 2)))._check_head() == (1, 2)
