"""The claims table's types: a row, the result, a row's verdict, and the registry of checks.

A claim is one check function registered with :func:`claim` plus one entry of
``data/seed_claims.json`` (its text, published figure, tolerance and ``null`` margin). A check
takes ``(c, ref, w)`` — the JSON entry, the :class:`~headscope.claims.reference.Reference` and the
shared measurements (:class:`~headscope.claims.work.Work`) — and returns ``(published, measured,
tolerance, passed, note)`` and, where the row has a null, a sixth value: the
:class:`~headscope.claims.null.NullComparison`.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

from .._html_repr import HtmlRepr, render_text
from .null import NullComparison

#: claim id → its check function (filled by :func:`claim` in seed000_*.py and seed002.py)
CHECKS: dict[str, Callable] = {}


def claim(*ids: str):
    """Register a check function under the claim ids of seed_claims.json it measures."""
    def register(fn):
        for i in ids:
            if i in CHECKS:
                raise ValueError(f"claim {i!r} registered twice")
            CHECKS[i] = fn
        return fn
    return register


@dataclasses.dataclass
class ClaimRow:
    id: str
    seed: str
    claim: str
    measure: str
    published: object              # a number, list or text (from the seeds or the manifest)
    measured: object               # None when it could not be measured
    tolerance: str
    passed: bool | None            # None: nothing to compare with (stated in note)
    note: str = ""
    source: str = ""               # where the published figure comes from (seed_claims.json)
    rejects: str = ""              # the wrong convention the tolerance rejects (seed_claims.json)
    null: dict | None = None       # the statistic against its null (claims.null.NullComparison.to_dict)
    verdict: str = ""              # PASS, FAIL, "indistinguishable from random" or "no verdict"
    component: str = ""            # --find: the component the row used (claims.find) …
    why: str = ""                  # … and why it is that component

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        return d if self.component else {k: v for k, v in d.items() if k not in ("component", "why")}


RANDOM = "indistinguishable from random"


def verdict(passed: bool | None, null: NullComparison | None) -> tuple[bool | None, str]:
    """(passed, verdict) of a row: PASS only when the component passes AND clears its null."""
    if passed is None:
        return None, "no verdict"
    if not passed:
        return False, "FAIL"
    if null is not None and not null.clears:
        return False, RANDOM
    return True, "PASS"


@dataclasses.dataclass
class ReproduceResult(HtmlRepr):
    rows: list[ClaimRow]
    source: str
    fingerprint: str
    reference: str
    notes: list[str]
    details: dict
    components: list | None = None  # --find: every component located (claims.find.Found.to_dict)

    @property
    def ok(self) -> bool:
        """Every row that has a verdict passes."""
        return all(r.passed is not False for r in self.rows)

    def to_dict(self) -> dict:
        return {"source": self.source, "fingerprint": self.fingerprint, "reference": self.reference,
                "ok": self.ok, "n_pass": sum(r.passed is True for r in self.rows),
                "n_fail": sum(r.passed is False for r in self.rows),
                "rows": [r.to_dict() for r in self.rows], "notes": self.notes, "details": self.details,
                **({} if self.components is None else {"components": self.components})}

    def render(self) -> str:
        """The claims table as text (headscope.report.views.reproduce.text)."""
        return render_text(self)


# -- the reference: seed figures or a planted manifest -------------------------------------------


def margin_of(spec: dict) -> dict:
    """The margin of a claim's ``null`` entry in seed_claims.json."""
    return {"margin": float(spec["margin"]), "margin_kind": spec.get("margin_kind", "diff")}


def share_of(draws, ok) -> float | None:
    """The share of the null draws that pass the row's own tolerance."""
    draws = list(draws)
    return round(sum(bool(ok(x)) for x in draws) / len(draws), 4) if draws else None

