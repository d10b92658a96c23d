"""The claims table's runner: every claim of ``data/seed_claims.json`` measured on a model
(:func:`reproduce`; the module docstring of :mod:`headscope.reproduce` states the rules)."""

from __future__ import annotations

import dataclasses

from .._errors import HeadscopeError, NotApplicable
from ..core.model import Model
from ..shipped import seed_claims
from . import seed000_context, seed000_heads, seed000_neurons, seed002, seed002_clusters  # noqa: F401  (@claim rows)
from .details import details as _details
from .reference import PLANTED_REFERENCE, SEED_REFERENCE, Reference, reference_for, resolve_heads
from .table import CHECKS, RANDOM, ClaimRow, ReproduceResult, verdict
from .work import Work

GPT2_SMALL = {"n_layers": 12, "n_heads": 12, "d_model": 768, "d_head": 64, "d_mlp": 3072,
              "n_ctx": 1024, "d_vocab": 50257}


def reproduce(model: Model, *, reference: Reference | None = None,
              details: bool = True, heads=None, variant=None, find: bool = False) -> ReproduceResult:
    """Measure every seed claim on `model` against `reference` (default: :func:`reference_for`;
    ``find=True``: the model's own components, :func:`headscope.claims.find.find_reference`).

    ``heads``: the layer-0 heads of the downstream rows ("published" by default, "auto",
    "seed", "code", or indices); ``variant``: the neurons' contribution variant
    (:func:`headscope.neurons.parse_variant`; default ``paper``).
    """
    claims = seed_claims()
    if find and reference is not None:
        raise HeadscopeError("find=True locates its own components; leave out reference=")
    if find:
        from .find import find_reference

        reference = find_reference(model, variant=variant)
    ref = reference_for(model) if reference is None else reference
    w = Work(model, ref, heads=heads, variant=variant)
    if heads not in (None, "published"):
        resolve_heads(heads, ref, model.cfg.n_heads)          # a bad --heads is an error, not a failing row
    rows = []
    for c in claims["claims"]:
        base = dict(id=c["id"], seed=c["seed"], claim=c["claim"], measure=c["measure"],
                    source=c.get("source", "no source found"), rejects=c.get("rejects", ""))
        try:
            published, measured, tol, passed, note, *null = CHECKS[c["id"]](c, ref, w)
            null = null[0] if null else None
            ok, word = verdict(None if passed is None else bool(passed), null)
            if null is not None:
                note = (note + "; " if note else "") + null.text() + (
                    f"; {word}: the null's bar is {null.bar:.4g}" if word == RANDOM else "")
            rows.append(ClaimRow(**base, published=published, measured=measured, tolerance=tol, passed=ok, note=note,
                                 null=None if null is None else {**null.to_dict(), "component_passes": passed},
                                 verdict=word))
        except NotApplicable as e:                  # the claim cannot apply here: no verdict, one line why
            rows.append(ClaimRow(**base, published=c.get("published_text"), measured=None,
                                 tolerance=c["tolerance"], passed=None, note=f"no verdict: {e}", verdict="no verdict"))
        except HeadscopeError as e:
            rows.append(ClaimRow(**base, published=c.get("published_text"), measured=None,
                                 tolerance=c["tolerance"], passed=False, note=f"not measured: {e}", verdict="FAIL"))
    if ref.found is not None:                       # --find: each row's component; none rests on one not found
        ref.found.annotate(rows)
    notes = []
    shape = {k: getattr(model.cfg, k) for k in GPT2_SMALL}
    if ref.name == SEED_REFERENCE and shape != GPT2_SMALL:
        diff = ", ".join(f"{k} {shape[k]} (GPT-2 Small {v})" for k, v in GPT2_SMALL.items() if shape[k] != v)
        notes.append(f"the published figures are GPT-2 Small's; this model differs: {diff}")
    if ref.name == PLANTED_REFERENCE:
        notes.append("planted checkpoint: the published column is its planted.json manifest")
    if w.heads_spec != "published" or w.variant.name != "paper":
        notes.append(f"downstream layer-0 rows use heads {w.heads_spec!r} and contribution variant {w.variant.name!r}")
    return ReproduceResult(rows=rows, source=model.source, fingerprint=model.fingerprint, reference=ref.name,
                           notes=notes, details=_details(w, claims, ref) if details else {},
                           components=None if ref.found is None else ref.found.to_dict()["components"])


def claims_table(model: Model):
    """The claims table of the report's claims page: against a planted manifest, GPT-2 Small's
    published figures on a GPT-2-Small-shaped model, else (any other model, where GPT-2's
    indices mean nothing) the model's own components (:func:`headscope.claims.find.find_reference`). Every row says
    which component it used."""
    from .find import find_reference, reference_components

    ref = reference_for(model)
    if ref.planted or {k: getattr(model.cfg, k) for k in GPT2_SMALL} == GPT2_SMALL:
        ref = dataclasses.replace(ref, found=reference_components(model, ref))
    else:
        ref = find_reference(model)
    return reproduce(model, reference=ref, details=False)
