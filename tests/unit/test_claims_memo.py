"""The claims table's process memo (headscope.claims.work.shared): another load of the same
checkpoint is served the measurements already made; changed weights, config or processing, and
a model whose weights were replaced in memory, are measured afresh."""

from __future__ import annotations

import dataclasses
import json
import shutil

import pytest

import headscope
from headscope.claims import work
from headscope.core.weights import Processing
from headscope.reproduce import seed_claims, seed_reference


@pytest.fixture()
def ref():
    work.clear_memo()
    yield dataclasses.replace(seed_reference(seed_claims()), semantic_head=(1, 2))   # tiny has 3 heads
    work.clear_memo()


def form(model, ref):
    """The semantic head's W_QK form: a measurement of the weights (cheap on tiny)."""
    return work.Work(model, ref).form


def test_another_load_of_the_same_checkpoint_is_served_from_the_memo(tiny_hf_dir, tmp_path, ref):
    first = form(headscope.load(tiny_hf_dir), ref)
    copy = tmp_path / "copy"
    shutil.copytree(tiny_hf_dir, copy)                      # same files elsewhere: the same measurements
    assert form(headscope.load(tiny_hf_dir), ref) is first
    assert form(headscope.load(copy), ref) is first


def test_changed_weights_config_or_processing_are_measured_afresh(tiny_hf_dir, tmp_path, ref):
    model = headscope.load(tiny_hf_dir)
    first = form(model, ref)
    b = model.raw_block(1)
    changed = model.save(tmp_path / "changed", blocks={1: dataclasses.replace(b, W_Q=2.0 * b.W_Q)})
    other = form(headscope.load(changed), ref)
    assert other is not first

    cfg = tmp_path / "config"                                # same weights, another config.json
    shutil.copytree(tiny_hf_dir, cfg)
    c = json.loads((cfg / "config.json").read_text())
    c["layer_norm_epsilon"] = 1e-3
    (cfg / "config.json").write_text(json.dumps(c))
    assert form(headscope.load(cfg), ref) is not first

    assert form(model.bound(Processing.none()), ref) is not first
    W = model.weights()                                      # weights replaced in memory (a null draw, an edit)
    w1 = dataclasses.replace(W.blocks[1], W_Q=2.0 * W.blocks[1].W_Q)
    edited = model.with_weights(dataclasses.replace(W, blocks=[W.blocks[0], w1]))
    assert edited.fingerprint == model.fingerprint          # the file fingerprint cannot tell them apart
    assert form(edited, ref) is not first and form(edited, ref) is not form(edited, ref)   # never kept


def test_a_measurement_keeps_the_reference_parts_it_reads_in_its_key(tiny_hf_dir, ref):
    model = headscope.load(tiny_hf_dir)
    ref = dataclasses.replace(ref, contextual_heads=[0, 2])   # tiny's heads: the seed's [0, 2, 6, …] has no verdict here
    other = dataclasses.replace(ref, contextual_heads=[0, 1])
    windows = work.Work(model, ref).denominator_windows
    assert work.Work(model, other).denominator_windows is windows          # reads no reference

    def probe(r):                                                         # a measurement of the heads used
        return work._memo(work.Work(model, r), "probe", ("heads",), object)

    a = probe(ref)
    assert probe(ref) is a and probe(other) is not a


def test_a_measurement_set_by_hand_keeps_the_work_out_of_the_memo(tiny_hf_dir, ref):
    """A test's stand-in (fewer windows) must not become what the next table of the model reads."""
    model = headscope.load(tiny_hf_dir)
    w = work.Work(model, ref)
    w.denominator_windows = w.denominator_windows[:2]
    few = w.denominators
    assert work.Work(model, ref).denominators.n_texts > few.n_texts == 2
