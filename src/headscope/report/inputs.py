"""The report's input texts: shipped defaults (headscope/data/) or files given by flags."""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Sequence

from .._errors import HeadscopeError
from .stages import Inputs, Text


def _data_dir():
    return resources.files("headscope") / "data"


def default_calibration() -> Text:
    """``headscope/data/calibration.txt``: ~1500 words of everyday prose (average keyword density)."""
    return Text("calibration", (_data_dir() / "calibration.txt").read_text(encoding="utf-8"))


def default_samples() -> list[Text]:
    """``headscope/data/samples/*.txt``, sorted by file name."""
    d = _data_dir() / "samples"
    files = sorted((f for f in d.iterdir() if f.name.endswith(".txt")), key=lambda f: f.name)
    return [Text(f.name[:-4], f.read_text(encoding="utf-8")) for f in files]


def read_text_file(path: str | Path, what: str) -> Text:
    """Read a UTF-8 text file for the report; bad files are a :class:`HeadscopeError`."""
    p = Path(path)
    if not p.is_file():
        raise HeadscopeError(f"{what} {p}: no such file")
    try:
        data = p.read_bytes()
        if b"\x00" in data:
            raise HeadscopeError(f"{what} {p}: expected UTF-8 text, got a binary file (NUL bytes)")
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise HeadscopeError(f"{what} {p}: expected UTF-8 text, got an invalid byte at offset {e.start}") from None
    except OSError as e:
        raise HeadscopeError(f"{what} {p}: cannot read it ({e.strerror})") from None
    if not text.strip():
        raise HeadscopeError(f"{what} {p}: expected some text, got an empty file")
    return Text(p.stem, text)


def load_inputs(calibration: str | Path | None = None, samples: Sequence[str | Path] | None = None) -> Inputs:
    """The calibration text and sample texts: the files given, else the shipped defaults."""
    cal = read_text_file(calibration, "calibration text") if calibration is not None else default_calibration()
    if samples:
        texts = [read_text_file(s, "sample text") for s in samples]
        names: dict[str, int] = {}
        unique = []
        for t in texts:  # two files called a.txt in different folders stay distinguishable
            n = names.get(t.name, 0)
            names[t.name] = n + 1
            unique.append(t if n == 0 else Text(f"{t.name}-{n + 1}", t.text))
        texts = unique
    else:
        texts = default_samples()
    return Inputs(calibration=cal, samples=texts)
