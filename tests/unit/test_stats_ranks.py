"""stats.ranks / stats.spearman: mean ranks for ties, and values equal to float64 rounding are one value,
so a rank correlation does not move with the order of the sums that made its inputs."""

import math

import pytest
import torch

from headscope.stats import RANK_DIGITS, ranks, spearman


def test_ranks_are_mean_ranks_of_ties():
    assert ranks([3.0, 1.0, 2.0, 1.0]).tolist() == [3.0, 0.5, 2.0, 0.5]
    assert ranks(torch.tensor([5.0, 5.0, 5.0])).tolist() == [1.0, 1.0, 1.0]


def test_values_equal_to_rounding_are_one_value():
    a = 59.160762369655579
    b = math.nextafter(math.nextafter(a, math.inf), math.inf)             # two ulps apart
    assert a != b and ranks([a, b, 1.0]).tolist() == [1.5, 1.5, 0.0]
    # a difference in the 11th digit is a difference
    assert ranks([1.0, 1.0 + 10 ** -(RANK_DIGITS - 2), 0.0]).tolist() == [1.0, 2.0, 0.0]


def test_spearman_does_not_move_with_the_last_bits():
    g = torch.Generator().manual_seed(0)
    base = torch.rand(18, generator=g, dtype=torch.float64).tolist()
    base[3:9] = [base[3]] * 6                                             # a saturated head: six equal values
    meas = torch.rand(18, generator=g, dtype=torch.float64).tolist()
    jittered = [v * (1 + k * 2.0 ** -52) for k, v in enumerate(base)]      # each value a few ulps off
    assert jittered[3:9] != base[3:9]
    assert spearman(jittered, meas) == pytest.approx(spearman(base, meas), abs=0)
    # and it still sees real order
    assert spearman(base, base) == pytest.approx(1.0)
    assert spearman(base, [-v for v in base]) == pytest.approx(-1.0)
    assert spearman([1.0, 1.0, 1.0], meas[:3]) is None                   # constant: undefined
