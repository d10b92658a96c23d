"""Issue 36, trust nothing on disk: what the bad-input matrix cannot say in one case — a wedged
directory that the next writer must recover, a cached stage edited by hand, a model whose
directory is re-planted while it is in memory."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from headscope.cli import main


def _steer(model: str, out: Path) -> list[str]:
    return ["steer", model, "1.2", "--scale-negative", "0", "--out", str(out)]


@pytest.mark.parametrize("replace", ["directory", "symlink", "missing"])
def test_a_killed_commit_whose_staging_lock_was_replaced_is_recovered(replace, tiny_hf_dir, tmp_path, capsys):
    """A killed commit whose staging lock became a directory, a link or nothing: the next writer finishes it
    (it used to skip it as a live writer's forever, so `info` said "half-committed" after every rerun)."""
    out = tmp_path / "steered"
    assert main(_steer(str(tiny_hf_dir), out)) == 0
    victim = tmp_path / "victim.txt"
    victim.write_text("mine\n")
    staging = out / ".headscope-staging-0123456789ab"
    staging.mkdir()
    (staging / "extra.txt").write_text("committed by the killed run\n")
    (staging / ".headscope-commit.json").write_text(json.dumps({"files": ["extra.txt"], "stale": []}))
    if replace == "directory":
        (staging / ".headscope-lock").mkdir()
    elif replace == "symlink":
        os.symlink(victim, staging / ".headscope-lock")
    capsys.readouterr()
    assert main(["info", str(out)]) == 2
    assert "half-committed" in capsys.readouterr().err
    assert main(_steer(str(tiny_hf_dir), out)) == 0                 # the next writer rolls it forward
    assert not staging.exists()
    assert main(["info", str(out)]) == 0, capsys.readouterr().err
    assert victim.read_text() == "mine\n"
    manifest = json.loads((out / ".headscope-manifest.json").read_text())
    assert not (out / "extra.txt").exists() and "extra.txt" not in manifest["files"]   # rolled in, then stale
    assert "steering.json" in manifest["files"]


def _first_number(d):
    """(container, key) of the first int/float leaf of `d` (not a bool)."""
    items = d.items() if isinstance(d, dict) else enumerate(d)
    for k, v in items:
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            return d, k
        if isinstance(v, (dict, list)) and (found := _first_number(v)) is not None:
            return found
    return None


@pytest.mark.parametrize("edit", ["value changed", "data replaced"])
def test_a_report_stage_cache_edited_by_hand_is_recomputed(edit, tiny_hf_dir, tmp_path, capsys):
    """data/<stage>.json edited with its key kept: not reused (its sha256 is not the manifest's), recomputed —
    the report is byte-identical to a fresh one; it used to be reused (wrong numbers) or to raise a traceback."""
    argv = ["report", str(tiny_hf_dir), "--stages", "model", "--no-progress", "--json"]
    out = tmp_path / "rep"
    assert main([*argv, "--out", str(out)]) == 0
    fresh = {p.relative_to(out).as_posix(): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    doc = json.loads((out / "data/model.json").read_text())
    if edit == "value changed":
        box, k = _first_number(doc["data"])
        box[k] = box[k] + 7
    else:
        doc["data"] = {"surprise": [1, 2]}
    (out / "data/model.json").write_text(json.dumps(doc))
    capsys.readouterr()
    assert main([*argv, "--out", str(out)]) == 0, capsys.readouterr().err
    run = json.loads(capsys.readouterr().out)
    assert run["stages"][0]["cached"] is False
    again = {p.relative_to(out).as_posix(): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    assert again == fresh
    assert main([*argv, "--out", str(out)]) == 0                     # unedited now: reused
    assert json.loads(capsys.readouterr().out)["stages"][0]["cached"] is True
