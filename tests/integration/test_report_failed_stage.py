"""A report stage that raises HeadscopeError (not NotApplicable) is recorded as failed, the others
run, and ``headscope report`` exits 2 with one line naming it (it used to end the whole report)."""

from __future__ import annotations

import json

from headscope import HeadscopeError, cli
from headscope.report.builtin import default_stages
from headscope.report.stages import REGISTRY

REASON = "the calibration text has 3 tokens, expected at least 4096"


def _fail_calibration(monkeypatch):
    default_stages()

    def compute(self, ctx):
        raise HeadscopeError(REASON + "\nsecond line never shown")

    monkeypatch.setattr(REGISTRY["calibration"], "compute", compute)


def test_a_failed_stage_is_recorded_and_the_others_run(tiny_hf_dir, tmp_path, capsys, monkeypatch):
    out = tmp_path / "rep"
    argv = ["report", str(tiny_hf_dir), "--out", str(out), "--stages", "model", "calibration", "neurons",
            "attention", "--no-progress", "--json"]
    assert cli.main(argv) == 0                                   # an earlier, complete report
    capsys.readouterr()
    assert (out / "data" / "calibration.json").is_file()

    with monkeypatch.context() as m:
        _fail_calibration(m)
        assert cli.main(argv + ["--no-cache"]) == 2
    cap = capsys.readouterr()
    res = json.loads(cap.out)
    status = {s["name"]: s["status"] for s in res["stages"]}
    assert status == {"model": "computed", "calibration": "failed", "neurons": "failed", "attention": "computed"}
    assert res["failed"] == {"calibration": REASON, "neurons": "needs the calibration stage, which failed"}
    err = cap.err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("headscope: error: report stages calibration failed (" + REASON)
    assert "neurons failed" in err[0] and "Traceback" not in cap.err
    # nothing half-written: the failed stages' data (the earlier run's included) are gone, the rest is there
    assert not (out / "data" / "calibration.json").exists() and not (out / "data" / "neurons.json").exists()
    assert (out / "data" / "attention.json").is_file() and (out / "data" / "model.json").is_file()
    assert not list(out.rglob("*.tmp"))
    index = (out / "index.html").read_text()
    assert "Failed:" in index and REASON in index and "second line" not in index

    # text output: the reason on the stage's line
    assert cli.main(argv[:-1] + ["--no-cache"]) == 0            # unpatched: every stage computes again
    capsys.readouterr()
    with monkeypatch.context() as m:
        _fail_calibration(m)
        assert cli.main(argv[:-1] + ["--no-cache"]) == 2
    text = capsys.readouterr().out
    line = next(l for l in text.splitlines() if l.startswith("calibration"))
    assert "failed" in line and REASON in line
