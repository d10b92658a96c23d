"""Open the report of a planted checkpoint in headless Chromium (DevTools protocol).

Needs Debian's ``chromium`` package (``apt-get install -y chromium``) and the Python
package ``websocket-client``; skipped with the reason when either is missing.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest


FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-extensions", "--disable-default-apps", "--mute-audio", "--hide-scrollbars",
         "--remote-debugging-port=0", "--remote-allow-origins=*"]


def find_chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        path = shutil.which(name)
        if path:
            return path
    return None


class Browser:
    """Start headless Chromium, attach to one page, send commands, collect events."""

    def __init__(self, binary: str, user_data_dir: Path, timeout: float = 60.0):
        import websocket

        self.timeout = timeout
        user_data_dir.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen([binary, *FLAGS, f"--user-data-dir={user_data_dir}", "about:blank"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                     env={**os.environ, "LANG": "C.UTF-8"})
        port_file = user_data_dir / "DevToolsActivePort"
        deadline = time.time() + timeout
        while not (port_file.is_file() and len(port_file.read_text().split()) >= 2):
            if self.proc.poll() is not None:
                raise RuntimeError(f"chromium exited: {self.proc.stderr.read().decode(errors='replace')[-2000:]}")
            if time.time() > deadline:
                self.close()
                raise RuntimeError("chromium did not open its DevTools port")
            time.sleep(0.1)
        port, path = port_file.read_text().split()[:2]
        self.ws = websocket.create_connection(f"ws://127.0.0.1:{port}{path}", timeout=timeout, suppress_origin=True)
        self._id = 0
        self.events: list[dict] = []
        target = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        self.session = self.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Page", "Runtime", "Log"):
            self.call(f"{domain}.enable", session=True)

    def call(self, method: str, params: dict | None = None, session: bool = False) -> dict:
        self._id += 1
        msg = {"id": self._id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = self.session
        self.ws.send(json.dumps(msg))
        while True:
            reply = json.loads(self.ws.recv())
            if reply.get("id") == self._id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self.events.append(reply)

    def page(self, method: str, params: dict | None = None) -> dict:
        return self.call(method, params, session=True)

    def wait_event(self, method: str, since: int = 0) -> dict:
        deadline = time.time() + self.timeout
        while time.time() < deadline:
            for e in self.events[since:]:
                if e.get("method") == method:
                    return e
            self.events.append(json.loads(self.ws.recv()))
        raise TimeoutError(method)

    def evaluate(self, expression: str):
        r = self.page("Runtime.evaluate", {"expression": expression, "returnByValue": True, "awaitPromise": True})
        if "exceptionDetails" in r:
            raise RuntimeError(f"evaluate failed: {r['exceptionDetails']}")
        return r["result"].get("value")

    def navigate(self, url: str) -> None:
        mark = len(self.events)
        self.page("Page.navigate", {"url": url})
        self.wait_event("Page.loadEventFired", since=mark)

    def errors(self) -> list[dict]:
        """Console errors, uncaught exceptions and error log entries seen so far."""
        out = []
        for e in self.events:
            m, p = e.get("method"), e.get("params", {})
            if m == "Runtime.exceptionThrown":
                out.append(e)
            elif m == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
                out.append(e)
            elif m == "Log.entryAdded" and p.get("entry", {}).get("level") == "error":
                out.append(e)
        return out

    def close(self) -> None:
        try:
            if getattr(self, "ws", None):
                self.ws.close()
        finally:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()



CHROMIUM = find_chromium()
pytestmark = [
    pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install -y chromium)"),
]

SVG_SIZES = """Array.from(document.querySelectorAll('svg')).map(s => {
  const r = s.getBoundingClientRect(); return [r.width, r.height]; })"""


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    pytest.importorskip("websocket", reason="the browser test needs websocket-client (pip install websocket-client)")
    b = Browser(CHROMIUM, tmp_path_factory.mktemp("chromium-profile"))
    b.page("Emulation.setDeviceMetricsOverride", {"width": 1280, "height": 1600, "deviceScaleFactor": 1,
                                                  "mobile": False})
    yield b
    b.close()


@pytest.fixture(scope="module")
def report_dir(planted_report) -> Path:
    """The planted report test_report.py checks (tests/conftest.py: planted_report; its sample
    texts hold markup and an odd file name), opened as a reader would."""
    return planted_report[0]


def _check_figures(browser, page: Path) -> int:
    sizes = browser.evaluate(SVG_SIZES)
    assert len(sizes) == page.read_text().count("<svg "), "not every figure became an SVG element"
    assert sizes, f"{page.name} has no figures"
    for w, h in sizes:
        assert w > 10 and h > 10, f"{page.name}: a figure rendered with size {w}×{h}"
    return len(sizes)


def test_report_in_chromium(browser, report_dir, tmp_path):
    index = report_dir / "index.html"
    browser.navigate(index.as_uri())
    assert browser.evaluate("document.title").startswith("Report:")
    n_index = _check_figures(browser, index)
    assert n_index >= 6

    shot = browser.page("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": False})
    png = base64.b64decode(shot["data"])
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 20_000
    keep = Path(os.environ.get("HEADSCOPE_SCREENSHOT_DIR", tmp_path))
    keep.mkdir(parents=True, exist_ok=True)
    (keep / "report-index.png").write_bytes(png)

    # follow the first link to a neuron page, as a reader would
    href = browser.evaluate("(() => { const a = document.querySelector('a[href^=\"neurons/\"]');"
                            " a.click(); return a.getAttribute('href'); })()")
    browser.wait_event("Page.loadEventFired", since=len(browser.events) - 1)
    assert browser.evaluate("location.href").endswith(href)
    neuron = report_dir / href
    _check_figures(browser, neuron)
    n_tokens = browser.evaluate("document.querySelectorAll('.tokens .tok').length")
    assert n_tokens > 100
    shot = browser.page("Page.captureScreenshot", {"format": "png"})
    (keep / "report-neuron.png").write_bytes(base64.b64decode(shot["data"]))

    # and a head page
    head = report_dir / "heads" / "L0H0.html"
    browser.navigate(head.as_uri())
    _check_figures(browser, head)

    errors = browser.errors()
    assert not errors, f"console errors: {errors[:3]}"


def _centre(browser, selector: str) -> tuple[float, float]:
    """Scroll the element into view and return its centre in viewport coordinates."""
    x, y = browser.evaluate(f"""(() => {{ const e = document.querySelector({json.dumps(selector)});
      e.scrollIntoView({{block: 'center'}}); const r = e.getBoundingClientRect();
      return [r.x + r.width / 2, r.y + r.height / 2]; }})()""")
    return x, y


def _hover(browser, x: float, y: float) -> None:
    browser.page("Input.dispatchMouseEvent", {"type": "mouseMoved", "x": x, "y": y})


def _tooltip(browser) -> tuple[str, bool, list[float]]:
    return browser.evaluate("""(() => { const t = document.getElementById('hs-tip'); const r = t.getBoundingClientRect();
      return [t.textContent, t.hidden, [r.width, r.height]]; })()""")


def test_atlas_hover_click_sort_search(browser, report_dir, tmp_path):
    atlas = json.loads((report_dir / "data/atlas.json").read_text())["data"]
    rows = {(r["layer"], r["head"]): r for r in atlas["rows"]}
    lowest = min(atlas["rows"], key=lambda r: r["qk_self"])
    name = f"L{lowest['layer']}H{lowest['head']}"
    page = report_dir / "atlas.html"
    browser.navigate(page.as_uri())
    sizes = browser.evaluate("""Array.from(document.querySelectorAll('table.hgrid .cell')).map(c => {
      const r = c.getBoundingClientRect(); return [r.width, r.height]; })""")
    assert len(sizes) == page.read_text().count('class="cell"') == len(rows) * len(atlas["metrics"]) + 12   # a grid per metric + layer-0 kernels
    assert all(w >= 10 and h >= 10 for w, h in sizes)

    # hover a grid cell: the tooltip shows every figure of that head
    cell = f'#grid-qk_self a.cell[data-head="{name}"]'
    _hover(browser, *_centre(browser, cell))
    text, hidden, (w, h) = _tooltip(browser)
    assert not hidden and w > 50 and h > 30
    assert text.startswith(f"{name} (layer {lowest['layer']}, head {lowest['head']})")
    for line in (f"self score z: {lowest['qk_self']:.4g}", f"OV copying (effective): {lowest['ov_copying_effective']:.4g}",
                 "QK symmetry: ", "negative λ share: ", "positional share: ", "semantic loss: "):
        assert line in text, (line, text)
    category = json.loads((report_dir / "data/kernels.json").read_text())["data"]["heads"][0]["category"]
    _hover(browser, *_centre(browser, '#grid-ov_copying_effective a.cell[data-head="L0H0"]'))
    text = _tooltip(browser)[0]                                           # the kernels stage's category merged in
    assert text.startswith("L0H0 (layer 0, head 0)") and f"kernel category: {category.replace('_', ' ')}" in text
    _hover(browser, 2, 2)                                                 # away from every cell: hidden
    assert _tooltip(browser)[1] is True

    # sort the table of every head by the self score, then reverse it
    col = browser.evaluate("""Array.from(document.querySelectorAll('table.data thead th'))
      .findIndex(th => th.textContent.startsWith('self score z'))""")
    assert col > 0
    first = f"document.querySelector('table.data tbody tr').cells[0].textContent"
    browser.evaluate(f"document.querySelectorAll('table.data thead th')[{col}].click()")
    assert browser.evaluate(first) == name
    browser.evaluate(f"document.querySelectorAll('table.data thead th')[{col}].click()")
    highest = max(atlas["rows"], key=lambda r: r["qk_self"])
    assert browser.evaluate(first) == f"L{highest['layer']}H{highest['head']}"

    # search: a head and a token of the semantic deep dive's clusters
    sem = json.loads((report_dir / "data/semantic.json").read_text())["data"]["heads"][0]
    token = sem["clusters"][0]["tokens"][0]
    for query, href in ((name, f"heads/{name}.html"), (token.strip(), f"heads/L{sem['layer']}H{sem['head']}.html")):
        browser.evaluate(f"""(() => {{ const s = document.getElementById('hs-search'); s.value = {json.dumps(query)};
          s.dispatchEvent(new Event('input')); }})()""")
        links = browser.evaluate("Array.from(document.querySelectorAll('#hs-results a')).map(a => a.getAttribute('href'))")
        assert href in links, (query, links)
    shot = browser.page("Page.captureScreenshot", {"format": "png"})
    keep = Path(os.environ.get("HEADSCOPE_SCREENSHOT_DIR", tmp_path))
    keep.mkdir(parents=True, exist_ok=True)
    (keep / "report-atlas.png").write_bytes(base64.b64decode(shot["data"]))

    # click the cell: its head's page opens
    x, y = _centre(browser, cell)
    mark = len(browser.events)
    for kind in ("mousePressed", "mouseReleased"):
        browser.page("Input.dispatchMouseEvent", {"type": kind, "x": x, "y": y, "button": "left", "clickCount": 1})
    browser.wait_event("Page.loadEventFired", since=mark)
    assert browser.evaluate("location.href").endswith(f"heads/{name}.html")
    assert "Atlas: the head from its weights" in browser.evaluate("document.body.textContent")
    _check_figures(browser, report_dir / "heads" / f"{name}.html")

    # token heatmaps show their value on hover too
    neuron = sorted((report_dir / "neurons").glob("*.html"))[0]
    browser.navigate(neuron.as_uri())
    tok = ".tokens .tok[data-tip]"
    want = browser.evaluate(f"document.querySelector({json.dumps(tok)}).getAttribute('data-tip')")
    assert browser.evaluate(f"document.querySelector({json.dumps(tok)}).hasAttribute('title')") is False
    _hover(browser, *_centre(browser, tok))
    text, hidden, _ = _tooltip(browser)
    assert not hidden and text == want and " = " in text

    errors = browser.errors()
    assert not errors, f"console errors: {errors[:3]}"
