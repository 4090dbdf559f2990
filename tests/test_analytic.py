"""coalitions.analytic: the mean-estimation game of docs/concepts.md §4 and planted games."""

import numpy as np
import pytest
from conftest import fs

from coalitions.analytic import mean_estimation, planted
from coalitions.brute_force import equilibrium_masks
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
    assert len(equilibrium_masks(mean_estimation([2, 8, 2, 40]))) == 2


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
    assert equilibrium_masks(g) == [expect]


@pytest.mark.parametrize("kwargs, fault", [
    (dict(groups=[]), "group sizes"), (dict(groups=[2, 0]), "group sizes"),
    (dict(groups=[2], noise=-1), "non-negative"), (dict(groups=[2], ties=-0.1), "non-negative"),
    (dict(groups=[2], clients=["a"]), "1 names for 2 clients"),
])
def test_planted_rejects(kwargs, fault):
    with pytest.raises(InputError, match=fault):
        planted(**kwargs)


# ---------------------------------------------------------------------------- federations
# The coarse and fine formulas of docs/concepts.md §4 are checked against the weighted estimators they claim
# to solve, computed here from the estimator's definition: client j estimates its mean θ_j by
# Σ_k w_k·ȳ_k with Σ_k w_k = 1, where ȳ_k = θ_k + e_k, θ_k = θ + d_k, Var d_k = σ², Var e_k = μ_e/n_k,
# all independent.  Then θ̂_j − θ_j = Σ_k w_k·e_k + Σ_k (w_k − [k = j])·d_k, so its expected square is
# Σ_k w_k²·μ_e/n_k + σ²·Σ_k (w_k − [k = j])².  The optimal weights are found numerically.
def estimator_error(w, n, j, mu_e, sigma2):
    w, n = np.asarray(w, float), np.asarray(n, float)
    d = w.copy()
    d[j] -= 1.0
    return float(np.sum(w ** 2 * mu_e / n) + sigma2 * np.sum(d ** 2))


def best_coarse_error(n, j, mu_e, sigma2):
    """min over λ of the error of λ·ȳ_j + (1 − λ)·ȳ_C (a quadratic in λ: fit by three points)."""
    n = np.asarray(n, float)
    own, pooled = np.eye(n.size)[j], n / n.sum()
    e = [estimator_error(lam * own + (1 - lam) * pooled, n, j, mu_e, sigma2) for lam in (0.0, 1.0, 2.0)]
    a, b = (e[2] - 2 * e[1] + e[0]) / 2, (4 * e[1] - 3 * e[0] - e[2]) / 2
    return e[0] - b * b / (4 * a) if a > 0 else min(e)


def best_fine_error(n, j, mu_e, sigma2):
    """min over all weights summing to 1, by the KKT system of the quadratic."""
    n = np.asarray(n, float)
    m = n.size
    kkt = np.zeros((m + 1, m + 1))
    kkt[:m, :m] = 2 * np.diag(mu_e / n + sigma2)
    kkt[:m, m] = kkt[m, :m] = 1.0
    rhs = np.zeros(m + 1)
    rhs[j], rhs[m] = 2 * sigma2, 1.0
    w = np.linalg.solve(kkt, rhs)[:m]
    return estimator_error(w, n, j, mu_e, sigma2)


@pytest.mark.parametrize("sizes, mu_e, sigma2", [([5, 5, 25], 10, 1), ([1, 8, 15], 10, 1),
                                                 ([1, 3, 7, 2, 9], 4.5, 0.3), ([2, 40], 1, 0.0),
                                                 ([4], 1, 2)])
@pytest.mark.parametrize("federation, best", [("uniform", None), ("coarse", best_coarse_error),
                                              ("fine", best_fine_error)])
def test_federations_match_their_estimators(sizes, mu_e, sigma2, federation, best):
    g = mean_estimation(sizes, mu_e, sigma2, federation=federation)
    assert g.sense == "min" and g.provenance["federation"] == federation
    for m in range(1, 1 << len(sizes)):
        c = sorted(fs(m))
        sub = [sizes[i] for i in c]
        for j in c:
            k = c.index(j)
            if best is None:  # the pooled mean: w_k = n_k / N_C
                expect = estimator_error(np.array(sub, float) / sum(sub), sub, k, mu_e, sigma2)
            else:
                expect = best(sub, k, mu_e, sigma2)
            assert -g.values[j, m] == pytest.approx(expect, rel=1e-9), (federation, c, j)


def test_federations_are_ordered_and_alone_is_the_same():
    """fine ≤ coarse ≤ uniform (each optimises over a larger family); alone they coincide."""
    errs = {f: -mean_estimation([1, 8, 15, 3], federation=f).values for f in ("uniform", "coarse", "fine")}
    inside = ~np.isnan(errs["uniform"])
    assert np.all(errs["fine"][inside] <= errs["coarse"][inside] + 1e-12)
    assert np.all(errs["coarse"][inside] <= errs["uniform"][inside] + 1e-12)
    assert np.any(errs["fine"][inside] < errs["coarse"][inside] - 1e-6)
    for j, n in enumerate([1, 8, 15, 3]):
        assert [float(errs[f][j, 1 << j]) for f in errs] == pytest.approx([10 / n] * 3)


def test_estimator_error_by_monte_carlo():
    """The expected-error expression the tests rely on, against simulation of the model itself."""
    rng = np.random.default_rng(0)
    n, mu_e, sigma2, draws = np.array([1.0, 8.0, 15.0]), 10.0, 1.0, 400_000
    theta = rng.normal(0, np.sqrt(sigma2), (draws, 3))  # θ = 0 without loss of generality
    ybar = theta + rng.normal(0, 1, (draws, 3)) * np.sqrt(mu_e / n)
    for w in ([1 / 24, 8 / 24, 15 / 24], [0.7, 0.1, 0.2], [1, 0, 0]):
        mc = np.mean((ybar @ np.array(w) - theta[:, 0]) ** 2)
        assert mc == pytest.approx(estimator_error(w, n, 0, mu_e, sigma2), rel=0.02)


def test_unknown_federation():
    with pytest.raises(InputError, match="federation must be one of uniform, coarse, fine"):
        mean_estimation([1, 2], federation="median")
