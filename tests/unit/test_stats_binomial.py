"""headscope.stats.binomial_quantiles: exact quantiles of Binomial(n, p), also at MLP widths."""

import math

import pytest

from headscope.stats import binomial_quantiles


def _cdf(n, p, x):
    return sum(math.comb(n, k) * p ** k * (1 - p) ** (n - k) for k in range(x + 1))


@pytest.mark.parametrize("n,p", [(10, 0.5), (37, 0.13), (64, 0.9)])
def test_small_n_matches_the_exact_cdf(n, p):
    med, p95 = binomial_quantiles(n, p)
    assert _cdf(n, p, med) >= 0.5 - 1e-12 and (med == 0 or _cdf(n, p, med - 1) < 0.5)
    assert _cdf(n, p, p95) >= 0.95 - 1e-12 and (p95 == 0 or _cdf(n, p, p95 - 1) < 0.95)


def test_mlp_widths_do_not_overflow():
    # d_mlp of GPT-2 small (3072) and XL (6400): C(n, x) alone exceeds a float
    for n in (3072, 6400):
        med, p95 = binomial_quantiles(n, 0.3)
        mean, sd = n * 0.3, math.sqrt(n * 0.3 * 0.7)
        assert abs(med - mean) <= 1 and mean + sd < p95 < mean + 2.2 * sd


def test_point_masses():
    assert binomial_quantiles(50, 0.0) == (0, 0) and binomial_quantiles(50, 1.0) == (50, 50)
