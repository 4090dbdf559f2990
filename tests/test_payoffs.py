"""coalitions.payoffs: MAU by a subset-max transform, and the two semantics (docs/concepts.md §1–2)."""

import numpy as np
import pytest
from conftest import fs, naive_mau, tied_games
from hypothesis import given, settings
from hypothesis import strategies as st

from coalitions.errors import InputError
from coalitions.payoffs import check_semantics, mau, models_in, payoff_table, subset_max


def test_subset_max_small_example():
    v = np.array([[np.nan, 3.0, np.nan, 2.0]])
    np.testing.assert_array_equal(subset_max(v), [[-np.inf, 3.0, -np.inf, 3.0]])


def test_subset_max_does_not_modify_input():
    v = np.array([[np.nan, 1.0, 5.0, 2.0]])
    before = v.copy()
    subset_max(v)
    np.testing.assert_array_equal(v, before)


def test_mau_on_tie_example(tie_game):
    m = mau(tie_game)
    # c0: {0}:2 {0,1}:3 {0,2}:3 {0,1,2}:0 -> MAU over all is 3, over {0} is 2
    assert m[0, 0b001] == 2 and m[0, 0b011] == 3 and m[0, 0b111] == 3
    # c1's best is the grand coalition, c2's best is {0,2}
    assert m[1, 0b111] == 3 and m[1, 0b110] == 2 and m[2, 0b111] == 2 and m[2, 0b110] == 0
    assert np.isnan(m[0, 0b110]) and np.isnan(m[1, 0]) and np.isnan(m[2, 0b011])


@given(tied_games(max_n=6, levels=5))
@settings(max_examples=40, deadline=None)
def test_mau_equals_naive_max_and_is_monotone(game):
    m = mau(game)
    for i in range(game.n):
        for r in range(1, 1 << game.n):
            if (r >> i) & 1:
                assert m[i, r] == naive_mau(game, i, fs(r))
                for b in range(game.n):  # adding any client never lowers MAU
                    assert m[i, r | (1 << b)] >= m[i, r]
            else:
                assert np.isnan(m[i, r])


def test_mau_is_cached_and_read_only(tie_game):
    a = mau(tie_game)
    assert mau(tie_game) is a
    with pytest.raises(ValueError):
        a[0, 1] = 0


def test_payoff_table_semantics(tie_game):
    assert payoff_table(tie_game) is mau(tie_game)
    assert payoff_table(tie_game, "shared") is tie_game.values
    # shared payoffs are not monotone: c0 gets 3 in {0,1} but 0 in the grand coalition
    shared = payoff_table(tie_game, "shared")
    assert shared[0, 0b011] == 3 and shared[0, 0b111] == 0
    with pytest.raises(InputError, match="semantics"):
        payoff_table(tie_game, "selfish")
    assert check_semantics("shared") == "shared"


@given(tied_games(max_n=6, levels=3), st.randoms(use_true_random=False))
@settings(max_examples=100, deadline=None)
def test_models_in_earns_the_payoff(game, rnd):
    """The model each client uses is inside its block, holds it, and achieves MAU (ties: smallest)."""
    labels = [rnd.randrange(game.n) for _ in range(game.n)]
    partition = sorted({sum(1 << i for i in range(game.n) if labels[i] == b) for b in labels})
    used = models_in(game, partition)
    m = mau(game)
    for block in partition:
        for i in range(game.n):
            if block >> i & 1:
                s = used[i]
                assert s >> i & 1 and s & ~block == 0
                assert game.values[i, s] == m[i, block]
                smaller = [t for t in range(1, s) if t & block == t and t >> i & 1]
                assert all(game.values[i, t] < m[i, block] for t in smaller)
    assert models_in(game, partition, "shared") == [next(k for k in partition if k >> i & 1)
                                                    for i in range(game.n)]


def test_models_in_tie_example(tie_game):
    # CE {c0,c2},{c1}: c0 gets 3 from {c0,c2}, c2 gets 2 from {c0,c2}, c1 alone
    assert models_in(tie_game, [0b101, 0b010]) == [0b101, 0b010, 0b101]
    with pytest.raises(InputError):
        models_in(tie_game, [0b111], "both")
