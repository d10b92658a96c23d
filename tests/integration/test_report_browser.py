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

from headscope.report import ReportOptions, build_report


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
def report_dir(planted_model, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("browser-report") / "report"
    build_report(planted_model, out, ReportOptions(progress=False, n_neurons=4, deep_dives=1, semantic_tokens=1500,
                                                kernel_windows=4))
    return out


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
