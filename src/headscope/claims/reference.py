"""What each claim is compared with: the seed studies' figures or a planted checkpoint's manifest
(see :mod:`headscope.reproduce`), and the layer-0 head set of the downstream rows."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from .._errors import HeadscopeError, NotApplicable
from ..core.model import Model
from ..layer0.contextual import HEAD_SETS
from ..planted.build import MANIFEST, read_manifest
from ..shipped import seed_claims

SEED_REFERENCE = "seed (GPT-2 Small)"
PLANTED_REFERENCE = "planted manifest"
FOUND_REFERENCE = "found in the model (--find)"   #: claims.find's components


@dataclasses.dataclass
class Reference:
    """What each claim is compared with (see the module docstring)."""

    name: str
    contextual_heads: list[int]
    categories: dict[int, str] | None            # planted: head → category
    n_neurons: int | None                        # planted: exact count; seed: None (range)
    neuron_indices: list[int] | None
    neuron: int
    neuron_label: str
    top_tokens: list[str]
    bottom_tokens: list[str]
    semantic_head: tuple[int, int]
    n_negative_top64: int
    sigma: tuple[float, float] | None            # seed: (sym, skew)
    planted_sigma_sym: float | None              # planted: the largest |λ| planted
    worst_heads: list[int] = dataclasses.field(default_factory=list)   # least stable denominators
    survey_categories: object = "seed"           # categories of the survey's rank rows ("seed" or a dict)
    found: object = None                         # --find: the claims.find.Found the components come from
    own_categories: bool = False                 # --find: survey_categories are the semantic head's own clusters

    @property
    def planted(self) -> bool:
        return self.name == PLANTED_REFERENCE


def seed_reference(claims: dict) -> Reference:
    by = {c["id"]: c for c in claims["claims"]}
    return Reference(
        name=SEED_REFERENCE, contextual_heads=by["contextual_heads"]["published"], categories=None,
        n_neurons=None, neuron_indices=None, neuron=by["neuron_704_top"]["neuron"], neuron_label="704",
        top_tokens=by["neuron_704_top"]["published"], bottom_tokens=by["neuron_704_bottom"]["published"],
        semantic_head=(1, 5), n_negative_top64=by["negative_eigenvalues"]["published"],
        sigma=tuple(by["sym_vs_skew"]["published"]), planted_sigma_sym=None,
        worst_heads=by["denominator_worst_heads"]["published"], survey_categories="seed")


def planted_reference(manifest: dict) -> Reference:
    """The mechanisms a ``headscope plant`` manifest documents."""
    try:
        l0, l1 = manifest["layer0"], manifest["layer1"]
        cats = {h: c for c, heads in l0["categories"].items() for h in heads}
        neurons = l0["neurons"]
        n704 = next((n for n in neurons if n["name"] == "commonwealth_spelling"), neurons[0])
        form = l1["bilinear_form"]
        sem = l1["semantic_head"]
        return Reference(
            name=PLANTED_REFERENCE, contextual_heads=sorted(l0["contextual_heads"]), categories=cats,
            n_neurons=len(neurons), neuron_indices=sorted(n["index"] for n in neurons), neuron=int(n704["index"]),
            neuron_label=f"{n704['index']} ({n704['name']})", top_tokens=list(n704["positive"]),
            bottom_tokens=list(n704["negative"]), semantic_head=(int(sem["layer"]), int(sem["head"])),
            n_negative_top64=int(form["n_negative"]), sigma=None,
            planted_sigma_sym=max(abs(float(form["negative_eigenvalue"])), abs(float(form["positive_eigenvalue"]))),
            worst_heads=sorted(int(h) for h in l0["keyword_heads"]),
            survey_categories={k: list(v["tokens"]) for k, v in l1["categories"].items()})
    except (KeyError, TypeError, ValueError, IndexError, StopIteration) as e:
        raise HeadscopeError(f"planted.json: malformed manifest ({type(e).__name__}: {e})") from None


def seed_component(ref: Reference, check, *index):
    """``check(*index)`` (:meth:`Config.check_head`, :meth:`Config.check_neuron`, :func:`check_layer0_heads`):
    the index itself when the model has it. GPT-2 Small's own component (the seed reference's L1H5, neuron 704,
    published layer-0 heads) that this model lacks leaves the row without a verdict: :class:`NotApplicable`,
    one line, pointing at ``--find`` (a row does not fail because another model is smaller). Any other
    reference's index out of range (a planted manifest's, a found component's) stays a :class:`HeadscopeError`."""
    try:
        return check(*index)
    except NotApplicable:
        raise
    except HeadscopeError as e:
        if ref.name != SEED_REFERENCE:
            raise
        raise NotApplicable(f"GPT-2 Small's component is not in this model: {e}; reproduce --find locates "
                            "the model's own") from None


def check_layer0_heads(heads: list[int], n_heads: int) -> list[int]:
    """`heads` if every one is a head of layer 0, else a one-line :class:`HeadscopeError`."""
    bad = [h for h in heads if not 0 <= h < n_heads]
    if bad:
        raise HeadscopeError(f"layer-0 heads {bad} out of range (the model has {n_heads} heads per layer)")
    return list(heads)


def gpt2_only(ref: Reference, what: str) -> None:
    """Refuse a verdict on a figure that describes only GPT-2 Small's own component (neuron 704's token
    lists, σ 1.86 / 1.34) when the row runs on components --find located: no verdict, one line why."""
    if ref.name == FOUND_REFERENCE:
        from .._errors import NotApplicable

        raise NotApplicable(f"GPT-2-specific figure ({what}); compared only on GPT-2 Small's own component "
                            "(reproduce without --find)")


def reference_for(model: Model) -> Reference:
    if model.directory is not None and (Path(model.directory) / MANIFEST).is_file():   # None: a model in memory
        return planted_reference(read_manifest(model.directory))
    return seed_reference(seed_claims())


# -- the measurements, computed once and shared by the rows ---------------------------------------


def resolve_heads(spec, ref: Reference, n_heads: int) -> list[int] | None:
    """The head set of ``heads=``: "published" (default), "auto" (None: automatic), "seed",
    "code", a comma-separated string or a list of indices."""
    if spec is None or spec == "published":
        return seed_component(ref, check_layer0_heads, list(ref.contextual_heads), n_heads)
    if spec == "auto":
        return None
    if isinstance(spec, str) and spec in HEAD_SETS:
        return list(HEAD_SETS[spec])
    if isinstance(spec, str):
        try:
            spec = [int(x) for x in spec.split(",") if x.strip()]
        except ValueError:
            raise HeadscopeError(f"--heads: expected published, auto, seed, code or indices such as 0,2,6, "
                                 f"got {spec!r}") from None
    heads = sorted({int(h) for h in spec})
    if not heads or any(not 0 <= h < n_heads for h in heads):
        raise HeadscopeError(f"--heads: expected layer-0 head indices in 0..{n_heads - 1}, got {spec!r}")
    return heads
