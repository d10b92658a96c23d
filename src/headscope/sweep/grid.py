"""The grid of a sweep: models × revisions × analyses, each cell resolved into a :class:`TaskSpec`.

Revisions are a comma list of names and ranges: ``step0:143000:1000`` means ``step0``,
``step1000``, … ``step143000`` (start, stop inclusive, stride), filtered to the branches that
exist — in the local Hugging Face cache when ``HF_HUB_OFFLINE=1``, else on the hub. A name given
outright is kept; if it does not exist its cell fails (one line) and the rest goes on.

Each cell's revision is resolved to its commit (the ``config.json`` download that loading starts
with; offline, the cache's ``refs/<revision>``), which enters the task's key and is what the
task loads, so a branch that moved is noticed. A local checkpoint directory has no revisions;
its key holds a stamp of its files (name, size, modification time).

The grid can also come from a TOML (``[grid]``-less: top-level keys) or JSON spec file::

    models = ["EleutherAI/pythia-70m", "EleutherAI/pythia-160m"]
    analyses = ["atlas", "reproduce"]
    revisions = "step0:143000:1000"
    [options.atlas]
    tokens = 1000
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import re
from pathlib import Path
from typing import Sequence

from .._errors import HeadscopeError
from .._input import read_capped, read_input_bytes
from .._json import dumps
from .._version import __version__
from ..maps.revisions import parse_revisions, revision_file
from .analyses import kind
from .engine import TaskSpec, task_key

_RANGE_RE = re.compile(r"([A-Za-z_-]*?)(\d{1,12}):(\d{1,12}):(\d{1,12})")
_COMMIT_RE = re.compile(r"[0-9a-f]{40}")
_SAFE_RE = re.compile(r"[^A-Za-z0-9._-]")
#: at most this many revisions a range may name (before filtering)
MAX_RANGE = 100_000


@dataclasses.dataclass
class Grid:
    """What to run: models, the revisions spec (None: main / the directory), analyses and their options."""

    models: list[str]
    analyses: list[str]
    revisions: str | None = None
    options: dict = dataclasses.field(default_factory=dict)     #: analysis → {option: value}
    dtype: str = "float32"
    device: str = "cpu"

    def to_dict(self) -> dict:
        return {"models": self.models, "analyses": self.analyses, "revisions": self.revisions,
                "options": {a: self.options[a] for a in self.analyses if a in self.options},
                "dtype": self.dtype, "device": self.device}

    def check(self) -> "Grid":
        if not self.models:
            raise HeadscopeError("sweep: expected at least one MODEL")
        if not self.analyses:
            raise HeadscopeError("--analyses: expected at least one analysis")
        if len(set(self.models)) != len(self.models):
            raise HeadscopeError("sweep: each MODEL once")
        if len(set(self.analyses)) != len(self.analyses):
            raise HeadscopeError("--analyses: each analysis once")
        for a in self.analyses:
            kind(a)
        for a in self.options:
            if a not in self.analyses:
                raise HeadscopeError(f"options for {a!r}, which is not in --analyses ({', '.join(self.analyses)})")
        return self


def read_spec(path: str | os.PathLike) -> dict:
    """A spec file (TOML, or JSON when it ends in .json) as a dict of grid fields (input rule, capped)."""
    import json

    data = read_capped(path, "spec file")
    try:
        text = data.decode("utf-8")
        if str(path).endswith(".json"):
            d = json.loads(text)
        else:
            try:
                import tomllib
            except ImportError:                                         # Python 3.10
                raise HeadscopeError("spec file: TOML needs Python ≥ 3.11; give a .json spec") from None
            d = tomllib.loads(text)
    except HeadscopeError:
        raise
    except (ValueError, UnicodeDecodeError, RecursionError) as e:
        raise HeadscopeError(f"spec file {path} is not valid {'JSON' if str(path).endswith('.json') else 'TOML'}"
                             f" ({str(e).splitlines()[0]})") from None
    allowed = {"models", "analyses", "revisions", "options", "dtype", "device"}
    if not isinstance(d, dict) or set(d) - allowed:
        raise HeadscopeError(f"spec file {path}: expected the keys {', '.join(sorted(allowed))}, got "
                             f"{', '.join(sorted(d)) if isinstance(d, dict) else type(d).__name__}")
    if "revisions" in d and isinstance(d["revisions"], list):
        d["revisions"] = ",".join(map(str, d["revisions"]))
    for k in ("models", "analyses"):
        if k in d and (not isinstance(d[k], list) or not all(isinstance(x, str) for x in d[k])):
            raise HeadscopeError(f"spec file {path}: {k} must be a list of strings")
    if "options" in d and (not isinstance(d["options"], dict) or not all(isinstance(v, dict)
                                                                         for v in d["options"].values())):
        raise HeadscopeError(f"spec file {path}: options must be a table per analysis")
    return d


# -- revisions -------------------------------------------------------------------------------------


def is_local(model: str) -> bool:
    return Path(model).expanduser().exists()


def existing_branches(model: str) -> list[str]:
    """The branches of hub model `model`: the cache's ``refs/`` offline, the hub's branch list online."""
    from huggingface_hub import constants

    if constants.HF_HUB_OFFLINE:
        refs = Path(constants.HF_HUB_CACHE) / ("models--" + model.replace("/", "--")) / "refs"
        if not refs.is_dir():
            return []
        return sorted(str(p.relative_to(refs)) for p in refs.rglob("*") if p.is_file())
    import huggingface_hub

    try:
        return [b.name for b in huggingface_hub.HfApi().list_repo_refs(model).branches]
    except Exception as e:                      # noqa: BLE001 — any hub failure is one line
        raise HeadscopeError(f"cannot list the branches of {model!r}: {str(e).splitlines()[0]}") from None


def expand_revisions(spec: str | None, model: str) -> list[str | None]:
    """The revisions of `model` that `spec` names, in run order (module docstring); [None] without a spec."""
    if spec is None:
        return [None]
    if is_local(model):
        raise HeadscopeError(f"--revisions applies to hub ids, but {model} is a local directory")
    names: list[str] = []
    branches = None
    for part in [p.strip() for p in spec.split(",")]:
        m = _RANGE_RE.fullmatch(part)
        if m is None:
            names.append(part)
            continue
        prefix, a, b, c = m.group(1) or "step", int(m.group(2)), int(m.group(3)), int(m.group(4))
        if c < 1 or b < a or (b - a) // c + 1 > MAX_RANGE:
            raise HeadscopeError(f"--revisions: range {part!r}: expected START:STOP:STRIDE with START ≤ STOP, "
                                 f"STRIDE ≥ 1 and at most {MAX_RANGE} names")
        if branches is None:
            branches = set(existing_branches(model))
        names += [f"{prefix}{n}" for n in range(a, b + 1, c) if f"{prefix}{n}" in branches and
                  f"{prefix}{n}" not in names]
    if not names:
        raise HeadscopeError(f"--revisions {spec!r}: none of these revisions of {model} exists")
    return list(parse_revisions(list(dict.fromkeys(names))))


def resolve_commit(model: str, revision: str | None) -> str:
    """The commit hash of hub model `model` at `revision` (one line when it cannot be found)."""
    import huggingface_hub
    from huggingface_hub import constants
    from huggingface_hub import errors as hf_errors

    what = repr(model) + (f" at revision {revision!r}" if revision is not None else "")
    if revision is not None and _COMMIT_RE.fullmatch(revision):
        return revision
    try:
        path = Path(huggingface_hub.hf_hub_download(model, "config.json", revision=revision))
    except hf_errors.LocalEntryNotFoundError:
        if constants.HF_HUB_OFFLINE:
            raise HeadscopeError(f"{what} is not in the local Hugging Face cache and HF_HUB_OFFLINE=1 forbids "
                                 "downloading it") from None
        raise HeadscopeError(f"cannot download {what}: the hub is unreachable and it is not cached") from None
    except hf_errors.RevisionNotFoundError:
        raise HeadscopeError(f"hub model {model!r} has no revision {revision!r}") from None
    except (hf_errors.RepositoryNotFoundError, hf_errors.GatedRepoError):
        raise HeadscopeError(f"unknown hub model id {model!r}") from None
    except hf_errors.EntryNotFoundError:
        raise HeadscopeError(f"hub model {what} has no config.json") from None
    except hf_errors.HfHubHTTPError as e:
        raise HeadscopeError(f"cannot download {what}: {str(e).splitlines()[0]}") from None
    except ValueError as e:
        raise HeadscopeError(f"not a hub model id or a directory: {model!r} ({str(e).splitlines()[0]})") from None
    commit = path.parent.name
    if not _COMMIT_RE.fullmatch(commit):
        raise HeadscopeError(f"{what}: the Hugging Face cache gave no commit hash for it ({path.parent})")
    return commit


def _weight_bytes(directory: Path) -> int:
    return sum(p.stat().st_size for p in directory.iterdir()
               if p.name.endswith((".safetensors", ".bin")) and p.is_file())


def local_stamp(directory: Path) -> str:
    """sha256 of a checkpoint directory's (file name, size, mtime) list: its identity for reuse."""
    rows = sorted((p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in directory.iterdir() if p.is_file())
    return "local:" + hashlib.sha256(dumps(rows).encode()).hexdigest()


def _safe(name: str) -> str:
    safe = _SAFE_RE.sub("_", name)
    if safe != name or len(safe) > 80:
        safe = safe[:80] + "-" + hashlib.sha256(name.encode("utf-8")).hexdigest()[:8]
    return safe


def input_digest(path: str) -> str:
    """sha256 of an input file named in the options (read by the input rule: a FIFO is one line, capped)."""
    return hashlib.sha256(read_input_bytes(path, "corpus file")).hexdigest()


def analysis_options(analysis: str, given: dict | None) -> dict:
    """The checked options of `analysis`, with the digest of a named corpus (part of the key)."""
    o = kind(analysis).options(given)
    if o.get("corpus") is not None:
        o["corpus_sha256"] = input_digest(o["corpus"])
    return o


def make_spec(model: str, revision: str | None, analysis: str, options: dict, *, dtype: str, device: str,
              file: str) -> TaskSpec:
    """The cell's spec: resolves the revision's commit (hub) or stamps the directory (one line on failure)."""
    if is_local(model):
        directory = Path(model).expanduser().resolve()
        if not directory.is_dir():
            raise HeadscopeError(f"{model} is not a checkpoint directory (expected a folder with config.json)")
        commit, stamp, weights = None, local_stamp(directory), _weight_bytes(directory)
    else:
        commit = resolve_commit(model, revision)
        stamp = commit
        from huggingface_hub import constants

        snap = Path(constants.HF_HUB_CACHE) / ("models--" + model.replace("/", "--")) / "snapshots" / commit
        weights = _weight_bytes(snap) if snap.is_dir() else 0
    key = task_key(command=analysis, model=model, revision=revision, commit=stamp, options=options, dtype=dtype,
                   device=device, version=__version__)
    return TaskSpec(model=model, revision=revision, commit=commit, analysis=analysis, options=options, dtype=dtype,
                    device=device, file=file, key=key, weight_bytes=weights)


def task_file(model: str, revision: str | None, analysis: str) -> str:
    """``tasks/<model>/<analysis>/rev-<revision>.json`` (``rev-main``/``rev-local`` without a revision)."""
    rev = revision if revision is not None else ("local" if is_local(model) else "main")
    return f"tasks/{_safe(model)}/{analysis}/{revision_file(rev)}"


@dataclasses.dataclass
class Cell:
    model: str
    revision: str | None
    analysis: str
    file: str


def cells(grid: Grid) -> tuple[list[Cell], dict[str, list[str | None]]]:
    """Every (model, revision, analysis) of the grid in order, and each model's revisions (checked, nothing run)."""
    revs = {m: expand_revisions(grid.revisions, m) for m in grid.models}
    out = [Cell(m, r, a, task_file(m, r, a)) for m in grid.models for r in revs[m] for a in grid.analyses]
    return out, revs


def specs(grid: Grid, cell_list: Sequence[Cell]) -> list[TaskSpec | tuple[str, str]]:
    """Each cell's spec, or (label, one-line error) for one that cannot be resolved (a missing revision)."""
    options = {a: analysis_options(a, grid.options.get(a)) for a in grid.analyses}
    out: list[TaskSpec | tuple[str, str]] = []
    failed: dict[tuple[str, str | None], str] = {}          # a revision that cannot be resolved: once
    for c in cell_list:
        label = f"{c.model}" + (f"@{c.revision}" if c.revision is not None else "") + f" {c.analysis}"
        if (c.model, c.revision) in failed:
            out.append((label, failed[c.model, c.revision]))
            continue
        try:
            out.append(make_spec(c.model, c.revision, c.analysis, options[c.analysis], dtype=grid.dtype,
                                 device=grid.device, file=c.file))
        except HeadscopeError as e:
            failed[c.model, c.revision] = str(e)
            out.append((label, str(e)))
    return out
