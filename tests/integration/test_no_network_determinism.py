"""A local path never touches the network (sockets blocked), and reruns are byte-identical."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from headscope.cli import main


@pytest.fixture()
def no_network(monkeypatch):
    def refuse(*a, **k):
        raise AssertionError("headscope tried to use the network")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)


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
