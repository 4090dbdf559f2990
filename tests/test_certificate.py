"""coalitions.certificate: the streamed certificate equals the table-based checks, for every chunk size.

The references are the table-based checks of coalitions.axioms and the shrink of coalitions.graph
(themselves checked against the naive loops of conftest in test_axioms / test_graph /
test_properties), and a plain-Python subset-OR for the streaming primitive.
"""

import numpy as np
import pytest
from conftest import any_games, naive_inner, naive_outer, subsets, tied_games, to_mask
from hypothesis import given, settings
from hypothesis import strategies as st

from coalitions import axioms, certificate
from coalitions.analytic import mean_estimation, planted
from coalitions.certificate import all_members_pass, check_chunk, shrink
from coalitions.equilibrium import certify, solve
from coalitions.graph import shrink_to_minimal
from coalitions.partition import canonical
from coalitions.payoffs import mau, mau_at, payoff_at, payoff_table
from coalitions.testing import assert_equilibrium

FAST = settings(max_examples=150, deadline=None)
CHUNKS = st.sampled_from([1, 2, 4, 8, 16, 32, 64, 128, 1 << 16])
TOLS = st.sampled_from([0.0, 1e-9, 0.5, 1.0])
SEMANTICS = st.sampled_from(["personalized", "shared"])


@st.composite
def partitions(draw, n):
    """A random partition of ``range(n)`` as canonical bitmask blocks."""
    labels = draw(st.lists(st.integers(0, n - 1), min_size=n, max_size=n))
    blocks = {}
    for i, lab in enumerate(labels):
        blocks[lab] = blocks.get(lab, 0) | (1 << i)
    return canonical(blocks.values())


# ---------------------------------------------------------------------------- the primitive
@given(st.integers(0, 7), st.data(), CHUNKS)
@FAST
def test_all_members_pass_matches_a_plain_loop(k, data, chunk):
    """out[M] = every r in M has (max over S ⊆ M holding r, or the value at M) above its threshold."""
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    table = rng.integers(0, 3, size=(k, 1 << k)).astype(float)
    for r in range(k):
        table[r, [m for m in range(1 << k) if not (m >> r) & 1]] = np.nan
    thresholds = rng.integers(0, 3, size=k).astype(float)
    strict, cumulative = data.draw(st.booleans()), data.draw(st.booleans())
    got = all_members_pass(lambda r: table[r], k, thresholds, strict, cumulative, chunk)
    for m in range(1 << k):
        expect = True
        for r in range(k):
            if (m >> r) & 1:
                pay = max(table[r, to_mask(s)] for s in subsets([i for i in range(k) if (m >> i) & 1])
                          if r in s) if cumulative else table[r, m]
                expect &= bool(pay > thresholds[r] if strict else pay >= thresholds[r])
        assert got[m] == expect


@pytest.mark.parametrize("bad", [0, 3, -4, 1.5, True, "8"])
def test_chunk_must_be_a_power_of_two(bad, tie_game):
    with pytest.raises(ValueError, match="power of two"):
        check_chunk(bad)
    with pytest.raises(ValueError, match="power of two"):
        certificate.outer_agreement(tie_game, [0b111], chunk=bad)


# ---------------------------------------------------------------------------- streamed vs tables
@given(any_games(max_n=7), st.data(), SEMANTICS, TOLS, CHUNKS)
@FAST
def test_streamed_axioms_equal_the_table_based_ones(game, data, semantics, tol, chunk):
    """Same verdict, counts and witnesses (payoffs included, to the bit) for any partition."""
    part = data.draw(partitions(game.n))
    for name in ("inner_agreement", "outer_agreement"):
        got = getattr(certificate, name)(game, part, semantics, tol, chunk=chunk)
        assert got == getattr(axioms, name)(game, part, semantics, tol)


@given(any_games(max_n=7), st.data(), SEMANTICS, TOLS)
@FAST
def test_every_chunk_size_gives_the_same_certificate(game, data, semantics, tol):
    part = data.draw(partitions(game.n))
    whole = certify(game, part, semantics, tol, chunk=1 << game.n)
    for chunk in (1, 2, 4, 8, 32):
        assert certify(game, part, semantics, tol, chunk=chunk) == whole


@given(any_games(max_n=6), st.data(), SEMANTICS)
@FAST
def test_streamed_verdicts_match_the_naive_axioms(game, data, semantics):
    part = data.draw(partitions(game.n))
    cert = certify(game, part, semantics, chunk=data.draw(CHUNKS))
    blocks = [frozenset(i for i in range(game.n) if (k >> i) & 1) for k in part]
    assert cert.inner.holds == naive_inner(game, blocks, semantics)
    assert cert.outer.holds == naive_outer(game, blocks, semantics)


@given(tied_games(max_n=7, levels=3), st.data(), SEMANTICS, TOLS, CHUNKS)
@FAST
def test_streamed_shrink_equals_the_table_shrink(game, data, semantics, tol, chunk):
    r = data.draw(st.integers(1, game.grand))
    k = data.draw(st.integers(1, game.grand)) & r or r
    expect = shrink_to_minimal(payoff_table(game, semantics), mau(game), k, r, tol)
    assert shrink(game, k, r, semantics, tol, chunk) == expect


@given(any_games(max_n=7), st.data(), SEMANTICS)
@FAST
def test_point_payoffs_equal_the_table(game, data, semantics):
    fresh = type(game)(game.clients, game.values)  # no cached table: mau_at searches sub-coalitions
    k = data.draw(st.integers(1, game.grand))
    for i in range(game.n):
        if (k >> i) & 1:
            assert payoff_at(fresh, i, k, semantics) == payoff_table(game, semantics)[i, k]
            assert mau_at(fresh, i, k) == mau(game)[i, k]
    assert "_mau" not in fresh.__dict__


def test_sampled_certificates_still_come_from_the_axioms():
    g = planted([3, 3], noise=0.05, seed=1)
    cert = certify(g, solve(g).masks, exhaustive_up_to=4)
    assert cert.method == "sampled" and cert.holds


# ---------------------------------------------------------------------------- larger games
@pytest.mark.parametrize("semantics", ["personalized", "shared"])
def test_sixteen_clients_chunked_equals_whole_and_the_tables(semantics):
    """N = 16: a planted CE, a partition that is no CE (witnesses compared), and the grand coalition."""
    g = planted([4, 4, 4, 4], noise=0.05, seed=7)
    ce = solve(g, semantics).masks
    singletons = tuple(1 << i for i in range(16))
    pairs = tuple(0b11 << (2 * i) for i in range(8))
    for part in (ce, singletons, pairs, (g.grand,)):
        whole = certify(g, part, semantics, chunk=1 << 16)
        assert certify(g, part, semantics, chunk=1 << 5) == whole
        assert whole.inner == axioms.inner_agreement(g, part, semantics)
        assert whole.outer == axioms.outer_agreement(g, part, semantics)
    assert_equilibrium(g, ce, semantics=semantics)
    bad = certify(g, singletons, semantics)
    assert not bad.outer.holds and bad.outer.violations > 10 and len(bad.outer.witnesses) == 10


def test_sixteen_equal_clients_form_the_grand_coalition_streamed():
    g = mean_estimation([5] * 16)
    eq = solve(g)
    assert eq.masks == (g.grand,) and eq.certificate.holds
    assert eq.certificate.inner.checked == (1 << 16) - 2
    assert eq.certificate == certify(g, eq.masks, chunk=4)


@given(any_games(max_n=7), st.sampled_from([0.0, 1e-9, 0.5, 1.0]))
@FAST
def test_ocs_among_all_clients_follows_the_tie_rule(game, tol):
    """OCS_i(all) reads the row without a list of masks; it must equal the naive tie rule and the
    general path (a remaining set given as all clients but a phantom bit is impossible, so compare
    with naive_ocs from conftest)."""
    from conftest import naive_ocs

    from coalitions.ocs import optimal_collaborators

    for i in range(game.n):
        o = optimal_collaborators(game, i, game.grand, tol)
        chosen, alts = naive_ocs(game, i, frozenset(range(game.n)), tol)
        assert (o.collaborators, o.alternatives) == (chosen, tuple(alts))
        assert o.mau == mau(game)[i, game.grand]
