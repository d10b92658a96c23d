"""Contribution variants of the layer-0 neuron score (:mod:`headscope.layer0.neurons`).

A :class:`ContributionVariant` says how the per-token contribution becomes a neuron's score:
the value input with or without its position part, which LayerNorm-2 scale divides it
(none, the calibrated median σ̄₂, or a constant), a signed or absolute max, and which tokens
the max leaves out (none, the under-trained ones by a robust z-score of |c(W_E[t])|, or a list
from a file). ``--variant`` strings parse into one (:func:`parse_variant`); docs/fidelity.md
gives the file and line of each choice in the seed's code.
"""

from __future__ import annotations

import dataclasses
import math

from .._errors import HeadscopeError
from .._input import read_json_file
from ..stats import robust_z
from .contextual import Circuit

GLITCH_Z = -3.5        #: modified z-score of |c(W_E[t])| below which a token counts as under-trained
AUTHORS_LN2 = 1.2      #: the constant LN2 scale of Gibson's reconstructions (ab.py:529, main.py:1095)


@dataclasses.dataclass(frozen=True)
class ContributionVariant:
    """How the per-token contribution is turned into a neuron score (module docstring)."""

    name: str = "paper"
    position_part: bool = True        # value input LN1(W_E[t] + W_pos[n]) (True) or its W_E[t] part only
    ln2: str = "none"                 # "none" (the seed's formula), "median" (calibrated σ̄₂), or "constant"
    ln2_constant: float = AUTHORS_LN2
    max: str = "signed"               # "signed": max_t score; "abs": max_t |score|
    glitch: str = "keep"              # "keep", "exclude" (under-trained tokens), or a JSON file of strings
    position: int | None = None       # query position n (None: the circuit's)
    computation: str = "circuit"      # "circuit" (the seed's contextual circuit) or "code" (Gibson's, code_variant)

    def spec(self) -> str:
        """The canonical ``--variant`` string of this variant."""
        ln2 = self.ln2 if self.ln2 != "constant" else f"{self.ln2_constant:g}"
        parts = ["computation=code"] if self.computation == "code" else []
        parts += [f"pos={'with' if self.position_part else 'without'}", f"ln2={ln2}", f"max={self.max}",
                  f"glitch={self.glitch}"]
        if self.position is not None:
            parts.append(f"position={self.position}")
        return ",".join(parts)

    def to_dict(self) -> dict:
        return {**dataclasses.asdict(self), "spec": self.spec()}


#: named bases of ``--variant`` (docs/fidelity.md gives the file/line of every choice)
VARIANTS = {
    "paper": ContributionVariant(),
    "code": ContributionVariant(name="code", position_part=False, ln2="none", max="abs", position=500,
                                computation="code"),
    "scaled": ContributionVariant(name="scaled", ln2="median"),
}
DEFAULT_VARIANT = "paper"


def parse_variant(spec: str | ContributionVariant | None) -> ContributionVariant:
    """``paper`` / ``code`` optionally followed by ``,key=value`` overrides, or only overrides
    (on top of ``paper``): ``code,glitch=exclude``, ``ln2=none,max=abs``, ``paper,position=255``."""
    if spec is None:
        return VARIANTS[DEFAULT_VARIANT]
    if isinstance(spec, ContributionVariant):
        return spec
    parts = [p.strip() for p in str(spec).split(",") if p.strip()]
    if not parts:
        raise HeadscopeError(f"--variant: expected a name ({', '.join(VARIANTS)}) or key=value pairs, got {spec!r}")
    base, name = VARIANTS[DEFAULT_VARIANT], None
    if "=" not in parts[0]:
        if parts[0] not in VARIANTS:
            raise HeadscopeError(f"--variant: expected one of {', '.join(VARIANTS)} or key=value pairs, got {parts[0]!r}")
        base, name = VARIANTS[parts[0]], parts[0]
        parts = parts[1:]
    kw: dict = {}
    for p in parts:
        key, _, val = p.partition("=")
        key, val = key.strip(), val.strip()
        if key == "pos" and val in ("with", "without"):
            kw["position_part"] = val == "with"
        elif key == "ln2" and val in ("median", "none"):
            kw["ln2"] = val
        elif key == "ln2":
            try:
                x = float(val)
            except ValueError:
                x = math.nan
            if not (math.isfinite(x) and x > 0):
                raise HeadscopeError(f"--variant ln2: expected median, none or a positive number, got {val!r}")
            kw["ln2"], kw["ln2_constant"] = "constant", x
        elif key == "computation" and val in ("circuit", "code"):
            kw["computation"] = val
        elif key == "max" and val in ("signed", "abs"):
            kw["max"] = val
        elif key == "glitch" and val:
            kw["glitch"] = val
        elif key == "position":
            if not val.isdigit():
                raise HeadscopeError(f"--variant position: expected a query position ≥ 0, got {val!r}")
            kw["position"] = int(val)
        else:
            raise HeadscopeError(
                f"--variant: expected pos=with|without, ln2=median|none|X, max=signed|abs, glitch=keep|exclude|FILE "
                f"or position=N, got {p!r}")
    name = name or DEFAULT_VARIANT
    if parts:
        name += "+" + ",".join(parts)
    return dataclasses.replace(base, name=name, **kw)


def ln2_divisor(circuit: Circuit, variant: ContributionVariant) -> float:
    """The LayerNorm-2 scale the variant divides by (1.0 for ``ln2=none``)."""
    if variant.ln2 == "median":
        return float(circuit.calibration.ln2_scale)
    if variant.ln2 == "none":
        return 1.0
    return float(variant.ln2_constant)


def glitch_tokens(circuit: Circuit) -> list[int]:
    """Under-trained tokens: |c(W_E[t])| with a modified z-score below :data:`GLITCH_Z`.

    Tokens seen (almost) never in training keep embeddings near the centroid of W_E
    (GPT-2's ' SolidGoldMagikarp' family); the robust z-score (median / MAD) flags the
    norms far below the bulk. The authors zeroed a hand-made list of 145 such strings
    instead (ab.py:628, ab.py:635); give such a list with ``glitch=FILE``.
    """
    W_E = circuit.weights.W_E
    norms = (W_E - W_E.mean(-1, keepdim=True)).norm(dim=-1)                   # [v]
    return (robust_z(norms) < GLITCH_Z).nonzero().squeeze(1).tolist()


def excluded_tokens(circuit: Circuit, variant: ContributionVariant, tokenizer=None) -> list[int]:
    """Token ids the variant leaves out of the max (sorted)."""
    g = variant.glitch
    if g == "keep":
        return []
    if g == "exclude":
        return glitch_tokens(circuit)
    strings = read_json_file(g, "glitch token file")
    if not isinstance(strings, list) or not all(isinstance(x, str) for x in strings):
        raise HeadscopeError(f"glitch token file {g}: expected a JSON list of token strings")
    if tokenizer is None:
        raise HeadscopeError("glitch token file: a tokenizer is needed to map strings to ids")
    ids = set()
    for x in strings:
        enc = tokenizer.encode(x)
        if len(enc) == 1:
            ids.add(int(enc[0]))
    return sorted(ids)
