"""MLP0 neurons' pre-activations on texts: spread, extremes with context, histograms.

pre[p, j] = LN2(resid_mid[p]) · W_in[:, j] + b_in[j] (forward's ``blocks.0.mlp.hook_pre``),
over every non-BOS token of the texts (each ``[BOS] + tokens``, truncated to n_ctx).
Per neuron shown: mean, std, min, max, the tokens of largest and smallest pre-activation
with their left context, and a histogram; over all neurons, the histogram of their std.
The neurons shown are the ones given, else the first `n_neurons` of `preferred` (e.g. the
contextual neurons), else the `n_neurons` of largest std.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Iterable, Sequence

import torch

from .._errors import NotApplicable
from .._json import plain
from ..corpus import default_window
from ..core.forward import run_with_cache
from ..core.model import Model
from ..shipped import Text
from ..stats import bin_values

TOP = 10      #: top / bottom tokens listed per neuron
CONTEXT = 4   #: tokens of left context shown with each


@dataclasses.dataclass
class ActivationProfile:
    selection: str
    n_tokens: int
    samples: list[dict]           # {"name", "tokens"}
    std_hist: dict                # {"edges", "counts"} over all neurons
    neurons: list[dict]           # per neuron shown: stats, values per sample, top / bottom, hist

    def to_dict(self) -> dict:
        return plain(self)   # asdict's values without its deep copy of every float


@torch.no_grad()
def activation_profile(model: Model, texts: Sequence[Text], *, neurons: Sequence[int] | None = None,
                       preferred: Sequence[int] | None = None, n_neurons: int = 8,
                       progress: Callable[[list], Iterable] | None = None) -> ActivationProfile:
    """The module docstring's statistics of MLP0 neurons on `texts`."""
    cfg = model.cfg
    W = model.weights()
    toks = [model.to_tokens(t.text)[: default_window(model)] for t in texts]     # one window, ≤ 2048 tokens
    pres = []
    for t in (progress or iter)(toks):
        cache = run_with_cache(W, t[None], ["blocks.0.mlp.hook_pre"], stop_at_layer=1)
        pres.append(cache["blocks.0.mlp.hook_pre"][0].double())                  # [p m]
    allp = torch.cat([p[1:] for p in pres])                                       # non-BOS tokens: [N m]
    if allp.shape[0] < 2:   # a spread needs two tokens
        raise NotApplicable(f"activation profile: the texts hold {allp.shape[0]} non-BOS token(s), expected at least 2")
    std = allp.std(0)                                                             # [m]
    if neurons is not None:
        chosen = list(dict.fromkeys(cfg.check_neuron(int(j)) for j in neurons))
        selection = "given"
    elif preferred:
        chosen = list(preferred)[:n_neurons]
        selection = f"the {len(chosen)} contextual neurons of largest max token contribution"
    else:
        chosen = torch.argsort(std, descending=True, stable=True)[:n_neurons].tolist()
        selection = f"top {n_neurons} by std"
    str_toks = [model.to_str_tokens(t.tolist()) for t in toks]
    where = [(s, p) for s, t in enumerate(toks) for p in range(1, len(t))]        # rows of allp
    out = []
    for j in chosen:
        v = allp[:, j]
        order = torch.argsort(v, descending=True, stable=True).tolist()

        def entry(r):
            s, p = where[r]
            return {"token": str_toks[s][p], "sample": s, "position": p, "value": v[r].item(),
                    "context": str_toks[s][max(1, p - CONTEXT):p]}

        edges, counts = bin_values(v.tolist(), bins=30)
        out.append({
            "neuron": j, "mean": v.mean().item(), "std": std[j].item(), "min": v.min().item(), "max": v.max().item(),
            "values": [[None] + p[1:, j].tolist() for p in pres],                 # per sample, BOS → None
            "top": [entry(r) for r in order[:TOP]],
            "bottom": [entry(r) for r in order[::-1][:TOP]],
            "hist": {"edges": edges, "counts": counts},
        })
    edges, counts = bin_values(std.tolist(), bins=40)
    return ActivationProfile(
        selection=selection, n_tokens=int(allp.shape[0]),
        samples=[{"name": t.name, "tokens": st} for t, st in zip(texts, str_toks)],
        std_hist={"edges": edges, "counts": counts}, neurons=out)
