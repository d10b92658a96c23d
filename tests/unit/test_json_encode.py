"""_json.encode: json.dumps(clean(obj), sort_keys=True, indent=2, …) byte for byte, in one pass
(floats at every magnitude); clean's error paths; OutputDir.announce: many files listed with one
manifest write."""

import dataclasses
import enum
import json
import random
import struct
from collections import namedtuple

import numpy as np
import pytest
import torch

from headscope import _json
from headscope._atomic import OutputDir
from headscope._atomic import directory as directory_module
from headscope._errors import HeadscopeError
from headscope._json import Encoded, NonFiniteError, clean, dumps, encode


def _reference(obj) -> str:
    return json.dumps(clean(obj), sort_keys=True, indent=2, ensure_ascii=False, allow_nan=False)


class _Name(str, enum.Enum):
    A = "a<b"


class _Level(enum.IntEnum):
    X = 3


_Pair = namedtuple("_Pair", "a b")


@dataclasses.dataclass
class _Row:
    x: float
    ys: list


def _leaf(rng: random.Random):
    r = rng.random()
    return rng.choice([
        rng.uniform(-1e9, 1e9), r * 10 ** rng.randint(-30, 30), rng.randint(-10 ** 20, 10 ** 20), None, True, False,
        'é"\\\n\t\x01 ☃', "\udc80 lone surrogate", np.float32(r), np.float64(-r), np.int64(7), torch.tensor([r, 2.0]),
        np.arange(3), _Name.A, _Level.X, -0.0, 1e16, 12345678.9, _Row(r, [1, 2.5]), torch.tensor(r), 5.0])


def _tree(rng: random.Random, depth: int):
    if depth == 0 or rng.random() < 0.3:
        return _leaf(rng)
    n = rng.randrange(5)
    kind = rng.randrange(6)
    if kind == 0:
        return [_tree(rng, depth - 1) for _ in range(n)]
    if kind == 1:
        return tuple(_tree(rng, depth - 1) for _ in range(n))
    if kind == 2:
        return {rng.choice(["b", "a", "ä", "10", "9", "", '"q']) + str(i): _tree(rng, depth - 1) for i in range(n)}
    if kind == 3:
        return {rng.choice([1, 2, 3.5, None]): _tree(rng, depth - 1) for _ in range(n)}
    if kind == 4:
        return [rng.random() * 10 ** rng.randint(-8, 12) for _ in range(n)]
    return _Pair(_tree(rng, depth - 1), [rng.randint(-3, 3) for _ in range(n)])


def test_encode_is_the_reference_json_byte_for_byte_at_every_level():
    rng = random.Random(0)
    for _ in range(600):
        obj = _tree(rng, 5)
        want = _reference(obj)
        assert dumps(obj) == want + "\n"
        for level in (1, 3):
            assert encode(obj, level) == want.replace("\n", "\n" + "  " * level)


def test_clean_names_where_a_bad_value_sits():
    cases = [({"heads": [1, {"tv_median": float("nan")}]}, "nan at heads[1].tv_median"),
             ({1: {2: [0, [float("-inf")]]}}, "-inf at 1.2[1][0]"), ([float("nan")], "nan at [0]"),
             ({"": {"a": float("inf")}}, "inf at a"), (float("nan"), "nan at the top level")]
    for obj, where in cases:
        with pytest.raises(NonFiniteError) as e:
            clean(obj)
        assert str(e.value).startswith(where + ":")
    with pytest.raises(TypeError, match=r"^not JSON-serialisable: object at x\[2\]\.y$"):
        clean({"x": [0, 1, {"y": object()}]})


def test_encode_raises_what_clean_raises():
    for obj in ({"a": {"b": [1.0, float("nan")]}}, [float("inf")], {"x": object()}):
        with pytest.raises((NonFiniteError, TypeError)) as want:
            clean(obj)
        with pytest.raises(type(want.value)) as got:
            dumps(obj)
        assert str(got.value) == str(want.value)


def test_encoded_text_is_inserted_as_it_is():
    data = {"z": [1.5, 2.0], "a": {"k": "<v>"}}
    doc = dumps({"key": "k", "data": Encoded(encode(data, level=1))})
    assert doc == dumps({"key": "k", "data": data})


def test_announce_lists_many_files_with_one_manifest_write(tmp_path, monkeypatch):
    writes = []
    real = directory_module._write_manifest
    monkeypatch.setattr(directory_module, "_write_manifest", lambda *a: writes.append(1) or real(*a))
    odir = OutputDir(tmp_path / "out", ".marker").open()
    odir.write(".marker", "m")
    odir.write("data/a.json", "{}", record_hash=True)
    writes.clear()
    odir.announce(["p/1.html", "p/2.html", "index.html", "data/a.json"])
    assert len(writes) == 1
    for rel in ("p/1.html", "p/2.html", "index.html", "data/a.json"):
        odir.write(rel, "<p>")
    assert len(writes) == 1                        # every file was listed (and data/a.json lost its hash) at once
    listed = json.loads((tmp_path / "out" / ".headscope-manifest.json").read_text())
    assert {"p/1.html", "p/2.html", "index.html", "data/a.json"} <= set(listed["files"])
    assert "data/a.json" not in listed.get("sha256", {})


def test_announce_refuses_a_users_file_and_lists_nothing(tmp_path):
    odir = OutputDir(tmp_path / "out", ".marker").open()
    odir.write(".marker", "m")
    (tmp_path / "out" / "mine.html").write_text("user's")
    with pytest.raises(HeadscopeError, match="not written by headscope"):
        odir.announce(["a.html", "mine.html"])
    assert odir.files == {".marker"}
    assert (tmp_path / "out" / "mine.html").read_text() == "user's"


def test_floats_are_written_as_their_repr_at_every_magnitude():
    """encode writes a float as repr(float("%.7g" % x)) (json.dumps's spelling of the rounded value),
    spelled from the "%.7g" text where that is the same string: checked over every decade of the
    double range, subnormals, whole numbers, the e+07..e+15 band and the decade edges."""
    rng = random.Random(7)
    xs = [float(f"{rng.uniform(-10, 10):.17f}e{e}") for e in range(-330, 308) for _ in range(40)]
    xs += [struct.unpack("<d", struct.pack("<Q", rng.getrandbits(64)))[0] for _ in range(20000)]
    xs += [rng.randint(-10 ** 9, 10 ** 9) / 10 ** rng.randint(0, 12) for _ in range(20000)]
    xs += [0.0, -0.0, 1e-4, 9.99999949e-5, 9.9999995e-5, 9999999.4, 9999999.5, 1e7, 1e16, 9.9999995e15, 5e-324,
           2.2250738585072014e-308, 1.7976931348623157e308, 1.0, -1.0, 123456.0, 1e-30, 3.5e-300, 2.5e+20]
    xs = [x for x in xs if x == x and abs(x) != float("inf")]
    want = [repr(float(f"{x:.7g}")) for x in xs]
    assert [encode(x) for x in xs] == want                     # one float at a time
    for k in (1, 3, 50, 1000):                                 # lists (mixed decades, and all of one kind)
        for i in range(0, len(xs), k):
            assert encode(xs[i:i + k]) == json.dumps([float(w) for w in want[i:i + k]], indent=2)
