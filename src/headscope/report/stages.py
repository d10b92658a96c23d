"""Report stages: compute → JSON-ready dict (cached by an inputs key) → render → HTML.

A stage is a subclass of :class:`Stage` registered with :func:`register_stage`.
``build_report`` runs the registered stages in order, or two at a time where torch has two
threads (:mod:`.lanes`; a stage starts once those it requires have finished). For each stage it
computes

    key = sha256(dumps({stage, version, model fingerprint, dtype, device, processing,
                        stage.key_options(options), sha256 of each input text the stage
                        reads, keys of the stages it requires}))

and, unless ``--no-cache``, reuses ``DIR/data/<stage>.json`` when that file holds the
same key; otherwise it calls :meth:`Stage.compute` and writes the result there
atomically (temp file + rename) as soon as the stage finishes. An interrupted run
therefore keeps every finished stage, and the rerun skips them. What later stages and
:meth:`Stage.render` see is always the JSON round-trip of the result
(``json.loads(dumps(data))``), so a cached and a fresh run render identical pages and
write identical JSON.

Rendering is cheap and always redone: :meth:`Stage.render` returns a :class:`Rendered`
with index sections, summary rows for the index table, and sections of per-item pages
(:class:`PageSection`). Sections of the same page path from different stages are merged
into one page (e.g. the attention stage and a future kernels stage both write to
``heads/L0H3.html``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import sys
from pathlib import Path
from typing import Any, Iterable, Sequence

from tqdm.auto import tqdm

from .._errors import HeadscopeError
from .._json import clean, dumps
from ..shipped import Text
from .html import Safe

#: name → stage class, in registration order (the order stages run in).
REGISTRY: dict[str, type["Stage"]] = {}


def register_stage(cls: type["Stage"]) -> type["Stage"]:
    """Class decorator: add a stage to the default report (runs after those registered before)."""
    if not cls.name or not cls.name.replace("_", "").isalnum():
        raise ValueError(f"stage name must be a non-empty identifier, got {cls.name!r}")
    REGISTRY[cls.name] = cls
    return cls


def registered_stages() -> list["Stage"]:
    """Instances of every registered stage, in order (:func:`headscope.report.builtin.default_stages`
    registers the built-in ones first)."""
    return [cls() for cls in REGISTRY.values()]


@dataclasses.dataclass
class Inputs:
    """The report's input texts, by kind: ``calibration`` (one text), ``samples`` (several)."""

    calibration: Text
    samples: list[Text]

    def hashes(self, kinds: Iterable[str]) -> dict:
        out = {}
        for k in kinds:
            if k == "calibration":
                out[k] = self.calibration.sha256
            elif k == "samples":
                out[k] = [[t.name, t.sha256] for t in self.samples]
            else:
                raise ValueError(f"unknown input kind {k!r} (expected calibration or samples)")
        return out


@dataclasses.dataclass
class Context:
    """What a stage's compute sees: the model, options, inputs, earlier stages' data."""

    model: Any
    options: Any  # ReportOptions
    inputs: Inputs
    results: dict[str, dict]  # stage name → its (JSON round-tripped) data: the stages it requires
    progress: "Progress | None" = None

    def weights(self):
        """The model's weights under the report's processing (the model is bound to it)."""
        return self.model.weights()


class Progress:
    """A tqdm bar for one stage (on stderr); stages call :meth:`iter` or :meth:`update`."""

    def __init__(self, desc: str, enabled: bool = True):
        self.bar = tqdm(total=None, desc=desc, file=sys.stderr, disable=not enabled, leave=True,
                        dynamic_ncols=True, unit="step")

    def set_total(self, n: int) -> None:
        self.bar.reset(total=n)

    def update(self, n: int = 1) -> None:
        self.bar.update(n)

    def iter(self, items: Sequence, desc: str | None = None):
        """Iterate over `items`, advancing the bar (its total becomes len(items))."""
        items = list(items)
        self.set_total(len(items))
        if desc:
            self.bar.set_postfix_str(desc)
        for x in items:
            yield x
            self.bar.update(1)

    def step(self, done: int, total: int, what: str = "") -> None:
        """Report `done` of `total` steps finished, the last being `what`."""
        if self.bar.total != total:
            self.bar.reset(total=total)
        self.bar.n = done
        if what:
            self.bar.set_postfix_str(what, refresh=False)
        self.bar.refresh()

    def note(self, text: str) -> None:
        self.bar.set_postfix_str(text)

    def close(self) -> None:
        self.bar.close()


@dataclasses.dataclass
class PageSection:
    """A section of a per-item page (``heads/L0H3.html``), contributed by one stage.

    `group` names the index list the page appears in ("Attention heads", "Neurons");
    `order` sorts pages within a group (and drives previous/next links); `summary`
    is a short line shown beside the link on the index.
    """

    path: str
    title: str
    group: str
    body: Safe
    order: tuple = ()
    summary: str = ""


@dataclasses.dataclass
class Rendered:
    """What a stage contributes to the report's HTML."""

    index: list[Safe] = dataclasses.field(default_factory=list)        # sections on index.html
    summary: list[tuple[str, Any]] = dataclasses.field(default_factory=list)  # rows of the index summary table
    pages: list[PageSection] = dataclasses.field(default_factory=list)


class Stage:
    """One analysis in the report. Subclass, set the class attributes, implement two methods.

    * ``name`` — identifier; data go to ``DIR/data/<name>.json``.
    * ``title`` — heading of its index section.
    * ``version`` — bump when compute changes, to invalidate old caches.
    * ``inputs`` — which input texts compute reads (``"calibration"``, ``"samples"``).
    * ``requires`` — names of earlier stages whose data compute reads (``ctx.results[name]``);
      compute sees theirs (and what they require) only, finished before it starts.
    * ``exclusive`` — True for a stage of large products that already use every torch thread
      well: it runs alone on all of them, never in a lane beside another stage (:mod:`.lanes`).
    * ``long`` — True for one of the longest stages that run in a lane: lanes start it before the
      others (longest first), so that they end together (:mod:`.lanes`).
    * :meth:`key_options` — the options that change the result (part of the cache key).
    * :meth:`compute` — the numbers, as a JSON-ready dict (use ``result.to_dict()``).
    * :meth:`render` — HTML from that dict (``data`` is what was saved, after the JSON
      round trip), using :mod:`headscope.report.html` and :mod:`headscope.report.figures`.
    * ``nullable`` — the fields of the data that may be ``null`` (fnmatch patterns over
      paths with list indices as ``[]``, e.g. ``"neurons[].correlation"``); everywhere
      else a number is promised (checked by :func:`headscope._json.assert_finite_json`).

    When the analysis cannot apply to the model, compute raises
    :class:`headscope.NotApplicable`: the report saves ``{"not_applicable": reason}``,
    renders the reason instead of calling :meth:`render`, and goes on. A stage whose
    required stage did not apply does not apply either, unless it sets
    ``tolerates_not_applicable`` (it then reads ``ctx.results[name]`` and copes).
    """

    name: str = ""
    title: str = ""
    version: int = 1
    inputs: tuple[str, ...] = ()
    requires: tuple[str, ...] = ()
    nullable: tuple[str, ...] = ()
    tolerates_not_applicable: bool = False
    optional: bool = False          # run only when named (--stages NAME) or asked for (ReportOptions.claims)
    exclusive: bool = False         # run alone on every torch thread, never in a lane (report.lanes)
    long: bool = False              # started before the other lane stages: longest first (report.lanes)

    def key_options(self, options) -> dict:
        return {}

    def compute(self, ctx: Context) -> dict:  # pragma: no cover - abstract
        raise NotImplementedError

    def render(self, data: dict, ctx: "RenderContext") -> Rendered:  # pragma: no cover - abstract
        raise NotImplementedError


@dataclasses.dataclass
class RenderContext:
    """What render sees besides its own data: all stages' data and the model's description."""

    results: dict[str, dict]
    options: Any


# -- keys and the cache ------------------------------------------------------------------


def stage_key(stage: Stage, model, options, inputs: Inputs, dep_keys: dict[str, str]) -> tuple[str, dict]:
    """(sha256 hex, the dict it hashes) identifying `stage`'s result for these inputs."""
    parts = {
        "stage": stage.name,
        "version": stage.version,
        "fingerprint": model.fingerprint,
        "dtype": str(model.dtype).replace("torch.", ""),
        "device": str(model.device.type),
        "processing": options.processing.to_dict(),
        "options": clean(stage.key_options(options)),
        "inputs": inputs.hashes(stage.inputs),
        "requires": {d: dep_keys[d] for d in stage.requires},
    }
    return hashlib.sha256(dumps(parts).encode("utf-8")).hexdigest(), parts


def data_path(out: Path, stage: Stage) -> Path:
    return Path(out) / "data" / f"{stage.name}.json"


def read_cached(raw: bytes | None, key: str) -> dict | None:
    """The saved data of a stage if `raw` (the bytes of its data file, proven unedited by the
    manifest's hash: :meth:`headscope._atomic.OutputDir.verified`) holds the same key, else None."""
    try:
        doc = json.loads(raw.decode("utf-8")) if raw is not None else None
    except (ValueError, RecursionError):
        return None
    if not isinstance(doc, dict) or doc.get("key") != key or not isinstance(doc.get("data"), dict):
        return None
    return doc["data"]


def document(stage: Stage, key: str, key_parts: dict, data) -> str:
    """The text of ``data/<stage>.json``: the key, what it hashes, and the data (a dict, or
    :class:`headscope._json.Encoded` text of it at level 1: its place in the document)."""
    return dumps({"stage": stage.name, "title": stage.title, "key": key, "key_parts": key_parts, "data": data})


def check_order(stages: Sequence[Stage]) -> None:
    seen: set[str] = set()
    for s in stages:
        if s.name in seen:
            raise HeadscopeError(f"report stage {s.name!r} listed twice")
        for d in s.requires:
            if d not in seen:
                raise HeadscopeError(f"report stage {s.name!r} requires stage {d!r}, which does not run before it")
        seen.add(s.name)


def select(stages: Sequence[Stage], names: Sequence[str] | None) -> list[Stage]:
    """The stages named (plus what they require), in registry order."""
    if not names:
        return [s for s in stages if not s.optional]
    by = {s.name: s for s in stages}
    unknown = [n for n in names if n not in by]
    if unknown:
        raise HeadscopeError(f"unknown report stage {unknown[0]!r}: expected one of {', '.join(by)}")
    want: set[str] = set()

    def add(n):
        if n not in want:
            want.add(n)
            for d in by[n].requires:
                add(d)

    for n in names:
        add(n)
    return [s for s in stages if s.name in want]

