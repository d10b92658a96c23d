"""clustering.leiden stops when an iteration gains at most LEIDEN_TOL of the quality."""

import igraph
import leidenalg
import numpy as np

from headscope.semantic import clustering


def _random_graph(n=1500, k=6, seed=3):
    rng = np.random.default_rng(seed)
    edges = [(i, int(j)) for i in range(n) for j in rng.choice(n - 1, k, replace=False) + 1 if int(j) != i]
    g = igraph.Graph(n=n, edges=[(a, (a + b) % n) for a, b in edges])
    g.es["weight"] = rng.random(g.ecount()).tolist()
    return g


def _by_hand(g, tol):
    """The same Leiden stream, stopped by hand at the first iteration gaining ≤ tol · |quality|."""
    part = leidenalg.RBConfigurationVertexPartition(g, weights="weight", resolution_parameter=1.0)
    opt = leidenalg.Optimiser()
    opt.set_rng_seed(0)
    gains = []
    while True:
        gains.append(opt.optimise_partition(part, n_iterations=1))
        if gains[-1] <= tol * abs(part.quality()):
            return np.asarray(part.membership), gains


def test_random_graph_stops_early_and_tol_zero_converges():
    g = _random_graph()
    stopped, gains = _by_hand(g, clustering.LEIDEN_TOL)
    converged, all_gains = _by_hand(g, 0.0)
    assert len(all_gains) > len(gains) >= 2 and all_gains[-1] == 0      # the rule cut iterations off
    assert np.array_equal(clustering.leiden(g, seed=0), stopped)
    full = leidenalg.find_partition(g, leidenalg.RBConfigurationVertexPartition, weights="weight",
                                    resolution_parameter=1.0, seed=0, n_iterations=-1)
    assert np.array_equal(clustering.leiden(g, seed=0, tol=0.0), np.asarray(full.membership))
    assert np.array_equal(converged, np.asarray(full.membership))


def test_structured_graph_is_the_converged_partition():
    # four dense blocks joined by a few weak edges: the structure is found at once
    rng = np.random.default_rng(1)
    block = np.arange(400) // 100
    a, b = np.triu_indices(400, 1)
    p = np.where(block[a] == block[b], 0.3, 0.002)
    keep = rng.random(len(a)) < p
    g = igraph.Graph(n=400, edges=list(zip(a[keep].tolist(), b[keep].tolist())))
    g.es["weight"] = [1.0] * g.ecount()
    full = leidenalg.find_partition(g, leidenalg.RBConfigurationVertexPartition, weights="weight",
                                    resolution_parameter=1.0, seed=0, n_iterations=-1)
    got = clustering.leiden(g, seed=0)
    assert np.array_equal(got, np.asarray(full.membership))
    assert len(set(got.tolist())) == 4


def test_random_graph_work_is_bounded_at_one_percent():
    # iterations after the structure is found gain a few percent, then under 1 %: at most 4 here
    # (at 0.1 % this graph runs 6; to zero gain 14)
    g = _random_graph()
    stopped, gains = _by_hand(g, clustering.LEIDEN_TOL)
    assert 2 <= len(gains) <= 4
    assert np.array_equal(clustering.leiden(g, seed=0), stopped)
