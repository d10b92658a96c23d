"""The report's input texts: the files given by flags, else the shipped defaults (:mod:`headscope.shipped`)."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from .. import shipped
from .._input import read_text_file
from ..shipped import Text
from .stages import Inputs


def _read(path: str | Path, what: str) -> Text:
    return Text(Path(path).stem, read_text_file(path, what, allow_empty=False))


def load_inputs(calibration: str | Path | None = None, samples: Sequence[str | Path] | None = None) -> Inputs:
    """The calibration text and sample texts: the files given, else the shipped defaults."""
    cal = _read(calibration, "calibration text") if calibration is not None else shipped.calibration_text()
    if samples:
        texts = [_read(s, "sample text") for s in samples]
        names: dict[str, int] = {}
        unique = []
        for t in texts:  # two files called a.txt in different folders stay distinguishable
            n = names.get(t.name, 0)
            names[t.name] = n + 1
            unique.append(t if n == 0 else Text(f"{t.name}-{n + 1}", t.text))
        texts = unique
    else:
        texts = shipped.samples()
    return Inputs(calibration=cal, samples=texts)
