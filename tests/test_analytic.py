"""coalitions.analytic: the mean-estimation game of docs/concepts.md §4 and planted games."""

import numpy as np
import pytest
from conftest import fs

from coalitions.analytic import mean_estimation, planted
from coalitions.brute_force import equilibria
from coalitions.errors import InputError
from coalitions.peeling import peel


def direct_error(sizes, c, j, mu_e, sigma2):
    """err_j(C) = μ_e/N_C + σ²·S_j/N_C², S_j = Σ_{i∈C, i≠j} n_i² + (N_C − n_j)²."""
    nc = sum(sizes[i] for i in c)
    s = sum(sizes[i] ** 2 for i in c if i != j) + (nc - sizes[j]) ** 2
    return mu_e / nc + sigma2 * s / nc ** 2


@pytest.mark.parametrize("sizes, mu_e, sigma2", [([5, 5, 25], 10, 1), ([2, 8, 2, 40], 10, 1),
                                                 ([1, 3, 7, 2, 9], 4.5, 0.3), ([4], 1, 2)])
def test_mean_estimation_matches_formula(sizes, mu_e, sigma2):
    g = mean_estimation(sizes, mu_e, sigma2)
    for m in range(1, 1 << len(sizes)):
        for j in fs(m):
            assert g.values[j, m] == pytest.approx(-direct_error(sizes, fs(m), j, mu_e, sigma2), rel=1e-12)
    for j, n in enumerate(sizes):
        assert g.values[j, 1 << j] == pytest.approx(-mu_e / n)  # alone: μ_e / n_j
    assert g.provenance["generator"] == "mean-estimation" and g.provenance["sizes"] == list(map(float, sizes))


def test_mean_estimation_matches_shared_example(me_game):
    g = mean_estimation([5, 5, 25], clients=["a", "b", "c"])
    np.testing.assert_allclose(g.values, me_game.values, rtol=1e-14)
    assert g.clients == me_game.clients


@pytest.mark.parametrize("kwargs, fault", [
    (dict(sizes=[]), "sizes"), (dict(sizes=[1, 0]), "sizes"), (dict(sizes=[1, -2]), "sizes"),
    (dict(sizes=[1, float("nan")]), "sizes"), (dict(sizes=[[1, 2]]), "sizes"),
    (dict(sizes=[1, 2], mu_e=0), "mu_e"), (dict(sizes=[1, 2], mu_e=float("inf")), "mu_e"),
    (dict(sizes=[1, 2], sigma2=-1), "sigma2"),
])
def test_mean_estimation_rejects(kwargs, fault):
    with pytest.raises(InputError, match=fault):
        mean_estimation(**kwargs)


def test_mean_estimation_worked_cases():
    assert peel(mean_estimation([5, 5, 5])).partition == (0b111,)
    assert sorted(peel(mean_estimation([25, 25, 25])).partition) == [1, 2, 4]
    assert len(equilibria(mean_estimation([2, 8, 2, 40]))) == 2


def test_planted_is_deterministic_and_named():
    a, b = planted([2, 3], seed=7), planted([2, 3], seed=7)
    np.testing.assert_array_equal(a.values, b.values)
    assert not np.array_equal(a.values, planted([2, 3], seed=8).values, equal_nan=True)
    assert a.clients == ("c0", "c1", "c2", "c3", "c4")
    assert planted([1, 1], clients=["x", "y"]).clients == ("x", "y")
    assert a.provenance == {"generator": "planted", "groups": [2, 3], "noise": 0.05, "ties": 0.0, "seed": 7}


def test_planted_ties_round_values():
    g = planted([2, 2], ties=0.25, seed=1)
    v = g.values[~np.isnan(g.values)]
    np.testing.assert_allclose(v / 0.25, np.round(v / 0.25), atol=1e-9)
    assert np.unique(v).size < v.size  # ties exist


@pytest.mark.parametrize("groups", [[3], [2, 2], [3, 1, 2], [1, 1, 1]])
def test_noise_free_groups_are_the_unique_ce(groups):
    g = planted(groups, noise=0.0, seed=2)
    bounds = np.cumsum([0] + groups)
    expect = tuple(sum(1 << i for i in range(lo, hi)) for lo, hi in zip(bounds[:-1], bounds[1:], strict=True))
    assert equilibria(g) == [expect]


@pytest.mark.parametrize("kwargs, fault", [
    (dict(groups=[]), "group sizes"), (dict(groups=[2, 0]), "group sizes"),
    (dict(groups=[2], noise=-1), "non-negative"), (dict(groups=[2], ties=-0.1), "non-negative"),
    (dict(groups=[2], clients=["a"]), "1 names for 2 clients"),
])
def test_planted_rejects(kwargs, fault):
    with pytest.raises(InputError, match=fault):
        planted(**kwargs)
