"""coalitions.equilibrium: solve = peel + certificate, with the shared-semantics fallback (docs/concepts.md §3)."""

import pytest
from conftest import STALLS

from coalitions.analytic import mean_estimation, planted
from coalitions.brute_force import equilibrium_masks
from coalitions.equilibrium import certify, solve
from coalitions.errors import InputError, NoEquilibrium
from coalitions.game import Game
from coalitions.testing import assert_equilibrium


def test_tie_example(tie_game):
    eq = solve(tie_game)
    assert eq.masks == (0b101, 0b010) and eq.blocks() == [["c0", "c2"], ["c1"]]
    assert eq.rounds == ((0b101,), (0b010,)) and eq.found_by == "peeling"
    assert eq.payoffs.tolist() == [3, 2, 2] and eq.mau_all.tolist() == [3, 3, 2]
    assert eq.round_of().tolist() == [1, 2, 1]
    assert eq.certificate.holds and eq.certificate.method == "exhaustive"
    assert len(eq.graphs) == 2 and eq.graphs[0].within == 0b111


def test_mean_estimation_worked_cases(me_game):
    assert solve(me_game).blocks() == [["a", "b"], ["c"]]
    assert solve(mean_estimation([5, 5, 5])).masks == (0b111,)
    assert solve(mean_estimation([25, 25, 25])).masks == (1, 2, 4)
    g = mean_estimation([2, 8, 2, 40])
    both = equilibrium_masks(g)
    assert len(both) == 2 and solve(g).masks in both


def test_shared_semantics_falls_back_to_enumeration():
    eq = solve(STALLS, "shared")
    assert eq.found_by == "enumeration" and eq.masks == (1, 2, 4) and eq.rounds == ()
    assert eq.certificate.holds and eq.round_of().tolist() == [0, 0, 0]
    assert eq.masks in equilibrium_masks(STALLS, "shared")


def test_no_equilibrium(no_ce_game):
    with pytest.raises(NoEquilibrium, match="no collaboration equilibrium exists under shared"):
        solve(no_ce_game, "shared")
    with pytest.raises(InputError, match="exceeds the limit of 2"):
        solve(no_ce_game, "shared", max_enumerate=2)
    assert solve(no_ce_game).masks == (0b111,)


@pytest.mark.parametrize("tol", [-1e-3, float("nan"), float("inf"), "0.1", None])
def test_bad_tolerance(tie_game, tol):
    with pytest.raises(InputError, match="tolerance"):
        solve(tie_game, tol=tol)


def test_bad_semantics(tie_game):
    with pytest.raises(InputError, match="semantics"):
        solve(tie_game, "pareto")


def test_tolerance_changes_the_answer():
    # c1 gains 1e-6 by joining c0; c0 gains 1e-6 as well: together under tol 1e-9, alone under tol 1e-3
    g = Game.from_mapping(["a", "b"], {"a": {"a": 1, "a,b": 1 + 1e-6}, "b": {"b": 1, "a,b": 1 + 1e-6}})
    assert solve(g).masks == (0b11,)
    assert solve(g, tol=1e-3).masks == (1, 2)
    assert solve(g, tol=1e-3).certificate.holds


def test_certificate_options():
    g = planted([3, 3, 2], noise=0.05, seed=2)
    eq = solve(g, exhaustive_up_to=4, seed=1)
    assert eq.certificate.method == "sampled" and eq.certificate.holds
    assert solve(g, certify_result=False).certificate is None
    bad = certify(g, [g.grand])
    assert not bad.holds and bad.method == "exhaustive"
    assert_equilibrium(g, eq.masks)


def test_noise_free_planted_groups():
    g = planted([4, 3, 3], noise=0.0, seed=5)
    assert solve(g).masks == (0b0000001111, 0b0001110000, 0b1110000000)


def test_progress_is_reported_during_enumeration():
    calls = []
    solve(STALLS, "shared", progress=lambda done, total: calls.append((done, total)))
    assert calls and calls[-1][0] == calls[-1][1]
