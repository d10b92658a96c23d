"""The seed-002 options as values: presets fill what is left None, explicit fields win, bad values
are refused with the expected and the given value, and the analyses take one value each."""

from __future__ import annotations

import dataclasses
import inspect
import re

import pytest

from headscope._errors import HeadscopeError
from headscope.semantic.head import analyse_head, analyse_heads, head_clusters
from headscope.semantic.options import PRESETS, ClusterOptions, HeadOptions, SteerOptions
from headscope.semantic.steering import steer


@pytest.mark.parametrize("preset", list(PRESETS))
def test_preset_fills_what_is_left_none(preset):
    o = HeadOptions(preset=preset).resolved()
    want = PRESETS[preset]
    assert (o.n_tokens, o.k, o.frequency, o.attn_mean) == (want["n_tokens"], want["k"], want["frequency"],
                                                          want["attn_mean"])
    assert o.authors == (want["graph"] == "authors")
    assert o.n_examples == 10 and o.keys == "vocab" and o.seed == 0


def test_explicit_fields_win_and_resolving_is_idempotent():
    o = HeadOptions(preset="seed", n_tokens=123, k=7, frequency="bpe", attn_mean="prompts").resolved()
    assert (o.n_tokens, o.k, o.frequency, o.attn_mean, o.preset) == (123, 7, "bpe", "prompts", "seed")
    assert o.resolved() == o
    assert ClusterOptions(k=3).resolved().n_tokens == PRESETS["headscope"]["n_tokens"]


@pytest.mark.parametrize("options, needle", [
    (ClusterOptions(preset="nope"), "preset: expected one of headscope, seed, got 'nope'"),
    (ClusterOptions(frequency="zipf"), "frequency: expected one of bpe, wordfreq, got 'zipf'"),
    (ClusterOptions(attn_mean="median"), "attention means: expected one of"),
    (ClusterOptions(keys="all"), "keys: expected 'vocab', 'nodes' or 'auto', got 'all'"),
    (ClusterOptions(k=0), "k: expected ≥ 1, got 0"),
    (SteerOptions(preset="nope"), "steer preset: expected one of headscope, seed, got 'nope'"),
])
def test_bad_options_are_refused(options, needle):
    with pytest.raises(HeadscopeError, match=re.escape(needle)):
        options.resolved()


def test_steer_preset_chooses_the_selection():
    assert SteerOptions().resolved().select == "negative"
    assert SteerOptions(preset="seed").resolved().select == "negative-top64"
    assert SteerOptions(preset="seed", select=(0, 3)).resolved().select == (0, 3)


def test_options_are_frozen_values():
    o = HeadOptions()
    with pytest.raises(dataclasses.FrozenInstanceError):
        o.k = 3
    assert HeadOptions(k=3) == HeadOptions(k=3) != HeadOptions(k=4)
    assert isinstance(o, ClusterOptions)          # a head's options are also its clustering's


@pytest.mark.parametrize("fn", [analyse_head, analyse_heads, head_clusters, steer])
def test_analyses_take_one_options_value(fn):
    params = inspect.signature(fn).parameters
    assert len(params) <= 8, (fn.__name__, list(params))
    assert "options" in params
