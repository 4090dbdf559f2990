"""Bootstrap replicates of a game, the support of its CE, and ``--tol auto`` (docs/concepts.md §6).

Shares are checked against hand-computed numbers and against every replicate's equilibria by
brute force; ``auto_tol`` against explicit loops; the two file formats by round trips and by
hostile files whose one-line error must name the replicate, client and coalition at fault.
"""

from __future__ import annotations

import json
import zipfile

import numpy as np
import pytest
from conftest import NO_CE, any_games, subsets, to_mask
from hypothesis import given, settings
from hypothesis import strategies as st

import coalitions as co
from coalitions import cli
from coalitions import io as cio
from coalitions.brute_force import equilibrium_masks
from coalitions.equilibrium import solve
from coalitions.errors import InputError, NoEquilibrium
from coalitions.game import Game
from coalitions.replicates import MAX_REPLICATES, Replicates
from coalitions.support import AUTO_TOL_FACTOR, auto_tol, support

ABC = ["a", "b", "c"]


def abc_game(ab_gain_a=1.0, grand_a=1.0, grand_b=1.0, grand_c=0.0) -> Game:
    """a and b gain together; c gains nothing by default."""
    return Game.from_mapping(ABC, {
        "a": {"a": 0, "a,b": ab_gain_a, "a,c": 0, "a,b,c": grand_a},
        "b": {"b": 0, "a,b": 1, "b,c": 0, "a,b,c": grand_b},
        "c": {"c": 0, "a,c": 0, "b,c": 0, "a,b,c": grand_c},
    })


def stack(games) -> Replicates:
    g0 = games[0]
    return Replicates.from_array(np.stack([g.raw_values() for g in games]), g0.clients, g0.sense)


# ---------------------------------------------------------------------------- support, by hand
def test_a_flipped_coalition_gives_the_exact_shares():
    game = abc_game()
    same = abc_game()
    split = abc_game(ab_gain_a=-1.0, grand_a=-1.0)               # a is better alone: a | b | c
    grand = abc_game(grand_a=2.0, grand_b=2.0, grand_c=1.0)       # everyone gains from all: a,b,c
    reps = stack([game, split, grand, same])
    expected = [(0b011, 0b100), (0b001, 0b010, 0b100), (0b111,), (0b011, 0b100)]
    for b, want in enumerate(expected):                           # the hand-made CEs, checked by brute force
        assert [tuple(sorted(p)) for p in equilibrium_masks(reps.game(b))] == [want]
    eq = solve(game)
    assert eq.masks == (0b011, 0b100)
    s = support(eq.masks, reps)
    assert s.found == tuple(expected)
    assert s.partition_share == 0.5
    assert s.coalition_shares == {0b011: 0.5, 0b100: 0.75}
    assert s.b == 4 and s.without_ce == 0
    assert cio.support_to_json(game, s) == {"partition": 0.5, "coalitions": {"a,b": 0.5, "c": 0.75}, "replicates": 4}


def test_a_replicate_without_equilibrium_counts_against_every_share():
    bad = co.read_game(NO_CE)
    with pytest.raises(NoEquilibrium):
        solve(bad, "shared")
    good = Game.from_array(np.where(np.isnan(bad.raw_values()), np.nan, 0.0), bad.clients, bad.sense)
    eq = solve(good, "shared")
    s = support(eq.masks, stack([good, bad, good]), "shared")
    assert s.found[1] is None and s.without_ce == 1
    assert s.partition_share == pytest.approx(2 / 3)
    assert all(v == pytest.approx(2 / 3) for v in s.coalition_shares.values())


@settings(max_examples=60, deadline=None)
@given(any_games(max_n=5), st.integers(1, 6))
def test_support_is_one_on_copies_of_the_game(game, b):
    reps = stack([game] * b)
    eq = solve(game)
    s = support(eq.masks, reps, tol=1e-9)
    assert s.partition_share == 1.0 and set(s.coalition_shares.values()) == {1.0} and s.b == b


def naive_shares(partition, found):
    """The shares by Python sets: the definition, written out."""
    target = frozenset(partition)
    same = sum(p is not None and frozenset(p) == target for p in found) / len(found)
    per = {k: sum(p is not None and k in p for p in found) / len(found) for k in partition}
    return same, per


@settings(max_examples=80, deadline=None)
@given(any_games(min_n=2, max_n=5), st.integers(1, 8), st.integers(0, 2**32 - 1),
       st.sampled_from([0.0, 0.3, 1.0]), st.sampled_from(["personalized", "shared"]))
def test_support_properties_on_perturbed_replicates(game, b, seed, noise, semantics):
    try:
        eq = solve(game, semantics)
    except NoEquilibrium:
        return
    rng = np.random.default_rng(seed)
    raw = game.raw_values()
    tied = rng.integers(-1, 2, size=(b,) + raw.shape) * noise  # small integer shifts keep ties likely
    reps = Replicates.from_array(raw + tied, game.clients, game.sense)
    s = support(eq.masks, reps, semantics)
    shares = s.coalition_shares
    assert 0.0 <= s.partition_share <= 1.0
    assert all(0.0 <= v <= 1.0 for v in shares.values())
    assert s.partition_share <= min(shares.values())
    # each replicate's CE is the one solve gives for it, and the shares are the sets' counts
    for k in range(b):
        try:
            assert s.found[k] == solve(reps.game(k), semantics).masks
        except NoEquilibrium:
            assert s.found[k] is None
    same, per = naive_shares(eq.masks, s.found)
    assert s.partition_share == pytest.approx(same) and shares == pytest.approx(per)


def test_support_is_fast_enough_for_the_cli():
    """B = 50 at N = 6 is well under a second: 50 peelings (counted, not timed)."""
    game = co.planted([3, 3], noise=0.05, seed=1)
    reps = stack([game] * 50)
    calls = []
    s = support(solve(game).masks, reps, progress=lambda d, t: calls.append((d, t)))
    assert calls == [(k, 50) for k in range(1, 51)] and s.partition_share == 1.0


# ---------------------------------------------------------------------------- --tol auto
def naive_auto_tol(reps: Replicates) -> float:
    sds = []
    for i in range(reps.n):
        for s in subsets(range(reps.n)):
            for j in s:
                if i in s and j != i:
                    m, w = to_mask(s), to_mask(s - {j})
                    d = [reps.values[b, i, m] - reps.values[b, i, w] for b in range(reps.b)]
                    sds.append(np.std(d, ddof=1))
    return AUTO_TOL_FACTOR * float(np.median(sds)) if sds else 0.0


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 4), st.integers(2, 6), st.integers(0, 2**32 - 1), st.sampled_from(["max", "min"]))
def test_auto_tol_equals_the_rule_written_out(n, b, seed, sense):
    game = co.planted([n], seed=seed % 1000)
    rng = np.random.default_rng(seed)
    reps = Replicates.from_array(game.raw_values() + rng.normal(size=(b,) + game.values.shape) * 0.1,
                                 game.clients, sense)
    assert auto_tol(reps) == pytest.approx(naive_auto_tol(reps), rel=1e-12, abs=0)


def test_auto_tol_edge_cases():
    game = abc_game()
    assert auto_tol(stack([game] * 3)) == 0.0
    with pytest.raises(InputError, match="at least 2 replicates"):
        auto_tol(stack([game]))
    one = Game.from_array([[np.nan, 1.0]], ["x"])
    assert auto_tol(stack([one, one])) == 0.0


# ---------------------------------------------------------------------------- formats
@pytest.mark.parametrize("ending", [".json", ".npz"])
@pytest.mark.parametrize("sense", ["max", "min"])
def test_round_trip_of_both_formats(tmp_path, ending, sense):
    game = Game.from_array(co.planted([2, 1], seed=3).raw_values(), ["a", "b", "c"], sense, {"note": "x"})
    rng = np.random.default_rng(0)
    reps = Replicates.from_array(game.raw_values() + rng.normal(size=(5,) + game.values.shape), game.clients, sense)
    path = tmp_path / f"g{ending}"
    cio.write_game(game, path, reps)
    back, rback = cio.read_game_replicates(path)
    assert np.array_equal(back.values, game.values, equal_nan=True) and back.sense == sense
    assert rback.b == 5 and rback.sense == sense
    assert np.array_equal(rback.values, reps.values, equal_nan=True)
    assert co.read_game(path).clients == game.clients  # the plain reader still reads it
    cio.write_game(game, path)
    assert cio.read_game_replicates(path)[1] is None


def test_json_layout_is_as_documented(tmp_path):
    game = abc_game()
    reps = stack([game, abc_game(ab_gain_a=0.5)])
    data = cio.game_to_json(game, reps)
    assert data["replicates"][1]["a"] == {"a": 0.0, "a,b": 0.5, "a,c": 0.0, "a,b,c": 1.0}
    assert list(data) == ["format", "clients", "sense", "values", "replicates"]


def test_replicates_must_match_their_game(tmp_path):
    game = abc_game()
    other = Game.from_array(game.raw_values(), ["x", "y", "z"])
    with pytest.raises(InputError, match="clients"):
        cio.write_game(game, tmp_path / "g.json", stack([other]))
    flipped = Replicates.from_array(np.stack([game.raw_values()]), ABC, "min")
    with pytest.raises(InputError, match="sense"):
        cio.write_game(game, tmp_path / "g.npz", flipped)


def write_json_game(path, replicates):
    data = cio.game_to_json(abc_game())
    data["replicates"] = replicates
    path.write_text(json.dumps(data))
    return path


def good_table():
    return cio.game_to_json(abc_game())["values"]


HOSTILE_JSON = {
    "missing": (lambda t: t["b"].pop("a,b"), "replicate 1: value of client 'b' for coalition 'a,b' is missing (NaN)"),
    "unknown-client": (lambda t: t.update(d={"d": 1}), "replicate 1: values given for unknown client 'd'"),
    "not-a-number": (lambda t: t["c"].update({"a,b,c": "1"}),
                     "replicate 1: value of client 'c' for coalition 'a,b,c' is not a number: '1'"),
    "outside": (lambda t: t["c"].update({"a,b": 1.0}),
                "replicate 1: coalition 'a,b' listed under client 'c' does not contain 'c'"),
    "no-client": (lambda t: t.pop("c"), "replicate 1: no values given for client 'c'"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE_JSON))
def test_hostile_json_replicate_is_named(tmp_path, capsys, case):
    spoil, fault = HOSTILE_JSON[case]
    bad = good_table()
    spoil(bad)
    path = write_json_game(tmp_path / "g.json", [good_table(), bad])
    rc = cli.main(["solve", str(path)])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "Traceback" not in err
    assert err == f"coalitions: error: {path}: {fault}\n"


@pytest.mark.parametrize("text, fault", [
    ('"replicates": {"a": 1}', "'replicates' must be a list"),
    ('"replicates": []', "at least one replicate is needed"),
    ('"replicates": [[1]]', "replicate 0: 'values' must be a mapping"),
    ('"replicates": [{"a": {"a": 1, "a,b": 1, "a,b": 2}}]', "duplicate key 'a,b' in object ['replicates'][0]['a']"),
])
def test_hostile_json_replicates_structure(tmp_path, capsys, text, fault):
    body = json.dumps(cio.game_to_json(abc_game()))[:-1] + ", " + text + "}"
    path = tmp_path / "g.json"
    path.write_text(body)
    rc = cli.main(["verify", str(path), "--partition", "a,b|c"])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and fault in err and str(path) in err, err


def npz(path, **arrays):
    game = abc_game()
    base = {"values": game.raw_values(), "clients": np.array(game.clients), "sense": np.array("max")}
    np.savez(path, **{**base, **arrays})
    return path


def test_hostile_npz_replicates(tmp_path, capsys):
    good = abc_game().raw_values()
    outside = np.stack([good, good]).copy()
    outside[1, 2, 0b011] = 0.5                          # client c, coalition a,b (does not hold c)
    inside = np.stack([good, good]).copy()
    inside[1, 0, 0b101] = np.nan                        # client a, coalition a,c
    infinite = np.stack([good]).copy()
    infinite[0, 1, 0b010] = np.inf
    cases = {
        "shape": (np.stack([good[:, :4]]), "'replicates' must have shape (B, 3, 8) for 3 clients, got (1, 3, 4)"),
        "flat": (good, "'replicates' must have shape (B, 3, 8) for 3 clients, got (3, 8)"),
        "dtype": (np.array([["x"] * 8] * 3)[None], "'replicates' must be numeric, got dtype <U1"),
        "outside": (outside, "replicate 1: value of client 'c' for coalition 'a,b', which does not contain it, "
                             "must be NaN (got 0.5)"),
        "inside": (inside, "replicate 1: value of client 'a' for coalition 'a,c' is missing (NaN)"),
        "infinite": (infinite, "replicate 0: value of client 'b' for coalition 'b' is not finite (inf)"),
        "empty": (np.zeros((0, 3, 8)), "at least one replicate is needed, got 0"),
    }
    for name, (arr, fault) in cases.items():
        path = npz(tmp_path / f"{name}.npz", replicates=arr)
        rc = cli.main(["solve", str(path)])
        err = capsys.readouterr().err
        assert rc == 2 and err.count("\n") == 1, (name, err)
        assert err.startswith(f"coalitions: error: {path}: ") and fault in err, (name, err)


def test_npz_replicate_count_is_refused_from_the_header(tmp_path, capsys):
    """A header declaring more replicates than allowed is refused before any data is read."""
    from numpy.lib import format as npformat

    path = npz(tmp_path / "huge.npz")
    with zipfile.ZipFile(path, "a") as zf, zf.open("replicates.npy", "w") as m:
        npformat.write_array_header_1_0(m, {"descr": "<f8", "fortran_order": False,
                                            "shape": (MAX_REPLICATES + 1, 3, 8)})
    rc = cli.main(["solve", str(path)])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "'replicates': 100,001 replicates of a 3-client game" in err, err


# ---------------------------------------------------------------------------- the command line
def test_oracle_replicates_then_solve_prints_support(tmp_path, capsys):
    path = tmp_path / "g.npz"
    assert cli.main(["oracle", "synthetic", "--replicates", "50", "-o", str(path)]) == 0
    assert "50 bootstrap replicates" in capsys.readouterr().err
    game, reps = cio.read_game_replicates(path)
    assert reps.b == 50 and reps.clients == game.clients
    assert cli.main(["solve", str(path)]) == 0
    out = capsys.readouterr().out
    assert "support over 50 bootstrap replicates" in out and "the partition" in out
    assert cli.main(["solve", str(path), "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    eq = solve(game)                                   # at z = 1.96, the game's standard errors fixed
    s = support(eq.masks, reps, z=eq.z, uncertainty=game.uncertainty)
    assert data["support"] == {"partition": s.partition_share,
                               "coalitions": {game.key(k): v for k, v in s.coalition_shares.items()},
                               "replicates": 50}
    assert list(data["support"]["coalitions"]) == [",".join(b) for b in data["partition"]]


def test_solve_without_replicates_prints_no_support(capsys):
    cli.main(["solve", str(NO_CE)])
    out, err = capsys.readouterr()
    assert "support" not in out
    cli.main(["solve", str(NO_CE), "--format", "json"])
    assert "support" not in json.loads(capsys.readouterr().out)


def test_tol_auto(tmp_path, capsys):
    path = tmp_path / "g.json"
    game = co.planted([2, 2], noise=0.05, seed=4)
    rng = np.random.default_rng(1)
    reps = Replicates.from_array(game.raw_values() + 0.02 * rng.normal(size=(20,) + game.values.shape),
                                 game.clients, game.sense)
    cio.write_game(game, path, reps)
    tol = auto_tol(reps)
    assert tol > 0
    assert cli.main(["solve", str(path), "--tol", "auto", "--format", "json"]) == 0
    out, err = capsys.readouterr()
    data = json.loads(out)
    assert data["tol"] == tol and data["support"]["replicates"] == 20
    assert err.startswith("--tol auto: ") and "20 replicates" in err
    expect = solve(game, tol=tol)
    assert data["partition"] == expect.blocks()
    part = co.format_partition(game, expect.masks)
    for args in (["enumerate"], ["verify", "--partition", part], ["welfare"]):
        rc = cli.main([args[0], str(path), "--tol", "auto", *args[1:]])
        capsys.readouterr()
        assert rc in (0, 1), args


@pytest.mark.parametrize("command", ["solve", "verify", "enumerate", "welfare"])
def test_tol_auto_needs_replicates(tmp_path, capsys, command):
    path = tmp_path / "g.json"
    cio.write_game(abc_game(), path)
    extra = ["--partition", "a,b|c"] if command == "verify" else []
    rc = cli.main([command, str(path), "--tol", "auto", *extra])
    err = capsys.readouterr().err
    assert rc == 2 and err == (f"coalitions: error: {path}: --tol auto needs bootstrap replicates, and the game "
                               "holds none (coalitions oracle ... --replicates B records them)\n")


@pytest.mark.parametrize("args, fault", [
    (["solve", "G", "--tol", "often"], "'often' is neither a number nor 'auto'"),
    (["solve", "G", "--tol", "-1"], "--tol must be a finite number >= 0"),
    (["oracle", "synthetic", "--replicates", "-1", "-o", "O"], "--replicates"),
])
def test_bad_flags(tmp_path, capsys, args, fault):
    path = tmp_path / "g.json"
    cio.write_game(abc_game(), path)
    args = [str(path) if a == "G" else str(tmp_path / "o.json") if a == "O" else a for a in args]
    rc = cli.main(args)
    err = capsys.readouterr().err
    assert rc == 2 and fault in err and "Traceback" not in err, err


def test_tol_auto_with_one_replicate_is_refused(tmp_path, capsys):
    path = tmp_path / "g.npz"
    cio.write_game(abc_game(), path, stack([abc_game()]))
    rc = cli.main(["solve", str(path), "--tol", "auto"])
    err = capsys.readouterr().err
    assert rc == 2 and err == f"coalitions: error: {path}: --tol auto needs at least 2 replicates, the game has 1\n"


def test_oracle_refuses_replicates_its_output_cannot_hold(tmp_path, capsys):
    """Checked before training: too many values for a JSON file, or beyond the replicate limits."""
    out = tmp_path / "g.json"
    rc = cli.main(["oracle", "synthetic", "--clients", "16", "--replicates", "40", "-o", str(out)])
    err = capsys.readouterr().err
    assert rc == 2 and err == (f"coalitions: error: {out}: 40 replicates of a 16-client game make a JSON file too "
                               "large to read back; a name ending in .npz writes the compact binary form\n")
    rc = cli.main(["oracle", "synthetic", "--replicates", "200000", "-o", str(tmp_path / "g.npz")])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "200,000 replicates of a 6-client game" in err, err
    assert not out.exists() and not (tmp_path / "g.npz").exists()


def test_a_replicate_beyond_max_enumerate_is_named(tmp_path, capsys):
    bad = co.read_game(NO_CE)
    good = Game.from_array(np.where(np.isnan(bad.raw_values()), np.nan, 0.0), bad.clients, bad.sense)
    path = tmp_path / "g.json"
    cio.write_game(good, path, stack([good, bad]))
    rc = cli.main(["solve", str(path), "--semantics", "shared", "--max-enumerate", "1"])
    out, err = capsys.readouterr()
    assert rc == 2 and out == "" and err.count("\n") == 1
    assert err.startswith(f"coalitions: error: {path}: replicate 1: peeling ") and "--max-enumerate" in err, err
