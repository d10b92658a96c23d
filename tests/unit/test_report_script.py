"""The report's one inline script: its CSP hash, data blocks safe inside <script>, grid and heatmap attributes."""

from __future__ import annotations

import base64
import hashlib
import json
import re

from headscope.report import figures as F
from headscope.report import html as H

MARKUP = ["</script><script>alert(1)</script>", "<!--", "a & b > c", "<|endoftext|>", "line\u2028sep\u2029x", " colour"]


def test_csp_allows_exactly_the_inline_script():
    digest = base64.b64encode(hashlib.sha256(H.SCRIPT.encode("utf-8")).digest()).decode()
    assert H.CSP.endswith(f"script-src 'sha256-{digest}'") and "default-src 'none'" in H.CSP
    assert "unsafe" not in H.CSP.split("script-src")[1]
    assert "</script" not in H.SCRIPT.lower() and "<!--" not in H.SCRIPT
    assert "innerHTML" not in H.SCRIPT and "eval(" not in H.SCRIPT      # it writes text, never markup
    page = H.page("t", H.Safe("<p>x</p>"), path="heads/L0H1.html")
    assert page.count("<script>") == 1 and f"<script>{H.SCRIPT}</script>" in page and f'content="{H.CSP}"' in page


def test_script_json_cannot_end_its_block_and_round_trips():
    text = H.script_json({"tokens": MARKUP, "n": 1.5})
    assert not set(text) & set("<>&\u2028\u2029")
    assert json.loads(text) == {"n": 1.5, "tokens": MARKUP}
    block = H.data_script("hs-search-data", MARKUP)
    m = re.fullmatch(r'<script type="application/json" id="hs-search-data">([^<]*)</script>', block)
    assert m and json.loads(m.group(1)) == MARKUP
    box = H.search_box([(t, f"note {t}", "heads/L0H0.html") for t in MARKUP])
    assert box.count("<script") == 1 and "alert(1)</script>" not in box and 'id="hs-search"' in box


def test_head_grid_cells_escape_their_tips():
    tips = [[f"L{l}H{h} {MARKUP[0]}" for h in range(3)] for l in range(2)]
    vals = [[0.5, None, -1.0], [1.0, 0.0, "local"]]
    grid = F.head_grid(vals, layers=[4, 7], colour=lambda v: "#123456", href=lambda l, h: f"heads/L{l}H{h}.html",
                       tips=tips, titles=True, caption="<i>c</i>")
    assert "<script" not in grid and "<i>" not in grid and "&lt;/script&gt;" in grid
    cells = re.findall(r'<a class="cell" href="heads/L(\d)H(\d)\.html" data-head="L\1H\2" style="background:#123456" '
                       r'aria-label="([^"]*)" title="([^"]*)"></a>', grid)
    assert [(c[0], c[1]) for c in cells] == [(str(l), str(h)) for l in (4, 7) for h in range(3)]
    assert [c[2] for c in cells][:3] == ["L4H0: 0.5", "L4H1: —", "L4H2: -1"]
    plain = F.head_grid(vals, layers=[4, 7], colour=lambda v: "#ffffff")
    assert "<a " not in plain and "title=" not in plain and plain.count('<span class="cell"') == 6


def test_token_heatmap_value_on_hover():
    out = F.token_heatmap(["<b>", " x"], [1.25, -2.0], value_name="n<7>")
    tips = re.findall(r'title="([^"]*)" data-tip="([^"]*)"', out)
    assert len(tips) == 2 and all(a == b for a, b in tips)
    assert "n&lt;7&gt; = 1.25" in tips[0][0] and "<b>" not in out
