"""coalitions.welfare and coalitions.stable: the social optimum, stable partitions, prices (docs/concepts.md §4)."""

import numpy as np
import pytest
from conftest import any_games, fs, naive_equilibria, naive_partitions, naive_payoff, to_mask
from hypothesis import given, settings
from hypothesis import strategies as st
from test_analytic import direct_error

import coalitions as co
from coalitions.axioms import individual_stability, nash_stability, outer_agreement
from coalitions.errors import InputError
from coalitions.stable import NOTIONS, stable_partitions
from coalitions.welfare import (
    coalition_welfare,
    optimal_partitions,
    partition_welfare,
    price,
    resolve_weights,
    structure_values,
    welfare,
)

SETTINGS = settings(max_examples=120, deadline=None)
TOL = 1e-9


def naive_welfares(game, weights, semantics):
    """``{partition (frozenset of masks): Σ_i ω_i·payoff_i(P(i))}`` over every partition, by loops."""
    out = {}
    for part in naive_partitions(range(game.n)):
        out[frozenset(to_mask(k) for k in part)] = sum(
            weights[i] * naive_payoff(game, semantics, i, k) for k in part for i in k)
    return out


weights_for = st.one_of(st.just("uniform"), st.lists(st.integers(1, 3), min_size=7, max_size=7),
                        st.lists(st.floats(0.1, 10), min_size=7, max_size=7))


def _weights(game, drawn):
    return drawn if isinstance(drawn, str) else drawn[:game.n]


# ---------------------------------------------------------------------------- the optimum
@given(any_games(max_n=6), weights_for, st.sampled_from(["personalized", "shared"]))
@SETTINGS
def test_dynamic_programme_finds_every_optimal_partition(game, drawn, semantics):
    omega = resolve_weights(game, _weights(game, drawn))
    every = naive_welfares(game, omega, semantics)
    best = max(every.values())
    w = coalition_welfare(game, omega, semantics)
    f = structure_values(w)
    assert f[-1] == pytest.approx(best, abs=1e-9)
    found, truncated = optimal_partitions(w, f, TOL, limit=10_000)
    assert not truncated
    assert {frozenset(p) for p in found} == {p for p, x in every.items() if x >= best - TOL}
    for p in found:
        assert partition_welfare(game, p, omega, semantics) == pytest.approx(best, abs=1e-9)


@given(any_games(min_n=2, max_n=7), st.sampled_from([1, 2, 4, 8, 32]))
@settings(max_examples=60, deadline=None)
def test_chunking_does_not_change_the_optimum(game, chunk):
    """Small chunks force the split into a vectorised part and a loop over the remaining sub-mask bits."""
    w = coalition_welfare(game, np.ones(game.n))
    np.testing.assert_array_equal(structure_values(w, chunk=chunk), structure_values(w))


def test_structure_values_of_every_subset():
    """f[S] is the best partition of S itself, checked for every S of a 5-client game."""
    game = co.planted([2, 3], noise=0.3, seed=3)
    w = coalition_welfare(game, np.ones(5))
    f = structure_values(w)
    for s in range(1, 32):
        members = sorted(fs(s))
        best = max(sum(w[to_mask(k)] for k in part) for part in naive_partitions(members))
        assert f[s] == pytest.approx(best, abs=1e-12)


def test_optimum_at_nine_clients_against_enumeration():
    from coalitions.stable import enumerate_partitions

    game = co.planted([3, 3, 3], noise=0.5, seed=11)
    w = coalition_welfare(game, np.arange(1.0, 10.0), "shared")
    _, label_mask = enumerate_partitions(9)
    every = w[label_mask].sum(axis=1) - (label_mask == 0).sum(axis=1) * w[0]
    f = structure_values(w)
    assert f[-1] == pytest.approx(every.max(), abs=1e-9)
    (part,), _ = optimal_partitions(w, f)
    assert frozenset(part) == frozenset(int(k) for k in label_mask[every.argmax()] if k)


# ---------------------------------------------------------------------------- stable partitions
def reference_stable(game, notion, semantics):
    if notion == "ce":
        return naive_equilibria(game, semantics)
    check = {"core": outer_agreement, "individual_stability": individual_stability,
             "nash_stability": nash_stability}[notion]
    out = set()
    for part in naive_partitions(range(game.n)):
        masks = [to_mask(k) for k in part]
        if check(game, masks, semantics).holds:
            out.add(frozenset(masks))
    return out


@given(any_games(max_n=6), st.sampled_from(NOTIONS), st.sampled_from(["personalized", "shared"]))
@SETTINGS
def test_stable_partitions_match_the_axiom_checkers(game, notion, semantics):
    found = stable_partitions(game, notion, semantics, chunk=7)
    assert len(set(found)) == len(found)
    assert {frozenset(p) for p in found} == reference_stable(game, notion, semantics)


def test_stable_partitions_refuses_large_games_and_unknown_notions():
    with pytest.raises(InputError, match="exceeds the limit of 3 clients"):
        stable_partitions(co.planted([2, 2]), "core", max_clients=3)
    with pytest.raises(InputError, match="stability notion must be one of"):
        stable_partitions(co.planted([2]), "pareto")


# ---------------------------------------------------------------------------- prices
@given(any_games(max_n=6), st.sampled_from(NOTIONS), st.sampled_from(["min", "max"]))
@SETTINGS
def test_prices_are_ratios_at_least_one(game, notion, sense):
    if sense == "min":  # the same numbers read as a loss
        game = co.Game.from_array(game.values, game.clients, "min")
    r = welfare(game, stability=notion)
    every = naive_welfares(game, np.ones(game.n), "personalized")
    stable = reference_stable(game, notion, "personalized")
    sign = -1 if sense == "min" else 1
    assert r.quantity == ("cost" if sense == "min" else "welfare")
    assert r.optimum == pytest.approx(sign * max(every.values()), abs=1e-9)
    assert {frozenset(p) for p, _ in r.stable} == stable
    reported = [x for _, x in r.stable]
    assert reported == sorted(reported, reverse=sense == "max")  # best first
    if not stable:
        assert r.price_of_anarchy is r.price_of_stability is None
        return
    internal = [every[p] for p in stable]
    lo, hi, opt = min(internal), max(internal), max(every.values())
    if (opt > 0 and lo > 0) or (opt < 0 and hi < 0):
        assert r.price_of_anarchy >= r.price_of_stability >= 1 - 1e-12
        expect = (lambda s: opt / s) if opt > 0 else (lambda s: s / opt)
        assert r.price_of_stability == pytest.approx(1.0 if abs(opt - hi) <= TOL else expect(hi))
        assert r.price_of_anarchy == pytest.approx(1.0 if abs(opt - lo) <= TOL else expect(lo))
    elif abs(opt - lo) > TOL or abs(opt - hi) > TOL:
        assert r.price_of_anarchy is r.price_of_stability is None
        assert any("change sign" in n for n in r.notes)


def test_price():
    assert price(-2.0, -3.0) == 1.5  # costs 2 (optimum) and 3 (stable)
    assert price(3.0, 2.0) == 1.5  # welfares 3 (optimum) and 2 (stable)
    assert price(1.0, 1.0 + 1e-12, 1e-9) == 1.0
    assert price(1.0, -1.0) is None and price(0.0, -1.0) is None and price(1.0, 0.0) is None


def test_hand_worked_mean_estimation():
    """Three players of 1, 8 and 15 samples under model sharing: costs from docs/concepts.md §4's formula."""
    sizes = [1, 8, 15]
    g = co.mean_estimation(sizes)
    err = lambda c, j: direct_error(sizes, c, j, 10, 1)  # noqa: E731
    cost = {
        "all": sum(err([0, 1, 2], j) for j in range(3)),
        "02|1": err([0, 2], 0) + err([0, 2], 2) + err([1], 1),
    }
    r = welfare(g, semantics="shared", stability="individual_stability")
    assert r.optima == ((0b111,),) and r.optimum == pytest.approx(cost["all"])
    assert r.stable == (((0b101, 0b010), pytest.approx(cost["02|1"])),)
    assert r.price_of_anarchy == r.price_of_stability == pytest.approx(cost["02|1"] / cost["all"])
    # weighted by sample counts: Σ n_j·err_j over the five partitions
    costs = {frozenset(to_mask(k) for k in part): sum(sizes[j] * err(sorted(k), j) for k in part for j in k)
             for part in naive_partitions(range(3))}
    r = welfare(g, "sizes", "shared", "individual_stability")
    best = min(costs, key=costs.get)
    assert r.optimum == pytest.approx(costs[best]) and [frozenset(p) for p in r.optima] == [best]
    assert best == {0b011, 0b100}  # weighted by size, the two small clients pool and 15 stays alone


def test_gain_game_prices_and_no_stable_partition(no_ce_game):
    # one CE {a},{b} with welfare 1 + 1 = 2; together they would make 3 + 0 = 3
    g = co.Game.from_mapping(["a", "b"], {"a": {"a": 1, "a,b": 3}, "b": {"b": 1, "a,b": 0}})
    r = welfare(g, semantics="shared")
    assert r.quantity == "welfare" and r.optimum == 3 and r.optima == ((0b11,),)
    assert r.stable == (((1, 2), 2.0),) and r.price_of_anarchy == r.price_of_stability == 1.5
    r = welfare(no_ce_game, semantics="shared")
    assert r.stable == () and r.price_of_anarchy is None and "no partition is a CE" in r.notes[0]


def test_large_games_skip_enumeration():
    r = welfare(co.planted([3, 3, 3], noise=0.0), semantics="shared", max_enumerate=8)
    assert r.stable is None and r.price_of_anarchy is None and "not enumerated" in r.notes[0]
    assert r.optima == ((0b111, 0b111000, 0b111000000),)
    # under personalized semantics payoffs are monotone: the grand coalition is always optimal
    assert (0b111111111,) in welfare(co.planted([3, 3, 3], noise=0.0), max_enumerate=8).optima


def test_many_optima_are_truncated():
    g = co.Game.from_array(np.where(np.isnan(co.planted([4]).values), np.nan, 1.0))  # every partition ties
    r = welfare(g, max_optima=5)
    assert len(r.optima) == 5 and r.optima_truncated and "more than 5 optimal" in r.notes[-1]


# ---------------------------------------------------------------------------- weights
def test_weights():
    g = co.mean_estimation([1, 8, 15], clients=["a", "b", "c"])
    assert resolve_weights(g, "uniform").tolist() == [1, 1, 1]
    assert resolve_weights(g, "sizes").tolist() == [1, 8, 15]
    assert resolve_weights(g, "c=2, a=0.5,b=1").tolist() == [0.5, 1, 2]
    assert resolve_weights(g, {"a": 1, "b": 2, "c": 3}).tolist() == [1, 2, 3]
    odd = co.mean_estimation([1, 2], clients=["x=1", "y"])
    assert resolve_weights(odd, "x=1=4,y=2").tolist() == [4, 2]
    with pytest.raises(InputError, match="client 'c' has no weight"):
        resolve_weights(g, {"a": 1, "b": 2})
    with pytest.raises(InputError, match="weight of client 'c' is not a number"):
        resolve_weights(g, {"a": 1, "b": 2, "c": "3"})


@pytest.mark.parametrize("spec, fault", [
    ("a=1,b=2", "client 'c' has no weight"), ("a=1,b=2,c=3,a=4", "client 'a' is given twice"),
    ("a=1,b=2,z=3", "unknown client 'z'"), ("a=1,b=x,c=1", "weight of client 'b' is not a number"),
    ("a=1,b=0,c=1", "must be a positive number"), ("a=1,b=inf,c=1", "weight of client .b. is not finite"),
    ("median", "name=number pairs"), ([1, 2], "2 weights for 3 clients"),
])
def test_bad_weights(spec, fault):
    g = co.mean_estimation([1, 8, 15], clients=["a", "b", "c"])
    with pytest.raises(InputError, match=fault):
        resolve_weights(g, spec)


def test_sizes_need_provenance(tie_game):
    with pytest.raises(InputError, match="records no sample counts"):
        resolve_weights(tie_game, "sizes")
    bad = co.Game(tie_game.clients, tie_game.values, provenance={"sizes": [1, 2]})
    with pytest.raises(InputError, match="must list 3 sample counts"):
        resolve_weights(bad, "sizes")


def test_benchmark_quick_runs_to_its_end():
    import subprocess
    import sys

    from conftest import ROOT

    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "welfare.py"), "--quick"],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    rows = [l.split() for l in proc.stdout.splitlines() if l.strip()[:2] in ("8 ", "10")]
    assert [r[-1] for r in rows if len(r) == 6] == ["yes", "yes"]  # enumeration and DP agree at N = 8, 10
    assert "load average after" in proc.stdout
