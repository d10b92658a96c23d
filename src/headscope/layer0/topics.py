"""Labels for a contextual neuron from its top and bottom tokens (seed 000: "the vast majority
correspond to interpretable patterns like particular topics, languages, or sentiment").

A token is reduced to its word: leading space and case dropped, alphabetic only
(word pieces such as 'isation' are kept as they are). A side (the top or the bottom
tokens) gets a label when at least :data:`MIN_SHARE` of its tokens carry it:

* ``language:xx`` — the word is more than :data:`LANGUAGE_RATIO` times as frequent in
  language xx (one of :data:`LANGUAGES`) as in English, by the ``wordfreq`` package's
  offline word frequencies (:func:`language_of`);
* a lexicon name — the word is in that lexicon of ``data/topic_lexicons.json`` (topics,
  Commonwealth and American spellings, positive and negative sentiment; written for
  headscope, provenance in the file).

A neuron is *labelled* when either side has a label. The method is deterministic and
needs no network.
"""

from __future__ import annotations

import dataclasses
import functools
import json

from .. import shipped

MIN_SHARE = 0.2            #: share of a side's tokens that must carry a label
LANGUAGE_RATIO = 10.0      #: frequency in the language over frequency in English
LANGUAGES = ("fr", "de", "es", "it", "pt", "nl")
MIN_FREQUENCY = 1e-6       #: wordfreq frequency below which a word has no language


@functools.lru_cache(maxsize=1)
def lexicons() -> dict[str, frozenset[str]]:
    d = json.loads(shipped.read("topic_lexicons.json"))
    return {k: frozenset(w.lower() for w in v) for k, v in d["lexicons"].items()}


def word(token: str) -> str:
    return token.strip().lower()


@functools.lru_cache(maxsize=65536)
def language_of(w: str) -> str | None:
    """The language whose wordfreq frequency of `w` exceeds English's by LANGUAGE_RATIO (the most frequent)."""
    if not w.isalpha() or len(w) < 2:
        return None
    import wordfreq

    en = wordfreq.word_frequency(w, "en")
    best = max(LANGUAGES, key=lambda lang: wordfreq.word_frequency(w, lang))
    f = wordfreq.word_frequency(w, best)
    return best if f >= MIN_FREQUENCY and f > LANGUAGE_RATIO * en else None


def side_labels(tokens: list[str]) -> dict[str, float]:
    """{label: share of `tokens` carrying it} for the labels reaching MIN_SHARE."""
    if not tokens:
        return {}
    words = [word(t) for t in tokens]
    counts: dict[str, int] = {}
    for w in words:
        tags = {f"language:{lang}"} if (lang := language_of(w)) else set()
        tags |= {name for name, lex in lexicons().items() if w in lex}
        for t in tags:
            counts[t] = counts.get(t, 0) + 1
    return {k: round(v / len(words), 4) for k, v in sorted(counts.items()) if v / len(words) >= MIN_SHARE}


@dataclasses.dataclass
class NeuronLabel:
    neuron: int
    top: dict[str, float]
    bottom: dict[str, float]

    @property
    def labelled(self) -> bool:
        return bool(self.top or self.bottom)

    def to_dict(self) -> dict:
        return {**dataclasses.asdict(self), "labelled": self.labelled}


def label_neuron(neuron: int, top_tokens: list[str], bottom_tokens: list[str]) -> NeuronLabel:
    return NeuronLabel(neuron=neuron, top=side_labels(top_tokens), bottom=side_labels(bottom_tokens))
