"""Hypothesis properties of the whole game core on random games up to 7 clients (docs/concepts.md §1–3).

The games come from the package's own strategies (:mod:`coalitions.testing.strategies`, the
ones users get): *tied* games draw every value from a tiny integer set, so ties are everywhere
(and the shrink step matters); *continuous* games draw Gaussian values, so no two values tie;
``games()`` alone draws either.  Every property is checked against an independent naive
reference from conftest, and the axioms with :mod:`coalitions.testing`'s assertions, so a
failure prints its witness.
"""

import networkx as nx
import numpy as np
from conftest import (
    fs,
    has_ties,
    naive_equilibria,
    naive_inner,
    naive_ocs,
    naive_outer,
    subsets,
    to_mask,
)
from hypothesis import event, given, settings
from hypothesis import strategies as st

from coalitions.brute_force import equilibrium_masks
from coalitions.equilibrium import solve
from coalitions.errors import NoEquilibrium
from coalitions.graph import ExactOracle
from coalitions.ocs import optimal_collaborators
from coalitions.partition import canonical
from coalitions.payoffs import mau
from coalitions.peeling import peel
from coalitions.scc import source_components, strongly_connected_components
from coalitions.testing import assert_equilibrium, assert_same_partition
from coalitions.testing.strategies import games, planted_games

FAST = settings(max_examples=150, deadline=None)
SLOW = settings(max_examples=60, deadline=None)


def naive_mau_table(game):
    """``{(i, R): max_{S ⊆ R, i ∈ S} v_i(S)}`` by explicit loops (no subset-max transform)."""
    table = {}
    for r in subsets(range(game.n)):
        for i in r:
            table[i, r] = max(game.values[i, to_mask(s)] for s in subsets(r) if i in s)
    return table


def naive_stable(game, r, m):
    """Coalitions stable in ``R`` (personalized): condition (a), and no proper subset meets (a)."""
    passing = [k for k in subsets(r) if k and all(m[i, k] >= m[i, r] - 1e-9 for i in k)]
    return {to_mask(k) for k in passing if not any(p < k for p in passing)}


# ---------------------------------------------------------------------------- peeling
@given(games(max_n=7))
@FAST
def test_peeling_ends_with_a_brute_force_equilibrium(game):
    event(f"n={game.n}")
    p = peel(game)
    assert p.complete and len(p.rounds) <= game.n
    assert all(r.stable for r in p.rounds)  # every round removes someone, so peeling ends
    part = canonical(p.partition)
    assert_equilibrium(game, part)
    assert part in equilibrium_masks(game)


# On integer-valued games any tol < 1 is transitive ("equal" means exactly equal), so peeling
# must still give a CE.  (With tol >= 1 it need not: see test_certificate_is_honest_for_any_tolerance.)
@given(games(max_n=7, levels=4, ties=True), st.sampled_from([0.0, 1e-9, 0.5]))
@FAST
def test_peeling_gives_a_ce_for_transitive_tolerances(game, tol):
    p = peel(game, tol=tol)
    assert p.complete
    part = canonical(p.partition)
    assert_equilibrium(game, part, tol=tol)
    assert part in equilibrium_masks(game, tol=tol)


@given(games(max_n=6, levels=4, ties=True), st.sampled_from([0.0, 0.5, 1.0, 1.5]))
@FAST
def test_certificate_is_honest_for_any_tolerance(game, tol):
    """Whatever solve returns, its certificate holds exactly when brute force lists the partition;
    when it finds no CE, brute force finds none either (tol >= 1 can leave a game without one)."""
    found = equilibrium_masks(game, tol=tol)
    try:
        eq = solve(game, tol=tol)
    except NoEquilibrium:
        assert found == []
    else:
        assert eq.certificate.holds == (eq.masks in found)


@given(games(max_n=7))
@SLOW
def test_every_recorded_coalition_is_stable_in_its_round(game):
    m = naive_mau_table(game)
    for rnd in peel(game).rounds:
        stable = naive_stable(game, fs(rnd.within), m)
        assert set(rnd.stable) <= stable
        for k, src in zip(rnd.stable, rnd.sources, strict=True):  # each is shrunk from its own source component
            assert k & ~src == 0


@given(games(max_n=7, ties=False))
@SLOW
def test_without_ties_stable_coalitions_are_source_components(game):
    assert not has_ties(game)
    m = naive_mau_table(game)
    oracle = ExactOracle(game)
    for rnd in peel(game).rounds:
        r = rnd.within
        comps = {to_mask(c) for c in source_components(oracle.benefit_graph(r).successors())}
        # every stable coalition of R is a strongly connected component of BG(R) with no entering
        # edge, and conversely; the shrink changes nothing
        assert naive_stable(game, fs(r), m) == comps
        assert rnd.stable == rnd.sources and set(rnd.sources) == comps


@given(games(min_n=3, max_n=7, levels=2, ties=True))
@SLOW
def test_with_ties_shrunk_coalitions_are_stable_and_minimal(game):
    m = naive_mau_table(game)
    for rnd in peel(game).rounds:
        stable = naive_stable(game, fs(rnd.within), m)
        for k in rnd.stable:
            assert k in stable
            assert not any(s != k and s & ~k == 0 for s in stable)  # inclusion-minimal


# ---------------------------------------------------------------------------- MAU and OCS
@given(games(max_n=7))
@FAST
def test_mau_is_monotone_and_a_plain_max(game):
    got = mau(game)
    n = game.n
    for i in range(n):
        for r in range(1 << n):
            if not (r >> i) & 1:
                assert np.isnan(got[i, r])
                continue
            for b in range(n):
                assert got[i, r | (1 << b)] >= got[i, r]  # R ⊆ R' ⇒ MAU_i(R) ≤ MAU_i(R')
    m = naive_mau_table(game) if n <= 6 else None
    if m is not None:
        for (i, r), x in m.items():
            assert got[i, to_mask(r)] == x


@given(games(max_n=7), st.data())
@FAST
def test_ocs_matches_naive_tie_rule(game, data):
    for _ in range(4):
        r = data.draw(st.integers(1, game.grand))
        i = data.draw(st.sampled_from(sorted(fs(r))))
        o = optimal_collaborators(game, i, r)
        chosen, alts = naive_ocs(game, i, fs(r))
        assert (o.collaborators, o.alternatives, o.ambiguous) == (chosen, tuple(alts), len(alts) > 1)


# ---------------------------------------------------------------------------- shared semantics
@given(games(max_n=7))
@FAST
def test_shared_semantics_agrees_with_brute_force(game):
    found = equilibrium_masks(game, "shared")
    try:
        eq = solve(game, "shared")
    except NoEquilibrium:
        assert found == []
    else:
        assert eq.masks in found and eq.certificate.holds


@given(games(max_n=4, levels=4, ties=True))
@settings(max_examples=80, deadline=None)
def test_shared_semantics_on_small_tied_games(game):
    found = {frozenset(p) for p in equilibrium_masks(game, "shared")}
    assert found == naive_equilibria(game, "shared")
    try:
        eq = solve(game, "shared")
    except NoEquilibrium:
        assert not found
    else:
        assert frozenset(eq.masks) in found


# ---------------------------------------------------------------------------- brute force
@given(games(max_n=5), st.sampled_from([0.0, 1e-9, 0.5, 1.0]))
@FAST
def test_brute_force_matches_naive_enumerator(game, tol):
    for semantics in ("personalized", "shared"):
        got = {frozenset(p) for p in equilibrium_masks(game, semantics, tol)}
        assert got == naive_equilibria(game, semantics, tol)


@given(games(6))
@settings(max_examples=15, deadline=None)
def test_brute_force_matches_naive_enumerator_six_clients(game):
    got = {frozenset(p) for p in equilibrium_masks(game)}
    assert got == naive_equilibria(game)


@given(games(max_n=6))
@FAST
def test_every_brute_force_equilibrium_passes_the_naive_axioms(game):
    for p in equilibrium_masks(game):
        part = [fs(k) for k in p]
        assert naive_inner(game, part) and naive_outer(game, part)


# ---------------------------------------------------------------------------- graphs and planted games
@given(games(max_n=7), st.data())
@FAST
def test_benefit_graph_components_match_networkx(game, data):
    r = data.draw(st.integers(1, game.grand))
    bg = ExactOracle(game).benefit_graph(r)
    g = nx.DiGraph()
    g.add_nodes_from(fs(r))
    g.add_edges_from(bg.edges)
    ours = {c for c in strongly_connected_components(bg.successors())}
    assert ours == {frozenset(c) for c in nx.strongly_connected_components(g)}


@given(planted_games(max_groups=3, max_size=3))
@settings(max_examples=25, deadline=None)
def test_noise_free_planted_groups_are_found(g):
    bounds = np.cumsum([0] + g.provenance["groups"])
    expect = [g.clients[lo:hi] for lo, hi in zip(bounds[:-1], bounds[1:], strict=True)]
    assert_same_partition(solve(g), expect)
