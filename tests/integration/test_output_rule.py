"""The output rule (headscope._atomic) and the input rule (headscope.corpus), issue 18.

A user's files in an output directory survive every rewrite; links are written through
or refused, never replaced; FIFOs, sockets and devices are refused; a run killed at the
worst moment (a subprocess paused by HEADSCOPE_TEST_PAUSE, then SIGKILLed) is recovered by
the next run with nothing lost; inputs that never end (/dev/zero, a FIFO without a writer)
are refused within seconds.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from headscope._atomic import (MANIFEST, OutputDir, atomic_directory, is_temporary_name, json_object_with,
                               write_file)
from headscope._errors import HeadscopeError
from headscope.cli import main
from headscope.corpus import read_corpus
from headscope._input import input_limit, max_input_bytes, read_text_file

SRC = str(Path(__import__("headscope").__file__).resolve().parent.parent)   # the package under test
TEXT = "The cat sat on the mat, and the dog lay by the door of the old house. " * 2


def tree(d: Path, skip: tuple[str, ...] = ()) -> dict[str, bytes]:
    """Every regular file under `d` (hidden ones included, headscope's temporaries not) → its bytes,
    minus the names in `skip`."""
    return {p.relative_to(d).as_posix(): p.read_bytes() for p in sorted(d.rglob("*"))
            if p.is_file() and not p.is_symlink() and p.relative_to(d).as_posix() not in skip
            and p.name != ".headscope-lock"            # the lock file a killed writer leaves behind
            and not any(is_temporary_name(part) for part in p.relative_to(d).parts)}


def temporaries(d: Path) -> list[str]:
    return sorted(p.relative_to(d).as_posix() for p in d.rglob("*") if is_temporary_name(p.name))




# -- output directories (library level) ------------------------------------------------------


def test_output_dir_keeps_user_files_and_removes_only_its_own(tmp_path):
    out = tmp_path / "o"
    d = OutputDir(out, "mark").open()
    for rel in ("mark", "a/stale.txt", "b/stale.txt", "c.txt"):
        d.write(rel, rel)
    (out / "notes.txt").write_text("mine")
    (out / "a" / "mine.txt").write_text("mine")
    assert json.loads((out / MANIFEST).read_text())["files"] == ["a/stale.txt", "b/stale.txt", "c.txt", "mark"]

    d = OutputDir(out, "mark").open()                   # a rerun that writes only mark and c.txt
    d.write("mark", "mark 2")
    d.write("c.txt", "c 2")
    assert d.remove_stale({"mark", "c.txt"}) == ["a/stale.txt", "b/stale.txt"]
    assert tree(out) == {MANIFEST: (out / MANIFEST).read_bytes(), "a/mine.txt": b"mine", "c.txt": b"c 2",
                         "mark": b"mark 2", "notes.txt": b"mine"}
    assert not (out / "b").exists()                     # emptied by headscope, so removed; a/ holds a user file
    assert json.loads((out / MANIFEST).read_text())["files"] == ["c.txt", "mark"]
    # a file headscope did not write is never written over
    with pytest.raises(HeadscopeError, match="notes.txt already exists and was not written by headscope"):
        d.write("notes.txt", "theirs")
    assert (out / "notes.txt").read_text() == "mine"


def test_staged_directory_commits_and_keeps_user_files(tmp_path):
    out = tmp_path / "o"
    with atomic_directory(out, marker="k.json") as s:
        (s / "k.json").write_text("1")
        (s / "old.txt").write_text("old")
    (out / "notes.txt").write_text("mine")
    with atomic_directory(out, marker="k.json") as s:
        (s / "k.json").write_text("2")
        (s / "sub").mkdir()
        (s / "sub" / "new.txt").write_text("new")
    assert tree(out, skip=(MANIFEST,)) == {"k.json": b"2", "notes.txt": b"mine", "sub/new.txt": b"new"}
    assert json.loads((out / MANIFEST).read_text())["files"] == ["k.json", "sub/new.txt"]
    before = tree(out)
    with pytest.raises(RuntimeError), atomic_directory(out, marker="k.json") as s:   # a failure midway
        (s / "k.json").write_text("broken")
        raise RuntimeError("boom")
    assert tree(out) == before and temporaries(out) == []
    with pytest.raises(RuntimeError), atomic_directory(tmp_path / "new", marker="k.json") as s:
        (s / "k.json").write_text("broken")
        raise RuntimeError("boom")
    assert not (tmp_path / "new").exists()              # a directory it created is gone again
    (out / "k.json").unlink()                           # the user deleted headscope's file and put theirs there
    (out / MANIFEST).write_text(json.dumps({"format": "headscope-output", "version": 1, "files": ["sub/new.txt"]}))
    (out / "k.json").write_text("theirs")
    with pytest.raises(HeadscopeError, match="k.json already exists and was not written by headscope"):
        with atomic_directory(out) as s:
            (s / "k.json").write_text("3")
    assert (out / "k.json").read_text() == "theirs" and temporaries(out) == []


def test_foreign_and_other_kinds_are_refused_without_changes(tmp_path):
    foreign = tmp_path / "f"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    with pytest.raises(HeadscopeError, match="already holds other files"):
        OutputDir(foreign, "k.json").open()
    with atomic_directory(tmp_path / "k", marker="k.json") as s:
        (s / "k.json").write_text("1")
    with pytest.raises(HeadscopeError, match="no other.json listed in headscope"):
        OutputDir(tmp_path / "k", "other.json").check()
    assert sorted(p.name for p in foreign.iterdir()) == ["notes.txt"]
    empty = tmp_path / "e"
    empty.mkdir()
    OutputDir(empty, "k.json").open().write("k.json", "x")   # an empty directory is adopted


def test_symlinked_output_is_written_through_and_kept(tmp_path):
    real = tmp_path / "real"
    (tmp_path / "link").symlink_to(real, target_is_directory=True)
    real.mkdir()
    with atomic_directory(tmp_path / "link", marker="k.json") as s:
        (s / "k.json").write_text("1")
    assert (tmp_path / "link").is_symlink() and (real / "k.json").read_text() == "1"
    owned = json_object_with("v")
    (tmp_path / "real.json").write_text('{"v": 1}')
    (tmp_path / "f.json").symlink_to(tmp_path / "real.json")
    write_file(tmp_path / "f.json", '{"v": 2}', owned=owned)
    assert (tmp_path / "f.json").is_symlink() and (tmp_path / "real.json").read_text() == '{"v": 2}'
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    for call in (lambda: write_file(tmp_path / "dangling", "x"), lambda: OutputDir(tmp_path / "dangling").open()):
        with pytest.raises(HeadscopeError, match="which does not exist"):
            call()
    assert not (tmp_path / "nowhere").exists()


def test_links_inside_an_output_directory_are_never_written_through(tmp_path):
    out = tmp_path / "o"
    d = OutputDir(out, "k").open()
    d.write("k", "1")
    d.write("sub/a.txt", "1")
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    (out / "k").unlink()
    (out / "k").symlink_to(victim)
    with pytest.raises(HeadscopeError, match="is a symbolic link"):
        OutputDir(out, "k").open().write("k", "2")
    (out / "sub" / "a.txt").unlink()
    (out / "sub").rmdir()
    (out / "sub").symlink_to(tmp_path, target_is_directory=True)
    with pytest.raises(HeadscopeError, match="headscope does not write through it"):
        OutputDir(out, "k").open().write("sub/victim.txt", "2")
    assert victim.read_text() == "precious" and (out / "k").is_symlink()
    OutputDir(out, "k").open().remove_stale(set())         # stale removal leaves links alone
    assert (out / "k").is_symlink() and victim.read_text() == "precious"


def test_fifos_sockets_and_devices_are_refused_as_outputs(tmp_path, monkeypatch, alarm):
    monkeypatch.chdir(tmp_path)
    os.mkfifo("pipe")
    sock = socket.socket(socket.AF_UNIX)
    sock.bind("sock")
    with alarm(20):
        for path, kind in (("pipe", "a FIFO"), ("sock", "a socket"), ("/dev/null", "a character device")):
            with pytest.raises(HeadscopeError, match=f"is {kind}; headscope writes only regular files"):
                write_file(path, "x")
            with pytest.raises(HeadscopeError, match=f"not a directory \\({kind}\\)"):
                OutputDir(path).open()
    sock.close()
    assert Path("pipe").is_fifo() and Path("sock").is_socket()


def test_abandoned_temporaries_are_removed_and_live_ones_kept(tmp_path):
    out = tmp_path / "o"
    OutputDir(out, "k").open().write("k", "1")
    dead = out / ".k.headscope-tmp-0123456789ab"
    live = out / ".k.headscope-tmp-ba9876543210"
    dead.write_text("half")
    live.write_text("half")
    held = os.open(live, os.O_RDONLY)
    fcntl.flock(held, fcntl.LOCK_EX)                   # a live writer holds its temporary
    stage_dead = out / ".headscope-staging-00000000000a"
    stage_dead.mkdir()
    (stage_dead / ".headscope-lock").write_text("")
    (stage_dead / "k").write_text("uncommitted")
    try:
        OutputDir(out, "k").open()
        assert not dead.exists() and not stage_dead.exists() and live.exists()
    finally:
        os.close(held)
    OutputDir(out, "k").open()
    assert temporaries(out) == [] and (out / "k").read_text() == "1"
    cal = tmp_path / "cal.json"                          # single files: the next write removes its temporaries
    stray = tmp_path / ".cal.json.headscope-tmp-00000000000b"
    stray.write_text("half")
    write_file(cal, "{}")
    assert not stray.exists() and cal.read_text() == "{}"


def test_single_file_rule(tmp_path):
    owned = json_object_with("format", format="mine")
    p = tmp_path / "x.json"
    p.write_text("")
    write_file(p, '{"format": "mine"}', owned=owned)        # an empty file may be replaced
    os.chmod(p, 0o600)
    write_file(p, '{"format": "mine", "n": 2}', owned=owned)  # an earlier output of the same kind too
    assert json.loads(p.read_text())["n"] == 2 and (p.stat().st_mode & 0o777) == 0o600
    p.write_text('{"format": "theirs"}')
    with pytest.raises(HeadscopeError, match="already exists and was not written by headscope"):
        write_file(p, "{}", owned=owned)
    assert p.read_text() == '{"format": "theirs"}'


# -- the input rule --------------------------------------------------------------------------


def test_inputs_must_be_regular_files(tmp_path, monkeypatch, alarm):
    monkeypatch.chdir(tmp_path)
    os.mkfifo("pipe")
    sock = socket.socket(socket.AF_UNIX)
    sock.bind("sock")
    Path("ok.txt").write_text(TEXT)
    Path("link.txt").symlink_to("ok.txt")
    Path("fifo-link").symlink_to("pipe")
    with alarm(20):
        for path, kind in (("pipe", "a FIFO"), ("sock", "a socket"), ("/dev/zero", "a character device"),
                           ("fifo-link", "a FIFO")):
            with pytest.raises(HeadscopeError, match=f"is {kind}, not a regular file"):
                read_text_file(path, "text")
            with pytest.raises(HeadscopeError, match=f"is {kind}, not a regular file"):
                read_corpus([path])
    sock.close()
    with pytest.raises(HeadscopeError, match="expected a file, got a directory"):
        read_text_file(tmp_path, "text")
    assert read_text_file("link.txt") == TEXT                # a link to a regular file is fine
    assert max_input_bytes() == 64 * 2**20
    with input_limit(0.0001):                              # 104 bytes
        assert max_input_bytes() == 104
        with pytest.raises(HeadscopeError, match=f"over the input size limit: expected at most 104 bytes, got {len(TEXT)} bytes"):
            read_text_file("ok.txt", "text")
    assert read_text_file("ok.txt", limit=len(TEXT)) == TEXT
    with pytest.raises(HeadscopeError, match="expected a positive number of MiB"):
        with input_limit(float("inf")):
            pass


def test_a_fifo_swapped_in_after_the_stat_is_refused(tmp_path, monkeypatch, alarm):
    """The file is opened non-blocking and checked again, so a FIFO that replaces it in between cannot hang."""
    import headscope._input as inp

    os.mkfifo(tmp_path / "pipe")
    regular = os.stat(__file__)
    monkeypatch.setattr(inp.os, "stat", lambda p, *a, **k: regular)      # the race: stat saw a regular file
    with alarm(20), pytest.raises(HeadscopeError, match="is a FIFO, not a regular file"):
        inp.read_input_bytes(tmp_path / "pipe", "text")


def test_corpus_directories_are_walked_for_regular_files(tmp_path, alarm):
    c = tmp_path / "c"
    (c / "sub").mkdir(parents=True)
    (c / ".hidden").mkdir()
    (c / "a.txt").write_text("alpha text")
    (c / "sub" / "b.txt").write_text("beta text")
    (c / ".hidden" / "x.txt").write_text("hidden")
    (c / ".dot.txt").write_text("hidden")
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "e.txt").write_text("linked file")
    (c / "e.txt").symlink_to(tmp_path / "elsewhere" / "e.txt")
    (c / "loop").symlink_to(c, target_is_directory=True)   # not followed: no loop, no duplicates
    names = [Path(n).relative_to(c).as_posix() for n, _ in read_corpus(c)]
    assert names == ["a.txt", "e.txt", "sub/b.txt"]
    os.mkfifo(c / "sub" / "pipe")
    with alarm(20), pytest.raises(HeadscopeError, match="sub/pipe is a FIFO"):
        read_corpus(c)
    (c / "sub" / "pipe").unlink()
    with pytest.raises(HeadscopeError, match="expected at most 25 bytes in all"):
        read_corpus(c, limit=25)                             # 10 + 11 + 9 bytes: each fits, together they do not


# -- the command line: subprocesses killed at the worst moment ----------------------------------


def headscope(*argv: str, cwd: Path, env: dict | None = None) -> subprocess.Popen:
    full = {k: v for k, v in os.environ.items() if not k.startswith("HEADSCOPE_TEST_")}
    full.update(env or {})
    full["PYTHONPATH"] = os.pathsep.join([SRC, *filter(None, [os.environ.get("PYTHONPATH")])])  # this headscope
    return subprocess.Popen([sys.executable, "-m", "headscope", *argv], cwd=cwd, env=full,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def kill_at(point: str, *argv: str, cwd: Path) -> None:
    """Run headscope until it pauses at `point` (HEADSCOPE_TEST_PAUSE), then SIGKILL it."""
    flag = cwd / f"paused-{time.monotonic_ns()}"
    p = headscope(*argv, cwd=cwd, env={"HEADSCOPE_TEST_PAUSE": point, "HEADSCOPE_TEST_PAUSE_FLAG": str(flag)})
    deadline = time.monotonic() + 180
    try:
        while not flag.exists():
            if p.poll() is not None:
                pytest.fail(f"headscope exited {p.returncode} before reaching {point}: {p.stderr.read()}")
            if time.monotonic() > deadline:
                pytest.fail(f"headscope never reached {point}")
            time.sleep(0.02)
        p.send_signal(signal.SIGKILL)
        assert p.wait(timeout=30) == -signal.SIGKILL
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        p.stderr.close()
        flag.unlink(missing_ok=True)


def ok(*argv: str, capsys) -> None:
    assert main(list(argv)) == 0, capsys.readouterr().err
    capsys.readouterr()


def steer(model: Path, alpha: str, out: Path) -> list[str]:
    return ["steer", str(model), "1.2", "--scale-negative", alpha, "--out", str(out)]


def test_steer_killed_mid_commit_then_rerun_recovers(tiny_hf_dir, tmp_path, capsys):
    ref, out = tmp_path / "ref", tmp_path / "out"
    ok(*steer(tiny_hf_dir, "0.5", ref), capsys=capsys)          # what the interrupted run should produce
    ok(*steer(tiny_hf_dir, "0", out), capsys=capsys)            # the earlier output
    old = tree(out)
    (out / "notes.txt").write_text("mine")                      # a user's files in --out
    (out / "mine").mkdir()
    (out / "mine" / "data.csv").write_text("1,2\n")
    # killed after the new weights are in place and before the new steering.json: the worst moment
    kill_at("commit:model.safetensors", *steer(tiny_hf_dir, "0.5", out), cwd=tmp_path)
    assert (out / "model.safetensors").read_bytes() == (ref / "model.safetensors").read_bytes()
    assert (out / "steering.json").read_bytes() == old["steering.json"]      # mixed: the next run finishes it
    assert (out / "notes.txt").read_text() == "mine" and (out / "mine" / "data.csv").read_text() == "1,2\n"
    pending = [p for p in out.iterdir() if p.name.startswith(".headscope-staging-")]
    assert len(pending) == 1 and (pending[0] / ".headscope-commit.json").is_file()

    ok(*steer(tiny_hf_dir, "0.5", out), capsys=capsys)          # the rerun
    assert tree(out, skip=("notes.txt", "mine/data.csv")) == tree(ref)
    assert (out / "notes.txt").read_text() == "mine" and (out / "mine" / "data.csv").read_text() == "1,2\n"
    assert temporaries(out) == [] and temporaries(tmp_path) == []


def test_steer_killed_before_commit_keeps_the_old_output(tiny_hf_dir, tmp_path, capsys):
    ref, out = tmp_path / "ref", tmp_path / "out"
    ok(*steer(tiny_hf_dir, "0.5", ref), capsys=capsys)
    ok(*steer(tiny_hf_dir, "0", out), capsys=capsys)
    (out / "notes.txt").write_text("mine")
    old = tree(out)
    kill_at("file:.headscope-commit.json", *steer(tiny_hf_dir, "0.5", out), cwd=tmp_path)  # staged, not committed
    assert tree(out) == old                                     # the old output is whole, nothing missing
    assert [p.name[:19] for p in out.iterdir() if is_temporary_name(p.name)] == [".headscope-staging-"]
    ok(*steer(tiny_hf_dir, "0.5", out), capsys=capsys)
    assert tree(out, skip=("notes.txt",)) == tree(ref) and (out / "notes.txt").read_text() == "mine"
    assert temporaries(out) == []


def test_report_killed_while_replacing_a_page_then_rerun_recovers(tiny_hf_dir, tmp_path, capsys):
    ref, out = tmp_path / "ref", tmp_path / "out"
    model = str(tiny_hf_dir)
    ok("report", model, "--out", str(ref), "--stages", "model", "--no-progress", capsys=capsys)
    ok("report", model, "--out", str(out), "--stages", "model", "attention", "--no-progress", capsys=capsys)
    old = tree(out)
    assert any(k.startswith("data/attention") for k in old)
    (out / "notes.txt").write_text("mine")
    (out / "heads").mkdir(exist_ok=True)
    (out / "heads" / "my-annotations.html").write_text("<p>mine</p>")
    # killed with the new index.html complete under its temporary name, not yet renamed in
    kill_at("file:index.html", "report", model, "--out", str(out), "--stages", "model", "--no-progress", cwd=tmp_path)
    assert (out / "index.html").read_bytes() == old["index.html"]          # the old page is whole
    assert (out / "data" / "attention.json").read_bytes() == old["data/attention.json"]
    assert [Path(t).name[:20] for t in temporaries(out)] == [".index.html.headscop"]
    ok("report", model, "--out", str(out), "--stages", "model", "--no-progress", capsys=capsys)
    assert tree(out, skip=("notes.txt", "heads/my-annotations.html")) == tree(ref)
    assert (out / "notes.txt").read_text() == "mine"
    assert (out / "heads" / "my-annotations.html").read_text() == "<p>mine</p>"   # stale pages went, this stayed
    assert not (out / "data" / "attention.json").exists() and temporaries(out) == []


def test_calibrate_killed_before_the_rename_then_rerun(tiny_hf_dir, tmp_path, capsys):
    text = tmp_path / "t.txt"
    text.write_text(TEXT)
    cal, ref = tmp_path / "cal.json", tmp_path / "ref.json"
    ok("calibrate", str(tiny_hf_dir), "--text", str(text), "--out", str(ref), capsys=capsys)
    ok("calibrate", str(tiny_hf_dir), "--text", str(text), "--query", " of", "--out", str(cal), capsys=capsys)
    old = cal.read_bytes()
    kill_at("file:cal.json", "calibrate", str(tiny_hf_dir), "--text", str(text), "--out", str(cal), cwd=tmp_path)
    assert cal.read_bytes() == old and len([p for p in tmp_path.iterdir() if is_temporary_name(p.name)]) == 1
    ok("calibrate", str(tiny_hf_dir), "--text", str(text), "--out", str(cal), capsys=capsys)
    assert cal.read_bytes() == ref.read_bytes() and temporaries(tmp_path) == []


def test_user_files_survive_every_directory_writer(tiny_hf_dir, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    text = tmp_path / "t.txt"
    text.write_text(TEXT)
    model = str(tiny_hf_dir)
    runs = {
        "steer": steer(tiny_hf_dir, "0", Path("steer")),
        "kernels": ["kernels", model, "--corpus", str(text), "--out", "kernels"],
        "denominators": ["denominators", model, "--corpus", str(text), "--window", "16", "--out", "denominators"],
        "report": ["report", model, "--stages", "model", "--no-progress", "--out", "report"],
    }
    for name, argv in runs.items():
        ok(*argv, capsys=capsys)
        (tmp_path / name / "notes.txt").write_text(f"mine {name}")
        ok(*argv, capsys=capsys)                                  # rerun over its own output
        assert (tmp_path / name / "notes.txt").read_text() == f"mine {name}", name
    # kernels without a corpus no longer writes the TV figures: the stale ones go, the user's file stays
    assert (tmp_path / "kernels" / "tv_hist.svg").exists()
    ok("kernels", model, "--out", "kernels", capsys=capsys)
    assert not (tmp_path / "kernels" / "tv_hist.svg").exists()
    assert sorted(p.name for p in (tmp_path / "kernels").iterdir()) == [MANIFEST, "kernels.json", "kernels.svg",
                                                                        "notes.txt"]
    assert temporaries(tmp_path) == []


@pytest.mark.slow
def test_plant_over_its_own_output_keeps_a_users_notes(planted_dir, tmp_path, capsys):
    import shutil

    out = tmp_path / "p"
    shutil.copytree(planted_dir, out)
    (out / "notes.txt").write_text("mine")
    ok("plant", "--out", str(out), "--seed", "1", capsys=capsys)
    assert (out / "notes.txt").read_text() == "mine"
    assert json.loads((out / "planted.json").read_text())["seed"] == 1


def test_inputs_that_never_end_return_within_seconds(tiny_hf_dir, tmp_path):
    os.mkfifo(tmp_path / "pipe")
    for argv in (["calibrate", str(tiny_hf_dir), "--text", "/dev/zero", "--out", "c.json"],
                 ["denominators", str(tiny_hf_dir), "--corpus", str(tmp_path / "pipe")]):
        t0 = time.monotonic()
        p = headscope(*argv, cwd=tmp_path)
        try:
            _, err = p.communicate(timeout=120)
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
        took = time.monotonic() - t0
        assert p.returncode == 2, err
        assert re.fullmatch(r"headscope: error: .*(character device|a FIFO), not a regular file.*\n", err), err
        assert took < 60, f"{argv[0]} took {took:.1f} s"


# -- issue 25: nothing outside its own output, ever ----------------------------------------------


def fails(argv: list[str], capsys, expect: str) -> str:
    """Run the CLI in-process: exit 2 with one line `headscope: error: …` holding `expect`."""
    capsys.readouterr()
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err, err
    assert len(err.strip().splitlines()) == 1 and err.startswith("headscope: error: ") and expect in err, err
    return err


def test_a_manifest_listing_files_outside_is_refused_and_they_survive(tiny_hf_dir, tmp_path, capsys):
    out = tmp_path / "rep"
    model = str(tiny_hf_dir)
    ok("report", model, "--out", str(out), "--stages", "model", "--no-progress", capsys=capsys)
    victim = tmp_path / "notes.txt"
    victim.write_bytes(b"precious \xff notes")
    elsewhere = tmp_path / "elsewhere.txt"
    elsewhere.write_bytes(b"also mine")
    manifest = json.loads((out / MANIFEST).read_text())
    for bad in ("../notes.txt", str(elsewhere), "data/../../notes.txt"):
        (out / MANIFEST).write_text(json.dumps({**manifest, "files": manifest["files"] + [bad]}))
        before = tree(out)
        # the stale-file clean-up of the next report would delete `bad`: it is refused, nothing touched
        fails(["report", model, "--out", str(out), "--stages", "model", "--no-progress"], capsys,
              f"lists {bad!r}, which is not")
        with pytest.raises(HeadscopeError, match="headscope only touches files inside its output directory"):
            OutputDir(out, ".headscope-report").open().remove_stale(set())
        assert victim.read_bytes() == b"precious \xff notes" and elsewhere.read_bytes() == b"also mine"
        assert tree(out) == before


def test_a_commit_record_pointing_outside_is_refused_and_nothing_moves(tiny_hf_dir, tmp_path, capsys):
    out = tmp_path / "steered"
    ok(*steer(tiny_hf_dir, "0", out), capsys=capsys)
    victim, target = tmp_path / "victim.txt", tmp_path / "target.txt"
    victim.write_bytes(b"deleted if the record is trusted")
    target.write_bytes(b"replaced if the record is trusted")
    (out / "payload.txt").write_text("would be moved out")        # staging/../payload.txt is out/payload.txt
    staging = out / ".headscope-staging-00000000000c"             # an abandoned commit, crafted
    staging.mkdir()
    (staging / ".headscope-lock").write_text("")
    (staging / ".headscope-commit.json").write_text(json.dumps(
        {"files": ["../payload.txt", "../../target.txt"], "stale": ["../../victim.txt"]}))
    before = tree(out)
    fails(steer(tiny_hf_dir, "0.5", out), capsys, "which is not a normalised path inside the directory")
    assert victim.read_bytes() == b"deleted if the record is trusted"
    assert target.read_bytes() == b"replaced if the record is trusted"
    assert tree(out) == before and staging.is_dir()
    # a record naming a file of the user's inside the directory is not rolled over it either
    (staging / ".headscope-commit.json").write_text(json.dumps({"files": ["notes.txt"], "stale": []}))
    (staging / "notes.txt").write_text("headscope's?")
    (out / "notes.txt").write_text("mine")
    fails(steer(tiny_hf_dir, "0.5", out), capsys, "notes.txt already exists and was not written by headscope")
    assert (out / "notes.txt").read_text() == "mine"


def test_neuron_out_replaces_only_its_own_earlier_page(tiny_hf_dir, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    model = str(tiny_hf_dir)
    Path("t.txt").write_text(TEXT)
    ok("report", model, "--out", "rep", "--stages", "model", "--no-progress", capsys=capsys)
    index = Path("rep/index.html").read_bytes()
    Path("copy.html").write_bytes(index.replace(b"<main>", b"<main><p>my annotations</p>"))
    for page in ("rep/index.html", "copy.html"):                 # they share the doctype and CSP prefix
        before = Path(page).read_bytes()
        fails(["neuron", model, "3", "--text", "t.txt", "--out", page], capsys,
              "already exists and was not written by headscope")
        assert Path(page).read_bytes() == before
    ok("neuron", model, "3", "--text", "t.txt", "--out", "n.html", capsys=capsys)
    assert b'<meta name="headscope-output" content="neuron">' in Path("n.html").read_bytes()[:4096]
    ok("neuron", model, "4", "--text", "t.txt", "--out", "n.html", capsys=capsys)    # its own page: replaced


def test_a_second_writer_is_refused_and_readers_refuse_a_half_commit(tiny_hf_dir, tmp_path, capsys):
    import headscope as hs

    ref, out = tmp_path / "ref", tmp_path / "out"
    ok(*steer(tiny_hf_dir, "0.5", ref), capsys=capsys)
    ok(*steer(tiny_hf_dir, "0", out), capsys=capsys)
    flag = tmp_path / "paused"
    first = headscope(*steer(tiny_hf_dir, "0.5", out), cwd=tmp_path,
                      env={"HEADSCOPE_TEST_PAUSE": "commit:model.safetensors", "HEADSCOPE_TEST_PAUSE_FLAG": str(flag)})
    try:
        deadline = time.monotonic() + 180
        while not flag.exists():
            assert first.poll() is None, first.stderr.read()
            assert time.monotonic() < deadline, "the first writer never reached its commit"
            time.sleep(0.02)
        # a second writer (a real process) while the first holds the directory: refused, naming it
        second = headscope(*steer(tiny_hf_dir, "0.7", out), cwd=tmp_path)
        _, err = second.communicate(timeout=180)
        assert second.returncode == 2 and len(err.strip().splitlines()) == 1, err
        assert f"is being written by another headscope run (pid {first.pid}:" in err, err
        # readers never read the mix: new weights, old steering.json
        fails(["info", str(out)], capsys, "is half-committed")
        first.send_signal(signal.SIGKILL)                        # killed mid-commit
        assert first.wait(timeout=30) == -signal.SIGKILL
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
        first.stderr.close()
    fails(["info", str(out)], capsys, "rerun the command that writes it to finish the commit")
    fails(["reproduce", str(out), "--no-details"], capsys, "is half-committed")
    with pytest.raises(HeadscopeError, match="is half-committed"):
        hs.load(out)
    ok(*steer(tiny_hf_dir, "0.5", out), capsys=capsys)           # the next writer finishes and rewrites it
    assert tree(out) == tree(ref) and not (out / ".headscope-lock").exists()
    ok("info", str(out), capsys=capsys)


def test_the_lock_is_shared_within_a_process_and_released(tmp_path):
    out = tmp_path / "o"
    a = OutputDir(out, "k").open()
    a.write("k", "1")
    assert (out / ".headscope-lock").read_text().startswith(f"pid {os.getpid()}: ")
    OutputDir(out, "k").open().write("k", "2")                   # the same run: shared, not refused
    a.close()
    assert not (out / ".headscope-lock").exists() and (out / "k").read_text() == "2"
    held = os.open(out / ".headscope-lock", os.O_RDWR | os.O_CREAT)   # another process's lock (flock is per open file)
    os.write(held, b"pid 4242: headscope report m --out o\n")
    fcntl.flock(held, fcntl.LOCK_EX)
    try:
        with pytest.raises(HeadscopeError, match=r"being written by another headscope run \(pid 4242: headscope report"):
            OutputDir(out, "k").open()
    finally:
        os.close(held)
    with atomic_directory(out, marker="k") as s:                  # a killed writer's lock file is reused
        (s / "k").write_text("3")
    assert sorted(p.name for p in out.iterdir()) == [MANIFEST, "k"]


# -- bounded resources: long texts are tokenised in pieces, long work shows progress -------------


TRICKY = ("Une phrase  avec deux espaces,\ttabulations\n\nnouvelles lignes — et des mots: l'été, don't, 12345 "
          "ünïcödé   trois espaces " + "sanstrouniespace" * 9 + " fin. ") * 7


def test_texts_are_tokenised_in_pieces_with_the_ids_of_the_whole(tiny, monkeypatch):
    import headscope.corpus as corpus

    whole = tiny.tokenizer.encode(TRICKY)
    ref = corpus.windows(tiny, [TRICKY], n_ctx=40)
    seen = []
    encode = tiny.tokenizer.encode
    monkeypatch.setattr(tiny.tokenizer, "encode", lambda text, *a, **k: seen.append(len(text)) or encode(text, *a, **k))
    for size in (8, 50, 64, 101):
        monkeypatch.setattr(corpus, "PIECE_CHARS", size)
        pieces = list(corpus.text_pieces(TRICKY))
        assert "".join(pieces) == TRICKY and len(pieces) > 10
        assert sum(map(tiny.tokenizer.encode, pieces), []) == whole       # the cuts never change a token
        seen.clear()
        got = corpus.windows(tiny, [TRICKY], n_ctx=40)
        # never the whole text at once: at most `size` plus the longest run without a word boundary (145)
        assert max(seen) <= size + 145 and len(seen) >= len(pieces)
        assert [w.tolist() for w in got] == [w.tolist() for w in ref]


def test_calibrate_streams_and_shows_progress_on_long_texts(tiny_hf_dir, tmp_path, capsys, monkeypatch):
    import headscope.layer0.calibration as calibration
    import headscope.corpus as corpus

    text = tmp_path / "long.txt"
    text.write_text(TRICKY)
    ok("calibrate", str(tiny_hf_dir), "--text", str(text), "--out", str(tmp_path / "ref.json"), capsys=capsys)
    monkeypatch.setattr(corpus, "PIECE_CHARS", 64)
    monkeypatch.setattr(calibration, "PROGRESS_CHARS", 100)            # a "long" text, for the test
    capsys.readouterr()
    assert main(["calibrate", str(tiny_hf_dir), "--text", str(text), "--out", str(tmp_path / "c.json")]) == 0
    err = capsys.readouterr().err.splitlines()
    assert err[:2] == [f"calibrate: tokenised: {p}% of 0.0 M characters of text" for p in (10, 20)], err
    assert sum(line.startswith("calibrate: tokenised: ") for line in err) == 10, err
    assert (tmp_path / "c.json").read_bytes() == (tmp_path / "ref.json").read_bytes()     # same calibration


def test_two_reports_into_one_directory_never_leave_it_refused(tiny_hf_dir, tmp_path, capsys):
    """A full and a --stages report at once: the second is refused (naming the first); later runs work."""
    out, model = tmp_path / "rep", str(tiny_hf_dir)
    flag = tmp_path / "paused"
    first = headscope("report", model, "--out", str(out), "--stages", "model", "attention", "--no-progress",
                      cwd=tmp_path, env={"HEADSCOPE_TEST_PAUSE": "file:index.html",
                                         "HEADSCOPE_TEST_PAUSE_FLAG": str(flag)})
    try:
        deadline = time.monotonic() + 180
        while not flag.exists():
            assert first.poll() is None, first.stderr.read()
            assert time.monotonic() < deadline, "the first report never reached its index page"
            time.sleep(0.02)
        fails(["report", model, "--out", str(out), "--stages", "model", "--no-progress"], capsys,
              f"is being written by another headscope run (pid {first.pid}: headscope report")
        first.send_signal(signal.SIGKILL)
        assert first.wait(timeout=30) == -signal.SIGKILL
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
        first.stderr.close()
    ok("report", model, "--out", str(out), "--stages", "model", "--no-progress", capsys=capsys)
    ok("report", model, "--out", str(out), "--stages", "model", "attention", "--no-progress", capsys=capsys)
    ok("report", model, "--out", str(out), "--stages", "model", "--no-progress", capsys=capsys)
    assert not (out / "data" / "attention.json").exists() and temporaries(out) == []
