"""The atlas's columns come from one spec (maps.atlas.COLUMNS) that every view reads."""

from __future__ import annotations

import dataclasses
import re

from headscope.maps.atlas import COLUMNS, METRICS, SIGNED, UNIT, Atlas, HeadRow
from headscope.report.views.atlas import AtlasView


def _row(layer: int, head: int, **values) -> HeadRow:
    base = dict(layer=layer, head=head, qk_symmetry=0.25, qk_sym_rms=1.5, qk_skew_rms=0.5, qk_negative_fraction=0.125,
                n_negative_top=8, n_eigen_top=64, qk_self=-1.75, n_self_rows=100, ov_copying_effective=0.375,
                ov_copying_framework=-0.875, qk_negative_mass=0.5625, positional_share=0.625, kernel_category="local_decay" if layer == 0 else None, semantic_loss=3.5)
    return HeadRow(**{**base, **values})


def _atlas() -> Atlas:
    rows = [_row(0, 0), _row(0, 1, qk_self=None), _row(1, 0, semantic_loss=None), _row(1, 1)]
    return Atlas(fingerprint="0" * 64, processing={}, config={"n_layers": 2, "n_heads": 2, "d_model": 6, "d_head": 3},
                 layers=[0, 1], spec={"n_tokens": 10, "frequency": "tokenizer rank", "top": 64, "window": 16},
                 rows=rows)


def test_every_column_is_a_head_row_field_and_the_derived_sets_agree():
    fields = {f.name for f in dataclasses.fields(HeadRow)}
    assert {c.key for c in COLUMNS} <= fields
    assert list(METRICS) == [c.key for c in COLUMNS if c.scale != "category"]
    assert SIGNED == {"qk_self", "ov_copying_effective", "ov_copying_framework", "dla_logit_diff"}
    assert UNIT == {"qk_symmetry", "qk_negative_fraction", "qk_negative_mass", "positional_share"}
    assert all(len(c.short) <= 8 for c in COLUMNS)


def test_text_render_json_and_report_table_show_every_column_in_order():
    a = _atlas()
    header = a.render().splitlines()[0]
    positions = [header.index(c.short) for c in COLUMNS]
    assert positions == sorted(positions)
    first = a.render().splitlines()[1].split()
    assert first[:4] == ["0.0", "-1.750", "0.375", "-0.875"] and "local_decay" in first and first[-1] == "3.500"
    d = a.to_dict()
    assert list(d["metrics"]) == list(METRICS)
    table = str(AtlasView(d, d["rows"], links=False).table())
    heads = re.findall(r"<th(?: [^>]*)?>([^<]*)</th>", table)
    assert heads[:len(COLUMNS) + 1] == ["head", *(c.label for c in COLUMNS)]
    assert "local decay" in table


def test_a_grid_per_metric_that_some_head_has():
    d = _atlas().to_dict()
    grids = str(AtlasView(d, d["rows"], links=False).grids(METRICS))
    assert [m for m in re.findall(r'id="grid-([a-z_]+)"', grids)] == [*METRICS, "kernel_category"]


def test_tooltip_and_head_page_show_every_column_with_its_detail():
    """A column added to the spec shows in the tooltip and on the head page without more code."""
    import headscope.maps.atlas as A

    d = _atlas().to_dict()
    view = AtlasView(d, d["rows"], links=False)
    r = d["rows"][0]
    tip = view.tip(r).splitlines()
    assert tip[0] == "L0H0 (layer 0, head 0)"
    assert [line.split(": ")[0] for line in tip[1:]] == [c.label for c in COLUMNS]
    assert "self score z: -1.75 (over 100 tokens)" in tip
    assert "negative λ share: 0.125 (8 of the top 64)" in tip and "kernel category: local decay" in tip
    page = str(view.head_section(r))
    assert all(c.label in page for c in COLUMNS) and "rms sym 1.5, skew 0.5" in page
    extra = A.Column("extra_metric", "an extra metric", "made up for this test", "extra", "signed", "of {n_self_rows}")
    rows = [{**row, "extra_metric": 0.25} for row in d["rows"]]
    try:
        A.OPTIONAL_COLUMNS += (extra,)
        import headscope.report.views.atlas as V
        V.OPTIONAL_COLUMNS = A.OPTIONAL_COLUMNS
        view = AtlasView(d, rows, links=False)
        assert "an extra metric: 0.25 (of 100)" in view.tip(rows[0]).splitlines()
        assert "an extra metric" in str(view.head_section(rows[0]))
        assert "an extra metric" not in AtlasView(d, d["rows"], links=False).tip(r)   # not computed: not shown
    finally:
        A.OPTIONAL_COLUMNS = A.OPTIONAL_COLUMNS[:-1]
        V.OPTIONAL_COLUMNS = A.OPTIONAL_COLUMNS


def test_readme_defines_every_column():
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    table = [line for line in readme.splitlines() if line.startswith("| `")]
    for c in COLUMNS + __import__("headscope.maps.atlas", fromlist=["OPTIONAL_COLUMNS"]).OPTIONAL_COLUMNS:
        assert any(f"`{c.key}`" in line.split("|")[1] for line in table), c.key
