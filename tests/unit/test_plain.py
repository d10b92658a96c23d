"""_json.plain: dataclasses.asdict's result without deep-copying every number."""

import dataclasses

from headscope._json import plain


@dataclasses.dataclass
class _Inner:
    xs: list
    name: str = "x"


@dataclasses.dataclass
class _Outer:
    a: float
    inner: _Inner
    rows: list
    meta: dict
    pair: tuple = (1, 2.5)
    none: object = None


def test_plain_is_asdict_without_aliasing():
    o = _Outer(a=1.5, inner=_Inner([1.0, 2.0, [3, 4]]), rows=[_Inner([5.0]), {"k": [6.0]}],
               meta={"n": 3, "nested": {"v": [7.0, None]}})
    got = plain(o)
    assert got == dataclasses.asdict(o)
    assert type(got["pair"]) is tuple and type(got["rows"][0]) is dict
    got["inner"]["xs"][2].append(5)
    got["meta"]["nested"]["v"].append(8.0)
    assert o.inner.xs[2] == [3, 4] and o.meta["nested"]["v"] == [7.0, None]     # containers are copies
