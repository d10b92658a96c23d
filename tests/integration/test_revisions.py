"""`--revisions` on a hub cache holding one tiny GPT-2 at several revisions whose weights move in a
known way: revision k has head 1.0's keys W_K = α_k·(−W_Q) + (1 − α_k)·W_K(random), so the head
turns into a self-suppressing (semantic-style) head as α grows. The table's metric must follow α;
reruns reuse complete revisions (and only those) and give byte-identical JSON; bad lists and
missing revisions are one line, exit 2, nothing written."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from safetensors.torch import load_file, save_file

from headscope.cli import main
from headscope.maps.revisions import parse_revisions, revision_file, training_step
from headscope.testing.hub import cache_directory, write_hub_checkpoint

REPO = "tiny-org/tiny-pythia-like"
D, DH = 24, 8
#: revision → α (named out of order on purpose: the run order is by step)
ALPHAS = {"step4000": 1.0, "step0": 0.0, "step1000": 0.6, "step2000": 0.8, "step500": 0.4}
OPTS = ["--tokens", "200", "--no-kernels"]


@pytest.fixture(scope="module")
def hub_cache(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("revcache")
    base = write_hub_checkpoint(root / "base", n_layer=2, n_embd=D, n_head=3, n_ctx=32, n_inner=40, seed=0)
    sd = load_file(base / "model.safetensors")
    cache = root / "hub"
    for name, a in ALPHAS.items():
        s = {k: v.clone() for k, v in sd.items()}
        W = s["h.1.attn.c_attn.weight"]                       # Conv1D [d_model, 3·d_model]: Q | K | V columns
        W[:, D:D + DH] = a * -W[:, 0:DH] + (1 - a) * W[:, D:D + DH]     # head 0's K columns
        d = root / f"rev-{name}"
        shutil.copytree(base, d)
        save_file(s, d / "model.safetensors", metadata={"format": "pt"})
        cache_directory(cache, REPO, d, revision=name)
    return cache


@pytest.fixture
def offline(hub_cache, monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(hub_cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(hub_cache))
    return hub_cache


def run(capsys, *argv):
    capsys.readouterr()
    code = main([str(a) for a in argv])
    out = capsys.readouterr()
    assert "Traceback" not in out.err
    return code, out.out, out.err


def snapshot(d: Path) -> dict[str, tuple[bytes, int]]:
    return {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in sorted(d.iterdir()) if p.is_file()}


# -- the revisions list -----------------------------------------------------------------------


def test_parse_orders_by_step_then_as_given():
    assert parse_revisions("step8000, main,step1000,foo,step0") == ["step0", "step1000", "step8000", "main", "foo"]
    assert training_step("step143000") == 143000 and training_step("main") is None
    assert training_step("step1000-v2") is None
    assert revision_file("step1000") == "rev-step1000.json"
    assert revision_file("a/b") != revision_file("a_b") and "/" not in revision_file("a/b")


@pytest.mark.parametrize("spec, words", [("step1,,step2", "empty"), ("step1,step2,step1", "step1 more than once"),
                                         (",", "empty"), ("step1, step1", "more than once")])
def test_bad_lists_are_one_line_and_write_nothing(offline, tmp_path, capsys, spec, words):
    out = tmp_path / "out"
    code, stdout, err = run(capsys, "atlas", REPO, "--revisions", spec, "--revisions-out", out, *OPTS)
    assert code == 2 and stdout == ""
    assert err.startswith("headscope: error: --revisions") and err.count("\n") == 1 and words in err, err
    assert not out.exists()


def test_mixed_flags_are_refused(offline, tmp_path, capsys):
    out = tmp_path / "out"
    for argv in (["--revisions", "step0"], ["--revisions-out", out], ["--revision", "step0", "--revisions", "step0",
                                                                      "--revisions-out", out]):
        code, _, err = run(capsys, "atlas", REPO, *argv, *OPTS)
        assert code == 2 and err.count("\n") == 1 and "--revision" in err, err
    code, _, err = run(capsys, "reproduce", REPO, "--revisions", "step0", "--revisions-out", out,
                       "--out", tmp_path / "c.json")
    assert code == 2 and "--out" in err
    assert not out.exists() and not (tmp_path / "c.json").exists()


def test_foreign_directory_is_refused(offline, tmp_path, capsys):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    code, _, err = run(capsys, "atlas", REPO, "--revisions", "step0", "--revisions-out", out, *OPTS)
    assert code == 2 and "already holds other files" in err
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"]


# -- the run ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def first_run(hub_cache, tmp_path_factory):
    """The atlas over every revision, run once (offline) for the module; returns (DIR, stdout, exit code)."""
    import contextlib
    import io

    from huggingface_hub import constants

    out = tmp_path_factory.mktemp("revrun") / "emergence"
    old = constants.HF_HUB_OFFLINE, constants.HF_HUB_CACHE
    constants.HF_HUB_OFFLINE, constants.HF_HUB_CACHE = True, str(hub_cache)
    try:
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(io.StringIO()):
            code = main(["atlas", REPO, "--revisions", ",".join(ALPHAS), "--revisions-out", str(out), *OPTS])
    finally:
        constants.HF_HUB_OFFLINE, constants.HF_HUB_CACHE = old
    return out, buf.getvalue(), code


def test_table_follows_the_planted_interpolation(first_run):
    out, stdout, code = first_run
    assert code == 0
    d = json.loads((out / "revisions.json").read_text())
    order = sorted(ALPHAS, key=training_step)
    assert [r["revision"] for r in d["revisions"]] == order
    assert [r["step"] for r in d["revisions"]] == [training_step(r) for r in order]
    alphas = [ALPHAS[r] for r in order]
    assert alphas == sorted(alphas)
    # head 1.0 becomes self-suppressing: the most negative self score falls and its mass of negative
    # eigenvalues rises, strictly, with α; at α ≥ 0.5 the head is the extreme of the model
    low = [r["summary"]["qk_self"]["min"] for r in d["revisions"]]
    mass = [r["summary"]["qk_negative_mass"]["max"] for r in d["revisions"]]
    assert all(a > b for a, b in zip(low, low[1:])), low
    assert all(a < b for a, b in zip(mass, mass[1:])), mass
    for r in d["revisions"]:
        if ALPHAS[r["revision"]] >= 0.5:
            assert r["summary"]["qk_self"]["argmin"] == "L1H0" and r["summary"]["qk_negative_mass"]["argmax"] == "L1H0"
    # every per-revision file is the atlas's usual JSON, agreeing with the table
    for r in d["revisions"]:
        doc = json.loads((out / r["file"]).read_text())
        assert doc["revision_run"]["revision"] == r["revision"] and len(doc["rows"]) == 6
        assert min(x["qk_self"] for x in doc["rows"] if x["qk_self"] is not None) == r["summary"]["qk_self"]["min"]
    # the stdout table names every revision in order, and the figure is an SVG with one panel per metric
    lines = stdout.splitlines()
    assert [next(i for i, l in enumerate(lines) if l.startswith(r + " ")) for r in order] == sorted(
        next(i for i, l in enumerate(lines) if l.startswith(r + " ")) for r in order)
    svg = (out / "revisions.svg").read_text()
    assert svg.startswith("<svg") and svg.count("<polyline") >= len(d["revisions"][0]["summary"])
    assert "training step" in svg


def test_resume_recomputes_only_the_missing_revision_and_is_byte_identical(first_run, offline, tmp_path, capsys):
    src, _, _ = first_run
    out = tmp_path / "copy"
    shutil.copytree(src, out)
    before = snapshot(out)
    missing = revision_file("step1000")
    (out / missing).unlink()
    code, stdout, err = run(capsys, "atlas", REPO, "--revisions", ",".join(ALPHAS), "--revisions-out", out, *OPTS)
    assert code == 0
    after = snapshot(out)
    assert set(after) == set(before)
    for name, (data, mtime) in before.items():
        assert after[name][0] == data, name                             # byte-identical, recomputed or not
        if name.startswith("rev-"):
            assert (after[name][1] == mtime) == (name != missing), name  # only the deleted one was rewritten
    assert "step1000: computed" in err and err.count("computed") == 1 and err.count("reused") == 4, err
    assert "reused" in stdout and "computed" in stdout


def test_changed_options_recompute_and_stale_revisions_go(first_run, offline, tmp_path, capsys):
    src, _, _ = first_run
    out = tmp_path / "copy"
    shutil.copytree(src, out)
    (out / revision_file("step0")).write_text('{"rows": [')             # a truncated file is not reused
    doc = json.loads((out / revision_file("step500")).read_text())
    del doc["rows"][0]["qk_self"]                                       # nor one edited out of shape
    (out / revision_file("step500")).write_text(json.dumps(doc))
    code, _, err = run(capsys, "atlas", REPO, "--revisions", "step0,step500,step1000", "--revisions-out", out,
                       *OPTS)
    assert code == 0 and "step0: computed" in err and "step500: computed" in err, err
    assert "step1000: reused" in err, err
    code, _, err = run(capsys, "atlas", REPO, "--revisions", "step0,step500", "--revisions-out", out, *OPTS)
    assert code == 0 and "step0: reused" in err and "step500: reused" in err, err
    assert json.loads((out / revision_file("step0")).read_text())["revision_run"]["revision"] == "step0"
    assert sorted(p.name for p in out.iterdir() if not p.name.startswith(".")) == [
        revision_file("step0"), revision_file("step500"), "revisions.json", "revisions.svg"]
    code, _, err = run(capsys, "atlas", REPO, "--revisions", "step0,step500", "--revisions-out", out,
                       "--tokens", "150", "--no-kernels")
    assert code == 0 and err.count("computed") == 2, err
    # another command may not write into an atlas directory
    code, _, err = run(capsys, "reproduce", REPO, "--revisions", "step0", "--revisions-out", out)
    assert code == 2 and "headscope atlas --revisions" in err


def test_missing_revision_is_one_line_naming_it(offline, tmp_path, capsys):
    out = tmp_path / "out"
    code, stdout, err = run(capsys, "atlas", REPO, "--revisions", "step0,step999", "--revisions-out", out, *OPTS)
    assert code == 2 and stdout == ""
    errors = [l for l in err.splitlines() if l.startswith("headscope: error:")]
    assert len(errors) == 1 and err.splitlines()[-1] == errors[0] and "'step999'" in errors[0], err
    # the revision before it is complete (a rerun resumes there); no table was written
    assert (out / revision_file("step0")).is_file() and not (out / "revisions.json").exists()
    assert not [p for p in out.iterdir() if "headscope-tmp" in p.name or "staging" in p.name]
    # missing at once: the directory this run would have created is not left behind
    code, _, err = run(capsys, "atlas", REPO, "--revisions", "step999", "--revisions-out", tmp_path / "new", *OPTS)
    assert code == 2 and "'step999'" in err and not (tmp_path / "new").exists()


def test_each_model_is_freed_before_the_next_is_loaded(offline, tmp_path, capsys, monkeypatch):
    """Peak memory ≈ one model: when revision k+1 is loaded, no model of an earlier revision is alive."""
    import gc
    import weakref

    from headscope.commands import revisions as cmd

    alive, loads = [], []
    real = cmd.load

    def load(*a, **k):
        gc.collect()
        loads.append(sum(r() is not None for r in alive))
        m = real(*a, **k)
        alive.append(weakref.ref(m))
        return m

    monkeypatch.setattr(cmd, "load", load)
    code, _, _ = run(capsys, "atlas", REPO, "--revisions", "step0,step500", "--revisions-out", tmp_path / "o", *OPTS)
    assert code == 0 and loads == [0, 0]


@pytest.mark.slow
def test_reproduce_table_per_revision(offline, tmp_path, capsys):
    """reproduce --revisions: per claim the measured value and verdict of each revision's claims table."""
    out = tmp_path / "claims"
    code, stdout, err = run(capsys, "reproduce", REPO, "--revisions", "step500", "--revisions-out", out,
                            "--no-details")
    assert code == 1                                   # a random tiny model fails the seeds' claims
    d = json.loads((out / "revisions.json").read_text())
    assert d["command"] == "reproduce" and [r["revision"] for r in d["revisions"]] == ["step500"]
    assert d["revisions"][0]["step"] == 500
    for r in d["revisions"]:
        doc = json.loads((out / r["file"]).read_text())
        assert doc["revision_run"]["options"] == {"details": False, "heads": "published", "variant": None}
        assert r["summary"]["n_fail"] == doc["n_fail"] > 0 and r["summary"]["ok"] is False
        assert r["summary"]["claims"] == {row["id"]: {"measured": row["measured"], "passed": row["passed"]}
                                          for row in doc["rows"]}
    assert "step500" in stdout and "fail" in stdout
    svg = (out / "revisions.svg").read_text()
    assert svg.startswith("<svg") and ">claims<" in svg


def test_offline_subprocess_matches_in_process_run(first_run, hub_cache, tmp_path):
    """A fresh process with HF_HUB_OFFLINE=1 (the environment, not a patched constant) reads the cache;
    its per-revision JSON is byte-identical to the in-process run's."""
    import subprocess
    import sys

    src, _, _ = first_run
    out = tmp_path / "sub"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(hub_cache), "HF_HOME": str(tmp_path / "hf")}
    p = subprocess.run([sys.executable, "-m", "headscope", "atlas", REPO, "--revisions", "step2000",
                        "--revisions-out", str(out), *OPTS], capture_output=True, text=True, timeout=300, env=env)
    assert p.returncode == 0, p.stderr
    name = revision_file("step2000")
    assert (out / name).read_bytes() == (src / name).read_bytes()


@pytest.mark.slow
def test_pythia_shaped_checkpoint_at_two_steps(tmp_path, monkeypatch, capsys):
    """The issue's target: a GPT-NeoX (Pythia-layout) checkpoint at step0 and step143000, rotary, so the
    atlas has no positional column; the table and figure hold the rest."""
    import torch
    from huggingface_hub import constants

    transformers = pytest.importorskip("transformers")
    from headscope.testing.tokenizers import write_family_tokenizer

    cache = tmp_path / "hub"
    for i, rev in enumerate(["step143000", "step0"]):
        torch.manual_seed(i)
        cfg = transformers.GPTNeoXConfig(vocab_size=2048, hidden_size=24, num_hidden_layers=2, num_attention_heads=3,
                                         intermediate_size=40, max_position_embeddings=37, rotary_pct=0.5,
                                         use_parallel_residual=True, tie_word_embeddings=False)
        d = tmp_path / rev
        transformers.AutoModelForCausalLM.from_config(cfg).eval().save_pretrained(d)
        write_family_tokenizer(d, "gpt_neox", 2000)            # enough merges for the category words
        cache_directory(cache, "EleutherAI/pythia-tiny", d, revision=rev)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    out = tmp_path / "emergence"
    code, stdout, _ = run(capsys, "atlas", "EleutherAI/pythia-tiny", "--revisions", "step143000,step0",
                          "--revisions-out", out, "--tokens", "200")
    assert code == 0
    d = json.loads((out / "revisions.json").read_text())
    assert [(r["revision"], r["step"]) for r in d["revisions"]] == [("step0", 0), ("step143000", 143000)]
    for r in d["revisions"]:
        assert r["summary"]["positional_share"]["max"] is None            # rotary: not applicable
        assert isinstance(r["summary"]["qk_self"]["min"], float)
    # the two steps are different weights: their summaries differ
    assert d["revisions"][0]["summary"] != d["revisions"][1]["summary"]
    assert " pos" not in stdout.splitlines()[2] and "self z" in stdout.splitlines()[2]
    assert "positional share" not in (out / "revisions.svg").read_text()


# -- trust nothing on disk (issue 36): names, reused files, non-finite values, FIFOs, sizes ----------------


def test_long_revision_names_sharing_120_characters_get_different_files():
    a, b = "x" * 130 + "a", "x" * 130 + "b"
    assert revision_file(a) != revision_file(b)
    assert len(revision_file(a)) <= len("rev-.json") + 120
    assert revision_file("y" * 120) == "rev-" + "y" * 120 + ".json"            # short names keep their name


def _rerun_step(out, capsys, *extra):
    return run(capsys, "atlas", REPO, "--revisions", "step500", "--revisions-out", out, *OPTS, *extra)


def test_a_hand_edited_file_with_its_key_is_recomputed(first_run, offline, tmp_path, capsys):
    """Values changed, key kept: the sha256 recorded when it was written no longer matches → recomputed."""
    src, _, _ = first_run
    out = tmp_path / "copy"
    shutil.copytree(src, out)
    name = revision_file("step500")
    original = (out / name).read_bytes()
    doc = json.loads(original)
    doc["rows"][0]["qk_self"] = 123.0
    (out / name).write_text(json.dumps(doc))
    code, _, err = _rerun_step(out, capsys)
    assert code == 0 and "step500: computed" in err, err
    assert (out / name).read_bytes() == original
    assert json.loads((out / "revisions.json").read_text())["revisions"][0]["summary"]["qk_self"]["max"] != 123.0


def test_nan_in_a_per_revision_file_is_recomputed_without_a_traceback(first_run, offline, tmp_path, capsys):
    src, _, _ = first_run
    out = tmp_path / "copy"
    shutil.copytree(src, out)
    name = revision_file("step500")
    original = (out / name).read_bytes()
    text = original.decode()
    i = text.index('"qk_self": ') + len('"qk_self": ')
    j = min(text.index(",", i), text.index("}", i))
    (out / name).write_text(text[:i] + "NaN" + text[j:])
    code, _, err = _rerun_step(out, capsys)                 # run() asserts: no traceback
    assert code == 0 and "step500: computed" in err, err
    assert (out / name).read_bytes() == original


def test_a_per_revision_file_over_the_input_limit_is_not_parsed(first_run, offline, tmp_path, capsys):
    """A file grown past --max-input-mb (key and recorded hash intact) is recomputed, never read whole."""
    import hashlib

    src, _, _ = first_run
    out = tmp_path / "copy"
    shutil.copytree(src, out)
    name = revision_file("step500")
    original = (out / name).read_bytes()
    padded = original + b" " * (2 * 2**20)
    (out / name).write_bytes(padded)
    index = json.loads((out / ".headscope-tasks.json").read_text())
    index["files"][name]["sha256"] = hashlib.sha256(padded).hexdigest()
    (out / ".headscope-tasks.json").write_text(json.dumps(index))
    code, _, err = _rerun_step(out, capsys, "--max-input-mb", "1")
    assert code == 0 and "step500: computed" in err, err
    assert (out / name).read_bytes() == original


def test_a_fifo_corpus_is_refused_in_one_line(hub_cache, tmp_path):
    """--corpus FIFO with --revisions: refused by the input rule (no blocking read), exit 2, nothing written."""
    import subprocess
    import sys

    fifo = tmp_path / "corpus.fifo"
    os.mkfifo(fifo)
    out = tmp_path / "out"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(hub_cache), "HF_HOME": str(tmp_path / "hf")}
    try:
        p = subprocess.run([sys.executable, "-m", "headscope", "atlas", REPO, "--revisions", "step0",
                            "--revisions-out", str(out), "--corpus", str(fifo), *OPTS],
                           capture_output=True, text=True, timeout=60, env=env)
    except subprocess.TimeoutExpired:
        pytest.fail("atlas --revisions --corpus FIFO blocked")
    assert p.returncode == 2 and p.stdout == "", p.stderr
    assert p.stderr.startswith("headscope: error:") and p.stderr.count("\n") == 1 and "FIFO" in p.stderr, p.stderr
    assert not out.exists()
