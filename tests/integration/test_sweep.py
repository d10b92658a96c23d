"""`headscope sweep` on real Dask processes: a `dask scheduler` and two `dask worker`s on localhost, the
default LocalCluster, and the serial run, over two tiny checkpoints × three revisions (an offline hub
cache written by `testing.hub`) × two analyses. A worker SIGKILLed mid-task does not change a byte of
the result; a rerun recomputes nothing; an unreachable scheduler is one line with nothing written.
Every process started here is killed in a `finally`."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

import headscope
from headscope.cli import main
from headscope.testing.hub import write_hub_cache

pytest.importorskip("distributed")

SHAPES = {"tiny-org/alpha": dict(n_layer=2, n_embd=24, n_head=3, n_ctx=32, n_inner=40, seed=0),
          "tiny-org/beta": dict(n_layer=3, n_embd=20, n_head=2, n_ctx=28, n_inner=36, seed=7)}
GRID = [*SHAPES, "--analyses", "survey,composition", "--revisions", "step0:2000:1000", "--set", "survey.prompts=8"]
N_TASKS = 2 * 3 * 2


@pytest.fixture(scope="module")
def hub_cache(tmp_path_factory) -> Path:
    cache = tmp_path_factory.mktemp("sweepcache") / "hub"
    for repo, shape in SHAPES.items():
        write_hub_cache(cache, repo, revision_branches=["step0", "step1000", "step2000"], **shape)
    return cache


def _env(cache: Path, tmp: Path) -> dict:
    src = str(Path(headscope.__file__).resolve().parents[1])
    return {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(cache), "HF_HOME": str(tmp / "hf"),
            "PYTHONPATH": os.pathsep.join([src] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])}


@pytest.fixture(scope="module")
def serial_run(hub_cache, tmp_path_factory) -> Path:
    """The grid run serially, in this process (the reference every other run must equal byte for byte)."""
    import contextlib
    import io

    from huggingface_hub import constants

    out = tmp_path_factory.mktemp("serial") / "sweep"
    old = constants.HF_HUB_OFFLINE, constants.HF_HUB_CACHE
    constants.HF_HUB_OFFLINE, constants.HF_HUB_CACHE = True, str(hub_cache)
    try:
        err = io.StringIO()
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
            code = main(["sweep", *GRID, "--out", str(out), "--serial"])
    finally:
        constants.HF_HUB_OFFLINE, constants.HF_HUB_CACHE = old
    assert code == 0, err.getvalue()
    return out


def files(d: Path) -> dict[str, bytes]:
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


def assert_same(a: Path, b: Path) -> None:
    fa, fb = files(a), files(b)
    assert sorted(fa) == sorted(fb)
    assert [n for n in fa if fa[n] != fb[n]] == []


def test_serial_run_writes_the_grid(serial_run):
    d = json.loads((serial_run / "sweep.json").read_text())
    assert d["n_ok"] == N_TASKS and d["n_failed"] == 0
    assert d["revisions"] == {m: ["step0", "step1000", "step2000"] for m in SHAPES}     # main: not in the range
    assert {(c["model"], c["revision"], c["analysis"]) for c in d["cells"]} == {
        (m, r, a) for m in SHAPES for r in ("step0", "step1000", "step2000") for a in ("survey", "composition")}
    for c in d["cells"]:
        doc = json.loads((serial_run / c["file"]).read_text())
        assert doc["revision_run"]["commit"] == c["commit"] and len(c["commit"]) == 40
    # the tidy table: one row per model × revision × metric × component; the survey: every head of each model
    rows = (serial_run / "sweep.csv").read_text().splitlines()
    assert rows[0] == "model,revision,step,analysis,metric,component,value,status"
    loss = [r for r in rows if ",survey,semantic_loss," in r]
    assert len(loss) == 3 * (2 * 3) + 3 * (3 * 2)                # revisions × heads, per model
    page = (serial_run / "index.html").read_text()
    assert "<svg" in page and all(c["file"] in page for c in d["cells"])
    for c in d["cells"]:                                         # each task's own page, linked from the index
        own = c["file"][:-len(".json")] + ".html"
        assert own in page and "<pre>" in (serial_run / own).read_text()
    assert 'src="http' not in page and 'href="http' not in page                   # offline


@contextmanager
def dask_processes(env: dict, tmp: Path, workers: dict[str, list[str]] | None = None):
    """`dask scheduler` + `dask worker --no-nanny`s on 127.0.0.1, random ports, no dashboard: `workers`
    name → extra arguments (default: w1 and w2, one thread each)."""
    procs: list[subprocess.Popen] = []
    logs = open(tmp / "dask.log", "w")
    try:
        sched = tmp / "scheduler.json"
        procs.append(subprocess.Popen([sys.executable, "-m", "dask", "scheduler", "--host", "127.0.0.1", "--port", "0",
                                       "--no-dashboard", "--scheduler-file", str(sched)],
                                      env=env, stdout=logs, stderr=subprocess.STDOUT))
        deadline = time.monotonic() + 60
        while not (sched.is_file() and sched.stat().st_size) and time.monotonic() < deadline:
            time.sleep(0.1)
        address = json.loads(sched.read_text())["address"]
        spawned = {}
        for name, extra in (workers or {"w1": ["--nthreads", "1"], "w2": ["--nthreads", "1"]}).items():
            spawned[name] = subprocess.Popen(
                [sys.executable, "-m", "dask", "worker", address, "--no-nanny", "--no-dashboard",
                 "--host", "127.0.0.1", "--name", name, "--memory-limit", "4GiB", *extra],
                env=env, stdout=logs, stderr=subprocess.STDOUT)
            procs.append(spawned[name])
        from distributed import Client

        with Client(address, timeout=60) as c:
            c.wait_for_workers(len(spawned), timeout=120)
        yield address, spawned
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
        for p in procs:
            p.wait(timeout=60)
        logs.close()


def offline(monkeypatch, cache: Path) -> None:
    """This process and the workers it spawns read only the test's hub cache."""
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))


def test_cluster_with_a_worker_killed_mid_task_matches_serial_and_rerun_computes_nothing(
        serial_run, hub_cache, tmp_path, monkeypatch, capsys):
    from distributed import Client

    import threading

    env = _env(hub_cache, tmp_path)
    out = tmp_path / "remote"
    offline(monkeypatch, hub_cache)
    with dask_processes(env, tmp_path) as (address, workers):
        result: dict = {}
        capsys.readouterr()
        sweep = threading.Thread(target=lambda: result.setdefault(
            "code", main(["sweep", *GRID, "--out", str(out), "--scheduler", address])))
        sweep.start()
        killed = None
        try:
            with Client(address, timeout=30) as c:
                names = {a: w["name"] for a, w in c.scheduler_info()["workers"].items()}
                deadline = time.monotonic() + 240
                while killed is None and sweep.is_alive() and time.monotonic() < deadline:
                    for addr, keys in c.processing().items():
                        if any(str(k).startswith("headscope-task") for k in keys):
                            killed = names[addr]
                            workers[killed].send_signal(signal.SIGKILL)
                            break
                    time.sleep(0.02)
        finally:
            sweep.join(timeout=300)
        stderr = capsys.readouterr().err
        assert killed is not None, "no task was caught running"
        assert workers[killed].wait(timeout=30) == -signal.SIGKILL
        assert result.get("code") == 0, stderr
        assert "Traceback" not in stderr
        assert_same(out, serial_run)                             # byte-identical, every file
        before = {p: p.stat().st_mtime_ns for p in (out / "tasks").rglob("*.json")}
        offline(monkeypatch, hub_cache)
        capsys.readouterr()
        code = main(["sweep", *GRID, "--out", str(out), "--scheduler", address])
        err = capsys.readouterr().err
    assert code == 0, err
    assert err.count(": reused") == N_TASKS and ": computed" not in err, err
    assert {p: p.stat().st_mtime_ns for p in (out / "tasks").rglob("*.json")} == before
    assert_same(out, serial_run)


def test_default_local_cluster_matches_serial(serial_run, hub_cache, tmp_path, monkeypatch, capsys):
    out = tmp_path / "local"
    offline(monkeypatch, hub_cache)
    monkeypatch.setenv("PYTHONPATH", _env(hub_cache, tmp_path)["PYTHONPATH"])     # the spawned workers' headscope
    capsys.readouterr()
    code = main(["sweep", *GRID, "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 0 and "Traceback" not in err, err
    assert "headscope: LocalCluster: " in err and "one model per worker" in err, err
    assert err.count(": computed") == N_TASKS
    assert_same(out, serial_run)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("address", ["tcp://127.0.0.1:{port}", "nonsense"])
def test_unreachable_scheduler_is_one_line_and_writes_nothing(hub_cache, tmp_path, monkeypatch, capsys, address):
    offline(monkeypatch, hub_cache)
    out = tmp_path / "out"
    code = main(["sweep", *GRID, "--out", str(out), "--scheduler", address.format(port=_free_port()),
                 "--connect-timeout", "2"])
    cap = capsys.readouterr()
    assert code == 2 and cap.out == ""
    assert cap.err.startswith("headscope: error: --scheduler") and cap.err.count("\n") == 1, cap.err
    assert not out.exists()


def test_a_missing_revision_is_one_line_and_its_cells_are_marked(serial_run, hub_cache, tmp_path, monkeypatch,
                                                                  capsys):
    offline(monkeypatch, hub_cache)
    out = tmp_path / "out"
    code = main(["sweep", "tiny-org/alpha", "--analyses", "composition", "--revisions", "step0,step5", "--out",
                 str(out), "--serial"])
    cap = capsys.readouterr()
    assert code == 1 and "Traceback" not in cap.err
    errors = [l for l in cap.err.splitlines() if l.startswith("headscope: error:")]
    assert len(errors) == 1 and "'step5'" in errors[0], cap.err
    d = json.loads((out / "sweep.json").read_text())
    assert [(c["revision"], c["status"]) for c in d["cells"]] == [("step0", "ok"), ("step5", "failed")]
    assert "tiny-org/alpha,step5,5,composition,,,,failed" in (out / "sweep.csv").read_text()
    assert (out / d["cells"][0]["file"]).is_file() and not (out / d["cells"][1]["file"]).exists()


def test_tasks_declare_their_memory_so_two_models_never_share_a_worker(hub_cache, tmp_path, monkeypatch, capsys):
    """One `dask worker` with two threads whose MEMORY resource holds one task's declared need but not two:
    it runs its tasks one at a time (polled from the worker itself; without the declaration, two at once)."""
    import threading

    from distributed import Client

    from headscope.sweep.cluster import task_memory
    from headscope.testing.hub import cached_snapshot

    def running(dask_worker) -> int:                                # pickled by value: the worker runs it
        return sum(str(ts.key).startswith("headscope-task") for ts in dask_worker.state.executing)

    weights = sum(p.stat().st_size for p in cached_snapshot(hub_cache, "tiny-org/alpha").iterdir()
                  if p.name.endswith(".safetensors"))
    room = int(1.5 * task_memory(weights))                          # one task's need fits, two do not
    offline(monkeypatch, hub_cache)
    env = _env(hub_cache, tmp_path)
    with dask_processes(env, tmp_path, {"w": ["--nthreads", "2", "--resources", f"MEMORY={room}"]}) as (address, _):
        result: dict = {}
        capsys.readouterr()
        sweep = threading.Thread(target=lambda: result.setdefault("code", main(
            ["sweep", "tiny-org/alpha", "--analyses", "survey,composition", "--revisions", "step0:2000:1000",
             "--set", "survey.prompts=8", "--out", str(tmp_path / "out"), "--scheduler", address])))
        sweep.start()
        seen = []
        try:
            with Client(address, timeout=30) as c:
                while sweep.is_alive():
                    seen += c.run(running).values()
                    time.sleep(0.02)
        finally:
            sweep.join(timeout=300)
        err = capsys.readouterr().err
    assert result.get("code") == 0, err
    assert err.count(": computed") == 6, err
    assert max(seen) == 1 and len(seen) > 20, seen                 # tasks seen running, never two at once


@pytest.fixture(scope="module")
def wide_model(hub_cache, tmp_path_factory) -> str:
    """big-org/wide at step0 in the test's cache: one layer, d_model 1024 (218 MB of float32 weights), whose
    task peaks near 1 GiB in a worker — over a 768 MiB limit, under which a tiny-org task stays (≈ 0.53 GiB)."""
    from headscope.testing.hub import cache_directory, write_hub_checkpoint

    d = tmp_path_factory.mktemp("wide") / "ckpt"
    write_hub_checkpoint(d, n_layer=1, n_embd=1024, n_head=4, n_ctx=24, n_inner=36)
    cache_directory(hub_cache, "big-org/wide", d, revision="step0")
    return "big-org/wide"


def test_a_task_killed_for_memory_is_reported_with_its_model_and_revision_and_the_rest_goes_on(
        wide_model, hub_cache, tmp_path, monkeypatch, capsys):
    out = tmp_path / "mem"
    offline(monkeypatch, hub_cache)
    monkeypatch.setenv("PYTHONPATH", _env(hub_cache, tmp_path)["PYTHONPATH"])
    capsys.readouterr()
    code = main(["sweep", "tiny-org/alpha", wide_model, "--analyses", "composition", "--revisions", "step0",
                 "--out", str(out), "--workers", "1", "--worker-memory", "768MiB"])
    err = capsys.readouterr().err
    assert code == 1 and "Traceback" not in err, err
    assert "memory limit 768.0 MiB per worker (--worker-memory)" in err, err
    errors = [l for l in err.splitlines() if l.startswith("headscope: error:")]
    assert len(errors) == 1, err
    assert errors[0].startswith(f"headscope: error: {wide_model}@step0 composition: killed for memory — its "
                                "worker exceeded its memory limit (RSS "), errors
    d = json.loads((out / "sweep.json").read_text())
    assert [(c["model"], c["revision"], c["status"]) for c in d["cells"]] == [
        ("tiny-org/alpha", "step0", "ok"), (wide_model, "step0", "failed")]
    assert "killed for memory" in d["cells"][1]["error"]
    assert f"{wide_model},step0,0,composition,,,,failed" in (out / "sweep.csv").read_text()
    assert (out / d["cells"][0]["file"]).is_file() and not (out / d["cells"][1]["file"]).exists()


@pytest.mark.parametrize("extra, message", [
    (["--worker-memory", "lots"], "--worker-memory: expected a size of at least 1MiB such as 4GiB or 500MB, got 'lots'"),
    (["--worker-memory", "1GiB", "--serial"], "--worker-memory sizes the LocalCluster's workers; not with --serial"),
])
def test_a_bad_worker_memory_is_one_line_and_writes_nothing(hub_cache, tmp_path, monkeypatch, capsys, extra, message):
    offline(monkeypatch, hub_cache)
    out = tmp_path / "out"
    code = main(["sweep", "tiny-org/alpha", "--analyses", "composition", "--out", str(out), *extra])
    cap = capsys.readouterr()
    assert code == 2 and cap.err.startswith(f"headscope: error: {message}") and cap.err.count("\n") == 1, cap.err
    assert not out.exists()
