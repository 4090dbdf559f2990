"""coalitions.brute_force: every CE by restricted growth strings (docs/concepts.md §3)."""

import numpy as np
import pytest
from conftest import any_games, fs, naive_equilibria, naive_partitions, subsets
from hypothesis import given, settings

from coalitions.analytic import mean_estimation, planted
from coalitions.brute_force import bell, equilibrium_masks, inner_ok_table, restricted_growth_strings
from coalitions.errors import InputError
from coalitions.payoffs import payoff_table

BELL = [1, 1, 2, 5, 15, 52, 203, 877, 4140, 21147, 115975]


def test_bell_numbers():
    assert [bell(n) for n in range(11)] == BELL


def test_restricted_growth_strings_small():
    assert restricted_growth_strings(1).tolist() == [[0]]
    assert restricted_growth_strings(3).tolist() == [[0, 0, 0], [0, 0, 1], [0, 1, 0], [0, 1, 1], [0, 1, 2]]
    with pytest.raises(ValueError):
        restricted_growth_strings(0)


@pytest.mark.parametrize("n", range(1, 10))
def test_restricted_growth_strings_are_all_partitions(n):
    rgs = restricted_growth_strings(n)
    assert rgs.shape == (BELL[n], n)
    assert (rgs[:, 0] == 0).all()
    prefix_max = np.maximum.accumulate(rgs, axis=1)
    assert (rgs[:, 1:] <= prefix_max[:, :-1] + 1).all()  # the growth rule
    as_tuples = [tuple(r) for r in rgs.tolist()]
    assert as_tuples == sorted(as_tuples)  # lexicographic
    parts = {frozenset(frozenset(np.flatnonzero(r == b).tolist()) for b in range(r.max() + 1)) for r in rgs}
    assert len(parts) == BELL[n]  # all distinct partitions
    if n <= 7:
        assert parts == {frozenset(p) for p in naive_partitions(range(n))}


def test_inner_ok_table_matches_definition(tie_game):
    pay = payoff_table(tie_game)
    ok = inner_ok_table(pay, 3, 1e-9)
    assert not ok[0] and ok[1] and ok[2] and ok[4]
    assert ok[0b101] and not ok[0b111]


def test_worked_cases(tie_game, me_game):
    assert equilibrium_masks(tie_game) == [(0b101, 0b010)]
    assert equilibrium_masks(me_game) == [(0b011, 0b100)]
    assert equilibrium_masks(mean_estimation([5, 5, 5])) == [(0b111,)]
    assert equilibrium_masks(mean_estimation([25, 25, 25])) == [(1, 2, 4)]
    two = equilibrium_masks(mean_estimation([2, 8, 2, 40]))
    assert len(two) == 2 and len(set(two)) == 2


def test_zero_tolerance(tie_game):
    # exact ties: {c0,c2} leaves the grand coalition with nobody losing even when tol = 0
    assert equilibrium_masks(tie_game, tol=0.0) == [(0b101, 0b010)]
    assert not inner_ok_table(payoff_table(tie_game), 3, 0.0)[0b111]


def test_no_equilibrium_under_shared(no_ce_game):
    assert equilibrium_masks(no_ce_game, "shared") == []
    assert equilibrium_masks(no_ce_game) == [(0b111,)]


def test_refuses_large_games_and_reports_progress():
    g = planted([2, 2, 1], seed=0)
    with pytest.raises(InputError, match="5 clients"):
        equilibrium_masks(g, max_clients=4)
    calls = []
    found = equilibrium_masks(g, chunk=3, progress=lambda done, total: calls.append((done, total)))
    assert calls and calls[-1][0] == calls[-1][1]
    assert [d for d, _ in calls] == sorted(d for d, _ in calls)
    assert found == equilibrium_masks(g, chunk=10_000)


@given(any_games(max_n=5))
@settings(max_examples=40, deadline=None)
def test_equilibria_match_naive_enumerator(game):
    for semantics in ("personalized", "shared"):
        got = equilibrium_masks(game, semantics)
        assert len(set(got)) == len(got)
        for p in got:
            assert list(p) == sorted(p, key=lambda k: k & -k)
        assert {frozenset(p) for p in got} == naive_equilibria(game, semantics)


@given(any_games(max_n=5))
@settings(max_examples=30, deadline=None)
def test_inner_ok_table_matches_naive(game):
    pay = payoff_table(game)
    ok = inner_ok_table(pay, game.n, 1e-9)
    for k in range(1, 1 << game.n):
        members = fs(k)
        naive = all(any(pay[i, to] < pay[i, k] - 1e-9 for i in sub)
                    for sub in subsets(members) if sub and sub != members
                    for to in [sum(1 << j for j in sub)])
        assert ok[k] == naive
