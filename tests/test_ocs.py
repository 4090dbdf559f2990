"""coalitions.ocs: optimal collaborator sets with the tie rule of docs/concepts.md §2 and ambiguity."""

import pytest
from conftest import any_games, fs, game_from_flat, naive_ocs
from hypothesis import given, settings

from coalitions.game import Game
from coalitions.ocs import optimal_collaborators


def test_tie_example_ocs(tie_game):
    o = optimal_collaborators(tie_game, 0, 0b111)
    # {0,1} and {0,2} both reach MAU 3 with value 3: the smaller bitmask {0,1} wins, ambiguous
    assert o.collaborators == 0b010 and o.alternatives == (0b010, 0b100) and o.ambiguous
    assert o.value == 3 and o.mau == 3 and o.client == 0 and o.within == 0b111
    o1 = optimal_collaborators(tie_game, 1, 0b111)
    assert o1.collaborators == 0b101 and not o1.ambiguous
    o2 = optimal_collaborators(tie_game, 2, 0b111)
    assert o2.collaborators == 0b001 and o2.alternatives == (0b001,)


def test_alone_is_preferred_when_as_good():
    # client 0 gets 1 alone and 1 with client 1: the smallest set is {0}, OCS empty
    g = game_from_flat(2, [1, 1, 0, 0])
    o = optimal_collaborators(g, 0, 0b11)
    assert o.collaborators == 0 and not o.ambiguous


def test_tolerance_makes_nearly_best_sets_qualify():
    # v_0({0}) = 1, v_0({0,1}) = 1 + 1e-6: with tol 1e-5 going alone qualifies
    g = game_from_flat(2, [1.0, 1.0 + 1e-6, 0, 0])
    assert optimal_collaborators(g, 0, 0b11, tol=1e-9).collaborators == 0b10
    assert optimal_collaborators(g, 0, 0b11, tol=1e-5).collaborators == 0


def test_higher_value_breaks_ties_before_bitmask():
    # clients 0..2; v_0({0,1}) = 4.5, v_0({0,2}) = 5, MAU = 5, tol = 1: both qualify, {0,2} is higher
    vals = {frozenset({0}): 0, frozenset({0, 1}): 4.5, frozenset({0, 2}): 5, frozenset({0, 1, 2}): 5}
    g = Game.from_callable(3, lambda i, s: vals[s] if i == 0 else 0)
    o = optimal_collaborators(g, 0, 0b111, tol=1.0)
    assert o.collaborators == 0b100 and o.alternatives == (0b100, 0b010) and o.ambiguous


def test_client_outside_within_is_an_error(tie_game):
    with pytest.raises(ValueError):
        optimal_collaborators(tie_game, 0, 0b110)


def test_ocs_within_subset(tie_game):
    # within {c0, c1}: c0's best is {0,1} (3), c1's best is alone (2 > 0)
    assert optimal_collaborators(tie_game, 0, 0b011).collaborators == 0b010
    assert optimal_collaborators(tie_game, 1, 0b011).collaborators == 0


@given(any_games(max_n=6))
@settings(max_examples=40, deadline=None)
def test_ocs_equals_naive_search(game):
    for r in range(1, 1 << game.n):
        for i in fs(r):
            o = optimal_collaborators(game, i, r)
            chosen, alts = naive_ocs(game, i, fs(r))
            assert o.collaborators == chosen
            assert o.alternatives == tuple(alts)
            assert o.ambiguous == (len(alts) > 1)
            assert o.value == game.values[i, chosen | (1 << i)]
            assert o.collaborators & ~r == 0 and not (o.collaborators >> i) & 1
