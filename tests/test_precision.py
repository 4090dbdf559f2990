"""Float32 storage (coalitions.precision): the same answers as float64, or a refusal.

A float32 game and the float64 game with the same numbers must agree on everything the core
decides: the CE, its rounds and benefit graphs (ambiguity included), the certificate with its
witnesses, the other stability checks and brute force.  Rounding a float64 game is allowed only
where ``float32_safe`` proves it changes no decision, and the tests check that proof on games
built to sit near the tolerance.
"""

import numpy as np
import pytest
from conftest import any_games, game_from_flat, n_values, tied_games
from hypothesis import event, given, settings
from hypothesis import strategies as st

from coalitions.analytic import planted
from coalitions.axioms import all_checks
from coalitions.brute_force import equilibrium_masks
from coalitions.equilibrium import certify, solve
from coalitions.errors import InputError, NoEquilibrium
from coalitions.game import Game
from coalitions.io import read_game, write_game
from coalitions.payoffs import mau, payoff_table
from coalitions.precision import exact_threshold, float32_safe, is_float32_exact, to_float32

FAST = settings(max_examples=120, deadline=None)


def as_float32(game: Game) -> Game:
    return Game(game.clients, game.values.astype(np.float32), game.sense)


def upcast(game: Game) -> Game:
    """The float64 game holding the float32 rounding of ``game``'s values."""
    return Game(game.clients, game.values.astype(np.float32).astype(np.float64), game.sense)


@st.composite
def float32_games(draw, max_n=7):
    """Tied integer games, and Gaussian games rounded to float32, as float64 games."""
    return upcast(draw(any_games(max_n=max_n)))


def outcome(game, semantics, tol):
    """Everything solve decides, in comparable form (or the NoEquilibrium message)."""
    try:
        eq = solve(game, semantics, tol)
    except NoEquilibrium as e:
        return str(e)
    return (eq.masks, eq.rounds, eq.graphs, eq.found_by, eq.certificate,
            eq.payoffs.tolist(), eq.mau_all.tolist())


def decisions(report):
    """A check's report without the payoff numbers of its witnesses (a rounded game reports its own)."""
    return (report.name, report.holds, report.method, report.checked, report.violations,
            tuple((w.coalition, w.subcoalition, w.client, tuple(p[0] for p in w.payoffs)) for w in report.witnesses))


def decided(game, semantics, tol):
    """What solve decides, without the numbers."""
    try:
        eq = solve(game, semantics, tol)
    except NoEquilibrium as e:
        return str(e)
    return (eq.masks, eq.rounds, eq.graphs, eq.found_by, decisions(eq.certificate.inner),
            decisions(eq.certificate.outer))


def assert_same_answers(g64, g32, semantics, tol, part, exact=True):
    """Same answers; to the bit (payoffs and witness payoffs too) when ``exact``, the same numbers stored."""
    if exact:
        assert outcome(g32, semantics, tol) == outcome(g64, semantics, tol)
        assert certify(g32, part, semantics, tol) == certify(g64, part, semantics, tol)
        assert all_checks(g32, part, semantics, tol) == all_checks(g64, part, semantics, tol)
    else:
        assert decided(g32, semantics, tol) == decided(g64, semantics, tol)
        c32, c64 = certify(g32, part, semantics, tol), certify(g64, part, semantics, tol)
        assert (decisions(c32.inner), decisions(c32.outer)) == (decisions(c64.inner), decisions(c64.outer))
        a32, a64 = all_checks(g32, part, semantics, tol), all_checks(g64, part, semantics, tol)
        assert {k: decisions(r) for k, r in a32.items()} == {k: decisions(r) for k, r in a64.items()}


@st.composite
def partitions(draw, n):
    labels = draw(st.lists(st.integers(0, n - 1), min_size=n, max_size=n))
    blocks = {}
    for i, lab in enumerate(labels):
        blocks[lab] = blocks.get(lab, 0) | (1 << i)
    return tuple(blocks.values())


# ---------------------------------------------------------------------------- storage only
@given(float32_games(), st.data(), st.sampled_from(["personalized", "shared"]),
       st.sampled_from([0.0, 1e-9, 1e-7, 0.5, 1.0]))
@FAST
def test_float32_storage_gives_the_float64_answers(g64, data, semantics, tol):
    g32 = as_float32(g64)
    assert g32.values.dtype == np.float32 and g64.values.dtype == np.float64
    assert_same_answers(g64, g32, semantics, tol, data.draw(partitions(g64.n)))


@given(float32_games(max_n=5), st.sampled_from([0.0, 1e-9, 0.5]))
@settings(max_examples=60, deadline=None)
def test_float32_brute_force_equals_float64(g64, tol):
    g32 = as_float32(g64)
    for semantics in ("personalized", "shared"):
        assert equilibrium_masks(g32, semantics, tol) == equilibrium_masks(g64, semantics, tol)
    eq = solve(g32, tol=tol) if tol == 0 else None
    if eq is not None:
        assert eq.masks in equilibrium_masks(g64, tol=tol)


def test_tables_of_a_float32_game_are_float64(tie_game):
    g32 = as_float32(tie_game)
    assert mau(g32).dtype == np.float64 and payoff_table(g32, "shared").dtype == np.float64
    assert np.array_equal(payoff_table(g32, "shared"), tie_game.values, equal_nan=True)
    assert payoff_table(g32, "shared") is payoff_table(g32, "shared")  # upcast once


def test_a_float32_comparison_would_be_wrong_without_the_upcast():
    """Why thresholds are float64: 1 - 1e-9 rounds to 1 in float32, so v >= MAU - tol would pass."""
    v = np.array([[np.nan, 1.0 - 2**-23, np.nan, 1.0], [np.nan, np.nan, 0.0, 0.0]], dtype=np.float32)
    g = Game(("a", "b"), v)
    assert np.float32(1.0) - 1e-9 == np.float32(1.0)  # NumPy 2 keeps a float32 scalar's dtype
    assert solve(g).graphs[0].collaborators_of(0) == 0b10  # {a} alone is 1.2e-7 short: a needs b
    assert solve(g).masks == solve(upcast(g)).masks


# ---------------------------------------------------------------------------- rounding a float64 game
def near_tolerance_game():
    """Client a: alone 1 - 0.99e-6, with b 1.0; b gains only with a.  At tol = 1e-6 a is content
    alone (CE {a}, {b}); rounded to float32 its value alone drops to 1 - 1.01e-6 (CE {a, b})."""
    return Game.from_array(np.array([[np.nan, 1.0 - 0.99e-6, np.nan, 1.0], [np.nan, np.nan, 0.0, 1.0]]),
                           ["a", "b"])


def test_tolerance_above_the_rounding_is_not_enough():
    g = near_tolerance_game()
    assert solve(g, tol=1e-6).masks == (0b01, 0b10)
    assert solve(as_float32(g), tol=1e-6).masks == (0b11,)  # what naive rounding would answer
    assert not float32_safe(g.values, 1e-6)
    with pytest.raises(InputError, match="float32 would change answers at tolerance 1e-06"):
        to_float32(g, tol=1e-6)
    ok = to_float32(g, tol=1e-3)
    assert ok.values.dtype == np.float32 and ok.provenance["float32_tol"] == 1e-3
    assert decided(ok, "personalized", 1e-3) == decided(g, "personalized", 1e-3)


def test_merging_values_are_refused():
    v = np.array([[np.nan, 1.0, np.nan, 1.0 + 1e-12], [np.nan, np.nan, 0.0, 0.0]])
    g = Game.from_array(v)
    # 1 and 1 + 1e-12 merge; the OCS tie rule orders equal-sized sets by value, so a merge is
    # refused at every tolerance
    assert not float32_safe(g.values, 0.0) and not float32_safe(g.values, 1e-3)
    assert float32_safe(Game.from_array(v + [[0, 0, 0, 1e-6], [0, 0, 0, 0]]).values, 1e-3)


@st.composite
def near_tolerance_games(draw, max_n=5):
    """Values a + j·d + tiny jitter, with d close to the tolerance: many pairs sit near ±tol."""
    n = draw(st.sampled_from(range(2, max_n + 1)))
    tol = draw(st.sampled_from([1e-7, 1e-6, 1e-5]))
    d = tol * draw(st.sampled_from([0.5, 0.98, 1.0, 1.02, 2.0]))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    flat = 1.0 + d * rng.integers(0, 4, n_values(n)) + rng.normal(0, tol * 0.05, n_values(n)) * rng.integers(0, 2, n_values(n))
    return game_from_flat(n, flat), tol


@given(near_tolerance_games(), st.data())
@settings(max_examples=200, deadline=None)
def test_when_float32_is_declared_safe_nothing_changes(case, data):
    g64, tol = case
    safe = float32_safe(g64.values, tol)
    event(f"safe={safe}")
    if safe:
        g32 = to_float32(g64, tol)
        for semantics in ("personalized", "shared"):
            assert_same_answers(g64, g32, semantics, tol, data.draw(partitions(g64.n)), exact=False)
    else:
        with pytest.raises(InputError):
            to_float32(g64, tol)


@given(tied_games(max_n=6))
@settings(max_examples=40, deadline=None)
def test_float32_numbers_are_always_safe(game):
    assert is_float32_exact(game.values) and float32_safe(game.values, 1e-9)
    assert to_float32(game).values.dtype == np.float32


# ---------------------------------------------------------------------------- constructors and files
def test_from_array_float32_accepts_only_float32_numbers():
    v = np.array([[np.nan, 0.5, np.nan, 0.25], [np.nan, np.nan, 1.0, 3.0]])
    g = Game.from_array(v, dtype="float32")
    assert g.values.dtype == np.float32
    assert Game.from_array(v.astype(np.float32)).values.dtype == np.float64  # default stays float64
    with pytest.raises(InputError, match="not all float32 numbers"):
        Game.from_array(v + 1e-12, dtype="float32")
    with pytest.raises(InputError, match="dtype must be"):
        Game.from_array(v, dtype="float16")


def test_npz_keeps_float32(tmp_path):
    g = planted([3, 2], seed=4, dtype="float32")
    path = tmp_path / "g.npz"
    write_game(g, path)
    with np.load(path) as z:
        assert z["values"].dtype == np.float32
    back = read_game(path)
    assert back.values.dtype == np.float32 and np.array_equal(back.values, g.values, equal_nan=True)
    write_game(upcast(g), path)
    assert read_game(path).values.dtype == np.float64


def test_planted_float32_is_the_rounded_float64_game():
    g64, g32 = planted([3, 3, 2], seed=5), planted([3, 3, 2], seed=5, dtype="float32")
    assert g32.values.dtype == np.float32
    assert np.array_equal(g32.values, g64.values.astype(np.float32), equal_nan=True)
    assert g32.provenance["dtype"] == "float32"
    with pytest.raises(InputError, match="dtype"):
        planted([2], dtype="int8")


# ---------------------------------------------------------------------------- float32 thresholds
@st.composite
def thresholds_near_float32(draw):
    """A float64 threshold on, next to, or between float32 numbers, or beyond their range."""
    base = np.float32(draw(st.floats(-1e6, 1e6, width=32)))
    kind = draw(st.sampled_from(["on", "between", "next", "huge"]))
    if kind == "on":
        return float(base)
    if kind == "next":
        return float(np.nextafter(np.float64(base), draw(st.sampled_from([-np.inf, np.inf]))))
    if kind == "huge":
        return draw(st.sampled_from([-1e300, 1e300, 3.5e38, -3.5e38]))
    up = np.nextafter(base, np.float32(np.inf))
    return float(base) + draw(st.floats(0, 1)) * (float(up) - float(base))


@given(thresholds_near_float32(), st.lists(st.floats(width=32, allow_nan=True, allow_infinity=False),
                                            min_size=1, max_size=30), st.booleans())
@settings(max_examples=400, deadline=None)
def test_exact_threshold_decides_as_float64(t, xs, strict):
    with np.errstate(over="ignore"):  # thresholds beyond the float32 range; neighbours of its largest number
        x = np.array(xs + [np.float32(t)] if np.isfinite(np.float32(t)) else xs, dtype=np.float32)
        x = np.concatenate([x, np.nextafter(x, np.float32(np.inf)), np.nextafter(x, np.float32(-np.inf))])
    r = exact_threshold(t, np.float32, strict)
    assert r.dtype == np.float32
    expect = x.astype(np.float64) > t if strict else x.astype(np.float64) >= t
    assert np.array_equal(x > r if strict else x >= r, expect)
    assert exact_threshold(t, np.float64, strict) == np.float64(t)


def test_cli_writes_and_solves_a_float32_game(tmp_path, capsys):
    import json

    from coalitions import cli

    paths = {d: tmp_path / f"{d}.npz" for d in ("float32", "float64")}
    for dtype, path in paths.items():
        assert cli.main(["game", "planted", "--groups", "3,3,2", "--seed", "2", "--dtype", dtype, "-o", str(path)]) == 0
    capsys.readouterr()
    assert read_game(paths["float32"]).values.dtype == np.float32
    answers = {}
    for dtype, path in paths.items():
        assert cli.main(["solve", str(path), "--format", "json"]) == 0
        answers[dtype] = json.loads(capsys.readouterr().out)
    assert answers["float32"]["partition"] == answers["float64"]["partition"]
    assert answers["float32"]["certificate"]["outer_agreement"] is True
    assert cli.main(["game", "planted", "--groups", "2", "--dtype", "float16", "-o", str(tmp_path / "x.npz")]) == 2
