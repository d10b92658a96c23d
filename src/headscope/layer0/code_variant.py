"""Gibson's computation of the 5.0 neuron cell, piece by piece (``--variant code``).

Source: ``JasonGross/guarantees-based-mechanistic-interpretability``,
``gbmi/exp_max_of_n/probabilistic_experiments/main.py`` at ``4a2c7ab`` (read, not copied).
The cell computes, at query position n = 500 (``range(500, 501)``, main.py:332), for
every head h of its list and every token t:

1. token input, LayerNorm without the cross term (main.py:334-344)::

       Ẽ_n[t] = √d · c(W_E[t]) / √(|c(W_pos[n])|² + |c(W_E[t])|²)

   (c centres over d_model; the cross term 2 c(W_E[t])·c(W_pos[n]) of the true
   |c(W_E[t] + W_pos[n])|² is left out);
2. positional input of the query, normalised with the norm of token 11 (',')
   (main.py:346-353)::

       P̃[n] = √d · c(W_pos[n]) / √(|c(W_pos[n])|² + |c(W_E[11])|²)

3. the code's scalar: ``W_E[tokenized_text].mean()``, the mean of Ẽ_n over the
   calibration text's tokens *and* over d_model — a number, added to every coordinate
   of P̃[n] (no ' the' token enters the query; main.py:356)::

       q_h = (P̃[n] + s·1) W_Q[h] + b_Q[h]

   (Ẽ_n's rows are centred, so s is 0 up to rounding; with TransformerLens's centred
   W_Q, s·1 W_Q = 0 exactly);
4. keys from the token embedding alone, no W_pos[i], no b_K, divided by 8 = √d_head
   (main.py:356)::

       log weight_h[t] = q_h · (Ẽ_n[t] W_K[h]) / √d_head

5. the denominator: a uniform mean of weight_h over the text's positions n − 100 … n − 1
   (BOS at position 0; main.py:358)::

       S_h = mean_{i = n−100}^{n−1} weight_h[x_i]

6. values from the token embedding alone, no b_V (main.py:360)::

       full_pattern[t] = Σ_h weight_h[t] / S_h · Ẽ_n[t] W_V[h] W_O[h]

7. ``big = full_pattern @ W_in`` with no LayerNorm-2 scale (main.py:868), selected by
   ``max |big[:, j]| > 5.0`` (main.py:907-909; the code scans neurons 0–2047 only, a
   bug headscope does not copy).

TransformerLens's weights are centred over d_model where they read the residual
stream (``fold_ln``); the code runs on those, so W_Q, W_K, W_V and W_in are centred
here (:func:`centred`). Every piece is float64 and in log space where it exponentiates.
"""

from __future__ import annotations

import math

import torch
from jaxtyping import Float

from .._errors import HeadscopeError
from ..core.weights import Weights
from .split_windows import centred as centred_rows

Tensor = torch.Tensor

POSITION = 500        #: the cell's query position (main.py:332)
WINDOW = 100          #: the uniform window of its denominators (main.py:358)
NORM_TOKEN = 11       #: the token whose norm the positional input uses (',' in GPT-2; main.py:350)


def centred(W: Tensor) -> Tensor:
    """W − its mean over d_model (the first axis of a [d …] reading matrix): TransformerLens's centring."""
    return W - W.mean(0, keepdim=True)


def token_inputs(w: Weights, n: int) -> Float[Tensor, "v d"]:
    """Ẽ_n[t] = √d c(W_E[t]) / √(|c(W_pos[n])|² + |c(W_E[t])|²) for every token (step 1)."""
    E, p = centred_rows(w.W_E.double()), centred_rows(w.W_pos[n].double())
    d = E.shape[-1]
    return math.sqrt(d) * E / (p.pow(2).sum() + E.pow(2).sum(-1, keepdim=True)).sqrt()


def position_input(w: Weights, n: int, norm_token: int = NORM_TOKEN) -> Float[Tensor, "d"]:
    """P̃[n] = √d c(W_pos[n]) / √(|c(W_pos[n])|² + |c(W_E[11])|²) (step 2)."""
    p, e = centred_rows(w.W_pos[n].double()), centred_rows(w.W_E[norm_token].double())
    return math.sqrt(p.shape[-1]) * p / (p.pow(2).sum() + e.pow(2).sum()).sqrt()


def scalar(E_tilde: Tensor, tokens: list[int]) -> float:
    """s = mean of Ẽ_n over the text's tokens and over d_model (step 3)."""
    return float(E_tilde[torch.tensor(tokens)].mean())


def queries(w: Weights, heads: list[int], n: int, s: float) -> Float[Tensor, "h e"]:
    """q_h = (P̃[n] + s) W_Q[h] + b_Q[h] for each head (step 3)."""
    b = w.blocks[0]
    x = position_input(w, n) + s                                                   # [d]
    return torch.stack([x @ centred(b.W_Q[h].double()) + b.b_Q[h].double() for h in heads])


def log_weights(w: Weights, heads: list[int], n: int, q: Tensor, E_tilde: Tensor) -> Float[Tensor, "h v"]:
    """log weight_h[t] = q_h · (Ẽ_n[t] W_K[h]) / √d_head (step 4)."""
    b = w.blocks[0]
    return torch.stack([(E_tilde @ centred(b.W_K[h].double())) @ q[k] for k, h in enumerate(heads)]) \
        / math.sqrt(w.cfg.d_head)


def log_denominators(log_w: Tensor, tokens: list[int], n: int, window: int = WINDOW) -> Float[Tensor, "h"]:
    """log S_h = log mean_{i = n−window}^{n−1} weight_h[x_i] (step 5; `tokens` BOS first)."""
    if not 1 <= window <= n or len(tokens) < n:
        raise HeadscopeError(f"--variant code: its denominators average positions {n - window}..{n - 1} of the "
                             f"calibration text, which has {len(tokens)} tokens (with BOS); expected 1 ≤ window ≤ n "
                             f"and at least n tokens")
    ids = torch.tensor(tokens[n - window:n])
    return torch.logsumexp(log_w[:, ids], -1) - math.log(window)


def token_values(w: Weights, heads: list[int], tokens: list[int], n: int = POSITION, window: int = WINDOW
                 ) -> Float[Tensor, "v he"]:
    """Y[t] = (weight_h[t] / S_h · Ẽ_n[t] W_V[h])_h, concatenated over heads: the code's
    full_pattern is Y @ stack_h W_O[h] (step 6)."""
    b = w.blocks[0]
    E = token_inputs(w, n)                                                         # [v d]
    q = queries(w, heads, n, scalar(E, tokens))                                    # [h e]
    lw = log_weights(w, heads, n, q, E)                                            # [h v]
    a = (lw - log_denominators(lw, tokens, n, window)[:, None]).exp()              # [h v] weight/S
    return torch.cat([a[k][:, None] * (E @ centred(b.W_V[h].double())) for k, h in enumerate(heads)], dim=1)
