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
