"""Data shipped inside the package (``headscope/data/``), read in one place.

- ``calibration.txt``: ~1500 words of everyday prose (average keyword density), the
  default calibration text of the contextual circuit;
- ``samples/*.txt``: short sample texts (news in British and American spelling,
  cooking, sport, French) for the report's per-token figures;
- ``sample_corpus.txt``: a few paragraphs written for headscope, a default corpus;
- ``genres/*.txt``: four ~1000-word texts of different genres (recipe, technical manual,
  dialogue, news report; ``genres/README.md``), the denominator rows' distinct texts;
- ``categories.json``: category word lists of the semantic-head prompts (with
  ``"_related"``: pairs of categories that overlap in meaning);
- ``categories_seed.json``: the L1H5 authors' 8 category lists (their
  ``src/constants.py`` at 6c45e47), for the survey's ``seed`` preset;
- ``seed_steering_tokens.json``: the 30 tokens (5 groups) of the authors' steering
  heatmaps (their ``GROUP_TOKENS``);
- ``seed_claims.json``: the seed studies' claims, published figures and tolerances.

Every text here was written for headscope (no third-party text); the two ``seed``
files hold word lists of the L1H5 study (data, cited in docs/fidelity.md).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from importlib import resources

CALIBRATION = "calibration.txt"
SAMPLE_CORPUS = "sample_corpus.txt"


@dataclasses.dataclass(frozen=True)
class Text:
    """An input text: a display name, its contents and their sha256."""

    name: str
    text: str

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.text.encode("utf-8")).hexdigest()

    def to_dict(self) -> dict:
        return {"name": self.name, "sha256": self.sha256, "chars": len(self.text),
                "words": len(self.text.split())}


def _data():
    return resources.files("headscope") / "data"


def read(name: str) -> str:
    """The UTF-8 text of ``headscope/data/<name>``."""
    return (_data() / name).read_text(encoding="utf-8")


def calibration_text() -> Text:
    """``calibration.txt``, named "calibration"."""
    return Text("calibration", read(CALIBRATION))


def samples() -> list[Text]:
    """``samples/*.txt``, sorted by file name, each named by its stem."""
    files = sorted((f for f in (_data() / "samples").iterdir() if f.name.endswith(".txt")), key=lambda f: f.name)
    return [Text(f.name[:-4], f.read_text(encoding="utf-8")) for f in files]


def genre_texts() -> list[Text]:
    """``genres/*.txt`` (recipe, manual, dialogue, report), sorted by file name, each named by its stem."""
    files = sorted((f for f in (_data() / "genres").iterdir() if f.name.endswith(".txt")), key=lambda f: f.name)
    return [Text(f.name[:-4], f.read_text(encoding="utf-8")) for f in files]


def sample_corpus() -> list[tuple[str, str]]:
    """``sample_corpus.txt`` as a one-text corpus ``[(name, text)]``."""
    return [(f"headscope:{SAMPLE_CORPUS}", read(SAMPLE_CORPUS))]


def categories() -> dict[str, list[str]]:
    """``categories.json``: ``{"colours": ["red", …], …}``."""
    return json.loads(read("categories.json"))


def seed_categories() -> dict[str, list[str]]:
    """``categories_seed.json``: the L1H5 authors' 8 category lists (survey preset ``seed``)."""
    return json.loads(read("categories_seed.json"))


def seed_steering_tokens() -> dict[str, list[str]]:
    """``seed_steering_tokens.json``: the authors' 30 steering tokens, by group (with leading spaces)."""
    return json.loads(read("seed_steering_tokens.json"))


def seed_claims() -> dict:
    """``seed_claims.json``: the claims, published figures and tolerances."""
    return json.loads(read("seed_claims.json"))


def spelling_texts() -> list[tuple[str, str]]:
    """``spelling_texts.json``: [(label, text)] with labels commonwealth / american (written for
    headscope; provenance in the file)."""
    d = json.loads(read("spelling_texts.json"))
    return [(t["label"], t["text"]) for t in d["texts"]]
