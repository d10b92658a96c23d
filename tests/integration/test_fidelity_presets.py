"""Kernel-category rules and survey presets on the planted checkpoint (issue 16, items 6 and 7):
where the plant makes the two definitions agree, they agree; where they differ by definition,
they differ."""

from __future__ import annotations

import pytest
import torch

from headscope.layer0.kernels import analyse_kernels
from headscope.stats import robust_z
from headscope.semantic.survey import survey

pytestmark = pytest.mark.slow


def test_shape_and_width_rules_agree_on_the_planted_kernels(planted_model, planted_manifest):
    """The planted kernels are exact exponentials e^{−κδ} (κ = 0 for uniform heads): both rules
    recover every planted category, and the fitted rate is κ at every n checked."""
    rep = analyse_kernels(planted_model)
    heads = planted_manifest["layer0"]["heads"]
    assert rep.rule["name"] == "shape" and rep.heads[0].shape_positions == [128, 256, 512, 1023]
    for h in rep.heads:
        planted = heads[h.head]
        assert h.category == h.category_shape == h.category_width == planted["category"], h.head
        for k in h.shape_decay_rate:
            assert k == pytest.approx(planted["kappa"], rel=0.03, abs=2e-3), (h.head, h.shape_decay_rate)
    width = analyse_kernels(planted_model, rule_name="width")
    assert [h.category for h in width.heads] == [h.category for h in rep.heads]
    assert width.rule["name"] == "width"


def test_survey_presets_on_planted(planted_model, planted_manifest):
    """Both recipes rank the planted semantic head first; on the authors' 8 categories (only 4
    planted) it is no clear outlier, on the planted categories it is."""
    cats = {k: v["tokens"] for k, v in planted_manifest["layer1"]["categories"].items()}
    ours = survey(planted_model)
    theirs = survey(planted_model, preset="seed")
    own = survey(planted_model, preset="seed", categories=cats)
    for res in (ours, theirs, own):
        assert (res.rows[0].layer, res.rows[0].head) == (1, 5)
    assert ours.prompts["bos_query_in_loss"] is False and theirs.prompts["bos_query_in_loss"] is True
    assert theirs.prompts["length"] == 255 and theirs.prompts["n_prompts"] == 1
    assert ours.prompts["related"] == [["days", "months"], ["colours", "metals"]] and own.prompts["related"] == []

    def z(res):
        losses = torch.tensor([r.semantic_loss for r in res.rows], dtype=torch.float64)
        return float(robust_z(losses[:1], losses[1:])[0])

    assert z(own) < -3.5 < z(theirs)
    # the BOS row only dilutes the mean: including it multiplies the loss by (p − 1)/p
    incl = survey(planted_model, preset="seed", categories=cats, include_bos_query=True)
    excl = survey(planted_model, preset="seed", categories=cats, include_bos_query=False)
    a = {(r.layer, r.head): r.semantic_loss for r in incl.rows}
    for r in excl.rows[:5]:
        assert a[(r.layer, r.head)] == pytest.approx(r.semantic_loss * 255 / 256, rel=1e-9)
