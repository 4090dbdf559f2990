"""coalitions.axioms: inner/outer agreement with witnesses, and classic stability notions (docs/concepts.md §3)."""

import pytest
from conftest import any_games, naive_inner, naive_outer, naive_partitions, to_mask
from hypothesis import given, settings

from coalitions.analytic import planted
from coalitions.axioms import (
    all_checks,
    individual_rationality,
    individual_stability,
    inner_agreement,
    nash_stability,
    outer_agreement,
    strict_core,
)
from coalitions.errors import InputError
from coalitions.game import Game
from coalitions.testing import (
    assert_core_stable,
    assert_equilibrium,
    assert_individually_rational,
    assert_individually_stable,
    assert_inner_agreement,
    assert_outer_agreement,
)

ALL3 = ["a", "b", "c", "a,b", "a,c", "b,c", "a,b,c"]


def game3(table):
    """A 3-client game from {client: [v(a), v(b), ..., v(a,b,c)] over the keys holding it}."""
    return Game.from_mapping(["a", "b", "c"], {
        c: dict(zip([k for k in ALL3 if c in k.split(",")], table[c], strict=True)) for c in "abc"})


def test_inner_agreement_witness_on_tie_example(tie_game):
    rep = inner_agreement(tie_game, [0b111])
    assert not rep.holds and rep.method == "exhaustive"
    assert rep.checked == 6 and rep.violations == 1
    (w,) = rep.witnesses
    assert w.coalition == 0b111 and w.subcoalition == 0b101
    assert w.payoffs == ((0, 3.0, 3.0), (2, 2.0, 2.0))  # (member, payoff after leaving, payoff now)
    assert_inner_agreement(tie_game, [0b101, 0b010])


def test_outer_agreement_witnesses_on_tie_example(tie_game):
    rep = outer_agreement(tie_game, [1, 2, 4])
    assert not rep.holds and rep.checked == 7 and rep.violations == 2
    assert [w.coalition for w in rep.witnesses] == [0b101, 0b111]
    assert rep.witnesses[0].payoffs == ((0, 3.0, 2.0), (2, 2.0, 0.0))
    assert_outer_agreement(tie_game, [0b101, 0b010])


def test_zero_tolerance(tie_game):
    # with tol = 0 a coalition's own payoffs never block it, and exact ties still let {c0,c2} leave
    ce = [0b101, 0b010]
    assert_equilibrium(tie_game, ce, tol=0)
    assert_core_stable(tie_game, [0b111], tol=0)  # nobody strictly gains anywhere: MAU is max
    # exactly equal payoffs count as "weakly better": the grand coalition blocks the CE strictly
    assert [w.coalition for w in strict_core(tie_game, ce, tol=0).witnesses] == [0b111]
    assert not inner_agreement(tie_game, [0b111], tol=0).holds
    # the CE is not Nash stable: c1 would gain (3 > 2) by joining {c0,c2}
    nash = nash_stability(tie_game, ce, tol=0)
    assert not nash.holds and [(w.client, w.coalition) for w in nash.witnesses] == [(1, 0b101)]


def test_tolerance_widens_equality():
    # b gains 0.5 by joining a: a violation with tol 0.1, none with tol 1
    g = Game.from_mapping(["a", "b"], {"a": {"a": 0, "a,b": 0.5}, "b": {"b": 0, "a,b": 0.5}})
    assert not outer_agreement(g, [1, 2], tol=0.1).holds
    assert_outer_agreement(g, [1, 2], tol=1.0)
    assert inner_agreement(g, [3], tol=0.1).holds and not inner_agreement(g, [3], tol=1.0).holds


def test_max_witnesses_limits_list_not_count():
    g = planted([1, 1, 1, 1, 1], noise=0.5, seed=3)
    rep = outer_agreement(g, [0b11111], max_witnesses=1)
    full = outer_agreement(g, [0b11111])
    assert rep.violations == full.violations and len(rep.witnesses) == min(1, full.violations)


def test_strict_core_is_stronger_than_outer_agreement(tie_game):
    ce = [0b101, 0b010]
    assert_outer_agreement(tie_game, ce)
    rep = strict_core(tie_game, ce)
    # the grand coalition leaves c0 and c2 as well off and makes c1 strictly better (3 > 2)
    assert not rep.holds and [w.coalition for w in rep.witnesses] == [0b111]


def test_individual_rationality(no_ce_game):
    rep = individual_rationality(no_ce_game, [0b111], "shared")
    assert not rep.holds and rep.violations == 3
    assert rep.witnesses[0].client == 0 and rep.witnesses[0].payoffs == ((0, 0.0, -1.0),)
    assert_individually_rational(no_ce_game, [0b111])  # personalized: MAU never below alone


def test_nash_and_individual_stability(no_ce_game):
    part = [0b011, 0b100]  # {x,y},{z} under shared semantics: y prefers joining z (2 > 1)
    nash = nash_stability(no_ce_game, part, "shared")
    assert not nash.holds and nash.violations == 1
    (w,) = nash.witnesses
    assert w.client == 1 and w.coalition == 0b100 and w.payoffs == ((1, 2.0, 1.0), (2, 1.0, 0.0))
    ist = individual_stability(no_ce_game, part, "shared")
    assert not ist.holds and ist.violations == 1  # z gains too, so it accepts y


def test_individually_stable_but_not_nash_stable():
    g = game3({"a": [0, 0, 0, 5], "b": [0, 0, 1, -1], "c": [0, 0, 1, 2]})
    part = [0b001, 0b110]  # {a}, {b,c}
    nash = nash_stability(g, part, "shared")
    assert not nash.holds and [(w.client, w.coalition) for w in nash.witnesses] == [(0, 0b110)]
    assert_individually_stable(g, part, semantics="shared")  # b would lose (-1 < 1) and vetoes a


def test_going_alone_is_a_move():
    g = game3({"a": [1, 0, 0, 0], "b": [0, 0, 0, 0], "c": [0, 0, 0, 0]})
    nash = nash_stability(g, [0b111], "shared")
    assert not nash.holds and (nash.witnesses[0].client, nash.witnesses[0].coalition) == (0, 0)


def test_sampling_above_the_limit():
    g = planted([3, 3, 2], noise=0.1, seed=1)
    part = [0b00000111, 0b00111000, 0b11000000]
    inner = inner_agreement(g, part, exhaustive_up_to=2, samples=50)
    outer = outer_agreement(g, part, exhaustive_up_to=4, samples=100)
    assert inner.method == outer.method == "sampled"
    assert 0 < outer.checked <= 100 and 0 < inner.checked
    exact = outer_agreement(g, part, exhaustive_up_to=8)
    assert exact.method == "exhaustive" and exact.checked == 255
    # the same seed gives the same sample
    assert outer_agreement(g, part, exhaustive_up_to=4, samples=100, seed=5) == \
        outer_agreement(g, part, exhaustive_up_to=4, samples=100, seed=5)


def test_all_checks_and_bad_partitions(tie_game):
    reps = all_checks(tie_game, [0b101, 0b010])
    assert set(reps) == {"inner_agreement", "outer_agreement", "individual_rationality",
                         "nash_stability", "individual_stability", "strict_core"}
    assert all(r.name == k for k, r in reps.items())
    for bad, fault in [([0b011, 0b110], "two blocks"), ([0b011], "no block"), ([0, 0b111], "empty"),
                       ([0b1111], "outside")]:
        with pytest.raises(InputError, match=fault):
            inner_agreement(tie_game, bad)
        with pytest.raises(InputError, match=fault):
            outer_agreement(tie_game, bad)


@given(any_games(max_n=4))
@settings(max_examples=30, deadline=None)
def test_inner_and_outer_match_naive_on_every_partition(game):
    for semantics in ("personalized", "shared"):
        for part in naive_partitions(range(game.n)):
            masks = [to_mask(k) for k in part]
            assert inner_agreement(game, masks, semantics).holds == naive_inner(game, part, semantics)
            assert outer_agreement(game, masks, semantics).holds == naive_outer(game, part, semantics)
