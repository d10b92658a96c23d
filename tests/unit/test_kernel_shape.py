"""The ``shape`` kernel-category rule (issue 16, item 7): a decay length fitted at several
query positions with position 0 left out, against synthetic kernels whose shape is known."""

from __future__ import annotations

import math

import pytest
import torch

from headscope.layer0.kernels import (LOCAL_MAX_LENGTH, categorise, categorise_shape, effective_width, fit_decay_rate,
                               shape_positions)


def kernel(weights_by_distance: torch.Tensor, bos: float = 0.0) -> torch.Tensor:
    """pos_{n, i} for i = 0..n from weights w(δ), δ = n − i = 0..n−1, and a share `bos` on i = 0."""
    k = torch.cat([torch.zeros(1, dtype=torch.float64), weights_by_distance.double().flip(0)])
    k = k / k.sum() * (1 - bos)
    k[0] = bos
    return k


def d(n):
    return torch.arange(n, dtype=torch.float64)


@pytest.mark.parametrize("kappa", [0.01, 0.05, 0.2, 1.5, 4.0])
def test_exponential_kernel_gives_its_rate(kappa):
    n = 1023
    assert fit_decay_rate(kernel((-kappa * d(n)).exp())) == pytest.approx(kappa, rel=1e-6)


def test_uniform_kernel_rate_zero_and_mass_at_zero_ignored():
    n = 700
    flat = kernel(torch.ones(n))
    heavy_bos = kernel(torch.ones(n), bos=0.6)
    assert abs(fit_decay_rate(flat)) < 1e-6 and abs(fit_decay_rate(heavy_bos)) < 1e-6
    # the width rule calls the BOS-heavy uniform kernel local; the shape rule does not
    assert categorise(float(effective_width(heavy_bos)), n) == "local"
    assert categorise_shape({n: fit_decay_rate(heavy_bos)}) == "uniform"


def test_heavy_tail_is_slowly_decaying_not_uniform():
    """p ∝ (1 + δ)^(−1/2): effective width above n/2 (the width rule's 'uniform'), yet it decays."""
    rates, widths = {}, {}
    for n in shape_positions(1024):
        k = kernel((1 + d(n)) ** -0.5)
        rates[n], widths[n] = fit_decay_rate(k), float(effective_width(k))
    assert categorise(widths[1023], 1023) == "uniform"
    assert all(r * n > 1 for n, r in rates.items())
    assert categorise_shape(rates) == "slowly_decaying"


def test_categories_at_several_positions():
    pos = shape_positions(1024)
    assert pos == [128, 256, 512, 1023]
    assert shape_positions(40) == [39] and shape_positions(2) == []
    exp = lambda k: {n: fit_decay_rate(kernel((-k * d(n)).exp())) for n in pos}  # noqa: E731
    assert categorise_shape(exp(1.0 / LOCAL_MAX_LENGTH + 0.01)) == "local"
    assert categorise_shape(exp(1.0 / LOCAL_MAX_LENGTH - 0.01)) == "slowly_decaying"
    assert categorise_shape(exp(0.05)) == "slowly_decaying"
    # decay length 3000 tokens: flat within every window checked → uniform
    assert categorise_shape(exp(1 / 3000)) == "uniform"
    # decay length 200: uniform-looking at n = 128 only, so not uniform at every n → slowly decaying
    r = exp(1 / 200)
    assert r[128] * 128 < 1 < r[1023] * 1023 and categorise_shape(r) == "slowly_decaying"
    # mass growing with distance
    assert categorise_shape({n: fit_decay_rate(kernel((0.05 * d(n)).exp())) for n in pos}) == "increasing"


def test_fit_is_finite_on_degenerate_kernels():
    assert fit_decay_rate(torch.tensor([1.0])) == 0.0                    # n = 0
    assert fit_decay_rate(torch.tensor([1.0, 0.0, 0.0])) == 0.0          # all mass on position 0
    one_hot = torch.zeros(50, dtype=torch.float64)
    one_hot[-1] = 1.0                                                    # all on δ = 0
    r = fit_decay_rate(one_hot)
    assert math.isfinite(r) and r >= 1 / LOCAL_MAX_LENGTH


@pytest.mark.parametrize("kappa", [0.02, 0.7])
def test_fit_from_logits_when_position_0_holds_all_the_mass(kappa):
    """Logits −κδ for i ≥ 1 and +2000 at i = 0: the probabilities of i ≥ 1 underflow to 0, the
    logits still give the remainder's shape exactly (the same κ as without the BOS logit)."""
    n = 511
    lg = torch.cat([torch.tensor([2000.0], dtype=torch.float64), (-kappa * d(n)).flip(0)])   # [n+1]
    assert float(torch.softmax(lg, 0)[1:].sum()) == 0.0                                       # underflowed
    assert fit_decay_rate(lg, logits=True) == pytest.approx(kappa, rel=1e-6)
    assert fit_decay_rate(torch.softmax(lg, 0)) == 0.0                                        # nothing left to fit
    # with no underflow the two forms agree
    lg0 = lg.clone()
    lg0[0] = 0.0
    assert fit_decay_rate(lg0, logits=True) == pytest.approx(fit_decay_rate(torch.softmax(lg0, 0)), rel=1e-9)
