"""Pass-through options of a sweep: a plain keyword argument of an analysis's function is an option under its
own name (checked by type, in the task's key only when given), so `--set reproduce.find=true` reaches
`reproduce(model, find=True)` as soon as that argument exists — simulated here by a reproduce that has it."""

from __future__ import annotations

import sys

import pytest

from headscope._errors import HeadscopeError
from headscope.sweep.analyses import kind
from headscope.sweep.grid import analysis_options


@pytest.fixture
def reproduce_with_find(monkeypatch):
    """headscope.reproduce.reproduce with a `find: bool = False` argument; records its calls."""
    calls = []

    def reproduce(model, *, reference=None, details=True, heads=None, variant=None, find: bool = False,
                  budget: "int | None" = None, reference_obj=object()):
        calls.append({"model": model, "details": details, "heads": heads, "find": find, "budget": budget})
        return "result"

    monkeypatch.setattr(sys.modules["headscope.reproduce"], "reproduce", reproduce)
    return calls


def test_a_plain_keyword_argument_is_an_option_passed_through(reproduce_with_find):
    k = kind("reproduce")
    assert set(k.passthrough()) == {"find", "budget"}                    # not an object-valued argument
    o = analysis_options("reproduce", {"find": True, "budget": 3})
    assert o == {"details": True, "heads": "published", "variant": None, "budget": 3, "find": True}
    assert k.execute("MODEL", o) == "result"
    assert reproduce_with_find == [{"model": "MODEL", "details": True, "heads": "published", "find": True,
                                    "budget": 3}]


def test_a_pass_through_option_enters_the_key_only_when_given(reproduce_with_find):
    assert "find" not in analysis_options("reproduce", {})              # tasks run before `find` stay reusable
    assert analysis_options("reproduce", {"budget": None})["budget"] is None


@pytest.mark.parametrize("given, message", [
    ({"find": "yes"}, "reproduce.find: expected bool (default False), got 'yes'"),
    ({"budget": 2.5}, "reproduce.budget: expected int or None (default None), got 2.5"),
    ({"reference_obj": 1}, "reproduce: unknown option(s) reference_obj; expected some of budget, details, find, "
                           "heads, variant"),
])
def test_a_pass_through_option_of_the_wrong_type_is_one_line(reproduce_with_find, given, message):
    with pytest.raises(HeadscopeError) as e:
        analysis_options("reproduce", given)
    assert str(e.value) == message


def test_an_unknown_option_lists_the_pass_through_ones_too():
    with pytest.raises(HeadscopeError, match=r"^neurons: unknown option\(s\) nonexistent; expected some of "
                                             r"chunk, heads, position, query, threshold, top, variant, window$"):
        analysis_options("neurons", {"nonexistent": 1})
