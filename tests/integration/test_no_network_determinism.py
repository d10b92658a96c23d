"""A local path never touches the network (sockets blocked), and reruns are byte-identical."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from headscope.cli import main


def cli(capsys, *argv) -> tuple[int, bytes]:
    capsys.readouterr()
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    assert code == 0, err
    return code, out.encode("utf-8")


def tree(d: Path) -> dict[str, bytes]:
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


def test_info_local_path_offline_and_byte_identical(tiny_hf_dir, no_network, capsys):
    _, first = cli(capsys, "info", tiny_hf_dir, "--json")
    _, second = cli(capsys, "info", tiny_hf_dir, "--json")
    assert first == second
    info = json.loads(first)
    assert info["source"] == f"local:{Path(tiny_hf_dir).resolve()}"
    assert info["config"]["n_heads"] == 3


def test_plant_offline_and_byte_identical(planted_dir, tmp_path, no_network, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _, out1 = cli(capsys, "plant", "--out", "p", "--seed", "0", "--json")
    first = tree(tmp_path / "p")
    _, out2 = cli(capsys, "plant", "--out", "p", "--seed", "0", "--json")  # rerun over its own output
    assert out1 == out2
    assert tree(tmp_path / "p") == first
    assert first == tree(planted_dir), "the CLI and headscope.planted.build disagree for seed 0"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p"], "temp files left behind"
    assert {"config.json", "model.safetensors", "planted.json", "vocab.json", "merges.txt"} <= set(first)
    # the planted checkpoint's own info is stable too
    _, i1 = cli(capsys, "info", "p", "--json")
    _, i2 = cli(capsys, "info", "p", "--json")
    assert i1 == i2


def test_different_seed_differs(planted_dir, tmp_path, capsys):
    """Guards the identity test above against a builder that ignores the seed."""
    cli(capsys, "plant", "--out", tmp_path / "s1", "--seed", "1")
    assert (tmp_path / "s1" / "model.safetensors").read_bytes() != (planted_dir / "model.safetensors").read_bytes()


# -- analysis commands: rerun in the same process (global RNG state, caches) and in a fresh
#    interpreter with another PYTHONHASHSEED (set / dict-of-str ordering) ---------------------

ANALYSES = {
    "kernels": ["kernels", "{m}", "--sample-corpus", "--max-windows", "3", "--json"],
    "survey": ["survey", "{m}", "--prompts", "6", "--length", "8", "--json"],
    "head": ["head", "{m}", "1.1", "--tokens", "150", "--k", "5", "--json"],
}


def _argv(name, model):
    return [a.replace("{m}", str(model)) for a in ANALYSES[name]]


@pytest.mark.parametrize("name", sorted(ANALYSES))
def test_analysis_json_offline_and_byte_identical(name, tiny_hf_dir, no_network, capsys):
    import torch

    _, first = cli(capsys, *_argv(name, tiny_hf_dir))
    torch.manual_seed(12345)          # a result must not depend on the global RNG state
    _, second = cli(capsys, *_argv(name, tiny_hf_dir))
    assert first == second
    assert len(first) > 200 and json.loads(first)


# sockets refused in the child too; then headscope's own CLI
_CHILD = """
import socket, sys
def refuse(*a, **k):
    raise AssertionError("headscope tried to use the network")
socket.socket.connect = socket.socket.connect_ex = refuse
socket.create_connection = socket.getaddrinfo = refuse
from headscope.cli import main
sys.exit(main(sys.argv[1:]))
"""


def _child(argv, hashseed: str) -> bytes:
    import os
    import subprocess
    import sys

    src = str(Path(__file__).resolve().parents[2] / "src")
    env = {**os.environ, "PYTHONHASHSEED": hashseed, "HF_HUB_OFFLINE": "1",
           "PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", _CHILD, *argv], env=env, capture_output=True, timeout=300)
    assert done.returncode == 0, done.stderr.decode()
    return done.stdout


@pytest.mark.parametrize("name", ["head", "survey"])
def test_analysis_json_identical_across_processes(name, tiny_hf_dir, no_network, capsys):
    """A fresh interpreter with a different string-hash seed prints the same bytes as this one."""
    _, here = cli(capsys, *_argv(name, tiny_hf_dir))
    assert _child(_argv(name, tiny_hf_dir), "1") == here
    assert _child(_argv(name, tiny_hf_dir), "2") == here


def test_kernels_out_dir_byte_identical(tiny_hf_dir, tmp_path, no_network, capsys):
    argv = ["kernels", tiny_hf_dir, "--sample-corpus", "--max-windows", "3", "--out", tmp_path / "k"]
    _, out1 = cli(capsys, *argv)
    first = tree(tmp_path / "k")
    assert {"kernels.json", "kernels.svg", "tv_hist.svg", "tv_position.svg"} <= set(first)
    _, out2 = cli(capsys, *argv)                  # rerun over its own output
    assert out1 == out2
    assert tree(tmp_path / "k") == first
    assert sorted(p.name for p in tmp_path.iterdir()) == ["k"], "temp files left behind"
    # the JSON file is the --json output
    _, js = cli(capsys, *argv[:-2], "--json")
    assert first["kernels.json"] == js


def test_kernels_corpus_changes_output(tiny_hf_dir, tmp_path, capsys):
    """Guards the identity tests: a different corpus gives different TV numbers."""
    (tmp_path / "c.txt").write_text("The cat sat on the mat. " * 30, encoding="utf-8")
    _, a = cli(capsys, *_argv("kernels", tiny_hf_dir))
    _, b = cli(capsys, "kernels", tiny_hf_dir, "--corpus", tmp_path / "c.txt", "--max-windows", "3", "--json")
    assert a != b
    assert json.loads(a)["heads"][0]["kernel"] == json.loads(b)["heads"][0]["kernel"]   # corpus-free part
