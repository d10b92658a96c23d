"""Neuron labels from token lists (topics.py) and the rows neuron_topics / neuron_transfer fed
right and wrong figures."""

from __future__ import annotations

import importlib
import random
import types

import pytest
import torch

from headscope.layer0.topics import NeuronLabel, label_neuron, language_of, side_labels
from headscope import shipped
from headscope._errors import NotApplicable
from headscope.claims import seed000_neurons as NR

R = importlib.import_module("headscope.reproduce")
CLAIMS = {c["id"]: c for c in R.seed_claims()["claims"]}
SEED = R.seed_reference(R.seed_claims())


def test_language_and_lexicon_labels():
    assert language_of("le") == "fr" and language_of("und") == "de" and language_of("the") is None
    assert side_labels([" colour", " centre", " Labour", " whilst", " table"]) == {"commonwealth_spelling": 0.8,
                                                                            "politics": 0.2}   # Labour: both
    fr = side_labels([" le", " des", " les", " pour", " the", " and", " of", " is", " in", " was"])
    assert fr == {"language:fr": 0.4}


def test_random_tokens_get_no_label(tiny):
    rng = random.Random(0)
    toks = tiny.to_str_tokens([rng.randrange(50257) for _ in range(50)])
    assert side_labels(toks) == {}                                       # the convention the row rejects


def test_neuron_topics_row():
    c = CLAIMS["neuron_topics"]
    good = [NeuronLabel(j, {"sport": 0.4}, {}) for j in range(8)] + [NeuronLabel(9, {}, {})]
    bad = [NeuronLabel(j, {}, {}) for j in range(6)] + [NeuronLabel(9, {"sport": 0.3}, {})]

    def work(labels):
        # the null's inputs (claims5): random neurons' scores [V K] (strength ≤ 1), unlabelled, and
        # the scan's neurons, each far stronger than the random ones
        return types.SimpleNamespace(
            topic_labels=labels, readout_null=torch.linspace(-1.0, 1.0, 5 * 64).reshape(5, 64),
            readout_null_labels=[NeuronLabel(k, {}, {}) for k in range(64)],
            scan=types.SimpleNamespace(neurons=[{"neuron": j, "max_contribution": 10.0, "min_contribution": -10.0}
                                                for j in range(10)]))

    assert NR._neuron_topics(c, SEED, work(good))[3] is True
    assert NR._neuron_topics(c, SEED, work(bad))[3] is False
    with pytest.raises(NotApplicable):
        NR._neuron_topics(c, SEED, work([]))


def test_neuron_transfer_row():
    c = CLAIMS["neuron_transfer"]
    labels = [label_neuron(7, [" football"] * 10, [" recipe"] * 10)]             # sport on top, cooking below

    def work(sign):
        act = {"sports_report": 2.0, "cooking": -2.0}
        w = types.SimpleNamespace(topic_labels=labels)
        names = {t.name: t.text for t in shipped.samples()}
        by_text = {v: k for k, v in names.items()}
        w.true_activation = lambda j, text: (sign * act.get(by_text[text], 0.0), 0.0, 0)
        # the labelled difference against random readouts of the neuron's norm (±0.5)
        w.sample_readout_null = lambda j, name: (sign * (act[name] - 0.0), [0.5 * (-1) ** k for k in range(64)])
        return w

    row = NR._neuron_transfer(c, SEED, work(1.0))
    assert row[3] is True and row[1] == "2/2"
    assert NR._neuron_transfer(c, SEED, work(-1.0))[3] is False                    # the wrong sign
