"""What the commands and the report say about themselves (issue 35's presentation defects): a stage that
did not apply is never called computed, options that do not apply are refused, rotary models get no
empty W_pos figure and keep their kernel categories in the atlas, the architecture is stated, and
legends leave the data visible."""

from __future__ import annotations

import json
import re

import pytest

import headscope
from headscope import cli
from headscope._errors import NotApplicable


@pytest.fixture(scope="module")
def rotary_dir(tmp_path_factory):
    """The planted rotary checkpoint (Qwen2 layout) with two layers: quick to build and to analyse."""
    from headscope.planted import rotary

    return rotary.build(tmp_path_factory.mktemp("rot") / "ckpt", seed=0, n_layers=2)


def test_report_says_not_applicable_not_computed(tiny_hf_dir, tmp_path, capsys, monkeypatch):
    from headscope.report.builtin.model import ModelStage

    def refuse(self, ctx):
        raise NotApplicable("the test's reason")
    monkeypatch.setattr(ModelStage, "compute", refuse)
    out = tmp_path / "r"
    assert cli.main(["report", str(tiny_hf_dir), "--out", str(out), "--stages", "model", "--no-progress"]) == 0
    line = [l for l in capsys.readouterr().out.splitlines() if l.startswith("model ")][0]
    assert "not applicable" in line and "computed" not in line and "the test's reason" in line
    assert json.loads((out / "data" / "model.json").read_text())["data"] == {"not_applicable": "the test's reason"}
    # cached on the rerun: still not applicable, in --json too
    assert cli.main(["report", str(tiny_hf_dir), "--out", str(out), "--stages", "model", "--no-progress",
                     "--json"]) == 0
    st = json.loads(capsys.readouterr().out)["stages"][0]
    assert st["status"] == "not applicable" and st["not_applicable"] == "the test's reason" and st["cached"]


@pytest.mark.parametrize("option", [["--query", " the"], ["--c", "gpt2"], ["--corpus", "x.txt"], ["--sample-corpus"],
                                    ["--max-windows", "8"], ["--window", "16"]])
def test_kernels_refuses_options_that_do_not_apply_to_a_rotary_model(rotary_dir, option, capsys):
    assert cli.main(["kernels", str(rotary_dir), *option]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"headscope: error: {option[0]} does not apply to a rotary model")


def test_kernels_honours_out_n_ref_and_rule_on_a_rotary_model(rotary_dir, tmp_path, capsys):
    out = tmp_path / "k"
    assert cli.main(["kernels", str(rotary_dir), "--n-ref", "10", "--rule", "width", "--out", str(out), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["n_ref"] == 10
    saved = json.loads((out / "kernels.json").read_text())
    assert saved["n_ref"] == 10 and saved["rule"] == "width" and "<svg" in (out / "kernels.svg").read_text()
    assert cli.main(["kernels", str(rotary_dir), "--rule", "width"]) == 0
    text = capsys.readouterr().out
    assert "width rule" in text and all(c in text for c in saved["width"])


def test_rotary_report_model_table_states_the_architecture_and_draws_no_empty_figure(rotary_dir, tmp_path):
    from headscope.report import ReportOptions, build_report

    out = tmp_path / "r"
    build_report(headscope.load(rotary_dir), out, ReportOptions(progress=False, stages=["model"]))
    page = (out / "index.html").read_text()
    assert "Positional embedding norms" not in page and "Token embedding norms" in page
    for s in ("Qwen2", "rotary on 32/32 dims", "base 10000", "RMSNorm", "key/value heads", "global (every layer)",
              "prepended by headscope"):
        assert s in page, s


def test_info_states_family_positions_kv_heads_norm_windows_and_bos(rotary_dir, tiny_hf_dir, capsys):
    assert cli.main(["info", str(rotary_dir)]) == 0
    text = capsys.readouterr().out
    for s in ("family       Qwen2", "positions    rotary on 32/32 dims of each head (100%), base 10000, scaling none",
              "key/value heads", "norm         RMSNorm", "attention windows global", "BOS          '<|endoftext|>'"):
        assert s in text, s
    assert cli.main(["info", str(tiny_hf_dir)]) == 0
    assert "learned absolute" in capsys.readouterr().out


def test_atlas_shows_the_relative_kernel_category_of_rotary_layer0_heads(rotary_dir):
    from headscope.layer0 import relative
    from headscope.maps.atlas import atlas
    from headscope.report.builtin.atlas import merged_rows

    model = headscope.load(rotary_dir)
    cats = relative.relative_kernels(model.weights()).shape
    a = atlas(model, n_tokens=64)
    assert [r.kernel_category for r in a.rows if r.layer == 0] == cats
    rows = merged_rows({"rows": [{"layer": 0, "head": h, "kernel_category": None, "semantic_loss": None}
                                 for h in range(len(cats))]}, {"kernels": {"relative": True, "shape": cats}})
    assert [r["kernel_category"] for r in rows] == cats


def test_revisions_legends_leave_the_last_points_visible():
    from headscope.report.views.revisions import figure

    # training steps crowd at the right (as Pythia's do), the last values are the largest: top right
    revs = [{"revision": f"step{s}", "step": s, "summary": {"n_pass": p, "n_fail": 9 - p,
                                                           "claims": {"c1": {"measured": float(p)}}}}
            for s, p in ((1000, 1), (130000, 9), (140000, 9), (143000, 9))]
    svg = str(figure({"command": "reproduce", "model": "m", "revisions": revs}))
    for panel in re.findall(r'<svg x=.*?</svg>', svg):
        rects = [tuple(float(v) for v in m) for m in re.findall(
            r'<rect x="([-\d.]+)" y="([-\d.]+)" width="([\d.]+)" height="([\d.]+)" fill="#ffffff" fill-opacity',
            panel)]
        points = [(float(x), float(y)) for x, y in re.findall(r'<circle cx="([-\d.]+)" cy="([-\d.]+)"', panel)]
        assert rects and points
        for x, y, w, h in rects:
            assert not any(x <= px <= x + w and y <= py <= y + h for px, py in points), (panel[:80], (x, y, w, h))
